"""The brief reaches the agent and can be followed as written: instructions.md is its one source, the
/autoresearch skill and the MCP prompt serve it (each client the parts it can act on), it says how to work
alone until a stop condition holds, and every tool call it, the skills and the agents show runs as written."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from autoresearch_mcp import resources
from autoresearch_mcp.app import build_server
from calls import problems, tool_calls

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]
PHASES = ["## 1. Setup", "## 2. Research", "## 3. Hypotheses", "## 4. Experiments", "## 5. Validate and commit",
          "## When to stop"]
CLAUDE_CODE_ONLY = ("subagent", "skill", "hook", "/compact")  # what a plain MCP client does not have
PLUGIN_TOOL = "mcp__plugin_autoresearch_autoresearch__"  # how Claude Code names the plugin's tools


def frontmatter(path: Path) -> dict[str, str]:
    """The `key: value` lines of a Markdown file's YAML frontmatter (all ours are one line each)."""
    head = path.read_text().split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in head.strip().splitlines() if not line.startswith("#"))
    return {k: v.strip().strip('"') for k, v in fields.items()}


def body(path: Path) -> str:
    return path.read_text().split("\n---\n", 1)[1].lstrip("\n")


async def wire_tools() -> dict[str, dict[str, Any]]:
    """Each tool's input schema as Claude Code receives it (JSON-RPC, compacted)."""
    async with Client(build_server(), mode="legacy") as c:
        return {t.name: t.input_schema for t in (await c.list_tools()).tools}


def test_the_skill_is_the_brief_as_claude_code_gets_it() -> None:
    skill = ROOT / "skills" / "autoresearch" / "SKILL.md"
    assert body(skill) == resources.brief("claude-code"), "stale: run `python scripts/generate.py`"
    assert "`researcher` subagent" in body(skill) and "`Agreed:` note again after `/compact`" in body(skill)
    assert "<!--" not in body(skill)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_prompt_is_the_brief_for_plain_clients_with_the_users_goal(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        plain = await c.get_prompt("autoresearch", {})
        with_goal = await c.get_prompt("autoresearch", {"goal": "CPU token generation"})
        instructions = c.instructions
    assert [a.name for a in prompts["autoresearch"].arguments or []] == ["goal"]
    assert not prompts["autoresearch"].arguments[0].required  # type: ignore[index]
    text = plain.messages[0].content.text  # type: ignore[union-attr]
    assert text == resources.brief("mcp") != resources.brief("claude-code")
    assert not [w for w in CLAUDE_CODE_ONLY if w in text.lower()], "Claude Code's parts reached a plain client"
    source = (ROOT / "instructions.md").read_text()
    assert text.split("\n", 1)[0] in source and "<!--" not in text
    assert with_goal.messages[0].content.text.endswith("The user's goal: CPU token generation\n")  # type: ignore[union-attr]
    assert instructions is not None and "/autoresearch" in instructions and "prompt `autoresearch`" in instructions


async def test_the_brief_says_how_to_work_alone_until_a_stop_condition_holds() -> None:
    tools = await wire_tools()
    for client in ("mcp", "claude-code"):
        brief = resources.brief(client)  # type: ignore[arg-type]
        positions = [brief.index(phase) for phase in PHASES]
        assert positions == sorted(positions)
        assert brief.index("Agree on the goal") < positions[0]
        assert "only time you ask" in brief and "never pause to ask" in brief  # keep going without asking
        assert 'add_note(text="Agreed:' in brief  # the agreement, written down where compaction cannot lose it
        assert "Read the project before touching it" in brief and "benchmarks and" in brief
        assert "The one exception is the set-up commit" in brief  # to "commit only through commit_winner"
        for word in ("metric", "Constraints", "cloud", "Budget", "-march", "PRs and issues", "complexity",
                     "source=\"experiment\"", "notes.md", "wait_s="):
            assert word in brief, word
        missing = [t for t in tools if not re.search(rf"\b{t}\b", brief)]
        assert not missing, f"the brief does not mention {missing}"
        outcomes = ["improved", "inconclusive", "no_change", "regressed", "noisy", "invalid", "checks_failed",
                    "lost", "cancelled"]
        assert all(f"`{v}`" in brief for v in outcomes)
        stop = brief[brief.index("## When to stop"):]
        assert "budget" in stop and "tells you to stop" in stop


async def test_every_tool_call_the_brief_skills_and_agents_show_runs_as_written() -> None:
    tools = await wire_tools()
    texts = {"instructions.md": (ROOT / "instructions.md").read_text(),
             **{str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.glob("skills/*/SKILL.md"))},
             **{str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.glob("agents/*.md"))}}
    found = {where: tool_calls(text) for where, text in texts.items()}
    wrong = [f"{where}: {p}" for where, calls in found.items() for call in calls for p in problems(call, tools)]
    assert not wrong, "\n".join(wrong)
    shown = {call.text for calls in found.values() for call in calls}
    assert 'launch_experiment(source="experiment", experiment_id=...)' in shown  # the re-measure step
    assert len(shown) >= 20
    granted = [t for p in ROOT.glob("agents/*.md") for t in frontmatter(p)["tools"].split(", ")]
    unknown = [t for t in granted if t.startswith(PLUGIN_TOOL) and t[len(PLUGIN_TOOL):] not in tools]
    assert not unknown, f"agents are granted tools the server does not have: {unknown}"


