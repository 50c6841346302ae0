#!/usr/bin/env bash
# Every test of the project: lint, the docsite, pytest (unit, repository and contract tests), every molecule scenario.
#   scripts/test.sh [lint|sanity|docs|pytest|collection|molecule]...   (default: all; the first four at once, pytest
#   as three processes: pytest-contract, pytest-tests and pytest-roles)
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
  antsibull-changelog lint
}

sanity() {
  echo "== ansible-test sanity"
  ./scripts/sanity.sh
}

# antsibull-docs lint-collection-docs --plugin-docs, then the docsite built offline (HTML) and every page checked.
docs() {
  echo "== docs"
  python scripts/docsite.py
}

# pytest [ARGS]: every test, or those ARGS select.
run_pytest() {
  echo "== pytest $*"
  SGLANG_CONTRACT_PYTHON=$(./scripts/sglang-contract-venv.sh)
  export SGLANG_CONTRACT_PYTHON
  python -m pytest -q "$@"
}

# Build the tarball, install it into a temporary collections path and check it; the molecule scenarios then run
# the collection from there (first in ANSIBLE_COLLECTIONS_PATH, see .config/molecule/config.yml).
collection_work=""
trap '[[ -z $collection_work ]] || rm -rf "$collection_work"' EXIT
collection() {
  echo "== collection tarball"
  collection_work=$(mktemp -d /tmp/dsv4-collection.XXXXXX)
  local work=$collection_work
  ansible-galaxy collection build --force --output-path "$work" >/dev/null
  ansible-galaxy collection install --offline --force -p "$work/collections" "$work"/dsv4-sglang-*.tar.gz >/dev/null
  python scripts/check_tarball.py "$work"/dsv4-sglang-*.tar.gz "$work/collections"
  export DSV4_COLLECTIONS_PATH=$work/collections
}

