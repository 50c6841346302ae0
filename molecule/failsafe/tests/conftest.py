"""Helpers for the steps that fail (the shared ones live in molecule/shared: labtools.py, faultcases.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from faultcases import at_inventory, back_to_the_inventory, cases
from labtools import ROOT, deploy, flat, host_state, inventory, lab_secret, playbook, recap, runs_from_disk, text

__all__ = [
    "ROOT",
    "at_inventory",
    "back_to_the_inventory",
    "cases",
    "deploy",
    "flat",
    "host_state",
    "inventory",
    "lab_secret",
    "playbook",
    "recap",
    "runs_from_disk",
    "text",
]
