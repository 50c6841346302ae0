"""Checks the collection tarball as a user gets it (run by scripts/test.sh after building and installing it).

    python scripts/check_tarball.py TARBALL COLLECTIONS_PATH

Lists its files, fails on any file a user of the collection must not get (lab inventory and vault password,
molecule, tests, bench, scripts, tool settings), and runs ansible-doc, from the installed copy, for every module,
filter and role the collection has.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

FORBIDDEN = (
    "inventories/",
    "molecule/",
    "tests/",
    "bench/",
    "scripts/",
    ".ci/",
    ".config/",
    "Makefile",
    "ansible.cfg",
    "requirements.txt",
    "requirements-ee.txt",
    "execution-environment.yml",
    "pyproject.toml",
    "conftest.py",
)


def filter_names(path: Path) -> list[str]:
    """The names a filter plugin file registers (the keys of FilterModule.filters()'s dict)."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "filters":
            returned = next(n for n in ast.walk(node) if isinstance(n, ast.Return))
            return [key.value for key in returned.value.keys]
    return []


def main(tarball: str, collections: str) -> int:
    with tarfile.open(tarball) as archive:
        names = sorted(member.name for member in archive.getmembers() if member.isfile())
    print("\n".join(names))
    bad = [n for n in names if n.startswith(FORBIDDEN) or "/tests/" in n or "vault" in n]
    installed = Path(collections) / "ansible_collections/dsv4/sglang"
    plugins = {
        "module": sorted(p.stem for p in (installed / "plugins/modules").glob("*.py")),
        "filter": sorted(n for p in (installed / "plugins/filter").glob("*.py") for n in filter_names(p)),
        "role": sorted(p.name for p in (installed / "roles").iterdir() if p.is_dir()),
    }
    failed = []
    with tempfile.TemporaryDirectory() as outside:
        # No ansible.cfg of the checkout: only the installed copy is on the collections path.
        (Path(outside) / "ansible.cfg").write_text("[defaults]\n")
        env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": collections, "ANSIBLE_CONFIG": f"{outside}/ansible.cfg"}
        for kind, items in plugins.items():
            # One call per kind; it fails naming any plugin whose documentation does not load.
            command = ["ansible-doc", "-t", kind, *(f"dsv4.sglang.{item}" for item in items)]
            out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=outside, check=False)
            missing = [item for item in items if f"dsv4.sglang.{item}" not in out.stdout]
            if out.returncode != 0 or missing:
                failed.append(f"ansible-doc -t {kind}: {out.stderr.strip()[-800:]} (missing: {missing})")
    counts = ", ".join(f"{len(items)} {kind}s" for kind, items in plugins.items())
    print(f"{len(names)} files; ansible-doc for {counts}")
    for line in [f"must not ship: {n}" for n in bad] + failed:
        print(line, file=sys.stderr)
    return 1 if bad or failed or not all(plugins.values()) else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
