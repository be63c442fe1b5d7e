#!/usr/bin/env bash
# The CPU backend must match the reference (accelerated) backend on the same input.
set -euo pipefail
cd "$(dirname "$0")"
./normsoft check $((1 << 16))
