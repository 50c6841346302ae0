"""Action plugin: the capacity guard's count, every serving host of the inventory asked at once (controller side).

A Kubernetes controller reads one status list instead of probing pods one by one; this is the rollout's equivalent.
One task, run once, asks every host concurrently, each over its own connection (the connection plugin and the
options Ansible would use for it: its inventory's ansible_host, ansible_port, ansible_user, key, ssh arguments),
in threads: the guard's wall time is the slowest host's answer, not the sum of them. Each host runs the same
question module sglang_in_rotation asks (module_utils/sglang_rotation.py, in_rotation), sent with the program on
the connection's stdin (no module payload, no temporary file), as root (sudo -n where the play becomes and the
connecting user is not root). At most `workers` hosts are asked at once, each given `host_timeout` seconds from its
own question's start, so a fleet of N hosts is counted within about ceil(N / workers) x host_timeout whatever its
size, and no healthy host is counted out for waiting in the queue. A host that cannot be asked (unreachable, no
answer in its time, an answer that is not the program's) is out of rotation and named: the unknown never counts as
serving.
"""

from __future__ import annotations

import functools
import getpass
import json
import math
import shlex
import threading
import time
from collections.abc import Callable
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


def bound(hosts: int, workers: int, host_timeout: int) -> int:
    """The count's bound in seconds once its questions start: each of `workers` slots asks one host after another,
    each for at most `host_timeout` s, so ceil(hosts / workers) questions in a row at most (and one more round of
    slack for the threads' own scheduling)."""
    return (math.ceil(hosts / max(1, workers)) + 1) * host_timeout


def count_all(
    hosts: list[str], ask: Callable[[str], dict[str, Any]], workers: int, host_timeout: float
) -> dict[str, dict[str, Any]]:
    """Every host's answer: at most `workers` questions at once, each host given `host_timeout` seconds from when its
    own question starts (never from the count's start: a long queue counts no healthy host out). A host that does not
    answer in its time is out ("did not answer within ..."), and its slot goes to the next host (its thread is left to
    end on its own, a daemon that never holds the worker's exit). A host whose turn never came within the count's
    bound (bound()) is out as "not asked", never as one that did not answer. The unknown never counts as serving."""
    workers = max(1, int(workers))
    queue = list(reversed(hosts))
    answers: dict[str, dict[str, Any]] = {}
    running: dict[str, float] = {}
    done = threading.Condition()
    late = bound(len(hosts), workers, int(host_timeout))
    deadline = time.monotonic() + late

    def one(host: str) -> None:
        try:
            found = ask(host)
        except Exception as error:  # an answer, whatever went wrong: the count never waits for a dead thread
            found = unavailable(f"cannot be asked: {error}")
        with done:
            if host in running:
                answers[host] = found
                del running[host]
            done.notify_all()

    with done:
        while queue or running:
            now = time.monotonic()
            for host in [h for h, began in running.items() if now - began >= host_timeout]:
                answers[host] = unavailable(f"did not answer within {host_timeout:g} s of its question")
                del running[host]
            if now >= deadline:
                break
            while queue and len(running) < workers:
                host = queue.pop()
                running[host] = time.monotonic()
                threading.Thread(target=one, args=(host,), daemon=True, name=f"rotation-{host}").start()
            if running:
                first = min(running.values())
                done.wait(timeout=max(0.0, min(first + host_timeout, deadline) - time.monotonic()))
        for host in running:
            answers[host] = unavailable(f"did not answer before the count's bound of {late} s")
        running.clear()
    return {
        host: answers.get(host) or unavailable(f"not asked: the count's bound of {late} s ended before its turn")
        for host in hosts
    }


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        _spec, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        hostvars = (task_vars or {}).get("hostvars", {})
        started = time.monotonic()
        answers, prepared = self._count(hostvars, args)
        result.update(
            changed=False,
            hosts=answers,
            seconds=round(time.monotonic() - started, 3),
            prepared=round(prepared, 3),
            bound=bound(len(args["hosts"]), args["workers"], args["host_timeout"]),
        )
        return result

    def _count(self, hostvars: Any, args: dict[str, Any]) -> tuple[dict[str, dict[str, Any]], float]:
        """Every host's answer (count_all), and the seconds spent making their connections and commands."""
        started = time.monotonic()
        # Each host's connection and command are made here, in the worker's own thread, where Ansible templates
        # variables; the threads only run them.
        calls = {host: self._prepare(host, hostvars, args) for host in args["hosts"]}
        prepared = time.monotonic() - started

        def ask(host: str) -> dict[str, Any]:
            if isinstance(calls[host], dict):
                return calls[host]
            try:
                return run_call(*calls[host])
            except Exception as error:
                return unavailable(f"cannot be reached: {error}")

        return count_all(args["hosts"], ask, args["workers"], args["host_timeout"]), prepared

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
