"""The lab_fault option of the rollout's folded host-side calls (module_utils/sglang_lab_fault.py): a lab tool."""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
options:
  lab_fault:
    description:
      - LAB TOOL (the rollout fault matrix, module_utils/sglang_lab_fault.py), set only by the lab's fault injector
        (molecule/shared/fault_plugins/lab_fault.py). C(point) (one of the module's points), C(action) (C(fail),
        C(pause), C(kill) or C(hold)), C(seconds) (of a pause, before a killed call ends, or the most a held call
        waits for its release), C(label) (for the message), C(notify) (the injector's loopback C(HOST:PORT), told
        when the point is reached; a held call waits there for the injector's word).
      - Refused, before anything changes, on a host that is not a lab host (no C(/etc/sglang-dsv4-lab-host)).
    type: dict
"""
