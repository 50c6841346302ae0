"""Prepares the controller once per run, so that the worker Ansible forks for each task of each host does not:

- the Jinja2 filters and tests every task of this collection uses are loaded in the main process (a worker that
  templates a filter would load every filter file of the collection from source, and throw them away on exit);
- the module payloads (AnsiballZ) of this collection's modules are kept between runs. Ansible builds each module's
  payload once per run, in the first worker that sends the module, by parsing the module and every module_utils file
  it imports (ansible.module_utils.basic and its ~50 files among them): about 0.2 s of CPU per module and run. The
  payloads a run built are kept in a private folder next to Ansible's own temporary files, under a key of everything
  they are built from (Ansible's version, the controller's Python, and the content of this collection's modules and
  module_utils and of every folder Ansible takes module_utils from), and put into the next run's cache before its
  first task. A change of any of those files is a new key: no payload is sent from sources other than those on disk;
- the Python code Jinja compiles each template string to is kept between the workers of a run and between runs
  (plugins/plugin_utils/sglang_template_cache.py): Ansible compiles every template a task uses again in each worker;
- the main process's heap is frozen (gc.freeze) before each task forks its workers: a worker's garbage collections
  then never walk, and so never write to, the objects it inherited, which it would otherwise copy page by page
  (copy-on-write) on its way to its first result. Each play starts with one full collection, so that what a play
  left unreachable is freed, not kept for the whole run.

bench/cpu.py measures what a deploy run saves (BENCHMARKS.md, "A run's CPU"). It changes nothing a run does or prints.
"""

from __future__ import annotations

DOCUMENTATION = """
name: sglang_preload
type: aggregate
short_description: Loads the filters once, and keeps this collection's module payloads between runs
description:
  - Loads, in the controller's main process at the start of a playbook, the filters and tests of Ansible itself and
    every filter of this collection, so that the worker Ansible forks for each task of each host finds them loaded
    instead of loading them from source again.
  - Keeps the module payloads (AnsiballZ) Ansible built for this collection's modules in a run, in a folder private
    to the user next to Ansible's temporary files (C(local_tmp)), under a key of everything they are built from
    (Ansible's version, the controller's Python, the content of this collection's modules and module_utils and of
    every folder Ansible takes module_utils from), and puts them into the next run's cache before its first task;
    a change of any of those files starts a new key. A folder that is not the user's own, or that others may
    write, is never used.
  - Keeps the Python code Jinja compiles each template string to, in a private folder next to the payloads, under a
    key of the string and of everything that changes its code (the environment's settings, Ansible's backslash
    escaping; Ansible's, Jinja's and Python's versions name the folder), since Ansible compiles every template a task
    uses again in each worker it forks. Only files of the user's own that no one else may write are ever loaded.
  - Freezes the main process's heap (Python's C(gc.freeze)) as each task starts, so that the workers it forks do not
    copy the pages of the objects they inherit when their garbage collector walks them; each play starts with one
    full collection, so nothing a play left unreachable is kept for the whole run.
  - Changes nothing a run does or prints; only the controller's CPU time.
options:
  freeze_heap:
    description:
      - Freeze the main process's heap before each task forks its workers (and collect it once as each play starts).
      - Off only to measure what it saves (C(bench/cpu.py)).
    type: bool
    default: true
    env:
      - name: DSV4_SGLANG_PRELOAD_FREEZE_HEAP
    ini:
      - section: callback_sglang_preload
        key: freeze_heap
requirements:
  - enabled with C(callbacks_enabled = dsv4.sglang.sglang_preload) in C(ansible.cfg), or
    C(ANSIBLE_CALLBACKS_ENABLED=dsv4.sglang.sglang_preload)
"""

import gc  # noqa: E402 (the sanity test wants the documentation first)
import hashlib  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import sys  # noqa: E402

from ansible import constants  # noqa: E402
from ansible.plugins.callback import CallbackBase  # noqa: E402
from ansible.plugins.loader import filter_loader, module_utils_loader, test_loader  # noqa: E402
from ansible.release import __version__ as ansible_version  # noqa: E402
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_template_cache  # noqa: E402
from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_private_store import (  # noqa: E402
    open_store,
    private_file,
)

_PLUGINS = pathlib.Path(__file__).resolve().parents[1]
# The collection's filters are documented one per file next to their code (plugins/filter/NAME.yml).
_FILTER_DOCS = _PLUGINS / "filter"
# Ansible's cache file of a module's payload is named after the module's name as the host imports it.
_PAYLOAD_PREFIX = "ansible_collections.dsv4.sglang.plugins.modules."
_STORE_PREFIX = "dsv4-sglang-payloads-"


