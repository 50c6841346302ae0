"""The collection's host-side helper: managed sampling defaults, and what each server started from.

One implementation, used three ways, standard library only:
- the sglang_generation_config module imports `merge`/`render` during a rollout;
- each server unit runs this file before every start (ExecStartPre=+, as root):
    `sglang_sampling_defaults.py heal MANAGED_JSON TARGET_JSON` puts the managed defaults back into a
    re-downloaded generation_config.json;
    `sglang_sampling_defaults.py record RECORD_JSON INPUT...` writes, under /run, the digest of every input
    the service starts from and the sampling defaults it starts with;
- the sglang_host_state module imports `inputs_digest` to compare those records with the files now,
  which is how a rollout decides, from the host's state, what must restart;
- the monitoring role's timer runs
    `sglang_sampling_defaults.py metrics OUT.prom MANAGED_JSON TARGET_JSON UNIT=ROLE...` every minute: it writes
    node_exporter textfile metrics saying whether the file holds the managed defaults and whether each server's
    current invocation logged them, with the last rollout's and the last heal's time and result.
"""

from __future__ import annotations

import ast
import errno
import hashlib
import json
import math
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
from typing import Any

# The keys SGLang reads from generation_config.json (ModelConfig.get_default_sampling_params),
# plus do_sample, which transformers and other readers of the file use to tell sampling from greedy.
SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "repetition_penalty")


def _kind(value: Any) -> str:
    """The plain type name (newer ansible-core hands over tagged subclasses of str, dict, ...)."""
    return next((t.__name__ for t in (bool, int, float, str, list, dict) if isinstance(value, t)), type(value).__name__)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def validate(sampling: dict[str, Any], allow_greedy: bool = False) -> list[str]:
    """Errors for the given sampling values; keys with None are unmanaged and skipped."""
    rules = {
        "temperature": (lambda v: 0 <= v <= 2, "between 0 and 2"),
        "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
        "top_k": (lambda v: isinstance(v, int) and (v == -1 or v >= 1), "an integer, -1 or at least 1"),
        "min_p": (lambda v: 0 <= v <= 1, "in [0, 1]"),
        "repetition_penalty": (lambda v: v > 0, "above 0"),
    }
    errors = []
    for key, value in sampling.items():
        if key not in rules:
            errors.append(f"{key} is not a sampling default SGLang reads (one of {', '.join(SAMPLING_KEYS)})")
            continue
        if value is None:
            continue
        check, wanted = rules[key]
        if not _is_number(value):
            errors.append(f"{key}={value!r} must be a number ({wanted}), not {_kind(value)}")
        elif not check(value):
            errors.append(f"{key}={value!r} must be {wanted}")
    temperature = sampling.get("temperature")
    if _is_number(temperature) and temperature == 0 and not allow_greedy:
        errors.append(
            "temperature=0 means greedy decoding, which makes DeepSeek-V4-Flash repeat itself; "
            "allow it explicitly if that is really wanted"
        )
    return errors


def merge(config: dict[str, Any], sampling: dict[str, Any]) -> dict[str, Any]:
    """The config with the managed keys set; every other key and the key order are kept."""
    merged = dict(config)
    for key in SAMPLING_KEYS:
        if sampling.get(key) is not None:
            merged[key] = sampling[key]
    temperature = sampling.get("temperature")
    if temperature is not None:
        merged["do_sample"] = temperature > 0
    return merged


def render(config: dict[str, Any]) -> str:
    """The stable text form: a re-run over its own output is byte-identical."""
    return json.dumps(config, indent=2, ensure_ascii=False) + "\n"


class UnsafeFileError(ValueError):
    """A managed path that is a link, a FIFO or anything else but a regular file: never read or written through."""


