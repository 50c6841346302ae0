"""The verification's repetition measure and startup-line parser (filter_plugins/sglang_verify.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "plugins/filter"))
import sglang_verify as f


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
    assert f.sglang_startup_defaults(journal) == {"temperature": 0.7, "top_p": 0.95}
    assert f.sglang_startup_defaults("nothing here") is None
