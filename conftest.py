"""Puts the checkout on sys.path as the collection dsv4.sglang (scripts/bootstrap.sh links .collections), so tests
import plugins the way Ansible does: ansible_collections.dsv4.sglang.plugins...."""

from __future__ import annotations

import sys
from pathlib import Path

COLLECTIONS = Path(__file__).resolve().parent / ".collections"
if str(COLLECTIONS) not in sys.path:
    sys.path.insert(0, str(COLLECTIONS))