def read_regular(path: str, limit: int | None = None, follow: bool = False) -> bytes | None:
    """The bytes of a regular file, None when it does not exist.

    Opened without blocking (a FIFO planted at the path cannot hang the reader) and, unless `follow`, without
    following a symbolic link at the last component; anything but a regular file raises UnsafeFileError.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UnsafeFileError(
                f"{path} is a symbolic link; the collection reads and writes only regular files"
            ) from None
        raise
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            raise UnsafeFileError(f"{path} is not a regular file (mode {stat.filemode(info.st_mode)})")
        if limit is not None and info.st_size > limit:
            raise UnsafeFileError(f"{path} is larger than {limit} bytes")
        chunks = []
        while True:
            chunk = os.read(handle, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(handle)


def load(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(parsed config, raw text), or (None, None) when the file does not exist. Refuses links and non-files."""
    raw = read_regular(path)
    if raw is None:
        return None, None
    text = raw.decode("utf-8")
    config = json.loads(text)
    if not isinstance(config, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return config, text


def write_atomic(path: str, text: str, mode: int = 0o644, like: str | None = None) -> None:
    """Replace path with text in one rename; keeps the owner and mode of `like` when it is a regular file.

    The temporary file has a random name in the same folder and is created with O_EXCL (never through a link
    someone planted); the rename replaces whatever is at path (a link itself, not its target).
    """
    directory = os.path.dirname(path) or "."
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            info = os.lstat(like) if like and os.path.lexists(like) else None
            if info is not None and stat.S_ISREG(info.st_mode):
                os.fchmod(out.fileno(), info.st_mode & 0o7777)
                os.fchown(out.fileno(), info.st_uid, info.st_gid)
            else:
                os.fchmod(out.fileno(), mode)
        os.replace(temporary, path)
    except BaseException:
        if os.path.lexists(temporary):
            os.unlink(temporary)
        raise


# Results other parts of the collection leave for the metrics in the layout's status_dir (roles/sglang_common, passed
# on every command line): heal.json (each heal), rollout.json (each apply).
def write_status(status_dir: str, name: str, entry: dict[str, Any]) -> None:
    os.makedirs(status_dir, mode=0o755, exist_ok=True)
    write_atomic(os.path.join(status_dir, name), json.dumps(entry, sort_keys=True) + "\n", mode=0o644)


def read_status(status_dir: str, name: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(status_dir, name), encoding="utf-8") as handle:
            entry = json.load(handle)
    except (OSError, ValueError):
        return None
    return entry if isinstance(entry, dict) else None


def heal(managed_path: str, target_path: str) -> bool:
    """Re-apply the managed defaults to target; True when the file had drifted and was rewritten."""
    with open(managed_path, encoding="utf-8") as handle:
        sampling = json.load(handle)
    config, text = load(target_path)
    wanted = render(merge(config or {}, sampling))
    if wanted == text:
        return False
    write_atomic(target_path, wanted, like=target_path)
    return True


STARTUP_LINE = re.compile(r"Using default chat sampling params from model generation config: (\{.*\})")


def startup_defaults(journal: str) -> dict[str, Any] | None:
    """The dict of SGLang's last 'Using default chat sampling params ...' line, or None when absent."""
    found = STARTUP_LINE.findall(str(journal))
    if not found:
        return None
    try:
        value = ast.literal_eval(found[-1])
    except (ValueError, SyntaxError):
        return None
    return value if isinstance(value, dict) else None


def defaults_missing(expected: dict[str, Any], logged: dict[str, Any] | None) -> dict[str, Any]:
    """The expected (non-null) defaults that the logged line does not hold with the same value."""
    logged = logged or {}
    return {k: v for k, v in expected.items() if v is not None and (k not in logged or logged[k] != v)}


def file_digest(path: str, follow: bool = True) -> str | None:
    """sha256 of a regular file's bytes, None when it does not exist. Modification times decide nothing.

    A FIFO, a device or a folder at the path gets a digest of its own kind (never read, so never blocks)."""
    digest = hashlib.sha256()
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        handle = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"unreadable:{errno.errorcode.get(error.errno, error.errno)}"
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode):
            return f"not-a-file:{stat.filemode(info.st_mode)}"
        for block in iter(lambda: os.read(handle, 1 << 20), b""):
            digest.update(block)
    finally:
        os.close(handle)
    return digest.hexdigest()


