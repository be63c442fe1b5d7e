"""Writes the files generated from one source each, which the plugin reads from its checkout:

- skills/autoresearch/SKILL.md: its frontmatter, then the brief (instructions.md) as Claude Code gets it;
- server/autoresearch_mcp/bootstrap.json: what the real server answers to MCP's handshake and lists,
  which the first start (bin/autoresearch-mcp-launch) serves while the package installs;
- plugin/: the plugin as the marketplace ships it (.claude-plugin/marketplace.json's source). Claude Code
  copies a plugin's whole folder into its cache, so the repository root (with a developer's 1.2 GB .venv
  and build outputs) is not the source: plugin/ holds copies of the files Claude Code reads (the manifest,
  .mcp.json, hooks.json, skills, agents; its validator reads no symlinked file) and links to the rest
  (bin/, hooks/run, the Python project the launcher installs), which the copy into the cache resolves.

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


PLUGIN = ROOT / "plugin"
# what Claude Code reads itself: copied (its validator does not follow links)
PLUGIN_COPIES = [".claude-plugin/plugin.json", ".mcp.json", "hooks/hooks.json", "skills", "agents"]


def plugin_copies() -> list[tuple[Path, str]]:
    """(path under plugin/, text) for every file plugin/ holds a copy of."""
    out = []
    for name in PLUGIN_COPIES:
        source = ROOT / name
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for f in files:
            text = skill_text(f.read_text(encoding="utf-8")) if f == SKILL else f.read_text(encoding="utf-8")
            out.append((PLUGIN / f.relative_to(ROOT), text))
    return out


def stray_copies() -> list[Path]:
    """Files under plugin/'s copied folders that the root no longer has."""
    wanted = {path for path, _ in plugin_copies()}
    return [p for name in PLUGIN_COPIES if (PLUGIN / name).is_dir()
            for p in sorted((PLUGIN / name).rglob("*")) if p.is_file() and p not in wanted]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 when a file is stale")
    args = parser.parse_args()
    stale = []
    files = [(SKILL, skill_text(SKILL.read_text(encoding="utf-8"))), (SNAPSHOT, snapshot_text()), *plugin_copies()]
    for path, text in files:
        if path.is_file() and not path.is_symlink() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.unlink(missing_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stray_copies():
        stale.append(path.relative_to(ROOT))
        if not args.check:
            path.unlink()
    verb = "stale" if args.check else "written"
    print(f"generate: {', '.join(map(str, stale))} {verb}" if stale else "generate: up to date", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
