#!/usr/bin/env bash
# Benchmark of normsoft for autoresearch: `build` builds, `bench` runs one sample.
set -euo pipefail
cd "$(dirname "$0")"
case "${1:-}" in
  # AUTORESEARCH_CCACHE is set by the harness when ccache is installed: fresh worktrees then
  # reuse the objects of every file a candidate did not change.
  build) make -s normsoft CC="${AUTORESEARCH_CCACHE:+$AUTORESEARCH_CCACHE }${CC:-cc}" ;;
  bench) ./normsoft run $((1 << 22)) "${NORMSOFT_ITERS:-40}" ;;
  *) echo "usage: $0 build|bench" >&2; exit 2 ;;
esac
