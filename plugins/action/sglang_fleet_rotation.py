"""Action plugin: the capacity guard's count, every serving host of the inventory asked at once (controller side).

A Kubernetes controller reads one status list instead of probing pods one by one; this is the rollout's equivalent.
One task, run once, asks every host concurrently, each over its own connection (the connection plugin and the
options Ansible would use for it: its inventory's ansible_host, ansible_port, ansible_user, key, ssh arguments),
in threads: the guard's wall time is the slowest host's answer, not the sum of them. Each host runs the same
question module sglang_in_rotation asks (module_utils/sglang_rotation.py, in_rotation), sent with the program on
the connection's stdin (no module payload, no temporary file), as root (sudo -n where the play becomes and the
connecting user is not root). A host that cannot be asked (unreachable, no answer in time, an answer that is not
the program's) is out of rotation and named: the unknown never counts as serving.
"""

from __future__ import annotations

import functools
import getpass
import json
import shlex
import threading
import time
from typing import Any

from ansible.errors import AnsibleError
from ansible.module_utils.common.text.converters import to_text
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.playbook.play_context import PlayContext
from ansible.plugins.action import ActionBase
from ansible.plugins.loader import connection_loader
from ansible_collections.dsv4.sglang.plugins.modules.sglang_fleet_rotation import ARGUMENT_SPEC
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_programs import MODULE_UTILS

# The helper-set modules in_rotation needs, in import order (each imports only the ones before it; sglang_rotation
# imports sglang_records only where its guard needs it).
PAYLOAD = ("sglang_systemd", "sglang_files", "sglang_rotation")
MARK = "sglang-dsv4-in-rotation:"
# Connections Ansible names differently but that run the ssh client.
SSH_LIKE = {"smart": "ssh"}


@functools.lru_cache(maxsize=1)
def _prelude() -> str:
    """What every host's program starts with: the helper-set modules, loaded from their text (made once a run)."""
    sources = {name: (MODULE_UTILS / f"{name}.py").read_text(encoding="utf-8") for name in PAYLOAD}
    return f"""import json, sys, types
sys.dont_write_bytecode = True
SOURCES = {json.dumps(sources)}
for name in {list(PAYLOAD)!r}:
    module = types.ModuleType(name)
    module.__file__ = name + ".py"
    sys.modules[name] = module
    exec(compile(SOURCES[name], name + ".py", "exec"), module.__dict__)
"""


def program(
    router_url: str, status_file: str, drain_state: str, timeout: int, health_urls: list[str] | None = None
) -> bytes:
    """The Python program a host runs: the prelude, then one in_rotation call whose answer is printed after MARK."""
    call = json.dumps(json.dumps([router_url, status_file, drain_state, timeout, list(health_urls or [])]))
    rotation = 'sys.modules["sglang_rotation"]'
    return f"{_prelude()}print({MARK!r} + json.dumps({rotation}.in_rotation(*json.loads({call}))))\n".encode()


def unavailable(why: str) -> dict[str, Any]:
    return {"available": False, "why": why, "drained_serving": False}


def answer(rc: int, stdout: bytes, stderr: bytes) -> dict[str, Any]:
    """The host's answer from its output, or an unavailable one saying what came back instead."""
    for line in to_text(stdout, errors="surrogate_or_strict").splitlines():
        if line.startswith(MARK):
            try:
                found = json.loads(line[len(MARK) :])
            except ValueError:
                break
            if isinstance(found, dict) and isinstance(found.get("available"), bool):
                return found
    said = to_text(stderr or stdout, errors="surrogate_or_strict").strip().replace("\n", " ")[-300:]
    return unavailable(f"cannot be asked: rc={rc}: {said or 'no answer'}")


