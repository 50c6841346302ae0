"""Helpers for the execution environment (the shared ones live in molecule/shared/labtools.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, host_state, runs_from_disk

__all__ = ["ROOT", "host_state", "instance", "runs_from_disk"]


def instance() -> dict:
    """Address, port, user and key of molecule's (single) lab host."""
    return yaml.safe_load(Path(os.environ["MOLECULE_INSTANCE_CONFIG"]).read_text())[0]
