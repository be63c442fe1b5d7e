#!/usr/bin/env bash
# Checks the plugin with real clients: Claude Code (pinned) validates it and connects to the
# server; the MCP Inspector CLI lists the tools; the shared contract checker holds the server to
# ../shared/contract.json when that file is present.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
export PATH="$root/.venv/bin:$PATH"
CLAUDE_CODE_VERSION=2.1.332
INSPECTOR_VERSION=0.15.0   # the newest that runs on Node 20 (2.x needs Node >= 22.19)

tools="${AUTORESEARCH_NPM_TOOLS:-$HOME/.cache/autoresearch-mcp-ci/npm}"
mkdir -p "$tools"
if [ ! -x "$tools/node_modules/.bin/claude" ] || [ ! -e "$tools/node_modules/@modelcontextprotocol/inspector" ]; then
  (cd "$tools" && npm install --silent --no-audit --no-fund \
     "@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION" "@modelcontextprotocol/inspector@$INSPECTOR_VERSION" >&2)
fi
home="$(mktemp -d)"
work="$(mktemp -d)"
trap 'rm -rf "$home" "$work"' EXIT
# PATH without any autoresearch-mcp, and a data folder the install cannot use (so it ends at once)
bare_path="$(tr ':' '\n' <<<"$PATH" | while read -r d; do [ -e "$d/autoresearch-mcp" ] || printf '%s:' "$d"; done)"
: > "$work/not-a-folder"

echo "check_plugin: claude plugin validate --strict" >&2
HOME="$home" "$tools/node_modules/.bin/claude" plugin validate --strict "$root"

echo "check_plugin: claude plugin validate --strict plugin (the folder the marketplace ships)" >&2
HOME="$home" "$tools/node_modules/.bin/claude" plugin validate --strict "$root/plugin"

echo "check_plugin: install from a local marketplace (a clone with a developer's .venv)" >&2
# Claude Code copies the marketplace's plugin source into its cache: the source is plugin/, so a checkout's
# .venv and build outputs stay out of it, while the links in plugin/ bring what the launcher installs.
git clone -q "$root" "$work/clone"
if [ -n "$(git -C "$root" status --porcelain -- plugin .claude-plugin)" ]; then  # test the tree as it is
  rm -rf "$work/clone/plugin" "$work/clone/.claude-plugin" && cp -a "$root/plugin" "$root/.claude-plugin" "$work/clone/"
fi
mkdir -p "$work/clone/.venv/lib" && head -c 50000000 /dev/zero > "$work/clone/.venv/lib/stand-in"
mhome="$(mktemp -d)"
trap 'rm -rf "$home" "$work" "$mhome"' EXIT
HOME="$mhome" "$tools/node_modules/.bin/claude" plugin marketplace add "$work/clone" >&2
HOME="$mhome" "$tools/node_modules/.bin/claude" plugin install autoresearch@autoresearch >&2
cached="$(echo "$mhome"/.claude/plugins/cache/autoresearch/autoresearch/*)"
for want in .claude-plugin/plugin.json .mcp.json bin/autoresearch-mcp-launch hooks/run hooks/hooks.json \
            skills/autoresearch/SKILL.md agents/change-reviewer.md pyproject.toml \
            server/autoresearch_mcp/bootstrap.py instructions.md autoresearch.sh.template examples/normsoft/Makefile; do
  [ -f "$cached/$want" ] && [ ! -L "$cached/$want" ] || { echo "check_plugin: the installed plugin lacks $want" >&2; exit 1; }
done
[ ! -e "$cached/.venv" ] || { echo "check_plugin: the installed plugin holds the checkout's .venv" >&2; exit 1; }
size_kb="$(du -sk "$cached" | cut -f1)"
[ "$size_kb" -lt 20000 ] || { echo "check_plugin: the installed plugin is ${size_kb} KB" >&2; exit 1; }
out="$(cd "$work" && HOME="$mhome" PATH="${bare_path%:}" AUTORESEARCH_PLUGIN_DATA="$work/not-a-folder" timeout 180 \
       "$tools/node_modules/.bin/claude" mcp list 2>&1)"
echo "$out"
grep -q "plugin:autoresearch:autoresearch.*Connected" <<<"$out"

