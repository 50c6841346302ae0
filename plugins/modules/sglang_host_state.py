#!/usr/bin/python
"""Ansible module: read a host's whole SGLang state at once and compute its plan (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_host_state
short_description: Read the host's SGLang state in one call and decide what a rollout must change and restart
description:
  - Read-only. Compares every managed file with its desired digest, merges the managed sampling defaults into
    generation_config.json in memory, reads the units from systemd and each service's start record under
    C(record_dir), and returns the host's plan (see module_utils/sglang_plan.py for the rules).
  - When the plan is otherwise empty and C(proof) is set, runs the light proof. Each server answers
    C(/health), its C(/server_info) says C(sampling_defaults=model), and the journal of its current invocation
    holds SGLang's startup line with the expected defaults; the router answers C(/readiness).
  - Reports the rollout lock's holder, age and lease.
extends_documentation_fragment:
  - dsv4.sglang.host_read
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Plan this host
  dsv4.sglang.sglang_host_state:
    files: [{path: /etc/sglang-dsv4/prefill.env, sha256: "{{ content | hash('sha256') }}", mode: "0644"}]
    generation_config: {path: /srv/models/DeepSeek-V4-Flash/generation_config.json, sampling: {temperature: 0.6}}
    units: [{name: sglang-dsv4-prefill, group: servers, inputs: [], health_url: "http://127.0.0.1:30000/health"}]
    record_dir: /run/sglang-dsv4
    lock_path: /run/sglang-dsv4-deploy
"""

RETURN = r"""
plan:
  description: C(files) to change, C(missing_users), C(disabled_units), C(other) (the same as sentences, for
    the table), C(held) and C(held_conflicts) (see C(apply_roles)), C(build) and C(releases) (see
    C(releases)), C(releases_found) (finished releases in their folders), C(weights) (the weight version of the
    model directory's weights manifest now, how many weight C(files) it names, and the version each server's
    current start got, C(running)), C(restart) reasons per group, C(restart_servers) and C(restart_router)
    (booleans), C(empty).
  returned: always
  type: dict
units:
  description: Per service its systemd state, record and evidence (C(status)).
  returned: always
  type: dict
proof:
  description: Whether the light proof ran and what failed, per group.
  returned: always
  type: dict
check_errors:
  description: Unmet preconditions, each naming the variable to fix.
  returned: always
  type: list
lock:
  description: The lock's holder (C(owner), C(run_id), C(age), C(expired), C(unreadable)), or null.
  returned: always
  type: dict
generation_config_sampling:
  description: The sampling keys generation_config.json holds on disk now.
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_host_read import READ_SPEC, read


def main() -> None:
    module = AnsibleModule(argument_spec=READ_SPEC, supports_check_mode=True)
    module.exit_json(**read(module, module.params))


if __name__ == "__main__":
    main()
