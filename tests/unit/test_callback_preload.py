"""plugins/callback/sglang_preload.py: the filters every task uses are loaded in the controller's main process, so that
the workers Ansible forks find them loaded; this collection's module payloads are kept between runs, under a key of
their sources, never from a place another account could have planted; and every way the repository runs deploy.yml
enables it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.dsv4.sglang.plugins.callback import sglang_preload as preload
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_private_store import STALE_SECONDS

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible_collections.dsv4.sglang.plugins.callback.sglang_preload import CallbackModule
before = set(sys.modules)
CallbackModule().v2_playbook_on_start(None)
from ansible._internal._templating._jinja_bits import AnsibleEnvironment
print(AnsibleEnvironment.compile.__module__, AnsibleEnvironment.compile_expression.__module__)
print("\\n".join(sorted(set(sys.modules) - before)))
"""


def test_the_preload_loads_every_filter_file_of_the_collection_and_ansibles_own():
    loaded = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / ".collections")], capture_output=True, text=True, check=True
    ).stdout.split()
    files = sorted(p.stem for p in (ROOT / "plugins/filter").glob("*.py"))
    assert files
    missing = [f for f in files if f"ansible_collections.dsv4.sglang.plugins.filter.{f}" not in loaded]
    assert missing == [], f"filter files a worker would still load from source: {missing}"
    # Ansible's own, under the names its loader gives them (ansible.plugins.filter.core_<hash>).
    assert any(m.startswith("ansible.plugins.filter.core") for m in loaded)
    assert any(m.startswith("ansible.plugins.test.core") for m in loaded)
    # The workers it forks compile templates through the kept code (plugins/plugin_utils/sglang_template_cache.py).
    assert loaded[:2] == ["ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_template_cache"] * 2


def test_every_run_of_the_repository_enables_the_preload_and_pipelining():
    config = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^callbacks_enabled = dsv4\.sglang\.sglang_preload$", config, re.MULTILINE)
    assert re.search(r"^pipelining = true$", config, re.MULTILINE)
    # Molecule writes its own ansible.cfg, which the lab tests' runs of deploy.yml inherit.
    molecule = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())["provisioner"]["config_options"]
    assert molecule["defaults"]["callbacks_enabled"] == "dsv4.sglang.sglang_preload"
    assert molecule["ssh_connection"]["pipelining"] is True
    # A run that names its own callbacks replaces the configured list: each must name the preload again.
    overrides = []
    for path in [*ROOT.glob("molecule/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        if path.name == Path(__file__).name:
            continue
        for value in re.findall(r'"ANSIBLE_CALLBACKS_ENABLED": "([^"]*)"', path.read_text()):
            overrides.append((path.relative_to(ROOT), value))
    assert overrides
    assert [o for o in overrides if "dsv4.sglang.sglang_preload" not in o[1].split(",")] == []


@pytest.fixture(autouse=True)
def template_cache(monkeypatch):
    """The runs of the preload in this process open no template cache (it would stay installed for every later
    test of the process): each only records the folder it was asked to keep compiled templates in. The PROBE above
    runs the real one, in a process of its own; tests/unit/test_plugin_utils_template_cache.py tests it."""
    asked = []
    monkeypatch.setattr(preload.sglang_template_cache, "install", asked.append)
    return asked


def test_the_preload_keeps_compiled_templates_under_ansibles_local_tmp_and_goes_on_without(
    tmp_path, monkeypatch, template_cache
):
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o700)
    a_run(monkeypatch, parent, "ansible-local-1")
    preload.CallbackModule().v2_playbook_on_start(None)
    assert template_cache == [parent]

    def refused(folder):
        raise OSError(f"{folder} is not a private folder of this user's")

    monkeypatch.setattr(preload.sglang_template_cache, "install", refused)
    preload.CallbackModule().v2_playbook_on_start(None)  # the run goes on, compiling as Ansible alone would


# The module payloads kept between runs (the preload's second part).

PAYLOAD = "ansible_collections.dsv4.sglang.plugins.modules.sglang_ask-ZIP_DEFLATED-none"


def a_run(monkeypatch, parent: Path, name: str) -> Path:
    """A run's own temporary folder (Ansible's DEFAULT_LOCAL_TMP, a private mkdtemp) under `parent`."""
    local = parent / name
    local.mkdir(mode=0o700)
    monkeypatch.setattr(preload.constants, "DEFAULT_LOCAL_TMP", str(local))
    return local / "ansiballz_cache"


def test_a_payload_a_run_built_is_in_the_next_runs_cache_before_its_first_task(tmp_path, monkeypatch):
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o700)
    first = preload.CallbackModule()
    cache = a_run(monkeypatch, parent, "ansible-local-1")
    first.v2_playbook_on_start(None)
    assert cache.is_dir() and list(cache.iterdir()) == []
    (cache / PAYLOAD).write_bytes(b"payload")
    (cache / "ansible.legacy.command-ZIP_DEFLATED-none").write_bytes(b"not this collection's")
    (cache / f"{PAYLOAD}.lock").write_bytes(b"")
    (cache / PAYLOAD.replace("-none", "-debugpy")).write_bytes(b"with a debugger's paths")
    first.v2_playbook_on_stats(None)
    (store,) = parent.glob("dsv4-sglang-payloads-*")
    assert [p.name for p in store.iterdir()] == [PAYLOAD]
    assert (store / PAYLOAD).stat().st_mode & 0o777 == 0o600
    cache = a_run(monkeypatch, parent, "ansible-local-2")
    preload.CallbackModule().v2_playbook_on_start(None)
    assert [p.name for p in cache.iterdir()] == [PAYLOAD]
    assert (cache / PAYLOAD).read_bytes() == b"payload"