def payload_key() -> str:
    """Everything a payload of this collection's modules is built from: a change of any of it is a new key."""
    digest = hashlib.sha256(f"{ansible_version}\0{sys.version_info[:2]}\0".encode())
    # This collection's modules and module_utils, and every folder Ansible looks for module_utils in (its own, and
    # the configured module_utils paths that exist), in Ansible's order.
    trees = [_PLUGINS / "modules", _PLUGINS / "module_utils"]
    trees += [pathlib.Path(path) for path in module_utils_loader._get_paths(subdirs=False) if os.path.isdir(path)]
    for number, tree in enumerate(trees):
        for path in sorted(tree.rglob("*.py")):
            digest.update(f"{number}:{path.relative_to(tree)}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:32]


def own_files(folder: pathlib.Path) -> list[pathlib.Path]:
    """The payload files of a private folder that are regular files of this user's, written by no one else. Only
    payloads without extensions (a debugger's maps the paths of the checkout that built them): names end in -none."""
    found = []
    for path in sorted(folder.glob(f"{_PAYLOAD_PREFIX}*-none")):
        if private_file(os.lstat(path)):
            found.append(path)
    return found


def copy_new(source: pathlib.Path, target: pathlib.Path) -> list[str]:
    """Copies the payload files of source that target lacks (atomically, mode 0600); returns their names."""
    copied = []
    for path in own_files(source):
        if (target / path.name).exists():
            continue
        part = target / f".{path.name}.{os.getpid()}"
        with open(part, "wb", opener=lambda name, flags: os.open(name, flags | os.O_EXCL, 0o600)) as handle:
            handle.write(path.read_bytes())
        os.replace(part, target / path.name)
        copied.append(path.name)
    return copied


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "dsv4.sglang.sglang_preload"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._store: pathlib.Path | None = None
        self._freeze = False

    def v2_playbook_on_start(self, playbook):
        try:
            self._freeze = bool(self.get_option("freeze_heap"))
        except KeyError:  # options never loaded (the plugin made outside Ansible's loader): the documented default
            self._freeze = True
        # One name loads every file of its kind: Ansible's own filters and tests all at once, this collection's
        # filters one file per documented filter.
        names = [(filter_loader, "ansible.builtin.to_json"), (test_loader, "ansible.builtin.match")]
        names += [(filter_loader, f"dsv4.sglang.{doc.stem}") for doc in sorted(_FILTER_DOCS.glob("*.yml"))]
        for loader, name in names:
            try:
                loader.get_with_context(name)
            except Exception as exc:  # a filter that does not load fails where a task uses it, with Ansible's message
                self._display.vvv(f"sglang_preload: {name}: {exc}")
        try:
            self._restore_payloads()
        except Exception as exc:  # without the kept payloads, Ansible builds them as it always does
            self._store = None
            self._display.vvv(f"sglang_preload: module payloads not restored: {exc}")
        try:
            store = sglang_template_cache.install(pathlib.Path(constants.DEFAULT_LOCAL_TMP).parent)
            self._display.vvv(f"sglang_preload: compiled templates kept in {store}")
        except Exception as exc:  # without it, every worker compiles its templates as Ansible always does
            self._display.vvv(f"sglang_preload: compiled templates not kept: {exc}")

    def v2_playbook_on_play_start(self, play):
        if self._freeze:
            gc.unfreeze()
            gc.collect()
            gc.freeze()

    def v2_playbook_on_task_start(self, task, is_conditional):
        if self._freeze:
            gc.freeze()

    def v2_playbook_on_handler_task_start(self, task):
        if self._freeze:
            gc.freeze()

    def v2_playbook_on_stats(self, stats):
        try:
            if self._store is not None:
                copy_new(self._cache(), self._store)
        except Exception as exc:
            self._display.vvv(f"sglang_preload: module payloads not kept: {exc}")

    @staticmethod
    def _cache() -> pathlib.Path:
        return pathlib.Path(constants.DEFAULT_LOCAL_TMP) / "ansiballz_cache"

    def _restore_payloads(self) -> None:
        # Ansible's own temporary folder of this run is private (mkdtemp); its parent (local_tmp) must be too.
        store = open_store(pathlib.Path(constants.DEFAULT_LOCAL_TMP).parent, _STORE_PREFIX, payload_key())
        cache = self._cache()
        cache.mkdir(mode=0o700, exist_ok=True)
        self._store = store
        restored = copy_new(store, cache)
        self._display.vvv(f"sglang_preload: {len(restored)} module payload(s) from {store}")
