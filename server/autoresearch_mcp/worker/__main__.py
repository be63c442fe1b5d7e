"""Runs one job: `python -m autoresearch_mcp.worker JOB.json [--prebuild]` here, and the same folder shipped to a cloud
worker as the package `autoresearch_worker` (executors/sky_task.py)."""

import sys

from .runner import main

sys.exit(main(sys.argv))