# The scenarios run in three lanes side by side (each scenario's lab hosts have their own names and ports, and the
# lab caches are built once, under a lock), about evenly long. Measured in fresh clones' make test at e846d86
# (2026-12-06, two runs; seconds): traffic 1776 / 1787, failsafe 1412 / 1448, interrupted 877 / 843, default 852 /
# 845, monitoring 614 / 648, fleet 570 / 542, releases 334 / 322, drift 159 / 152, ee 113 / 112. The lanes of then
# (traffic releases ee | failsafe fleet drift | default monitoring interrupted) took about 2225, 2140 and 2340 s,
# and 2705, 2656 and 2857 s in a fresh clone of b03cdb7 on a day the machine ran about 1.3x slower (scenario times
# move with their neighbours). xpyd (2026-12-07: 360 s alone, 635 s in a lane) came in; a fresh clone of its branch
# took 2625 (traffic 1768, releases 414, ee 284, drift 159), 2596 (failsafe 1323, fleet 638, xpyd 635) and
# 2416 s (default 906, interrupted 955, monitoring 555; run beside the other two). The lab is CPU-bound on 2 cores:
# a fourth lane made every scenario slower, not the suite shorter (a fresh clone, 2026-12-03: no scenario of four
# lanes had finished after 55 minutes). Two fresh clones of baad45c (2026-12-07; seconds): traffic 1614 / 1532,
# releases 381 / 356, ee 217 / 164, drift 92 / 80; failsafe 1259 / 1181, fleet 463 / 405, xpyd 535 / 484; default
# 799 / 747, interrupted 889 / 815, monitoring 526 / 467: lanes 2304 / 2132, 2257 / 2070, 2214 / 2029.
# Two fresh clones later that day (9d92d8c, b3791c7: the lab cases that hold runs, the pool's seams in xpyd): traffic
# 1711 / 1653, releases 365 / 330, ee 259 / 255, drift 123 / 144; failsafe 1339 / 1283, fleet 482 / 475, xpyd 664 /
# 650; default 976 / 843, interrupted 896 / 924, monitoring 569 / 561: lanes 2458 / 2382, 2485 / 2408, 2441 / 2328.
# xpyd then took about 220 s more (a central Prometheus, and the pool's step analysis passing and failing: 890 s in
# a lane, estimated), drift about 60 s more (the model directory as a dangling link). The lanes were rebalanced on
# those figures: traffic ee monitoring about 2540, failsafe interrupted releases about 2600, default xpyd fleet
# drift about 2530 s.
# A fresh clone of fb46078 in these lanes (2026-12-07 evening; checks 160 s): traffic 2122, ee 263, monitoring 735
# (lane 3120); failsafe 1960, interrupted 1086, then releases; default failed after 1530 s on a timing-dependent
# assertion (fixed since), so its lane stopped, and xpyd 1034, fleet 348 and drift 101 ran after it in the same clone by
# hand, beside the other lanes. Every scenario ran 1.2x to 1.6x its morning time: the suite is over its 45 minutes
# (about an hour), and making it cheaper again is open work (xpyd's six Prometheus scraping every 2 s run beside
# every other lane for its whole length).
# A fresh clone of d68ad14 (the preload's heap freeze), green: checks 163 s; traffic 2019, ee 165, monitoring 515 (lane
# 2699); failsafe 1593, interrupted 1033, releases 281 (2907); default 942, xpyd 1285, fleet 427, drift 130 (2784); 51 min
# 50 s in all, the machine 96-100% busy throughout: the suite's length is its CPU (the quick start guide's breakdown).
# Every scenario must be in exactly one lane; monitoring runs last in its lane,
# so the second controller's tree is built long before.
LANES=("traffic ee monitoring" "failsafe interrupted releases" "default xpyd fleet drift")
# Molecule's phase lines (INFO [scenario > phase] ...) with the seconds since the scenario started, so that a lane's
# log says where its time went (create, converge, idempotence, verify); every other line as it came.
stamp() {
  local line
  while IFS= read -r line; do
    if [[ $line == INFO* ]]; then printf '%s [%d s]\n' "$line" "$((SECONDS - $1))"; else printf '%s\n' "$line"; fi
  done
}
run_molecule() {
  echo "== molecule"
  local scenario lane listed=" ${LANES[*]} " logs pids=() failed=0
  for scenario in molecule/*/molecule.yml; do
    scenario=$(basename "$(dirname "$scenario")")
    [[ $listed == *" $scenario "* ]] || { echo "molecule scenario $scenario is in no lane of scripts/test.sh" >&2; return 1; }
  done
  logs=$(mktemp -d)
  for lane in "${!LANES[@]}"; do
    (
      for scenario in ${LANES[$lane]}; do
        started=$SECONDS
        molecule test -s "$scenario" 2>&1 | stamp "$started" || { echo "== molecule $scenario: FAILED after $((SECONDS - started)) s"; exit 1; }
        echo "== molecule $scenario: $((SECONDS - started)) s"
      done
    ) >"$logs/lane-$lane.log" 2>&1 &
    pids+=("$!")
  done
  local lane_failed=()
  for lane in "${!pids[@]}"; do
    if wait "${pids[$lane]}"; then lane_failed+=(0); else lane_failed+=(1); failed=1; fi
  done
  # Lanes that passed first, then the ones that failed, then what failed: CI keeps only the tail of the output.
  for lane in "${!LANES[@]}"; do
    ((lane_failed[lane] == 0)) || continue
    echo "== molecule lane $lane (${LANES[$lane]})"
    cat "$logs/lane-$lane.log"
  done
  for lane in "${!LANES[@]}"; do
    ((lane_failed[lane] == 1)) || continue
    echo "== molecule lane $lane (${LANES[$lane]}): FAILED"
    cat "$logs/lane-$lane.log"
  done
  for lane in "${!LANES[@]}"; do
    ((lane_failed[lane] == 1)) || continue
    echo "== molecule lane $lane: what failed"
    grep -n -B 3 -A 12 -E '^(fatal|failed): |FAILED! =>|^(E |FAILED )|: FAILED after' "$logs/lane-$lane.log" | tail -n 120 || true
  done
  rm -rf "$logs"
  return "$failed"
}

run_step() {
  local step=$1 started=$SECONDS
  case $step in
    lint) lint ;;
    sanity) sanity ;;
    docs) docs ;;
    collection) collection ;;
    pytest) run_pytest ;;
    pytest-contract) run_pytest tests/contract ;;
    # Every other test pyproject.toml's testpaths name: a path added there runs here without a change.
    pytest-tests) run_pytest --ignore=tests/contract --ignore-glob='roles/*' ;;
    pytest-roles) run_pytest roles ;;
    molecule) run_molecule ;;
    *) echo "unknown step: $step" >&2; exit 2 ;;
  esac
  echo "== $step: $((SECONDS - started)) s"
}

steps=("$@")
if ((${#steps[@]} == 0)); then
  # Everything. The second controller's tree (newest ansible-core, for the monitoring scenario) is made meanwhile;
  # its `run` waits for this build (a lock) and makes the tree itself if this build failed.
  ./scripts/newest-controller.sh build >/tmp/dsv4-newest-controller.log 2>&1 &
  # lint, sanity, docs and pytest share nothing: they run side by side, each into its own log, shown in order.
  # pytest runs as three processes (the contract tests, the other tests under tests/, the roles' tests): one pytest
  # is one core's work at most, and alone after lint, sanity and docs had ended it used about 0.6 of the two cores
  # for two and a half minutes (/proc/stat during make test at 43cc460); the roles' tests are mostly waits (the lab
  # stand-in's streams and drains: 38 s of CPU in 170 s), which now overlap the rest.
  checks=(lint sanity docs pytest-contract pytest-tests pytest-roles)
  logs=$(mktemp -d)
  started=$SECONDS
  pids=()
  for step in "${checks[@]}"; do
    (run_step "$step") >"$logs/$step.log" 2>&1 &
    pids+=("$!")
  done
  failed=()
  for index in "${!checks[@]}"; do
    wait "${pids[$index]}" || failed+=("${checks[$index]}")
  done
  for step in "${checks[@]}"; do
    cat "$logs/$step.log"
  done
  rm -rf "$logs"
  echo "== ${checks[*]} side by side: $((SECONDS - started)) s${failed[*]:+; FAILED: ${failed[*]}}"
  ((${#failed[@]} == 0)) || exit 1
  steps=(collection molecule)
fi
for step in "${steps[@]}"; do
  run_step "$step"
done