echo "check_plugin: claude --plugin-dir . mcp list" >&2
out="$(cd "$work" && HOME="$home" timeout 180 "$tools/node_modules/.bin/claude" --plugin-dir "$root" mcp list 2>&1)"
echo "$out"
grep -q "plugin:autoresearch:autoresearch.*Connected" <<<"$out"

echo "check_plugin: claude --plugin-dir . mcp list before anything is installed (the bootstrap answers)" >&2
# No autoresearch-mcp on PATH and a data folder the install cannot use (so it ends at once, leaving nothing
# running): Claude Code connects all the same, and each tool call would say what to fix.
out="$(cd "$work" && HOME="$home" PATH="${bare_path%:}" AUTORESEARCH_PLUGIN_DATA="$work/not-a-folder" timeout 180 \
       "$tools/node_modules/.bin/claude" --plugin-dir "$root" mcp list 2>&1)"
echo "$out"
grep -q "plugin:autoresearch:autoresearch.*Connected" <<<"$out"

echo "check_plugin: claude --plugin-dir . -p in a repository with a session (hooks, skills, agents)" >&2
# A session made through the MCP server, then a Claude Code start in it: no login is needed to load
# the plugin and run its SessionStart hook, and stream-json shows both.
python - "$work/session" <<'PY'
import subprocess, sys
from pathlib import Path

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server

repo = Path(sys.argv[1])
repo.mkdir()
(repo / "autoresearch.sh").write_text('#!/usr/bin/env bash\ncase "$1" in bench) echo METRIC score=7 ;; esac\n')
(repo / "autoresearch.checks.sh").write_text("#!/usr/bin/env bash\nexit 0\n")
for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["-c", "user.name=ci", "-c", "user.email=ci@example.com",
                                                           "commit", "-q", "-m", "bench"]):
    subprocess.run(["git", *args], cwd=repo, check=True)


async def main() -> None:
    async with Client(build_server()) as c:
        result = await c.call_tool("start_session", {"repo": str(repo), "metric": "score", "direction": "higher",
                                                     "tag": "ci"})
        assert not result.is_error, result

anyio.run(main)
PY
stream="$(cd "$work/session" && HOME="$home" timeout 180 "$tools/node_modules/.bin/claude" --plugin-dir "$root" -p hi \
          --output-format stream-json --verbose 2>&1 || true)"
init="$(grep '"subtype":"init"' <<<"$stream" || true)"
for want in '"autoresearch:autoresearch"' '"autoresearch:researcher"' '"autoresearch:change-reviewer"'; do
  grep -q "$want" <<<"$init" || { echo "check_plugin: claude does not load $want" >&2; exit 1; }
done
started="$(grep '"subtype":"hook_response".*"hook_event":"SessionStart"' <<<"$stream" || true)"
grep -q '"exit_code":0' <<<"$started" && grep -q 'Session ci (autoresearch/ci)' <<<"$started" || {
  echo "check_plugin: the SessionStart hook did not show the session: $started" >&2; exit 1; }

echo "check_plugin: MCP Inspector tools/list" >&2
listing="$(cd "$work" && timeout 120 "$tools/node_modules/.bin/mcp-inspector" --cli autoresearch-mcp serve --method tools/list)"
for tool in start_session list_experiments launch_experiment fetch_sky_logs commit_winner cancel_experiment \
            stop_workers search_arxiv read_paper survey_forks diff_backends analyze_bounds report add_note; do
  grep -q "\"$tool\"" <<<"$listing" || { echo "check_plugin: inspector does not list $tool" >&2; exit 1; }
done
grep -q '"outputSchema"' <<<"$listing"
prompts="$(cd "$work" && timeout 120 "$tools/node_modules/.bin/mcp-inspector" --cli autoresearch-mcp serve --method prompts/list)"
grep -q '"name": "autoresearch"' <<<"$prompts" || { echo "check_plugin: inspector does not list the prompt" >&2; exit 1; }

contract="$root/../shared/check_contract.py"
if [ -f "$contract" ]; then
  echo "check_plugin: shared contract" >&2
  (cd "$work" && python "$contract" --all)
fi
echo "check_plugin: ok" >&2
