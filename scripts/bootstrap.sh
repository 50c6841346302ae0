#!/usr/bin/env bash
# Installs everything the controller needs on a fresh Debian 12 machine: the lab's Debian packages
# and a venv with the pinned controller tools. Safe to re-run; does nothing when all is in place.
set -euo pipefail
# pip warns once per package about the machine's optional local indexes; keep real errors visible.
quiet_pip() { "$@" 2> >(grep -v "^WARNING: Location" >&2); }
cd "$(dirname "$0")/.."

# podman and runc: the execution environment's image, built and run as AWX runs it (molecule/ee); nftables: the
# traffic scenario cuts a lab host's ssh port mid-step (a host lost after its drain).
apt_packages=(debootstrap systemd-container openssh-client python3-venv shellcheck podman runc nftables)
missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

stamp=.venv/.requirements.sha256
want=$(sha256sum requirements.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  python3 -m venv .venv
  quiet_pip .venv/bin/pip install -q --upgrade pip
  quiet_pip .venv/bin/pip install -q -r requirements.txt
  echo "$want" >"$stamp"
fi

# The execution environment's and the docsite's tools (ansible-builder, ansible-runner, antsibull-docs, Sphinx),
# apart: Sphinx pins a docutils older than the one .venv's antsibull-changelog takes.
stamp=.venv-ee/.requirements.sha256
want=$(sha256sum requirements-ee.txt | cut -d' ' -f1)
if [[ ! -f $stamp || $(cat "$stamp") != "$want" ]]; then
  python3 -m venv .venv-ee
  quiet_pip .venv-ee/bin/pip install -q --upgrade pip
  quiet_pip .venv-ee/bin/pip install -q -r requirements-ee.txt
  echo "$want" >"$stamp"
fi

# promtool (checks and unit-tests the monitoring role's Prometheus config and alert rules) comes out of
# Debian's prometheus package, the same build the monitoring role installs on the hosts; only the binary
# is kept, so no Prometheus server is installed or started on the controller.
if [[ ! -x .venv/bin/promtool ]]; then
  work=$(mktemp -d)
  (cd "$work" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; })
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  install -m 0755 "$work/root/usr/bin/promtool" .venv/bin/promtool
  rm -rf "$work"
fi

# Roles refer to the collection's plugins by fully qualified name (dsv4.sglang.*), so that they run the
# same from this checkout and from an installed collection; this link makes the checkout that collection.
mkdir -p .collections/ansible_collections/dsv4
ln -sfn ../../.. .collections/ansible_collections/dsv4/sglang
