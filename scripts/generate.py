"""Writes the files generated from one source each, which the plugin reads from its checkout:

- skills/autoresearch/SKILL.md: its frontmatter, then the brief (instructions.md) as Claude Code gets it;
- server/autoresearch_mcp/bootstrap.json: what the real server answers to MCP's handshake and lists,
  which the first start (bin/autoresearch-mcp-launch) serves while the package installs.

Run after editing instructions.md, a tool, a prompt or the server's instructions:
    python scripts/generate.py            # write
    python scripts/generate.py --check    # exit 1 when a file is stale (the tests check the same)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from autoresearch_mcp import bootstrap, resources

ROOT = Path(__file__).resolve().parents[1]
SKILL = ROOT / "skills" / "autoresearch" / "SKILL.md"
SNAPSHOT = Path(bootstrap.__file__).with_suffix(".json")


def skill_text(current: str) -> str:
    """SKILL.md with its own frontmatter kept and the brief as its body."""
    frontmatter = current.split("\n---\n", 1)[0] + "\n---\n"
    return frontmatter + "\n" + resources.brief("claude-code")


def snapshot_text() -> str:
    server = [sys.executable, "-m", "autoresearch_mcp", "serve"]
    return json.dumps(bootstrap.record(server, list(HANDSHAKE_PROTOCOL_VERSIONS)), indent=1, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is stale")
    args = parser.parse_args()
    stale = []
    for path, text in ((SKILL, skill_text(SKILL.read_text(encoding="utf-8"))), (SNAPSHOT, snapshot_text())):
        if path.exists() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.write_text(text, encoding="utf-8")
    verb = "stale" if args.check else "written"
    print(f"generate: {', '.join(map(str, stale))} {verb}" if stale else "generate: up to date", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
