"""The Python code Jinja compiles a template to, kept between the workers of a run and between runs (controller only).

Ansible compiles each template string a task uses in the worker it forks for that task and host, and keeps nothing
compiled (ansible-core 2.19 to 2.21): the main process, which every worker starts from, never compiled it. On this
collection's lab, a 1-host sampling change compiled 614 templates (310 distinct strings) for about 1.1 s of CPU, and
every added host compiles them again. bench/cpu.py measures what keeping them saves (BENCHMARKS.md, "A run's CPU").

What Jinja compiles a source to depends only on the source and on how the environment compiles: its delimiters and
whitespace settings, its code generator and the operations its sandbox intercepts, whether it folds constants, its
finalizer, Ansible's backslash escaping for the template at hand and its embedded-template setting. All of that is
in each entry's key, with the source itself; Ansible's, Jinja's and Python's versions and this file are in the
store's name, so a new version of any of them starts an empty store. One thing more is read at compile time: what
each filter and test the template names asks to be passed (Jinja's pass_context, pass_environment...), which a
filter plugin of another version may change. Each entry records it for the names it uses, and is used only where
every one of them still asks the same. Only what could be compiled is kept: a template with a syntax error raises as
before and leaves nothing.

The store is a folder of this user's that no one else may write, each entry a file of this user's that no one else
may write (anything else is compiled afresh, never loaded), written whole (a private name, then a rename). Any
failure of the cache falls back to Jinja's own compile: it changes what a run costs, never what it renders.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import importlib.util
import marshal
import os
import pathlib
import shutil
import sys
import types
import typing as t

from ansible_collections.dsv4.sglang.plugins.plugin_utils.sglang_private_store import open_store, private_file

STORE_PREFIX = "dsv4-sglang-templates-"
# A store past this many entries is emptied when a run starts (distinct template strings, not runs, make entries).
MAX_ENTRIES = 20000

_state: dict[str, t.Any] = {"store": None, "original": None, "original_expression": None, "original_generate": None}
# The filters and tests the template being compiled names, as the code generator is handed its tree.
_names: contextvars.ContextVar[list | None] = contextvars.ContextVar("sglang_names", default=None)
# The source of the expression being compiled: Jinja compiles an expression from the tree it parsed, not a string.
_expression: contextvars.ContextVar[str | None] = contextvars.ContextVar("sglang_expression", default=None)


def store_key() -> str:
    """The store's key: Ansible's, Jinja's and Python's versions and this file, hashed."""
    import jinja2
    from ansible.release import __version__ as ansible_version

    digest = hashlib.sha256(f"{ansible_version}\0{jinja2.__version__}\0{sys.implementation.cache_tag}\0".encode())
    digest.update(importlib.util.MAGIC_NUMBER + pathlib.Path(__file__).read_bytes())
    return digest.hexdigest()[:32]


def _name_of(value: t.Any) -> str:
    """A class's or function's full name; any other value's repr (a bool, a string)."""
    if hasattr(value, "__qualname__"):
        return f"{value.__module__}.{value.__qualname__}"
    return repr(value)


def environment_key(environment: t.Any) -> tuple:
    """Everything of an environment and of the moment that changes the code Jinja compiles a source to."""
    from ansible._internal._templating._jinja_bits import _TemplateCompileContext, _TemplateConfig

    compiling = _TemplateCompileContext.current(optional=True)
    return (
        _name_of(type(environment)),
        _name_of(environment.code_generator_class),
        *(
            getattr(environment, name)
            for name in (
                "block_start_string",
                "block_end_string",
                "variable_start_string",
                "variable_end_string",
                "comment_start_string",
                "comment_end_string",
                "line_statement_prefix",
                "line_comment_prefix",
                "trim_blocks",
                "lstrip_blocks",
                "newline_sequence",
                "keep_trailing_newline",
                "optimized",
                "is_async",
            )
        ),
        _name_of(environment.autoescape),
        _name_of(environment.finalize),
        tuple(sorted(environment.extensions)),
        tuple(sorted(environment.intercepted_binops)),
        tuple(sorted(environment.intercepted_unops)),
        bool(_TemplateConfig.allow_embedded_templates),
        bool(compiling and compiling.escape_backslashes),
    )


