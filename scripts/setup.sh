#!/usr/bin/env bash
# Sets up a fresh machine: system packages (when root), a venv in .venv with the package.
#   bash scripts/setup.sh          what the demo and a user's sessions need (git, a compiler, bubblewrap, ccache)
#   bash scripts/setup.sh --dev    and the developer extras the tests use: chromium, the aarch64 cross
#                                  compilers and qemu, the SkyPilot SDK, pytest, ruff and mypy
# Idempotent; prints progress to stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
dev=0
case "${1:-}" in
  --dev) dev=1 ;;
  "") ;;
  *) echo "setup: unknown option $1 (use --dev for the developer extras)" >&2; exit 2 ;;
esac

need=()
command -v git >/dev/null || need+=(git)
command -v make >/dev/null || need+=(make)
command -v cc >/dev/null || need+=(gcc)
command -v rsync >/dev/null || need+=(rsync)
command -v ccache >/dev/null || need+=(ccache)
# bubblewrap confines every build, bench and checks run (the server refuses to measure without it)
command -v bwrap >/dev/null || need+=(bubblewrap)
if [ $dev = 1 ] && [ "${AUTORESEARCH_BROWSER_TESTS:-1}" = 1 ] && ! command -v chromium >/dev/null; then
  need+=(chromium)
fi
# The aarch64-qemu platform: cross compilers and user-mode qemu, so ARM paths build and run anywhere.
if [ $dev = 1 ] && [ "$(uname -m)" != aarch64 ]; then
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
if [ $dev = 1 ]; then extras="[dev,sky]"; else extras=""; fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e ".$extras" >&2
echo "setup: ready (.venv)" >&2
