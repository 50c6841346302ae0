"""The verification's repetition measure and startup-line parser (filter_plugins/sglang_verify.py)."""

from __future__ import annotations

from ansible_collections.dsv4.sglang.plugins.filter import sglang_verify as f
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import defaults_missing


def test_repetition_is_zero_for_varied_text_and_high_for_a_loop():
    assert f.sglang_repetition("the quick brown fox jumps over the lazy dog") == 0.0
    assert f.sglang_repetition("a b c " * 20) > 0.9
    assert f.sglang_repetition("") == 0.0
    assert f.sglang_repetition("one two") == 0.0


def test_startup_defaults_takes_the_last_line():
    journal = (
        "[t] Using default chat sampling params from model generation config: {'temperature': 0.6}\n"
        "[t] Using default chat sampling params from model generation config: {'temperature': 0.7, 'top_p': 0.95}\n"
    )
    assert f.FilterModule().filters()["sglang_startup_defaults"](journal) == {"temperature": 0.7, "top_p": 0.95}
    assert f.FilterModule().filters()["sglang_startup_defaults"]("nothing here") is None


def test_defaults_missing_names_what_the_startup_line_lacks():
    assert (
        defaults_missing({"temperature": 0.6, "top_p": 0.95, "top_k": None}, {"temperature": 0.6, "top_p": 0.95}) == {}
    )
    assert defaults_missing({"temperature": 0.6}, {"temperature": 0.7}) == {"temperature": 0.6}
    assert defaults_missing({"temperature": 0.6}, None) == {"temperature": 0.6}
