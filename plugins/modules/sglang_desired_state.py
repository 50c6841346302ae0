#!/usr/bin/python
"""Documentation of the action plugin sglang_desired_state (plugins/action), which runs on the controller only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_desired_state
short_description: Compute a host's one desired-state document (on the controller)
version_added: 0.5.0
description:
  - Returns C(document), which the next task keeps as the fact C(sglang_desired) (C(register) and
    C(ansible.builtin.set_fact)), the one document the plan compares the host with and each role writes exactly
    its part of. C(files) lists every managed file (C(path), C(mode), C(content), C(role), and C(secret),
    C(private) or C(unit) where they apply; content null means the file must not exist);
    C(generation_config) the sampling defaults merged into the model's file; C(units), C(target),
    C(served_model_name) and C(router_url) what the rollout restarts and proves; C(releases) what the units run;
    C(checks) the host-side checks of the plan; C(roles) the parts it holds.
  - A role used on its own passes only its own settings; the parts of the other roles already in the fact
    C(sglang_desired) are kept.
  - Built by one function, plugins/plugin_utils/sglang_desired.py. Never connects to the host. The document
    holds the keys, so the task needs C(no_log).
options:
  layout:
    description: The on-host layout (sglang_common's C(_sglang_common_layout)).
    type: dict
    required: true
  runtime:
    description: sglang_runtime's settings (C(releases), C(release_size_mb), C(user)).
    type: dict
  genconfig:
    description: sglang_genconfig's settings (C(sampling), C(model_path)).
    type: dict
  services:
    description: sglang_services' settings (C(topology), C(unit_settings), C(api_key), C(admin_key),
      C(served_model_name), C(router_tls), C(check_gpus)).
    type: dict
attributes:
  check_mode:
    description: Computes the same document in check mode (it changes nothing anywhere).
    support: full
  diff_mode:
    description: No diff of its own; the plan shows what differs on the host.
    support: none
author: dsv4 deployment team (@dsv4)
"""

EXAMPLES = r"""
- name: Compute the host's desired state
  dsv4.sglang.sglang_desired_state:
    layout: "{{ _sglang_common_layout }}"
    runtime: "{{ _sglang_runtime_desired_settings }}"
    genconfig: "{{ _sglang_genconfig_desired_settings }}"
    services: "{{ _sglang_services_desired_settings }}"
  register: __sglang_desired_state
  no_log: true

- name: Keep it as the host's desired state
  ansible.builtin.set_fact:
    sglang_desired: "{{ __sglang_desired_state.document }}"
  no_log: true
"""

RETURN = r"""
document:
  description: The host's desired-state document.
  returned: always
  type: dict
"""
