"""Checks the collection's documentation and builds its docsite (HTML) with antsibull-docs, offline.

scripts/docsite.py              lint, build into a temporary folder, check every page, remove it
scripts/docsite.py --dest DIR   the same, and keep the site in DIR (open DIR/build/html/index.html)

The guides are docs/docsite/rst/*.rst (listed in docs/docsite/extra-docs.yml); the role and plugin reference is
generated from each role's meta/argument_specs.yml and each plugin's own documentation. `make test` runs this beside
lint. The tools come from .venv-ee (scripts/bootstrap.sh). Sphinx treats every warning as an error; the only
references left unresolved are four labels of Ansible's own documentation, which intersphinx would fetch from the
network (none here).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / ".venv-ee" / "bin"
COLLECTION = "dsv4.sglang"
# Appended to the conf.py antsibull-docs writes: no network, and its labels into Ansible's docs left as they are.
OFFLINE_CONF = """
# scripts/docsite.py: offline. Intersphinx would fetch Ansible's and Python's inventories from the network.
intersphinx_mapping = {}
nitpicky = True
nitpick_ignore = [
    ("std:ref", "common_return_values"),
    ("std:ref", "action_plugins"),
    ("std:ref", "callback_plugins"),
    ("std:ref", "ansible_configuration_settings"),
]
"""


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> None:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-8000:]}{done.stderr[-4000:]}")


def expected_pages() -> list[str]:
    """Every page the reference and the guides must have, relative to the collection's folder of the site."""
    pages = [f"{p.parents[1].name}_role.html" for p in sorted(ROOT.glob("roles/*/meta/argument_specs.yml"))]
    pages += [f"{p.stem}_module.html" for p in sorted(ROOT.glob("plugins/modules/sglang_*.py"))]
    pages += [f"{p.stem}_filter.html" for p in sorted(ROOT.glob("plugins/filter/sglang_*.yml"))]
    pages += [f"{p.stem}_callback.html" for p in sorted(ROOT.glob("plugins/callback/sglang_*.py"))]
    extra = yaml.safe_load((ROOT / "docs/docsite/extra-docs.yml").read_text())
    pages += [f"docsite/{guide}.html" for section in extra["sections"] for guide in section["toctree"]]
    return pages


def build(dest: Path) -> list[str]:
    env = {
        **os.environ,
        "PATH": f"{TOOLS}{os.pathsep}{os.environ['PATH']}",
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT / ".collections"),
        "ANSIBLE_NOCOLOR": "1",
    }
    checkout = ROOT / ".collections/ansible_collections/dsv4/sglang"
    run([str(TOOLS / "antsibull-docs"), "lint-collection-docs", "--plugin-docs", str(checkout)], env)
    run([str(TOOLS / "antsibull-docs"), "sphinx-init", "--use-current", "--dest-dir", str(dest), COLLECTION], env)
    with (dest / "conf.py").open("a") as conf:
        conf.write(OFFLINE_CONF)
    run(["bash", str(dest / "build.sh")], env, cwd=dest)
    site = dest / "build/html/collections/dsv4/sglang"
    return [page for page in expected_pages() if not (site / page).is_file()]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dest", type=Path, help="keep the site here (an empty or new folder)")
    args = parser.parse_args()
    dest = args.dest.resolve() if args.dest else Path(tempfile.mkdtemp(prefix="dsv4-docsite."))
    try:
        dest.mkdir(parents=True, exist_ok=True)
        missing = build(dest)
    finally:
        if not args.dest:
            shutil.rmtree(dest, ignore_errors=True)
    if missing:
        print(f"the docsite lacks {len(missing)} pages: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"docsite: lint clean, built with no warning, {len(expected_pages())} pages checked")
    return 0


if __name__ == "__main__":
    sys.exit(main())
