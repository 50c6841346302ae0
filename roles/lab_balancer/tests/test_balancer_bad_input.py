"""The lab balancer's checks refuse each wrong setting of tests/bad_inputs.yml (balancer cases), naming it, before any
change: one ansible-playbook run over many local aliases; nothing is installed, written or started."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests"))
import bad_inputs  # noqa: E402

PLAYBOOK = """
- name: Lab balancer checks only
  hosts: balancer_cases
  gather_facts: false
  tasks:
    - name: Checks
      ansible.builtin.import_role:
        name: lab_balancer
        tasks_from: preflight
"""


def test_every_wrong_balancer_setting_is_refused_by_name(tmp_path):
    cases = bad_inputs.CASES["balancer"]
    inventory = tmp_path / "hosts.yml"
    bad_inputs.write_inventory(inventory, "balancer_cases", cases, {"ansible_connection": "local"})
    playbook = tmp_path / "balancer_checks.yml"
    playbook.write_text(PLAYBOOK)
    outcome = bad_inputs.run(str(playbook), [str(inventory)], tmp_path)
    assert outcome["rc"] != 0
    assert bad_inputs.mismatches(cases, outcome) == []
