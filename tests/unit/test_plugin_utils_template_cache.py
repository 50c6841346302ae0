"""plugins/plugin_utils/sglang_template_cache.py: the code Jinja compiles a template or an expression to is kept and
used again, under a key of everything that changes it; an entry anyone else could have written is never loaded; a
template that does not compile raises as before and leaves nothing; the store never grows past its bound."""

from __future__ import annotations

import contextlib
import marshal
import os
import time

import pytest
from ansible._internal._datatag._tags import TrustedAsTemplate
from ansible._internal._templating._jinja_bits import AnsibleEnvironment, _TemplateCompileContext
from ansible.errors import AnsibleTemplateError
from ansible.template import Templar
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_private_store
from ansible_collections.dsv4.sglang.plugins.plugin_utils import sglang_template_cache as cache
from jinja2 import pass_environment


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The cache installed in a private folder for one test; Jinja's own compile back afterwards."""
    with jinja_restored(monkeypatch):
        parent = tmp_path / "tmp"
        parent.mkdir(mode=0o700)
        yield cache.install(parent)


@contextlib.contextmanager
def jinja_restored(monkeypatch):
    """Jinja's own compile and a fresh cache state for the test, and whatever was there before back afterwards."""
    names = ("compile", "compile_expression", "_generate")
    saved = [(name, getattr(AnsibleEnvironment, name)) for name in names]
    originals = [cache._state["original"], cache._state["original_expression"], cache._state["original_generate"]]
    if AnsibleEnvironment.compile is cache._compile:  # installed before this test (a run of the preload)
        for name, original in zip(names, originals, strict=True):
            setattr(AnsibleEnvironment, name, original)
    monkeypatch.setattr(cache, "_state", dict.fromkeys(cache._state))
    try:
        yield
    finally:
        for name, value in saved:
            setattr(AnsibleEnvironment, name, value)


def entries(store):
    return sorted(p.name for p in store.iterdir())


def render(text, **variables):
    return Templar(variables=variables).template(TrustedAsTemplate().tag(text))


def never_compile(*args, **kwargs):
    raise AssertionError("compiled again: the kept code was not used")


def test_a_template_is_compiled_once_and_its_kept_code_renders_the_same(store, monkeypatch):
    assert render("{{ a + 1 }}-{% for x in b %}{{ x }}{% endfor %}", a=1, b=[3, 4]) == "2-34"
    assert len(entries(store)) == 1
    monkeypatch.setitem(cache._state, "original", never_compile)
    assert render("{{ a + 1 }}-{% for x in b %}{{ x }}{% endfor %}", a=41, b=[5]) == "42-5"


def test_an_expression_is_kept_under_its_source_apart_from_the_same_text_as_a_template(store, monkeypatch):
    templar = Templar(variables={"hosts": ["h1", "h2"]})
    assert templar.evaluate_conditional(TrustedAsTemplate().tag("'h2' in hosts")) is True
    assert len(entries(store)) == 1
    assert render("'h2' in hosts", hosts=[]) == "'h2' in hosts"  # a template without a delimiter is not compiled
    assert render("{{ 'h2' in hosts }}", hosts=["h2"]) is True
    assert len(entries(store)) == 2
    monkeypatch.setitem(cache._state, "original", never_compile)
    assert Templar(variables={"hosts": ["h1"]}).evaluate_conditional(TrustedAsTemplate().tag("'h2' in hosts")) is False


def test_the_key_holds_the_backslash_escaping_and_the_environments_settings(store):
    environment = AnsibleEnvironment()
    plain = cache.entry_key(environment, "{{ 'a\\nb' }}", None, None, False)
    with _TemplateCompileContext(escape_backslashes=True):
        escaped = cache.entry_key(environment, "{{ 'a\\nb' }}", None, None, False)
    overlay = environment.overlay(trim_blocks=not environment.trim_blocks)
    trimmed = cache.entry_key(overlay, "{{ 'a\\nb' }}", None, None, False)
    other = cache.entry_key(environment, "{{ 'a\\nc' }}", None, None, False)
    named = cache.entry_key(environment, "{{ 'a\\nb' }}", "unit.j2", None, False)
    assert len({plain, escaped, trimmed, other, named}) == 5
    # The same everything is the same key, in another environment object too.
    assert cache.entry_key(AnsibleEnvironment(), "{{ 'a\\nb' }}", None, None, False) == plain


def test_backslashes_render_as_without_the_cache(store):
    with_cache = [render("{{ 'c:\\newfile' }}"), render("{{ 'c:\\newfile' }}")]
    cache._state["store"] = None
    assert with_cache == [render("{{ 'c:\\newfile' }}")] * 2


