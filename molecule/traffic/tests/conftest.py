"""Helpers for the rollouts under load (the shared ones live in molecule/shared/labtools.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, deploy, flat, host_state, lab_secret, recap, runs_from_disk, text

__all__ = ["ROOT", "deploy", "flat", "host_state", "lab_secret", "recap", "runs_from_disk", "text"]
