#!/usr/bin/env bash
# The test command: set up, lint, type-check, run the three tiers of the test suite, then check the plugin with
# real clients (Claude Code's validator and MCP connection, the MCP Inspector CLI, the contract checker).
#   the fast tier     `pytest`: unit and contract tests, in parallel (the default; what to run while working)
#   the slow tier     real toolchains, the llama.cpp tree, long end-to-end runs, in parallel
#   the serial tier   tests whose outcome rests on real timings, one at a time (nothing beside them)
#   as users          the `as_user` tests as an ordinary user, with and without a delegated cgroup (as root only)
# Arguments go to every pytest run (e.g. -x).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export PATH="$PWD/.venv/bin:$PATH"

ruff check server tests benchmarks
mypy

tier() {  # a tier that collects no test is a failure (pytest's exit status 5)
  local name="$1"; shift
  echo "test.sh: the $name tier" >&2
  set +e
  pytest -q -p no:cacheprovider --durations=10 "$@"
  local status=$?
  set -e
  if [ $status -eq 5 ]; then
    echo "test.sh: pytest collected no tests in the $name tier; that is a failure" >&2
    exit 1
  fi
  [ $status -eq 0 ] || exit $status
}
tier fast "$@"
tier slow -m "slow and not serial" "$@"
tier serial -m serial -n 0 "$@"
# the confinement, turns and attack tests again as ordinary users: a delegated cgroup v2 subtree, nothing delegated
bash scripts/test_as_users.sh -- "$@"

bash scripts/check_plugin.sh