def test_an_entry_that_is_not_this_users_own_private_file_is_never_loaded(store, monkeypatch):
    code = compile("result = 'planted'", "<x>", "exec")
    (store / "writable").write_bytes(marshal.dumps((code, ())))
    os.chmod(store / "writable", 0o666)  # noqa: S103 (what the test plants)
    (store / "real").write_bytes(marshal.dumps((code, ())))
    os.chmod(store / "real", 0o600)
    os.symlink(store / "real", store / "link")
    (store / "garbage").write_bytes(b"\x00not marshal")
    (store / "not-code").write_bytes(marshal.dumps({"a": 1}))
    (store / "bare-code").write_bytes(marshal.dumps(code))
    os.mkfifo(store / "fifo", 0o600)
    assert cache.load(store, "real") == (code, ())
    for name in ("writable", "link", "garbage", "not-code", "bare-code", "fifo", "missing"):
        assert cache.load(store, name) is None, name


def test_an_entry_it_cannot_load_is_compiled_afresh_and_replaced(store):
    render("{{ 1 + 1 }}")
    [key] = entries(store)
    (store / key).write_bytes(b"torn")
    assert render("{{ 1 + 1 }}") == 2
    assert isinstance(cache.load(store, key)[0], type(compile("", "<x>", "exec")))


def test_a_template_that_does_not_compile_raises_as_before_and_leaves_nothing(store):
    with pytest.raises(AnsibleTemplateError, match="unexpected"):
        render("{{ a + }}", a=1)
    with pytest.raises(AnsibleTemplateError):
        Templar(variables={}).evaluate_conditional(TrustedAsTemplate().tag("a +"))
    assert entries(store) == []


def test_a_folder_others_may_write_is_refused_and_nothing_is_installed(tmp_path, monkeypatch):
    compile_ = AnsibleEnvironment.compile
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # noqa: S103 (what the test refuses)
    with jinja_restored(monkeypatch), pytest.raises(OSError, match="not a private folder"):
        cache.install(shared)
    assert AnsibleEnvironment.compile is compile_
    assert list(shared.iterdir()) == []


def test_other_versions_stores_are_removed_once_unused_and_a_store_past_its_bound_is_emptied(tmp_path, monkeypatch):
    monkeypatch.setattr(cache, "MAX_ENTRIES", 3)
    parent = tmp_path / "tmp"
    parent.mkdir(mode=0o700)
    old = parent / f"{cache.STORE_PREFIX}old"
    old.mkdir(mode=0o700)
    unused = time.time() - sglang_private_store.STALE_SECONDS - 60
    os.utime(old, (unused, unused))
    # Another checkout's or Ansible's store, used a minute ago by a run beside this one: kept.
    (parent / f"{cache.STORE_PREFIX}beside").mkdir(mode=0o700)
    (parent / "someone-elses").mkdir(mode=0o700)
    with jinja_restored(monkeypatch):
        store = cache.install(parent)
        assert sorted(p.name for p in parent.iterdir()) == sorted(
            [store.name, f"{cache.STORE_PREFIX}beside", "someone-elses"]
        )
        for number in range(4):
            render(f"{{{{ {number} }}}}")
        assert len(entries(store)) == 4
        assert cache.install(parent) == store
        assert entries(store) == []
        assert AnsibleEnvironment.compile is cache._compile  # installed once, not wrapped twice
        assert cache._state["original"] is not cache._compile


def test_code_is_used_again_only_where_each_filter_it_names_asks_to_be_passed_the_same(store, monkeypatch):
    """Jinja's code generator reads each filter's pass_context/pass_environment: a plugin of another version may
    change it, and the kept code would call it with other arguments."""

    def plain(value):
        return f"plain {value}"

    @pass_environment
    def with_environment(environment, value):
        return f"environment {value}"

    compiled = []
    original = cache._state["original"]
    monkeypatch.setitem(cache._state, "original", lambda *args: compiled.append(1) or original(*args))
    first, second = AnsibleEnvironment(), AnsibleEnvironment()
    first.filters["shifty"] = plain
    second.filters["shifty"] = with_environment
    first.compile("{{ 'x' | shifty is string }}")
    [key] = entries(store)
    assert cache.load(store, key)[1] == (("filters", "shifty", None), ("tests", "string", None))
    first.compile("{{ 'x' | shifty is string }}")
    assert len(compiled) == 1
    second.compile("{{ 'x' | shifty is string }}")
    assert len(compiled) == 2
    assert cache.load(store, key)[1] == (("filters", "shifty", "environment"), ("tests", "string", None))
    second.compile("{{ 'x' | shifty is string }}")
    assert len(compiled) == 2