def test_a_change_of_any_source_of_a_payload_is_a_new_key_and_the_old_payloads_go(tmp_path, monkeypatch):
    plugins = tmp_path / "plugins"
    for folder in ("modules", "module_utils"):
        (plugins / folder).mkdir(parents=True)
        (plugins / folder / "a.py").write_text("A = 1\n")
    monkeypatch.setattr(preload, "_PLUGINS", plugins)
    key = preload.payload_key()
    assert preload.payload_key() == key
    keys = {key}
    for changed in ("modules/a.py", "module_utils/a.py"):
        (plugins / changed).write_text("A = 2\n")
        keys.add(preload.payload_key())
    (plugins / "module_utils/b.py").write_text("")
    keys.add(preload.payload_key())
    assert len(keys) == 4
    # Ansible's own module_utils, which every payload holds, are in the key too.
    utils = tmp_path / "ansible_module_utils"
    utils.mkdir()
    (utils / "basic.py").write_text("X = 1\n")
    monkeypatch.setattr(preload.module_utils_loader, "_get_paths", lambda subdirs=False: [str(utils)])
    before = preload.payload_key()
    (utils / "basic.py").write_text("X = 2\n")
    assert preload.payload_key() != before
    # A run with the new key removes the payloads of the old ones once no run has used them for a while; those of a
    # key another controller beside this one uses stay.
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o700)
    old, beside = parent / "dsv4-sglang-payloads-0123", parent / "dsv4-sglang-payloads-4567"
    for other in (old, beside):
        other.mkdir(mode=0o700)
        (other / PAYLOAD).write_bytes(b"built from other sources")
    unused = time.time() - STALE_SECONDS - 60
    os.utime(old, (unused, unused))
    cache = a_run(monkeypatch, parent, "ansible-local-1")
    preload.CallbackModule().v2_playbook_on_start(None)
    assert not old.exists() and list(cache.iterdir()) == []
    assert (beside / PAYLOAD).read_bytes() == b"built from other sources"


def test_payloads_are_never_taken_from_a_folder_or_file_another_account_could_have_planted(tmp_path, monkeypatch):
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o700)
    key = preload.payload_key()
    planted = tmp_path / "elsewhere"
    planted.mkdir(mode=0o700)
    (planted / PAYLOAD).write_bytes(b"planted")
    # The store is a link to somewhere else: not used, and the run goes on as Ansible alone would.
    (parent / f"dsv4-sglang-payloads-{key}").symlink_to(planted)
    cache = a_run(monkeypatch, parent, "ansible-local-1")
    run = preload.CallbackModule()
    run.v2_playbook_on_start(None)
    assert not cache.exists() or list(cache.iterdir()) == []
    run.v2_playbook_on_stats(None)
    assert [p.name for p in planted.iterdir()] == [PAYLOAD]
    (parent / f"dsv4-sglang-payloads-{key}").unlink()
    # A store others may write; then a file in it others may write, and a link in it.
    store = parent / f"dsv4-sglang-payloads-{key}"
    store.mkdir(mode=0o700)
    store.chmod(0o777)
    cache = a_run(monkeypatch, parent, "ansible-local-2")
    preload.CallbackModule().v2_playbook_on_start(None)
    assert not cache.exists() or list(cache.iterdir()) == []
    store.chmod(0o700)
    (store / PAYLOAD).write_bytes(b"writable by others")
    (store / PAYLOAD).chmod(0o666)
    (store / f"{PAYLOAD}x").symlink_to(planted / PAYLOAD)
    cache = a_run(monkeypatch, parent, "ansible-local-3")
    preload.CallbackModule().v2_playbook_on_start(None)
    assert list(cache.iterdir()) == []
    # Ansible's own local_tmp that others may write: nothing is kept there at all.
    parent.chmod(0o777)
    cache = a_run(monkeypatch, parent, "ansible-local-4")
    run = preload.CallbackModule()
    run.v2_playbook_on_start(None)
    cache.mkdir(exist_ok=True)
    (cache / PAYLOAD).write_bytes(b"payload")
    run.v2_playbook_on_stats(None)
    assert (store / PAYLOAD).read_bytes() == b"writable by others"


@pytest.mark.parametrize("option", [None, True, False])
def test_the_heap_is_frozen_as_each_task_starts_and_collected_once_per_play_unless_the_option_is_off(
    option, monkeypatch
):
    import gc

    collected = []
    monkeypatch.setattr(gc, "collect", lambda *a: collected.append(a) or 0)
    from ansible import constants

    run = preload.CallbackModule()
    if option is not None:  # its name and options as Ansible's loader registers them (its documentation), then set
        run._load_name = "dsv4.sglang.sglang_preload"
        options = yaml.safe_load(preload.DOCUMENTATION)["options"]
        constants.config.initialize_plugin_configuration_definitions("callback", run._load_name, options)
        run.set_options(direct={"freeze_heap": option})
    # else: made by hand, its options never loaded: the documented default
    monkeypatch.setattr(preload.CallbackModule, "_restore_payloads", lambda self: None)
    gc.unfreeze()
    try:
        run.v2_playbook_on_start(None)
        collected.clear()
        run.v2_playbook_on_play_start(None)
        assert len(collected) == (0 if option is False else 1)
        gc.unfreeze()
        run.v2_playbook_on_task_start(None, False)
        assert (gc.get_freeze_count() > 0) == (option is not False)
        gc.unfreeze()
        run.v2_playbook_on_handler_task_start(None)
        assert (gc.get_freeze_count() > 0) == (option is not False)
    finally:
        gc.unfreeze()
