#!/usr/bin/env bash
# Sets up everything on a fresh machine: system packages (when root), a venv in .venv with the
# package, its SkyPilot extra and the dev tools. Idempotent; prints progress to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v git >/dev/null || need+=(git)
command -v make >/dev/null || need+=(make)
command -v cc >/dev/null || need+=(gcc)
command -v rsync >/dev/null || need+=(rsync)
command -v ccache >/dev/null || need+=(ccache)
# bubblewrap confines every build, bench and checks run (the server refuses to measure without it)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ "${AUTORESEARCH_BROWSER_TESTS:-1}" = 1 ] && ! command -v chromium >/dev/null; then need+=(chromium); fi
# The aarch64-qemu platform: cross compilers and user-mode qemu, so ARM paths build and run anywhere.
if [ "$(uname -m)" != aarch64 ]; then
  command -v qemu-aarch64 >/dev/null || need+=(qemu-user)
  command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
  command -v aarch64-linux-gnu-g++ >/dev/null || need+=(g++-aarch64-linux-gnu)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: apt-get install ${need[*]}" >&2
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >&2
  else
    echo "setup: please install ${need[*]} (not root, skipping)" >&2
  fi
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check --upgrade pip >&2
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".[dev,sky]" >&2
echo "setup: ready (.venv)" >&2