# Inputs of a service beyond plain files, as the units' `record` step and the plan both name them:
#   "DIR/"                      a unit's drop-in folder: every *.conf in it, by name and content
#   "distributions:PREFIX"      the Python distributions installed under PREFIX (a venv): names and versions
DISTRIBUTIONS = "distributions:"


def distributions(prefix: str) -> dict[str, str]:
    """name -> version of every distribution under a venv's site-packages, from the .dist-info folder names."""
    found: dict[str, str] = {}
    lib = os.path.join(prefix, "lib")
    try:
        pythons = sorted(os.listdir(lib))
    except OSError:
        return found
    for python in pythons:
        site = os.path.join(lib, python, "site-packages")
        try:
            names = os.listdir(site)
        except OSError:
            continue
        for name in names:
            if name.endswith(".dist-info") and "-" in name:
                dist, version = name[: -len(".dist-info")].rsplit("-", 1)
                found[dist.lower().replace("-", "_")] = version
    return dict(sorted(found.items()))


def input_digest(spec: str) -> str | None:
    """The digest of one input of a service: a file, a drop-in folder ("DIR/") or a runtime ("distributions:")."""
    if spec.startswith(DISTRIBUTIONS):
        dists = distributions(spec[len(DISTRIBUTIONS) :])
        text = "".join(f"{name}=={version}\n" for name, version in dists.items())
        return hashlib.sha256(text.encode()).hexdigest() if dists else None
    if spec.endswith("/"):
        try:
            names = sorted(n for n in os.listdir(spec) if n.endswith(".conf"))
        except OSError:
            return None
        text = "".join(f"{name}\0{file_digest(os.path.join(spec, name))}\n" for name in names)
        return hashlib.sha256(text.encode()).hexdigest() if names else None
    return file_digest(spec)


def inputs_digest(digests: dict[str, str | None]) -> str:
    """One digest over a set of inputs (path -> file digest, None for absent), independent of order."""
    text = "".join(f"{path}\0{digests[path] or '-'}\n" for path in sorted(digests))
    return hashlib.sha256(text.encode()).hexdigest()


def sampling_of(config: dict[str, Any] | None) -> dict[str, Any]:
    """The sampling keys a generation_config.json holds (those SGLang reads), without the unset ones."""
    return {k: config[k] for k in SAMPLING_KEYS if config and config.get(k) is not None}


def started_defaults(paths: list[str]) -> dict[str, Any]:
    """The five sampling keys of the generation_config.json among the inputs, as SGLang will read them."""
    for path in paths:
        if os.path.basename(path) == "generation_config.json":
            return sampling_of(load(path)[0])
    return {}


def release_of(prefix: str) -> str | None:
    """The id of the runtime release at prefix (module_utils/sglang_release.py builds them), or None."""
    try:
        raw = read_regular(os.path.join(prefix, "sglang-release.json"), limit=1 << 20)
        entry = json.loads(raw) if raw else None
    except (OSError, ValueError, UnsafeFileError):
        return None
    return entry.get("id") if isinstance(entry, dict) else None


