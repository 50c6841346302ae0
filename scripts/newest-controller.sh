#!/usr/bin/env bash
# A second controller with the newest ansible-core (tests/newest/requirements.txt) on Debian trixie's Python 3.13,
# which Debian 12's Python 3.11 cannot run. The tree is made once with debootstrap, like the lab's base tree, and
# cached under /var/cache/sglang-dsv4, keyed on the pins and this script.
#   scripts/newest-controller.sh build                 make the tree (idempotent)
#   scripts/newest-controller.sh run COMMAND...        run COMMAND in the tree, in this checkout, on this network
# NEWEST_CONTROLLER_BIND=DIR also shows DIR (for example molecule's inventory) at the same path.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
reqs=tests/newest/requirements.txt
key=$(cat "$reqs" "$0" | sha256sum | cut -c1-12)
tree=/var/cache/sglang-dsv4/controller-trixie-$key
lock=/var/cache/sglang-dsv4/controller-trixie.lock
mkdir -p /var/cache/sglang-dsv4

build() {
  [[ -d $tree ]] && return 0
  local work=$tree.partial
  rm -rf "$work"
  debootstrap --variant=minbase --include=python3,python3-venv,openssh-client trixie "$work" \
    http://deb.debian.org/debian >/dev/null
  # The wheels come through this machine's pip (its index and certificates), for CPython 3.13.
  mkdir -p "$work/tmp/wheels"
  .venv/bin/pip download --quiet --no-deps --only-binary=:all: --python-version 3.13 --implementation cp \
    --abi cp313 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
    --platform any -r "$reqs" -d "$work/tmp/wheels" 2> >(grep -v "^WARNING: Location" >&2)
  cp "$reqs" "$work/tmp/wheels/requirements.txt"
  chroot "$work" /usr/bin/python3 -m venv /opt/ansible
  env -u PIP_FIND_LINKS -u PIP_CERT PIP_CONFIG_FILE=/dev/null chroot "$work" /opt/ansible/bin/pip install --quiet \
    --no-index --find-links /tmp/wheels \
    -r /tmp/wheels/requirements.txt
  rm -rf "$work/tmp/wheels"
  mv "$work" "$tree"
  # Trees of older pins are not used again.
  find /var/cache/sglang-dsv4 -maxdepth 1 -name "controller-trixie-*" ! -path "$tree" -exec rm -rf {} +
}

case ${1:-} in
  build)
    flock "$lock" bash -c "$(declare -f build); tree=$tree reqs=$reqs; cd $repo; build"
    ;;
  run)
    shift
    "$0" build
    extra=()
    [[ -z ${NEWEST_CONTROLLER_BIND:-} ]] || extra=(--bind-ro="$NEWEST_CONTROLLER_BIND")
    # The lab's locks are read on the controller (sglang_runtime_server_lock in the lab settings).
    wheelhouse=/var/cache/sglang-dsv4/lab-wheelhouse
    [[ ! -d $wheelhouse ]] || extra+=(--bind-ro="$wheelhouse")
    # Shares this machine's network (the lab hosts listen on loopback); sees the checkout and the lab's key.
    exec systemd-nspawn --quiet --register=no --keep-unit --directory="$tree" --bind="$repo" \
      --bind-ro=/var/lib/sglang-dsv4-lab "${extra[@]}" --chdir="$repo" \
      --setenv=PATH=/opt/ansible/bin:/usr/bin:/bin --setenv=HOME=/root --setenv=ANSIBLE_FORCE_COLOR=0 \
      --setenv=ANSIBLE_NOCOLOR=1 -- "$@"
    ;;
  *)
    echo "usage: $0 build | run COMMAND..." >&2
    exit 2
    ;;
esac
