#!/usr/bin/env bash
# Creates (once) the venv holding the real sglang==0.5.23 and sglang-router==0.3.2 for the contract tests,
# outside the clone so that later runs on the same machine reuse it. Prints the venv's python.
set -euo pipefail
# pip warns once per package about the machine's optional local indexes; keep real errors visible.
quiet_pip() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
cd "$(dirname "$0")/.."
reqs=tests/contract/requirements-sglang.txt
venv=${SGLANG_CONTRACT_VENV:-/var/cache/sglang-dsv4/venv-sglang-0.5.23}
want=$(cat "$reqs" "$0" | sha256sum | cut -d' ' -f1)
if [[ ! -f $venv/.stamp || $(cat "$venv/.stamp") != "$want" ]]; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  python3 -m venv "$venv"
  quiet_pip "$venv/bin/pip" install -q --upgrade pip >&2
  quiet_pip "$venv/bin/pip" install -q -r "$reqs" >&2
  quiet_pip "$venv/bin/pip" install -q --no-deps sglang==0.5.23 sglang-router==0.3.2 >&2
  "$venv/bin/python" -c "from sglang.srt.server_args import prepare_server_args" >&2
  echo "$want" >"$venv/.stamp"
fi
echo "$venv/bin/python"