def record(record_path: str, inputs: list[str]) -> dict[str, Any]:
    """Write what this start of the service is made of; read back by the next rollout's plan."""
    digests = {path: input_digest(path) for path in inputs}
    entry = {
        "invocation": os.environ.get("INVOCATION_ID", ""),
        "digest": inputs_digest(digests),
        "inputs": digests,
        "defaults": started_defaults(inputs),
        # What the runtime was at this start, so that the plan can say which distribution changed.
        "runtime": {
            p[len(DISTRIBUTIONS) :]: distributions(p[len(DISTRIBUTIONS) :])
            for p in inputs
            if p.startswith(DISTRIBUTIONS)
        },
        # The release each runtime is (its id, from the manifest a finished build writes), or null.
        "releases": {
            p[len(DISTRIBUTIONS) :]: release_of(p[len(DISTRIBUTIONS) :]) for p in inputs if p.startswith(DISTRIBUTIONS)
        },
        "recorded_at": time.time(),
    }
    directory = os.path.dirname(record_path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    write_atomic(record_path, json.dumps(entry, indent=2, sort_keys=True) + "\n", mode=0o600)
    return entry


def in_sync(config: dict[str, Any] | None, sampling: dict[str, Any]) -> bool:
    """Whether the file's content already holds the managed defaults (what a merge would leave unchanged)."""
    return config is not None and merge(config, sampling) == config


def _unit_state(unit: str) -> dict[str, str]:
    out = subprocess.run(
        ["systemctl", "show", "--timestamp=unix", "-p", "ActiveState,InvocationID,ExecMainStartTimestamp", unit],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def _journal(invocation: str) -> str:
    if not invocation:
        return ""
    return subprocess.run(
        ["journalctl", f"_SYSTEMD_INVOCATION_ID={invocation}", "-o", "cat", "--no-pager"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout


def _labels(**labels: str) -> str:
    text = ",".join(
        f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"' for k, v in labels.items()
    )
    return "{" + text + "}" if text else ""


def _value(value: float) -> str:
    return "NaN" if math.isnan(value) else repr(float(value))


METRIC_HELP = {
    "sglang_dsv4_defaults_check_timestamp_seconds": ("gauge", "When this check last ran."),
    "sglang_dsv4_managed_defaults_present": ("gauge", "1 when the managed sampling defaults file exists."),
    "sglang_dsv4_managed_sampling_default": ("gauge", "A managed sampling default."),
    "sglang_dsv4_generation_config_sampling_value": ("gauge", "A sampling key as generation_config.json holds it."),
    "sglang_dsv4_generation_config_in_sync": ("gauge", "1 when generation_config.json holds the managed defaults."),
    "sglang_dsv4_server_up": ("gauge", "1 when the server unit is active."),
    "sglang_dsv4_server_defaults_in_effect": (
        "gauge",
        "1 when the server's current invocation logged the managed sampling defaults.",
    ),
    "sglang_dsv4_server_start_time_seconds": ("gauge", "When the server's current process started."),
    "sglang_dsv4_last_rollout_timestamp_seconds": ("gauge", "When the last rollout's apply phase ended."),
    "sglang_dsv4_last_rollout_success": ("gauge", "1 when the last rollout's apply phase succeeded."),
    "sglang_dsv4_last_rollout_rolled_back": (
        "gauge",
        "1 when the last rollout's apply failed and was rolled back; 0 when it succeeded or its rollback failed.",
    ),
    "sglang_dsv4_last_heal_timestamp_seconds": ("gauge", "When a server start last checked the file."),
    "sglang_dsv4_last_heal_rewrote": ("gauge", "1 when that check had to put the managed defaults back."),
}


def metrics(
    status_dir: str, managed_path: str, target_path: str, units: dict[str, str], now: float | None = None
) -> str:
    """The textfile-collector metrics of the sampling defaults on this host, decided by content."""
    samples: list[tuple[str, dict[str, str], float]] = [
        ("sglang_dsv4_defaults_check_timestamp_seconds", {}, time.time() if now is None else now)
    ]
    try:
        with open(managed_path, encoding="utf-8") as handle:
            sampling = json.load(handle)
    except (OSError, ValueError):
        sampling = None
    samples.append(("sglang_dsv4_managed_defaults_present", {}, 1.0 if isinstance(sampling, dict) else 0.0))
    sampling = sampling if isinstance(sampling, dict) else {}
    expected = {k: sampling[k] for k in SAMPLING_KEYS if _is_number(sampling.get(k))}
    for key, value in expected.items():
        samples.append(("sglang_dsv4_managed_sampling_default", {"key": key}, float(value)))
    try:
        config, _unused = load(target_path)
    except ValueError:
        config = None
    for key in SAMPLING_KEYS:
        if config is not None and _is_number(config.get(key)):
            samples.append(("sglang_dsv4_generation_config_sampling_value", {"key": key}, float(config[key])))
    synced = bool(expected) and in_sync(config, sampling)
    samples.append(("sglang_dsv4_generation_config_in_sync", {"path": target_path}, 1.0 if synced else 0.0))
    for unit, role in units.items():
        state = _unit_state(unit)
        labels = {"unit": unit, "role": role}
        active = state.get("ActiveState") == "active"
        samples.append(("sglang_dsv4_server_up", labels, 1.0 if active else 0.0))
        logged = startup_defaults(_journal(state.get("InvocationID", ""))) if active else None
        effective = active and bool(expected) and logged is not None and not defaults_missing(expected, logged)
        if role != "router":
            samples.append(("sglang_dsv4_server_defaults_in_effect", labels, 1.0 if effective else 0.0))
        started = state.get("ExecMainStartTimestamp", "").lstrip("@")
        if active and started.replace(".", "", 1).isdigit():
            samples.append(("sglang_dsv4_server_start_time_seconds", labels, float(started)))
    rollout = read_status(status_dir, "rollout.json")
    if rollout and _is_number(rollout.get("time")):
        samples.append(("sglang_dsv4_last_rollout_timestamp_seconds", {}, float(rollout["time"])))
        samples.append(("sglang_dsv4_last_rollout_success", {}, 1.0 if rollout.get("success") else 0.0))
        # Results written before the outcome was recorded were always rolled back when they failed.
        rolled_back = rollout.get("rolled_back", not rollout.get("success"))
        samples.append(("sglang_dsv4_last_rollout_rolled_back", {}, 1.0 if rolled_back else 0.0))
    healed = read_status(status_dir, "heal.json")
    if healed and _is_number(healed.get("time")):
        samples.append(("sglang_dsv4_last_heal_timestamp_seconds", {}, float(healed["time"])))
        samples.append(("sglang_dsv4_last_heal_rewrote", {}, 1.0 if healed.get("rewrote") else 0.0))
    lines: list[str] = []
    for name, (kind, text) in METRIC_HELP.items():
        family = [f"{name}{_labels(**labels)} {_value(value)}" for n, labels, value in samples if n == name]
        if family:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", *family]
    return "\n".join(lines) + "\n"


USAGE = """usage: sglang_sampling_defaults.py heal STATUS_DIR MANAGED_JSON TARGET_GENERATION_CONFIG_JSON
       sglang_sampling_defaults.py record RECORD_JSON INPUT...
       sglang_sampling_defaults.py metrics STATUS_DIR OUT_PROM MANAGED_JSON TARGET_GENERATION_CONFIG_JSON \
           UNIT=ROLE..."""


def say(line: str, stream=None) -> None:
    """A line for the journal (the helper runs as a systemd ExecStartPre= command)."""
    (stream or sys.stdout).write(line + "\n")


def main(argv: list[str]) -> int:
    if len(argv) == 4 and argv[0] == "heal":
        status_dir, managed, target = argv[1:]
        try:
            healed = heal(managed, target)
        except UnsafeFileError as error:
            say(f"sglang-dsv4: refusing to heal: {error}", sys.stderr)
            return 1
        write_status(status_dir, "heal.json", {"time": time.time(), "rewrote": healed, "path": target})
        if healed:
            say(f"sglang-dsv4: {target} had drifted from the managed sampling defaults; re-applied {managed}")
        else:
            say(f"sglang-dsv4: {target} holds the managed sampling defaults")
        return 0
    if len(argv) >= 3 and argv[0] == "record":
        try:
            entry = record(argv[1], argv[2:])
        except UnsafeFileError as error:
            say(f"sglang-dsv4: refusing to start: {error}", sys.stderr)
            return 1
        say(f"sglang-dsv4: starting from inputs {entry['digest'][:12]}, sampling defaults {entry['defaults']}")
        return 0
    if len(argv) >= 5 and argv[0] == "metrics" and all("=" in unit for unit in argv[5:]):
        status_dir, out, managed, target = argv[1:5]
        units = dict(unit.split("=", 1) for unit in argv[5:])
        write_atomic(out, metrics(status_dir, managed, target, units), mode=0o644)
        return 0
    say(USAGE, sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
