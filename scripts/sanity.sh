#!/usr/bin/env bash
# ansible-test sanity for the collection, as `make test` runs it: the tracked files copied under a temporary
# ansible_collections/dsv4/sglang, every test in a venv of Python 3.11 (no container engine here).
# Exceptions, each with its reason: tests/sanity/ignore-<ansible-core minor>.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tree=$work/ansible_collections/dsv4/sglang
mkdir -p "$tree"
git ls-files -z | xargs -0 cp --parents -t "$tree"
# ansible-test creates each venv without pip and fetches a pip bootstrap script from ci-files.testing.ansible.com,
# which is not reachable here; its cache gets scripts/ansible-test-get-pip.py (ensurepip, then PyPI) instead.
cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
grep -ho "pip='[0-9.]*'" .venv/lib/python3.*/site-packages/ansible_test/_internal/python_requirements.py \
  | cut -d"'" -f2 | sort -u | while read -r version; do
  cp scripts/ansible-test-get-pip.py "$cache/get_pip_${version//./_}.py"
done
cd "$tree"
ansible-test sanity --venv --python 3.11 --color no "$@"
