"""plugins/callback/sglang_preload.py: the filters every task uses are loaded in the controller's main process, so that
the workers Ansible forks find them loaded; and every way the repository runs deploy.yml enables it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
from ansible.utils.collection_loader._collection_finder import _AnsibleCollectionFinder
_AnsibleCollectionFinder(paths=[sys.argv[1]])._install()
from ansible_collections.dsv4.sglang.plugins.callback.sglang_preload import CallbackModule
before = set(sys.modules)
CallbackModule().v2_playbook_on_start(None)
print("\\n".join(sorted(set(sys.modules) - before)))
"""


def test_the_preload_loads_every_filter_file_of_the_collection_and_ansibles_own():
    loaded = subprocess.run(
        [sys.executable, "-c", PROBE, str(ROOT / ".collections")], capture_output=True, text=True, check=True
    ).stdout.split()
    files = sorted(p.stem for p in (ROOT / "plugins/filter").glob("*.py"))
    assert files
    missing = [f for f in files if f"ansible_collections.dsv4.sglang.plugins.filter.{f}" not in loaded]
    assert missing == [], f"filter files a worker would still load from source: {missing}"
    # Ansible's own, under the names its loader gives them (ansible.plugins.filter.core_<hash>).
    assert any(m.startswith("ansible.plugins.filter.core") for m in loaded)
    assert any(m.startswith("ansible.plugins.test.core") for m in loaded)


def test_every_run_of_the_repository_enables_the_preload_and_pipelining():
    config = (ROOT / "ansible.cfg").read_text()
    assert re.search(r"^callbacks_enabled = dsv4\.sglang\.sglang_preload$", config, re.MULTILINE)
    assert re.search(r"^pipelining = true$", config, re.MULTILINE)
    # Molecule writes its own ansible.cfg, which the lab tests' runs of deploy.yml inherit.
    molecule = yaml.safe_load((ROOT / ".config/molecule/config.yml").read_text())["provisioner"]["config_options"]
    assert molecule["defaults"]["callbacks_enabled"] == "dsv4.sglang.sglang_preload"
    assert molecule["ssh_connection"]["pipelining"] is True
    # A run that names its own callbacks replaces the configured list: each must name the preload again.
    overrides = []
    for path in [*ROOT.glob("molecule/**/*.py"), *ROOT.glob("tests/**/*.py"), *ROOT.glob("bench/**/*.py")]:
        if path.name == Path(__file__).name:
            continue
        for value in re.findall(r'"ANSIBLE_CALLBACKS_ENABLED": "([^"]*)"', path.read_text()):
            overrides.append((path.relative_to(ROOT), value))
    assert overrides
    assert [o for o in overrides if "dsv4.sglang.sglang_preload" not in o[1].split(",")] == []
