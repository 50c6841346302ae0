#!/usr/bin/env bash
# Every test of the project: lint, pytest (unit, repository and contract tests), every molecule scenario.
#   scripts/test.sh [lint|sanity|pytest|molecule]...   (default: all four, in that order)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH=$PWD/.venv/bin:$PATH
export ANSIBLE_FORCE_COLOR=0 PY_COLORS=0

lint() {
  echo "== lint"
  yamllint --strict .
  ansible-lint --offline --profile production
  ruff check .
  ruff format --check .
}

sanity() {
  echo "== ansible-test sanity"
  ./scripts/sanity.sh
}

run_pytest() {
  echo "== pytest"
  SGLANG_CONTRACT_PYTHON=$(./scripts/sglang-contract-venv.sh)
  export SGLANG_CONTRACT_PYTHON
  python -m pytest -q
}

run_molecule() {
  echo "== molecule"
  local scenario
  for scenario in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$scenario")")
    local started=$SECONDS
    molecule test -s "$scenario"
    echo "== molecule $scenario: $((SECONDS - started)) s"
  done
}

steps=("$@")
((${#steps[@]})) || steps=(lint sanity pytest molecule)
for step in "${steps[@]}"; do
  started=$SECONDS
  case $step in
    lint) lint ;;
    sanity) sanity ;;
    pytest) run_pytest ;;
    molecule) run_molecule ;;
    *) echo "unknown step: $step" >&2; exit 2 ;;
  esac
  echo "== $step: $((SECONDS - started)) s"
done
