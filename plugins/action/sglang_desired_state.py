"""The action behind dsv4.sglang.sglang_desired_state: the host's one desired-state document, on the controller.

It renders the collection's templates of the files a host runs from (host/templates) through Ansible's own
template lookup, so that a unit is the same text a template task would write, and hands everything to the one
function that builds the document (plugins/plugin_utils/sglang_desired.py). It never connects to the host. The base
of a role used on its own is the fact sglang_desired the previous call's task kept.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import lookup_loader
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_desired import ROLES, desired_state

TEMPLATES = Path(__file__).resolve().parents[2] / "host/templates"
FACT = "sglang_desired"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        args = self._task.args
        unknown = sorted(set(args) - {"layout", *ROLES})
        if unknown:
            raise AnsibleActionFail(f"sglang_desired_state takes layout, {', '.join(ROLES)}; not {', '.join(unknown)}")
        if not isinstance(args.get("layout"), dict):
            raise AnsibleActionFail("sglang_desired_state needs layout (the on-host layout of sglang_common)")
        lookup = lookup_loader.get("ansible.builtin.template", loader=self._loader, templar=self._templar)

        def render(template: str, template_vars: dict[str, Any]) -> str:
            return lookup.run([str(TEMPLATES / template)], variables=task_vars, template_vars=template_vars)[0]

        base = task_vars.get(FACT)
        document = desired_state(
            args["layout"],
            {role: args.get(role) for role in ROLES},
            render,
            base=self._templar.template(base) if base is not None else None,
        )
        # Returned, not set as a fact: a task registers it and set_fact keeps it as sglang_desired (an action's own
        # ansible_facts would be injected facts, which newer ansible-core no longer makes top-level variables).
        result.update(changed=False, document=document)
        return result
