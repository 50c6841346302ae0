#!/usr/bin/env bash
# Creates (once) a venv holding the real packages the contract tests hold the collection to, outside the clone so
# that later runs on the same machine reuse it, and prints its python:
#   scripts/sglang-contract-venv.sh         sglang==0.5.23 and sglang-router==0.3.2
#   scripts/sglang-contract-venv.sh smg     smg==1.13.0, from the collection's own lock (it installs bin/smg too,
#                                           so it never shares a venv with sglang-router)
set -euo pipefail
# pip warns once per package about the machine's optional local indexes; keep real errors visible.
quiet_pip() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
cd "$(dirname "$0")/.."
kind=${1:-sglang}
case $kind in
  sglang)
    reqs=tests/contract/requirements-sglang.txt
    venv=${SGLANG_CONTRACT_VENV:-/var/cache/sglang-dsv4/venv-sglang-0.5.23} ;;
  smg)
    reqs=roles/sglang_runtime/files/locks/smg-1.13.0.txt
    venv=${SMG_CONTRACT_VENV:-/var/cache/sglang-dsv4/venv-smg-1.13.0} ;;
  *) echo "usage: $0 [sglang|smg]" >&2; exit 2 ;;
esac
want=$(cat "$reqs" "$0" | sha256sum | cut -d' ' -f1)
# One maker at a time: scripts/test.sh runs two pytest processes at once, and each asks for the venv.
mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9
if [[ ! -f $venv/.stamp || $(cat "$venv/.stamp") != "$want" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  if [[ $kind == sglang ]]; then
    quiet_pip "$venv/bin/pip" install -q --upgrade pip >&2
    quiet_pip "$venv/bin/pip" install -q -r "$reqs" >&2
    quiet_pip "$venv/bin/pip" install -q --no-deps sglang==0.5.23 sglang-router==0.3.2 >&2
    "$venv/bin/python" -c "from sglang.srt.server_args import prepare_server_args" >&2
  else
    quiet_pip "$venv/bin/pip" install -q --require-hashes --only-binary=:all: -r "$reqs" >&2
    "$venv/bin/python" -c "from smg.launch_router import parse_router_args" >&2
  fi
  echo "$want" >"$venv/.stamp"
fi
echo "$venv/bin/python"
