"""Helpers for the lab tests of the default scenario (the shared ones live in molecule/shared/labtools.py)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "shared"))
from labtools import ROOT, deploy, instance, inventory, lab_secret, playbook, recap, text

__all__ = ["ROOT", "deploy", "instance", "inventory", "lab_secret", "playbook", "recap", "text"]
PORT_BASE = 32010
MODEL = "/srv/models/DeepSeek-V4-Flash"
GENCONFIG = f"{MODEL}/generation_config.json"
MANAGED = (
    f"{GENCONFIG} {GENCONFIG}.orig /etc/sglang-dsv4/*.env /etc/sglang-dsv4/sampling-defaults.json "
    "/etc/sglang-dsv4/credentials/* /etc/systemd/system/sglang-dsv4*.service /etc/systemd/system/sglang-dsv4.target "
    "/usr/local/libexec/sglang-dsv4/* /opt/sglang-dsv4-lab/*"
)