def test_the_call_check_catches_what_would_fail() -> None:
    tools = {"launch_experiment": {"properties": {"title": {"type": "string"}, "source": {
        "enum": ["worktree", "experiment"], "type": "string"}, "repeats": {"anyOf": [
            {"type": "integer"}, {"const": "auto", "type": "string"}]}}, "required": ["title"]}}
    text = ('`launch_experiment(source="experiment")` `launch_experiment(title, source="commits")` '
            '`launch_experiment(title, repeats="many")` `launch_experiment("x")` `lunch_experiment(title)` '
            '`launch_experiment(title, wait=1)` `launch_experiment(title="t", source="worktree"|"experiment", '
            'repeats=5)` `launch_experiment(...)`')
    found = [problems(call, tools) for call in tool_calls(text)]
    assert [len(p) for p in found] == [1, 1, 1, 2, 1, 1, 0, 0]
    assert "required argument(s) title missing" in found[0][0] and "commits" in found[1][0]
    assert "expected auto" in found[2][0] and "positional" in found[3][0] and "no tool" in found[4][0]


@pytest.mark.slow
def test_generated_files_are_current() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "generate.py"), "--check"], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr + "run `python scripts/generate.py`"


def test_skills_and_agents_follow_claude_codes_conventions() -> None:
    for skill in sorted((ROOT / "skills").iterdir()):
        meta = frontmatter(skill / "SKILL.md")
        assert meta["name"] == skill.name and re.fullmatch(r"[a-z0-9-]{1,64}", skill.name)
        assert 0 < len(meta["description"]) <= 1024, skill.name
    assert frontmatter(ROOT / "skills" / "autoresearch" / "SKILL.md")["argument-hint"].startswith("[what to optimize")
    agents = {p.stem: frontmatter(p) for p in (ROOT / "agents").glob("*.md")}
    assert set(agents) == {"researcher", "change-reviewer"}
    for name, meta in agents.items():
        assert meta["name"] == name and meta["description"] and meta["tools"], name


def test_the_advice_for_noisy_can_be_followed_and_the_review_comes_before_the_commit() -> None:
    """The scripts are protected and hand commits refused: the way out of `noisy` is the config's threads and
    start_session again; the candidate is reviewed (base..candidate) before commit_winner, not after."""
    brief = resources.brief("claude-code")
    noisy = brief[brief.index("  - `noisy`"):brief.index("  - `invalid`")]
    assert "`threads`" in noisy and "start_session" in noisy and "steady the machine or the\n    benchmark" not in noisy
    assert brief.index("git diff <base_commit> <candidate_commit>") < brief.index("- `commit_winner(")
    skill = (ROOT / "skills" / "review-before-commit" / "SKILL.md").read_text()
    assert skill.index("git diff <base_commit> <candidate_commit>") < skill.index("`commit_winner(experiment_id")
    assert "git show" not in (ROOT / "agents" / "change-reviewer.md").read_text()
