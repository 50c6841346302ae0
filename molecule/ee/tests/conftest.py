"""Helpers for the execution environment (the shared ones live in molecule/shared/labtools.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, host_state, instance, runs_from_disk

__all__ = ["ROOT", "host_state", "instance", "runs_from_disk"]
