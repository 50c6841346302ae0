"""What each start of a service is made of: part of the helper set (plugin_utils/sglang_programs.py, HELPER_MODULES).

Each unit runs `sglang_helper.py record RECORD_JSON INPUT...` before every start: it writes, under /run, the digest
of every input the service starts from (files, drop-in folders, the runtime's distributions) and the sampling
defaults it starts with. The sglang_host_state module reads those records and compares them with the same digests
now, which is how a rollout decides, from the host's state, what must restart. Standard library only.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
from typing import Any

try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_files import (
        UnsafeFileError,
        file_digest,
        load,
        read_regular,
        write_atomic,
    )
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    from sglang_files import UnsafeFileError, file_digest, load, read_regular, write_atomic  # type: ignore[no-redef]
try:  # in a module (Ansiballz) and on the controller
    from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import sampling_of
except ImportError:  # on a host, installed beside it (the helper set, plugin_utils/sglang_programs.py)
    from sglang_sampling_defaults import sampling_of  # type: ignore[no-redef]


# Inputs of a service beyond plain files, as the units' `record` step and the plan both name them:
#   "DIR/"                      a unit's drop-in folder: every *.conf in it, by name and content
#   "distributions:PREFIX"      the Python distributions installed under PREFIX (a venv): names and versions
#   "weights:MODEL_DIR"         the model's weight files in MODEL_DIR: names, sizes and modification times
DISTRIBUTIONS = "distributions:"
WEIGHTS = "weights:"
# The files that make up a model's weights, at the top of its directory (Hugging Face's layout).
WEIGHT_SUFFIXES = (".safetensors", ".safetensors.index.json", ".bin", ".bin.index.json", ".pt", ".pth", ".gguf")
# The variable the servers' --weight-version word expands (module_utils/sglang_flags.py, WEIGHT_ENV: the same name),
# from the file each start's record step writes beside its record (weights_env_path): the version of exactly the
# weights that start loaded. Spelled here too: the helper set carries this module, not the flag table.
WEIGHT_ENV = "SGLANG_DSV4_WEIGHT_VERSION"


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


class UnreadableWeightsError(OSError):
    """The model directory's weights cannot be read whole (not listed, a file that cannot be stat'ed, none at all):
    their version is unknown, and is never given as a definite one (an empty manifest's digest is no version)."""


def weights_manifest(model_dir: str) -> list[tuple[str, int, int]]:
    """(name, size, mtime_ns) of every weight file at the top of model_dir, by name; links are followed (a Hugging
    Face cache links its snapshot's files to blobs). Hashing hundreds of GB at every plan is no plan: a file rewritten
    in place with its size and modification time kept goes unnoticed, a copy of the same weights counts as new ones
    (one restart too many, never one too few).

    Raises UnreadableWeightsError when the directory cannot be listed (a share not mounted yet, a stale handle, root
    squash), holds no weight file, or names one that cannot be stat'ed (a dangling link, a file gone mid-read)."""
    try:
        names = sorted(n for n in os.listdir(model_dir) if n.endswith(WEIGHT_SUFFIXES))
    except OSError as error:
        raise UnreadableWeightsError(
            f"the model directory {model_dir} cannot be listed: {error.strerror or error}"
        ) from error
    if not names:
        raise UnreadableWeightsError(
            f"the model directory {model_dir} holds no weight file (*{', *'.join(WEIGHT_SUFFIXES)}): a share not"
            " mounted yet, or not the model's directory"
        )
    manifest = []
    for name in names:
        path = os.path.join(model_dir, name)
        try:
            info = os.stat(path)
        except OSError as error:
            raise UnreadableWeightsError(f"the weight file {path} cannot be read: {error.strerror or error}") from error
        if not stat.S_ISDIR(info.st_mode):
            manifest.append((name, info.st_size, info.st_mtime_ns))
    return manifest


def manifest_digest(manifest: list[tuple[str, int, int]]) -> str:
    """The digest of a weights manifest (weights_manifest): the same text, the same weights."""
    text = "".join(f"{name}\0{size}\0{mtime}\n" for name, size, mtime in manifest)
    return hashlib.sha256(text.encode()).hexdigest()


def weights_digest(model_dir: str) -> str:
    """The digest of a model directory's weights manifest."""
    return manifest_digest(weights_manifest(model_dir))


def weights_now(model_dir: str) -> dict[str, Any]:
    """The weight version the model directory's manifest gives now, and how many weight files it names (one read
    of the directory): what the plan shows and the verification holds each server to."""
    manifest = weights_manifest(model_dir)
    return {"version": weight_version(manifest_digest(manifest)), "files": len(manifest)}


def weight_version(digest: str) -> str:
    """What --weight-version says for a manifest's digest; /model_info and /server_info report it."""
    return f"sha256:{digest[:16]}"


def weights_env_path(record_path: str) -> str:
    """The env file beside a start's record that holds its --weight-version (the unit reads it, optional)."""
    return os.path.splitext(record_path)[0] + ".weights.env"


def input_digest(spec: str) -> str | None:
    """The digest of one input of a service: a file, a drop-in folder ("DIR/"), a runtime ("distributions:") or
    a model's weights ("weights:")."""
    if spec.startswith(WEIGHTS):
        return weights_digest(spec[len(WEIGHTS) :])
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


def known_digest(path: str) -> str | None:
    """An input's digest now (input_digest); weights that cannot be read whole are unknown (None), never a version.
    A start's record never holds None for its weights (record() refuses them), so an unknown never matches one."""
    try:
        return input_digest(path)
    except UnreadableWeightsError:
        return None


def inputs_digest(digests: dict[str, str | None]) -> str:
    """One digest over a set of inputs (path -> file digest, None for absent), independent of order."""
    text = "".join(f"{path}\0{digests[path] or '-'}\n" for path in sorted(digests))
    return hashlib.sha256(text.encode()).hexdigest()


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
        # The version --weight-version gets at this start, for each weights input (a server has one).
        "weights": {p[len(WEIGHTS) :]: weight_version(digests[p] or "") for p in inputs if p.startswith(WEIGHTS)},
        "recorded_at": time.time(),
    }
    directory = os.path.dirname(record_path)
    os.makedirs(directory, mode=0o700, exist_ok=True)
    for version in entry["weights"].values():
        # Read by systemd for ExecStart, after this step (EnvironmentFile= is read before each command).
        write_atomic(weights_env_path(record_path), f"{WEIGHT_ENV}={version}\n", mode=0o600)
    write_atomic(record_path, json.dumps(entry, indent=2, sort_keys=True) + "\n", mode=0o600)
    return entry


def runs_from_disk(record_path: str, invocation: str) -> bool:
    """Whether the service's current start (its invocation) recorded exactly the inputs on disk now."""
    try:
        raw = read_regular(record_path, limit=1 << 20)
        entry = json.loads(raw) if raw else None
    except (OSError, ValueError, UnsafeFileError):
        return False
    if not isinstance(entry, dict) or not invocation or entry.get("invocation") != invocation:
        return False
    inputs = entry.get("inputs")
    if not isinstance(inputs, dict):
        return False
    # Weights that cannot be read now have no digest (known_digest): that it runs from them is not said.
    return entry.get("digest") == inputs_digest({path: known_digest(path) for path in inputs})
