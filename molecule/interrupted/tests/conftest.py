"""Helpers for the runs cut short (the shared ones live in molecule/shared: labtools.py, faultcases.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from faultcases import back_to_the_inventory, cases
from labtools import ROOT, deploy, host_state, text

__all__ = ["ROOT", "back_to_the_inventory", "cases", "deploy", "host_state", "text"]
