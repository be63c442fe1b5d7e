"""The report numbers of the format-0 fixture as the code before typed records (8d5f63e) computes them:
    git archive 8d5f63e server | tar -x -C /tmp/v0m
    cd /tmp/v0m && PYTHONPATH=server python rereport.py tests/data/ledger_v0
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import autoresearch_mcp
from autoresearch_mcp.report import write_report

assert "/v0m/" in autoresearch_mcp.__file__
V0 = Path(sys.argv[1])
tmp = Path(tempfile.mkdtemp())
repo = tmp / "values"
subprocess.run(["git", "init", "-q", "-b", "tmp", str(repo)], check=True)
subprocess.run(["git", "fetch", "-q", str(V0 / "repo.bundle"), "refs/*:refs/*"], cwd=repo, check=True)
subprocess.run(["git", "checkout", "-q", "autoresearch/v0"], cwd=repo, check=True)
(repo / ".autoresearch").mkdir()
holdout = tmp / "private" / "holdout.sh"
config = (V0 / "config.json").read_text().replace("$REPO", str(repo)).replace("$HOLDOUT", str(holdout))
(repo / ".autoresearch/config.json").write_text(config)
shutil.copy(V0 / "ledger.jsonl", repo / ".autoresearch/ledger.jsonl")
report = write_report(str(repo)).model_dump()
numbers = {k: v for k, v in report.items() if not k.endswith("_path")}
report = json.loads(json.dumps(numbers).replace(str(repo), "$REPO"))
expected = json.loads((V0 / "expected.json").read_text())
old = expected["report"]
print({k: (old.get(k), v) for k, v in report.items() if old.get(k) != v})
expected["report"] = report
(V0 / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
