"""Helpers of every scenario's lab tests: run a playbook of the repository as an operator would, read the lab keys."""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Each run's environment carries its own mark, by which what it left running is found.
RUN_MARK = "DSV4_LAB_RUN"
RUNS = itertools.count(1)


def instance() -> dict:
    """Address, port, user and key of molecule's (first) lab host."""
    import yaml

    return yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())[0]


def instances() -> list[dict]:
    """Address, port, user and key of each of molecule's lab hosts."""
    import yaml

    return yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())


def inventory() -> str:
    return os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "inventory")


def playbook(name: str, *args: str, timeout: int = 900, env: dict | None = None) -> subprocess.CompletedProcess:
    """A playbook of the repository against molecule's instance, as an operator would run it.

    A run still going after `timeout` seconds is killed, with its workers, and fails the test with what it printed
    (where it hung), not only with its command line.
    """
    return finish(start(name, *args, env=env), timeout=timeout)


def start(name: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """A playbook run started in the background (finish() waits for it). What it prints goes to files, never to a
    pipe no one reads while the test does something else (a full pipe would stop the run where it writes)."""
    argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", inventory(), name, *args]
    mark = f"{os.getpid()}.{next(RUNS)}"
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    run = subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=out,
        stderr=err,
        text=True,
        env={**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0", **(env or {}), RUN_MARK: mark},
        # Its own process group: a lab fault that kills the controller kills this run only.
        start_new_session=True,
    )
    run.lab = (mark, out, err)
    return run


def printed(run: subprocess.Popen) -> tuple[str, str]:
    """What a run started by start() printed so far (stdout, stderr)."""
    _mark, *files = run.lab
    said = []
    for file in files:
        file.seek(0)
        said.append(file.read())
    return said[0], said[1]


def finish(run: subprocess.Popen, timeout: int = 900) -> subprocess.CompletedProcess:
    """Wait for a run started by start(); one still going after `timeout` seconds is killed, with its workers."""
    mark = run.lab[0]
    try:
        run.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(run.pid, signal.SIGKILL)
        for pid in left_running(mark):
            os.kill(pid, signal.SIGKILL)
        run.wait()
        out, err = printed(run)
        raise AssertionError(
            f"{' '.join(run.args[2:])} still ran after {timeout} s; what it printed last:\n{out[-6000:]}{err[-2000:]}"
        ) from None
    # A worker killed with its controller may take a moment to go.
    deadline = time.monotonic() + 10
    left = left_running(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = left_running(mark)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    command = " ".join(run.args[2:])
    assert not left, f"{command} ended (rc {run.returncode}) but left controller processes running: {left}"
    out, err = printed(run)
    for file in run.lab[1:]:
        file.close()
    return subprocess.CompletedProcess(run.args, run.returncode, out, err)


def left_running(mark: str) -> list[int]:
    """The controller processes (ansible-playbook and its workers, not ssh) of the run marked `mark` still running."""
    left = []
    for entry in os.listdir("/proc"):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except (OSError, ValueError):
            continue
        if f"{RUN_MARK}={mark}".encode() in environ and any(a.endswith(b"ansible-playbook") for a in command[:2]):
            left.append(int(entry))
    return left


def deploy(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return playbook("deploy.yml", *args, **kwargs)


# The lab fault injector (molecule/shared/fault_plugins/lab_fault.py), enabled in a run's environment.
FAULTS = {
    "ANSIBLE_CALLBACK_PLUGINS": str(ROOT / "molecule/shared/fault_plugins"),
    "ANSIBLE_CALLBACKS_ENABLED": "lab_fault,dsv4.sglang.sglang_preload",
    "ANSIBLE_NOCOLOR": "1",
}


class Hold:
    """LAB: a run held at a named point until the test lets it go (the injector's hold action), so that what each of
    two runs sees is decided by the test, on a busy machine as on an idle one.

    `where` is TASK (the controller stops as the task starts) or TASK>POINT (each host's call stops at its point,
    inside the host-side call); `env` goes into the held run's environment; `reached()` waits until it got there
    (for TASK>POINT, on `hosts` hosts) while the run still runs; `release()` lets it go on.
    """

    def __init__(self, folder: Path, where: str, seconds: int = 900) -> None:
        self.gate = Path(folder)
        self.gate.mkdir(parents=True, exist_ok=True)
        self.where = where
        self.env = {**FAULTS, "DSV4_LAB_FAULT": f"hold:{where}@{seconds}", "DSV4_LAB_FAULT_GATE": str(self.gate)}

    def arrivals(self) -> list[str]:
        reached = self.gate / "reached"
        return reached.read_text().split("\n")[:-1] if reached.exists() else []

    def reached(self, run: subprocess.Popen, hosts: int = 1, seconds: float = 600) -> list[str]:
        """Wait until the held run got to its point (on `hosts` hosts); fails if the run ended first."""
        deadline = time.monotonic() + seconds
        while len(self.arrivals()) < hosts:
            assert run.poll() is None, f"the run ended (rc {run.returncode}) before it reached {self.where}"
            assert time.monotonic() < deadline, f"the run did not reach {self.where} within {seconds} s"
            time.sleep(0.2)
        return self.arrivals()

    def release(self) -> None:
        (self.gate / "release").touch()


def lab_secret(name: str) -> str:
    """A lab key, decrypted from the lab inventory with the lab-only vault password."""
    from ansible.parsing.vault import VaultLib, VaultSecret

    text = (ROOT / "inventories/lab/group_vars/sglang_dsv4/keys.yml").read_text()
    vaulted = text.split(f"{name}: !vault |", 1)[1]
    lines = []
    for line in vaulted.splitlines()[1:]:
        if not line.startswith("          "):
            break
        lines.append(line.strip())
    password = (ROOT / "inventories/lab/vault-password.txt").read_bytes().strip()
    return VaultLib([("lab", VaultSecret(password))]).decrypt("\n".join(lines)).decode()


def text(run: subprocess.CompletedProcess) -> str:
    """All a run printed: the default callback writes failures to stderr."""
    return run.stdout + run.stderr


def flat(run: subprocess.CompletedProcess) -> str:
    """All a run printed, with the YAML callback's line wrapping undone."""
    return " ".join(text(run).split())


def recap(output: str) -> str:
    return output[output.rfind("PLAY RECAP") :]


# The state a rollout is judged on, read on the host (never from Ansible's output): every managed file's bytes,
# and per service whether it is active, its MainPID and invocation, whether its start record belongs to this
# invocation, which recorded inputs differ from the files on disk now, and the defaults its current start logged.
MANAGED_FILES = (
    "/srv/models/DeepSeek-V4-Flash/generation_config.json /etc/sglang-dsv4/*.env"
    " /etc/sglang-dsv4/sampling-defaults.json /etc/sglang-dsv4/credentials/*"
    " /etc/systemd/system/sglang-dsv4*.service /etc/systemd/system/sglang-dsv4.target"
    " /usr/local/libexec/sglang-dsv4/*"
)
STATE_PROBE = r"""
import glob, json, subprocess, sys
sys.dont_write_bytecode = True
sys.path.insert(0, "/usr/local/libexec/sglang-dsv4")
import sglang_files, sglang_records, sglang_sampling_defaults
digest = sglang_files.file_digest
files = {p: digest(p, follow=False) for pattern in sys.argv[1].split() for p in sorted(glob.glob(pattern))}
units = {}
for unit in ("prefill", "decode", "router"):
    name = "sglang-dsv4-" + unit
    out = subprocess.run(["systemctl", "show", name + ".service", "-p", "ActiveState,SubState,InvocationID,MainPID"],
                         capture_output=True, text=True).stdout
    props = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    try:
        record = json.load(open("/run/sglang-dsv4/" + name + ".json"))
    except (OSError, ValueError):
        record = None
    match = "_SYSTEMD_INVOCATION_ID=" + props.get("InvocationID", "-")
    journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat", match],
                             capture_output=True, text=True).stdout if props.get("InvocationID") else ""
    units[unit] = {
        "active": props.get("ActiveState") + "/" + props.get("SubState"),
        "pid": props.get("MainPID"),
        "invocation": props.get("InvocationID"),
        "recorded": bool(record) and record.get("invocation") == props.get("InvocationID"),
        "stale": sorted(p for p, d in (record or {}).get("inputs", {}).items() if sglang_records.input_digest(p) != d),
        "logged": sglang_sampling_defaults.startup_defaults(journal),
    }
import os
print(json.dumps({"files": files, "units": units, "lock": os.path.lexists("/run/sglang-dsv4-deploy")}))
"""


def host_state(host) -> dict:
    """The host's files and services as the invariants judge them (see STATE_PROBE)."""
    import json
    import shlex

    out = host.run(f"python3 -c {shlex.quote(STATE_PROBE)} {shlex.quote(MANAGED_FILES)}")
    assert out.rc == 0, out.stderr
    return json.loads(out.stdout)


def pids(state: dict) -> dict:
    """Each service's MainPID and InvocationID in a host_state(): the same pair is the same process of one start."""
    return {unit: (entry["pid"], entry["invocation"]) for unit, entry in state["units"].items()}


def runs_from_disk(state: dict) -> list[str]:
    """What is wrong with 'every service runs from exactly the files on disk' (empty when it holds)."""
    faults = []
    for unit, entry in state["units"].items():
        if entry["active"] != "active/running":
            faults.append(f"{unit} is {entry['active']}")
        elif not entry["recorded"]:
            faults.append(f"{unit}: no start record for its current invocation")
        elif entry["stale"]:
            faults.append(f"{unit} started from other content of {', '.join(entry['stale'])}")
    return faults


CHAT = {"model": "deepseek-ai/DeepSeek-V4-Flash", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}


def ask(url: str, key: str, body: dict | None = None, timeout: float = 30) -> int:
    """The HTTP status a service of a lab host gives this key, asked from the controller: the lab hosts share its
    loopback, and a key on a command line run on a host would be logged there (the command module logs its
    arguments to the host's journal), which the leak checks read."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, headers=headers), timeout=timeout) as answer:
            answer.read()
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code


LEAK_PROBE = r"""
import base64, os, subprocess, sys
secrets = [base64.b64decode(a) for a in sys.argv[1:]]
found = []
journal = subprocess.run(["journalctl", "--no-pager", "-o", "cat"], capture_output=True).stdout
found += ["journal: %d" % n for n, s in enumerate(secrets) if s in journal]
skip = {"credentials", "sglang-dsv4-rollout"}
for top in ("/var/lib", "/run", "/etc", "/opt", "/srv", "/usr/local"):
    for folder, dirs, files in os.walk(top):
        dirs[:] = [d for d in dirs if d not in skip]
        for name in files:
            path = os.path.join(folder, name)
            try:
                if not os.path.isfile(path) or os.path.islink(path) or os.path.getsize(path) > 1 << 26:
                    continue
                data = open(path, "rb").read()
            except OSError:
                continue
            found += ["%s: %d" % (path, n) for n, s in enumerate(secrets) if s in data]
print("\n".join(found))
"""


def leaked(host, *secrets: str) -> list[str]:
    """Where the host keeps any of these keys (by their number) outside the root-only key and snapshot folders: its
    whole journal, and every file under the folders a rollout writes or leaves results in (rollout.json, the
    metrics, the start records). The keys travel base64-encoded, so that the probe's own command line, which the
    host logs, holds none of them."""
    import base64
    import shlex

    encoded = " ".join(shlex.quote(base64.b64encode(s.encode()).decode()) for s in secrets)
    out = host.run(f"python3 -c {shlex.quote(LEAK_PROBE)} {encoded}")
    assert out.rc == 0, out.stderr
    return [line for line in out.stdout.splitlines() if line]


def balancer_stats(sock: str) -> dict[str, dict[str, str]]:
    """The lab balancer's own counters per router (HAProxy's runtime socket, `show stat`), by server name; OSError
    when the socket does not answer."""
    import csv
    import socket

    with socket.socket(socket.AF_UNIX) as conn:
        conn.settimeout(5)
        conn.connect(sock)
        conn.sendall(b"show stat\n")
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    rows = csv.DictReader(data.decode().lstrip("# ").splitlines())
    servers = (row for row in rows if row["pxname"] == "routers" and row["svname"] not in ("FRONTEND", "BACKEND"))
    return {row["svname"]: row for row in servers}


def cut_ssh(port: int) -> None:
    """LAB: the controller's packets to one lab host's sshd are answered with a reset (its established connection
    too): the host is lost to the run, its services go on serving. A table of its own per port: scenarios run side
    by side."""
    rule = f"tcp dport {port} reject with tcp reset"
    rules = (
        f"table inet dsv4_lab_cut_{port} {{\n chain input {{\n  type filter hook input priority 0;\n  {rule}\n }}\n}}\n"
    )
    subprocess.run(["nft", "-f", "-"], input=rules, text=True, check=True)


def uncut(port: int) -> None:
    subprocess.run(["nft", "delete", "table", "inet", f"dsv4_lab_cut_{port}"], capture_output=True, check=False)


def readiness(port: int) -> int:
    """The status a router's /readiness on the lab's loopback answers (0: no answer)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readiness", timeout=2) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def long_stream(url: str, key: str, tokens: int) -> threading.Event:
    """A streaming chat of `tokens` tokens to `url`, from the controller, in the background: greedy, so that the
    stand-in never ends it early (its end-of-text never wins outright). The event is set once its first chunk has
    arrived: the request is in flight at the router and its servers."""
    import urllib.request

    body = {**CHAT, "max_tokens": tokens, "stream": True, "temperature": 0}
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    in_flight = threading.Event()

    def stream() -> None:
        with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=300) as answer:
            answer.readline()
            in_flight.set()
            answer.read()

    threading.Thread(target=stream, daemon=True).start()
    return in_flight
