#!/usr/bin/env bash
# The test command: set up, lint, type-check, run the test suite, then check the plugin with real
# clients (Claude Code's validator and MCP connection, the MCP Inspector CLI, the contract checker).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --dev
export PATH="$PWD/.venv/bin:$PATH"

ruff check server tests benchmarks
mypy

set +e
pytest -q -p no:cacheprovider "$@"
status=$?
set -e
if [ $status -eq 5 ]; then
  echo "test.sh: pytest collected no tests; that is a failure" >&2
  exit 1
fi
[ $status -eq 0 ] || exit $status

bash scripts/check_plugin.sh
