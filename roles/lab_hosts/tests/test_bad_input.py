"""The lab_hosts checks refuse each wrong setting of tests/bad_inputs.yml (lab cases), naming it, before any change.

One ansible-playbook run over many local aliases; nothing is booted or written.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
import bad_inputs  # noqa: E402

PLAYBOOK = """
- name: Lab host checks only
  hosts: lab_cases
  gather_facts: false
  tasks:
    - name: Checks
      ansible.builtin.import_role:
        name: lab_hosts
        tasks_from: preflight
"""


def test_every_wrong_lab_setting_is_refused_by_name(tmp_path):
    cases = bad_inputs.CASES["lab"]
    inventory = tmp_path / "hosts.yml"
    bad_inputs.write_inventory(inventory, "lab_cases", cases, {"ansible_connection": "local"})
    playbook = tmp_path / "lab_checks.yml"
    playbook.write_text(PLAYBOOK)
    outcome = bad_inputs.run(str(playbook), [str(inventory)], tmp_path)
    assert outcome["rc"] != 0
    assert bad_inputs.mismatches(cases, outcome) == []
    assert not (Path("/var/lib/sglang-dsv4-lab/hosts") / "bad-000").exists()