def entry_key(environment: t.Any, source: str, name: str | None, filename: str | None, defer_init: bool) -> str:
    digest = hashlib.sha256(repr((environment_key(environment), name, filename, defer_init)).encode())
    digest.update(b"\0" + source.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def passed(environment: t.Any, kind: str, name: str) -> str | None:
    """What the filter or test (kind: filters or tests) of that name asks Jinja to pass it, as the code generator
    reads it: context, eval_context, environment, or None (nothing, or no such plugin)."""
    from jinja2.utils import _PassArg

    found = _PassArg.from_obj(getattr(environment, kind).get(name))
    return found.name if found is not None else None


def signature(environment: t.Any, names: t.Iterable[tuple[str, str]]) -> tuple:
    return tuple((kind, name, passed(environment, kind, name)) for kind, name in sorted(set(names)))


def load(store: pathlib.Path, key: str) -> tuple[types.CodeType, tuple] | None:
    """The entry's code and the signature of the filters and tests it names, or None: missing, not a regular file of
    this user's that only this user may write, or not an entry."""
    try:
        fd = os.open(store / key, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not private_file(os.fstat(fd)):
            return None
        with os.fdopen(os.dup(fd), "rb") as handle:
            entry = marshal.loads(handle.read())  # noqa: S302 (a private file of this user's, checked above)
    except (OSError, ValueError, EOFError, TypeError):
        return None
    finally:
        os.close(fd)
    if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], types.CodeType):
        return entry
    return None


def save(store: pathlib.Path, key: str, code: types.CodeType, names: tuple) -> None:
    """Writes the entry (the code, and the signature of the filters and tests it names) whole: under a private name
    first, then renamed over the entry's name."""
    data = marshal.dumps((code, names))
    part = store / f".{key}.{os.getpid()}"
    try:
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(part, store / key)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(part)
        raise


def _compile(self, source, name=None, filename=None, raw=False, defer_init=False):
    """AnsibleEnvironment.compile with the store: the kept code where there is one, else Jinja's compile, kept. An
    expression (the tree compile_expression parsed) is kept under its source, marked as an expression."""
    original = _state["original"]
    expression = _expression.get()
    _expression.set(None)  # the one compile compile_expression asked for, not any later one
    text = source if isinstance(source, str) else expression
    store = _state["store"]
    if store is None or text is None or raw or getattr(self, "_debuggable_template_source", False):
        return original(self, source, name, filename, raw, defer_init)
    try:
        key = entry_key(self, text, (name, "expression") if text is expression else name, filename, defer_init)
    except Exception:  # an environment this file does not know: compiled as Ansible would, not kept
        return original(self, source, name, filename, raw, defer_init)
    entry = load(store, key)
    with contextlib.suppress(Exception):  # a plugin that does not load: compiled afresh, which says why
        if entry is not None and signature(self, [named[:2] for named in entry[1]]) == entry[1]:
            return entry[0]
    names: list[tuple[str, str]] = []
    token = _names.set(names)
    try:
        code = original(self, source, name, filename, raw, defer_init)
    finally:
        _names.reset(token)
    with contextlib.suppress(Exception):  # a full disk, or code marshal cannot write: compiled, not kept
        save(store, key, code, signature(self, names))
    return code


def _generate(self, source, *args, **kwargs):
    """Environment._generate, noting the filters and tests the tree it is handed names, for the entry's signature."""
    from jinja2 import nodes

    names = _names.get()
    if names is not None:
        names += [("filters", node.name) for node in source.find_all(nodes.Filter)]
        names += [("tests", node.name) for node in source.find_all(nodes.Test)]
    return _state["original_generate"](self, source, *args, **kwargs)


def _compile_expression(self, source, *args, **kwargs):
    """AnsibleEnvironment.compile_expression, telling the compile it asks for which source the tree is of."""
    token = _expression.set(source if isinstance(source, str) else None)
    try:
        return _state["original_expression"](self, source, *args, **kwargs)
    finally:
        _expression.reset(token)


def install(parent: pathlib.Path) -> pathlib.Path:
    """Opens the store in the private folder parent (made by the caller), removes stores of other versions, and has
    every template Ansible compiles from now on (in this process and the workers it forks) go through it. Idempotent.
    Raises OSError where parent or the store is not private; nothing is installed then."""
    from ansible._internal._templating._jinja_bits import AnsibleEnvironment

    store = open_store(parent, STORE_PREFIX, store_key())
    if len(os.listdir(store)) > MAX_ENTRIES:
        shutil.rmtree(store)
        store.mkdir(mode=0o700)
    # Checked before the store is used: the key reads these (an Ansible without them keeps Jinja's own compile).
    environment_key(AnsibleEnvironment())
    if AnsibleEnvironment.compile is not _compile:
        _state["original"] = AnsibleEnvironment.compile
        _state["original_expression"] = AnsibleEnvironment.compile_expression
        _state["original_generate"] = AnsibleEnvironment._generate
        AnsibleEnvironment.compile = _compile
        AnsibleEnvironment.compile_expression = _compile_expression
        AnsibleEnvironment._generate = _generate
    _state["store"] = store
    return store
