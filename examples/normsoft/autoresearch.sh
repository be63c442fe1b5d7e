#!/usr/bin/env bash
# Benchmark of normsoft for autoresearch: `build` builds, `bench` runs one sample.
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  build) make -s normsoft ;;
  bench) ./normsoft run $((1 << 22)) "${NORMSOFT_ITERS:-40}" ;;
  *) echo "usage: $0 build|bench" >&2; exit 2 ;;
esac
