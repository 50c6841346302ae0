"""Batches in inventory order, every time: the apply phase's hosts do not depend on which plan came back first.

The plan of each host here is made slow on purpose, the later hosts of the inventory the fastest, so a rollout that
took its hosts in the order their plans arrived (as group_by did) would start with the last host of the inventory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
DELAYS = {"fleet-c": 3, "fleet-a": 2, "fleet-d": 0, "fleet-b": 1}  # inventory order: c, a, d (empty), b

PLAYBOOK = """
- name: Plan (slow per host)
  hosts: sglang_dsv4
  gather_facts: false
  tasks:
    - name: Put the hosts with something to do into the apply phase
      ansible.builtin.import_role:
        name: dsv4.sglang.sglang_rollout
        tasks_from: apply_hosts
        rolespec_validate: false  # as playbooks/plan.yml: its preflight validated the variables

- name: Apply one host at a time
  hosts: sglang_dsv4_apply
  gather_facts: false
  order: inventory
  serial: 1
  tasks:
    - name: Note the order
      ansible.builtin.shell: echo {{ inventory_hostname }} >> {{ order_file }}
      delegate_to: localhost
      changed_when: true
"""


def test_the_first_batch_is_the_first_host_of_the_inventory_whatever_answered_first(tmp_path):
    hosts = {
        name: {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            # Evaluated where the host's plan is read; sleeping makes this host's answer arrive late.
            "sglang_rollout_plan": f"{{{{ {{'empty': {name == 'fleet-d'}}} "
            f"if lookup('ansible.builtin.pipe', 'sleep {delay}') is string else {{}} }}}}",
        }
        for name, delay in DELAYS.items()
    }
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"sglang_dsv4": {"hosts": hosts}}, sort_keys=False))
    (tmp_path / "order.yml").write_text(PLAYBOOK)
    order = tmp_path / "order.txt"
    run = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(inventory),
            str(tmp_path / "order.yml"),
            "-e",
            f"order_file={order}",
            "--forks",
            "8",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1"},
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert order.read_text().split() == ["fleet-c", "fleet-a", "fleet-b"]
