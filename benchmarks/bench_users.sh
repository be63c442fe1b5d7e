#!/usr/bin/env bash
# Issue #50's figures: pairs and minutes to decide a real 3% win and a no-op (bench_shapes.py's C program of fixed
# work, paired in turns), as root, as an ordinary user with a delegated cgroup v2 subtree and as one with nothing
# delegated, each quiet and beside a neighbour (bench_noise's). One JSON line a decision. As root:
#   bash benchmarks/bench_users.sh [--conditions quiet,neighbour] [--wins 0,3]
set -euo pipefail
cd "$(dirname "$0")/.."
args=(--kinds c --pairings turns --conditions quiet,neighbour --wins 0,3 "$@")
echo "bench_users: as root" >&2
.venv/bin/python benchmarks/bench_shapes.py "${args[@]}" | sed 's/^/{"as": "root", "row": /; s/$/}/'
for condition in delegated plain; do
  echo "bench_users: as the $condition user" >&2
  bash scripts/test_as_users.sh --run "$condition" -- python benchmarks/bench_shapes.py "${args[@]}" \
    | sed "s/^/{\"as\": \"$condition\", \"row\": /; s/\$/}/"
done
