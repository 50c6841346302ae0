"""The verification's repetition measure and startup-line parser (filter_plugins/sglang_verify.py)."""

from __future__ import annotations

from ansible_collections.dsv4.sglang.plugins.filter import sglang_verify as f
from ansible_collections.dsv4.sglang.plugins.module_utils.sglang_sampling_defaults import defaults_missing


def test_repetition_is_zero_for_varied_text_and_high_for_a_loop():
    assert f.FilterModule().filters()["sglang_repetition"]("the quick brown fox jumps over the lazy dog") == 0.0
    assert f.FilterModule().filters()["sglang_repetition"]("a b c " * 20) > 0.9
    assert f.FilterModule().filters()["sglang_repetition"]("") == 0.0
    assert f.FilterModule().filters()["sglang_repetition"]("one two") == 0.0


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


EXPECTED = {"temperature": 0.6, "top_p": 0.95, "top_k": None, "min_p": None, "repetition_penalty": None}


def test_exactly_the_intended_defaults_pass():
    errors = f.FilterModule().filters()["sglang_defaults_errors"]
    assert errors(EXPECTED, {"temperature": 0.6, "top_p": 0.95}, {"temperature": 0.6, "top_p": 0.95}) == []
    # A key the collection does not manage but the file holds is intended too: SGLang reads it from the file.
    assert (
        errors(
            EXPECTED, {"temperature": 0.6, "top_p": 0.95, "top_k": 20}, {"temperature": 0.6, "top_p": 0.95, "top_k": 20}
        )
        == []
    )
    # Without the file's keys, the expected set alone is exact.
    assert errors(EXPECTED, {"temperature": 0.6, "top_p": 0.95}) == []


def test_a_key_the_file_does_not_set_fails_naming_it_its_value_and_where_sglang_took_it_from():
    """sglang issue 11574: a transformers release that fills class defaults leaks top_k 50 into the server's
    defaults; the expected keys all match, and the proof still fails."""
    errors = f.FilterModule().filters()["sglang_defaults_errors"]
    on_disk = {"temperature": 0.6, "top_p": 0.95}
    leaked = {"temperature": 0.6, "top_p": 0.95, "top_k": 50, "repetition_penalty": 1.0}
    assert errors(EXPECTED, leaked, on_disk) == [
        "top_k=50 is in the server's defaults, but generation_config.json sets no top_k: SGLang took it from"
        " transformers' GenerationConfig (a class default its to_dict() fills in), not from the file",
        "repetition_penalty=1.0 is in the server's defaults, but generation_config.json sets no repetition_penalty:"
        " SGLang took it from transformers' GenerationConfig (a class default its to_dict() fills in), not from the"
        " file",
    ]


def test_a_missing_a_wrong_and_an_unmanaged_value_are_each_named():
    errors = f.FilterModule().filters()["sglang_defaults_errors"]
    on_disk = {"temperature": 0.6, "top_p": 0.95, "min_p": 0.05}
    assert errors(EXPECTED, {"temperature": 0.7, "min_p": 0.1}, on_disk) == [
        "temperature: expected 0.6, logged 0.7",
        "top_p: expected 0.95, not logged",
        "min_p=0.1: generation_config.json says 0.05",
    ]
    assert errors(EXPECTED, None, on_disk) == ["no 'Using default chat sampling params' line at its current start"]
