"""Runtime releases (module_utils/sglang_release.py): the lock's checks, the release id, drift and pruning."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import ClassVar

import pytest
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_host_read as state
from ansible_collections.dsv4.sglang.plugins.module_utils import sglang_release as rel

ROOT = Path(__file__).resolve().parents[2]
HASH = "--hash=sha256:" + "a" * 64


def test_the_collections_and_the_labs_locks_pin_every_package_with_a_hash():
    production = ROOT / "inventories/production/locks/sglang-0.5.23.txt"
    locks = [*sorted((ROOT / "roles").glob("*/files/locks/*.txt")), production]
    assert len(locks) >= 7
    for lock in locks:
        pins, errors, _requirements = rel.parse_lock(lock.read_text(), lock.name)
        assert errors == [], errors
        assert pins, lock


def test_a_uv_compiled_lock_with_continuations_comments_and_markers_parses():
    text = f"""# generated
sglang==0.5.23 \\
    {HASH} \\
    --hash=sha256:{"b" * 64}
    # via -r sglang.in
nvidia-nccl-cu13==2.28.3 ; platform_machine == 'x86_64' \\
    {HASH}
Torch_Audio==2.9.0 {HASH}
"""
    pins, errors, requirements = rel.parse_lock(text, "sglang_runtime_server_lock")
    assert errors == []
    assert pins == {"nvidia-nccl-cu13": "2.28.3", "sglang": "0.5.23", "torch-audio": "2.9.0"}
    assert len(requirements) == 3


@pytest.mark.parametrize(
    ("line", "expect"),
    [
        ("sglang>=0.5 " + HASH, "line 1 ('sglang>=0.5 --hash"),
        ("sglang==0.5.23", "line 1 (sglang) has no --hash=sha256"),
        ("sglang==0.5.23 --hash=md5:abc", "line 1 (sglang) has no --hash=sha256"),
        ("--index-url https://mirror.invalid/simple", "line 1 is a pip option (--index-url)"),
        ("-e git+https://x.invalid/sglang", "line 1 is a pip option (-e)"),
        ("sglang==0.5.23\x1b[31m " + HASH, "line 1 holds a control character"),
        ("", "the lock file pins no package"),
    ],
)
def test_what_is_not_an_exact_pin_with_a_hash_is_named_with_its_variable_and_line(line, expect):
    _pins, errors, _requirements = rel.parse_lock(line + "\n", "sglang_runtime_router_lock")
    assert any(e.startswith("sglang_runtime_router_lock: ") and expect in e for e in errors), errors


def test_a_package_pinned_twice_to_different_versions_is_refused():
    _pins, errors, _requirements = rel.parse_lock(f"smg==1.13.0 {HASH}\nSMG==1.12.0 {HASH}\n", "v")
    assert errors == ["v: smg is pinned twice (1.13.0 and 1.12.0)"]


def test_the_release_id_is_the_digest_of_the_requirements_and_options_alone():
    a = rel.parse_lock(f"# one\nb==2 {HASH}\na==1 {HASH}\n", "v")[2]
    b = rel.parse_lock(f"a==1   {HASH}  # note\n\n# two\nb==2 {HASH}\n", "v")[2]
    assert rel.release_id(a, {"no_deps": False}) == rel.release_id(b, {"no_deps": False})
    assert rel.release_id(a, {"no_deps": False}) != rel.release_id(a, {"no_deps": True})
    c = rel.parse_lock(f"a==1 {HASH}\nb==3 {HASH}\n", "v")[2]
    assert rel.release_id(a, {}) != rel.release_id(c, {})
    assert len(rel.release_id(a, {})) == 16


def test_the_labs_no_compile_names_a_release_of_its_own_and_leaves_every_other_name_as_it_was():
    a = rel.parse_lock(f"a==1 {HASH}\n", "v")[2]
    assert rel.release_options(False) == {"no_deps": False}  # the options every release was named by before
    assert rel.release_options(True, False) == {"no_deps": True}
    ids = {rel.release_id(a, rel.release_options(d, c)) for d in (False, True) for c in (False, True)}
    assert len(ids) == 4


def test_describe_names_the_headline_packages():
    assert rel.describe({"sglang": "0.5.23", "torch": "2.14.1"}) == "sglang 0.5.23"
    assert rel.describe({"sglang-router": "0.3.1", "orjson": "3"}) == "sglang-router 0.3.1"
    assert rel.describe({"a": "1", "b": "2"}) == "2 packages"


def make_release(directory: Path, rid: str, packages: dict[str, str], built_at: float = 0.0) -> Path:
    path = directory / rid
    site = path / "lib/python3.11/site-packages"
    site.mkdir(parents=True)
    for name, version in {**packages, "pip": "23.0.1"}.items():
        (site / f"{name.replace('-', '_')}-{version}.dist-info").mkdir()
    (path / rel.MANIFEST).write_text(json.dumps({"id": rid, "packages": packages, "built_at": built_at}))
    return path


def test_drift_is_what_differs_from_the_lock_and_seeded_packages_are_not(tmp_path):
    path = make_release(tmp_path, "r1", {"sglang-router": "0.3.2", "orjson": "3.13.0"})
    assert rel.drift({"sglang-router": "0.3.2", "orjson": "3.13.0"}, rel.installed(str(path))) == []
    (path / "lib/python3.11/site-packages/orjson-3.13.0.dist-info").rename(
        path / "lib/python3.11/site-packages/orjson-3.14.0.dist-info"
    )
    (path / "lib/python3.11/site-packages/planted-1.0.dist-info").mkdir()
    assert rel.drift({"sglang-router": "0.3.2", "orjson": "3.13.0"}, rel.installed(str(path))) == [
        "orjson 3.13.0 in the lock, 3.14.0 installed",
        "planted - in the lock, 1.0 installed",
    ]


def test_a_manifest_is_read_only_when_it_is_root_s_regular_file_of_the_same_id(tmp_path):
    path = make_release(tmp_path, "r1", {"smg": "1.13.0"})
    assert rel.read_manifest(str(path))["id"] == "r1"
    os.rename(path, tmp_path / "r2")
    assert rel.read_manifest(str(tmp_path / "r2")) is None  # another folder's manifest
    target = tmp_path / "elsewhere.json"
    target.write_text(json.dumps({"id": "r3"}))
    (tmp_path / "r3").mkdir()
    (tmp_path / "r3" / rel.MANIFEST).symlink_to(target)
    assert rel.read_manifest(str(tmp_path / "r3")) is None
    assert rel.read_manifest(str(tmp_path / "none")) is None


def test_an_unsafe_releases_folder_is_named(tmp_path):
    assert rel.unsafe_dir(str(tmp_path / "absent")) is None
    (tmp_path / "open").mkdir(mode=0o777)
    os.chmod(tmp_path / "open", 0o777)  # noqa: S103 - the unsafe folder under test
    assert rel.unsafe_dir(str(tmp_path / "open")) == "is writable by accounts other than root"
    (tmp_path / "link").symlink_to(tmp_path / "open")
    assert rel.unsafe_dir(str(tmp_path / "link")) == "is a symbolic link"


def test_pruning_keeps_the_protected_ones_and_the_newest_others_up_to_keep():
    releases = {rid: {"built_at": t} for rid, t in (("a", 1), ("b", 2), ("c", 3), ("d", 4), ("e", 5))}
    assert rel.prunable(releases, 3, {"a", "e"}) == ["b", "c"]
    assert rel.prunable(releases, 2, {"a", "e"}) == ["b", "c", "d"]
    # More protected releases than keep: none of them goes, every other one does.
    assert rel.prunable(releases, 2, {"a", "b", "c"}) == ["d", "e"]
    assert rel.prunable(releases, 10, set()) == []


def test_the_plan_reads_each_release_built_what_runs_it_and_drift(tmp_path):
    directory = tmp_path / "releases"
    old = make_release(directory, "old", {"sglang-router": "0.3.1"})
    new = make_release(directory, "new", {"sglang-router": "0.3.2"})
    (new / "lib/python3.11/site-packages/planted-1.0.dist-info").mkdir()
    wanted = [
        {"group": "router", "id": "new", "path": str(new), "pins": {"sglang-router": "0.3.2"}, "size_mb": 1},
        {"group": "servers", "id": "missing", "path": str(directory / "missing"), "pins": {"sglang": "0.5.23"}},
    ]
    records = {
        "sglang-dsv4-router": {"inputs": {f"distributions:{old}": "x", "/etc/x": "y"}},
        "sglang-dsv4-decode": None,
    }
    groups = {"sglang-dsv4-router": "router", "sglang-dsv4-decode": "servers"}
    read, errors = state.read_releases(wanted, records, groups)
    assert read == [
        {
            "group": "router",
            "id": "new",
            "describe": "sglang-router 0.3.2",
            "ready": True,
            "running": ["old"],
            "running_describe": ["sglang-router 0.3.1"],
        },
        {
            "group": "servers",
            "id": "missing",
            "describe": "sglang 0.5.23",
            "ready": False,
            "running": [],
            "running_describe": [],
        },
    ]
    assert any("was changed by hand after its build: planted - in the lock, 1.0 installed" in e for e in errors)


def test_the_plan_refuses_a_build_without_room(tmp_path):
    wanted = [{"group": "servers", "id": "x", "path": str(tmp_path / "r/x"), "pins": {}, "size_mb": 1 << 40}]
    _read, errors = state.read_releases(wanted, {}, {})
    assert any("(sglang_runtime_release_size_mb)" in e and "MB free" in e for e in errors), errors


@pytest.mark.parametrize("no_compile", [False, True])
def test_a_release_is_built_from_wheels_only_never_a_source_distribution(tmp_path, no_compile):
    """A source distribution runs its setup code as root and fetches its build dependencies without a hash: pip is
    told to take wheels alone, with every hash, whatever the index or wheelhouse offers. It byte-compiles what it
    installs unless the lab's no_compile says otherwise."""
    from ansible_collections.dsv4.sglang.plugins.modules import sglang_release as module_code

    calls = []

    class StopError(Exception):
        pass

    class Module:
        check_mode = False
        params: ClassVar[dict] = {
            "releases_dir": str(tmp_path / "releases"),
            "id": "abc123",
            "group": "root",
            "lock": "six==1.16.0 --hash=sha256:" + "0" * 64 + "\n",
            "pins": {"six": "1.16.0"},
            "python": "/usr/bin/python3",
            "no_deps": True,
            "no_compile": no_compile,
            "index_url": None,
            "wheelhouse": str(tmp_path / "wheels"),
            "timeout": 60,
            "modules": [],
        }

        def run_command(self, argv):
            calls.append(argv)
            if "install" in argv:
                raise StopError
            os.makedirs(os.path.join(tmp_path, "releases", "abc123"), exist_ok=True)
            return 0, "", ""

        def fail_json(self, msg, **kwargs):
            raise AssertionError(msg)

    with pytest.raises(StopError):
        module_code.build(Module())
    install = calls[-1]
    assert install[install.index("--only-binary") + 1] == ":all:" and "--require-hashes" in install
    assert ("--no-compile" in install) is no_compile
