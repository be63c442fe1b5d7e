"""The brief reaches the agent: the /autoresearch skill and the MCP prompt are one text, the server's
instructions point to it, and it covers the five phases and every tool."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mcp import Client

from autoresearch_mcp import resources
from autoresearch_mcp.app import build_server

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]
PHASES = ["## 1. Setup", "## 2. Research", "## 3. Hypotheses", "## 4. Experiments", "## 5. Validate and commit"]


def frontmatter(path: Path) -> dict[str, str]:
    """The `key: value` lines of a Markdown file's YAML frontmatter (all ours are one line each)."""
    head = path.read_text().split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in head.strip().splitlines())
    return {k: v.strip().strip('"') for k, v in fields.items()}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_prompt_is_the_skill_text_with_the_users_goal(mode: str) -> None:
    async with Client(build_server(), mode=mode) as c:  # type: ignore[arg-type]
        prompts = {p.name: p for p in (await c.list_prompts()).prompts}
        plain = await c.get_prompt("autoresearch", {})
        with_goal = await c.get_prompt("autoresearch", {"goal": "CPU token generation"})
        instructions = c.instructions
    assert [a.name for a in prompts["autoresearch"].arguments or []] == ["goal"]
    assert not prompts["autoresearch"].arguments[0].required  # type: ignore[index]
    skill = (ROOT / "skills" / "autoresearch" / "SKILL.md").read_text()
    text = plain.messages[0].content.text  # type: ignore[union-attr]
    assert text == resources.brief() and text.strip() in skill  # one text, the skill's body
    assert with_goal.messages[0].content.text.endswith("The user's goal: CPU token generation\n")  # type: ignore[union-attr]
    assert instructions is not None and "/autoresearch" in instructions and "prompt `autoresearch`" in instructions


async def test_the_brief_covers_the_five_phases_and_names_every_tool() -> None:
    async with Client(build_server()) as c:
        tools = [t.name for t in (await c.list_tools()).tools]
    brief = resources.brief()
    positions = [brief.index(phase) for phase in PHASES]
    assert positions == sorted(positions)
    assert brief.index("Agree on the goal") < positions[0]  # goal, metric, constraints, where, budget first
    for word in ("metric", "Constraints", "cloud", "Budget", "-march", "profile_hotspots", "find_passes",
                 "PRs and issues", "complexity", "source=\"experiment\"", "When to stop", "researcher",
                 "change-reviewer", "notes.md"):
        assert word in brief, word
    missing = [t for t in tools if not re.search(rf"\b{t}\b", brief)]
    assert not missing, f"the brief does not mention {missing}"
    verdicts = ["improved", "inconclusive", "no_change", "regressed", "noisy", "invalid", "checks_failed"]
    assert all(f"`{v}`" in brief for v in verdicts)


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
    assert not (ROOT / "instructions.md").exists()  # the brief has one home: skills/autoresearch/SKILL.md