def run_call(connection: Any, command: str, payload: bytes) -> dict[str, Any]:
    """One host's answer over its connection (in a thread of the count)."""
    try:
        rc, stdout, stderr = connection.exec_command(command, in_data=payload, sudoable=False)
    except AnsibleError as error:
        return unavailable(f"cannot be reached: {error.message}")
    finally:
        connection.close()
    return answer(rc, stdout, stderr)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = (task_vars or {}).get("hostvars", {})
        started = time.monotonic()
        answers: dict[str, dict[str, Any]] = {}
        done = threading.Condition()
        slots = threading.BoundedSemaphore(max(1, args["workers"]))

        # Each host's connection and command are made here, in the worker's own thread, where Ansible templates
        # variables; the threads only run them.
        calls = {host: self._prepare(host, hostvars, args) for host in args["hosts"]}
        prepared = time.monotonic() - started

        def ask(host: str) -> None:
            with slots:
                try:
                    found = calls[host] if isinstance(calls[host], dict) else run_call(*calls[host])
                except Exception as error:
                    found = unavailable(f"cannot be reached: {error}")
            with done:
                answers[host] = found
                done.notify_all()

        # Daemon threads: a host that hangs past `wait` is answered for, and never holds the worker's exit.
        for host in args["hosts"]:
            threading.Thread(target=ask, args=(host,), daemon=True, name=f"rotation-{host}").start()
        deadline = started + args["wait"]
        with done:
            while len(answers) < len(args["hosts"]) and time.monotonic() < deadline:
                done.wait(timeout=max(0.0, deadline - time.monotonic()))
            answers = {
                host: answers.get(host) or unavailable(f"did not answer within {args['wait']} s")
                for host in args["hosts"]
            }
        result.update(
            changed=False, hosts=answers, seconds=round(time.monotonic() - started, 3), prepared=round(prepared, 3)
        )
        return result

    def _prepare(self, host: str, hostvars: Any, args: dict[str, Any]) -> tuple | dict[str, Any]:
        """(connection, command, program) for one host, or its answer when it cannot be asked."""
        if host not in hostvars:
            return unavailable("not in the inventory")
        try:
            variables = hostvars[host]
            kind = to_text(variables.get("ansible_connection") or "ssh")
            kind = SSH_LIKE.get(kind, kind)
            connection = connection_loader.get(kind, PlayContext(), None)
            if connection is None:
                return unavailable(f"cannot be asked over connection {kind!r}")
            connection.set_options(var_options=connection._resolve_option_variables(variables, self._templar))
            command = self._command(variables, connection)
        except AnsibleError as error:
            return unavailable(f"cannot be asked: its connection settings: {error.message}")
        if isinstance(command, dict):
            return command
        router_url = (args["router_urls"] or {}).get(host) or ""
        health_urls = (args.get("health_urls") or {}).get(host) or []
        return (
            connection,
            command,
            program(router_url, args["status_file"], args["drain_state"], args["timeout"], health_urls),
        )

    def _command(self, variables: Any, connection: Any) -> str | dict[str, Any]:
        """The command that reads the program from stdin, as root; or why it cannot be run."""
        interpreter = to_text(variables.get("ansible_python_interpreter") or "")
        python = interpreter if interpreter and not interpreter.startswith("auto") else "/usr/bin/python3"
        # Isolated and without site-packages: the program needs the standard library only.
        command = f"{shlex.quote(python)} -I -S -"
        become = boolean(variables.get("ansible_become", self._play_context.become), strict=False)
        user = variables.get("ansible_become_user") or self._play_context.become_user or "root"
        try:
            connecting = connection.get_option("remote_user")
        except (AnsibleError, KeyError):
            connecting = None
        connecting = connecting or getpass.getuser()  # what the ssh client logs in as without a user
        if become and user != connecting:
            method = variables.get("ansible_become_method") or self._play_context.become_method or "sudo"
            if method != "sudo":
                return unavailable(f"cannot be asked: become method {method!r} (the guard uses sudo -n)")
            command = f"sudo -n -u {shlex.quote(to_text(user))} {command}"
        return command
