"""The plugin's first start: the server answers MCP's handshake and lists the tools at once while its
environment installs (bin/autoresearch-mcp-launch in front of bootstrap.py), its tools work as soon as the
real server is up, and an unusable data folder is reported with what to do. The snapshot the bootstrap
answers from is the real server's own answer."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client, StdioServerParameters
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

from autoresearch_mcp import bootstrap, resources
from autoresearch_mcp.app import build_server

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[1]
LAUNCH = ROOT / "bin" / "autoresearch-mcp-launch"
SERVER = [sys.executable, "-m", "autoresearch_mcp", "serve"]
INSTALLING = "still installing"


def text_of(result: Any) -> str:
    return " ".join(getattr(c, "text", "") for c in result.content)


async def real_tool_names() -> list[str]:
    async with Client(build_server()) as c:
        return [t.name for t in (await c.list_tools()).tools]


def gated_server(gate: Path) -> list[str]:
    """A server that starts only once `gate` exists: an install that takes as long as the test wants."""
    return ["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.1; done; exec "$0" "$@"', *SERVER]


def bootstrap_params(command: list[str], tmp_path: Path, *options: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-I", bootstrap.__file__, *options, "--", *command],
                                 env=dict(os.environ), cwd=str(tmp_path))


async def call_until_up(c: Client, name: str, args: dict[str, Any]) -> Any:
    """Call a tool until the answer is not the bootstrap's "still installing"."""
    with anyio.fail_after(900):
        while INSTALLING in text_of(result := await c.call_tool(name, args)):
            await anyio.sleep(1)
    return result


# --- the bootstrap in front of a server that is not up yet -------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["legacy", "auto"])
async def test_the_tools_are_listed_before_the_server_is_up_and_a_call_waits_for_it(mode: str, tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    async with Client(bootstrap_params(gated_server(gate), tmp_path), mode=mode) as c:
        with anyio.fail_after(10):
            listed = [t.name for t in (await c.list_tools()).tools]
            prompts = [p.name for p in (await c.list_prompts()).prompts]
        assert not gate.exists()  # answered by the bootstrap alone

        async def open_gate() -> None:
            await anyio.sleep(1)
            gate.touch()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(open_gate)
            waited = await c.call_tool("list_experiments", {})  # waits for the server, then is its answer
        brief = await c.get_prompt("autoresearch", {})
        again = [t.name for t in (await c.list_tools()).tools]  # now from the server itself
    assert listed == again == await real_tool_names() and prompts == ["autoresearch"]
    assert waited.is_error and "no session: call start_session" in text_of(waited)
    assert brief.messages[0].content.text == resources.brief("mcp")  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_call_that_outwaits_the_install_says_how_long_is_left_and_works_once_it_is_done(
        tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    log = tmp_path / "install.log"
    params = bootstrap_params(gated_server(gate), tmp_path, "--wait-s", "0.5", "--estimate-s", "120", "--log", str(log))
    async with Client(params, mode="legacy") as c:
        early = await c.call_tool("list_experiments", {})
        gate.touch()
        later = await call_until_up(c, "list_experiments", {})
    assert early.is_error and INSTALLING in text_of(early) and "s left" in text_of(early) and str(log) in text_of(early)
    assert "no session: call start_session" in text_of(later)


async def test_a_start_that_fails_is_reported_by_every_call(tmp_path: Path) -> None:
    failing = ["sh", "-c", "echo 'ERROR: No space left on device' >&2; exit 1"]
    async with Client(bootstrap_params(failing, tmp_path), mode="legacy") as c:
        tools = [t.name for t in (await c.list_tools()).tools]
        results = [await c.call_tool("list_experiments", {}) for _ in range(2)]
    assert "list_experiments" in tools
    for result in results:
        assert result.is_error and "could not start its server" in text_of(result)
        assert "No space left on device" in text_of(result) and "/mcp" in text_of(result)


@pytest.mark.slow
def test_the_snapshot_is_what_the_real_server_answers_for_every_protocol_version() -> None:
    snapshot = json.loads(bootstrap.SNAPSHOT.read_text())
    assert snapshot["versions"] == list(HANDSHAKE_PROTOCOL_VERSIONS)
    for version in [*HANDSHAKE_PROTOCOL_VERSIONS, "2099-01-01"]:  # and one the server does not know
        real = bootstrap.record(SERVER, [version])
        given = bootstrap.answer(snapshot, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "test", "version": "0"}}})
        assert given is not None and given["result"] == real["initialize"], version
        assert real["lists"] == snapshot["lists"], f"stale {bootstrap.SNAPSHOT.name}: run python scripts/generate.py"


# --- the launcher on a fresh data folder ------------------------------------------------------------------


@pytest.fixture(scope="session")
def wheelhouse() -> Path:
    """The wheels of the package's dependencies and of its build backend, fetched once into the user's
    cache from whatever index pip is set up with; the installs under test then need no index."""
    key = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + sys.version.encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "autoresearch-mcp-tests" / key
    fetch = [sys.executable, "-m", "pip", "download", "--quiet", "--dest", str(cache), str(ROOT), "hatchling"]
    offline = subprocess.run([*fetch, "--no-index", "--find-links", str(cache)], capture_output=True, timeout=600)
    if offline.returncode != 0:
        subprocess.run(fetch, check=True, timeout=1200)
    return cache


def first_start_env(data: Path, wheelhouse: Path, tmp_path: Path) -> dict[str, str]:
    """A user's environment without the package: no autoresearch-mcp on PATH, this Python as python3, and
    pip (or uv) reading the wheelhouse only."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    python = Path(sys.base_prefix) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    (bin_dir / "python3").unlink(missing_ok=True)
    (bin_dir / "python3").symlink_to(python)
    path = [str(bin_dir), *(p for p in os.environ["PATH"].split(os.pathsep)
                             if not (Path(p) / "autoresearch-mcp").exists())]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "CLAUDE_PLUGIN"))}
    return {**env, "PATH": os.pathsep.join(path), "AUTORESEARCH_PLUGIN_DATA": str(data),
            "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheelhouse), "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "UV_NO_INDEX": "1", "UV_FIND_LINKS": str(wheelhouse)}


def launch_params(env: dict[str, str], tmp_path: Path) -> StdioServerParameters:
    return StdioServerParameters(command="bash", args=[str(LAUNCH), "serve"], env=env, cwd=str(tmp_path))


@pytest.mark.slow
@pytest.mark.timeout(1200)
async def test_a_fresh_data_folder_lists_the_tools_at_once_and_its_tools_answer_once_installed(
        wheelhouse: Path, example_repo: Path, tmp_path: Path) -> None:
    data = tmp_path / "plugin-data"
    env = first_start_env(data, wheelhouse, tmp_path)
    async with Client(launch_params(env, tmp_path), mode="legacy") as c:  # JSON-RPC, as Claude Code
        with anyio.fail_after(10):  # Claude Code waits 30 s
            listed = [t.name for t in (await c.list_tools()).tools]
        answered = await call_until_up(c, "diff_backends", {"repo": str(example_repo)})
        brief = await c.get_prompt("autoresearch", {})
    assert listed == await real_tool_names()
    assert not answered.is_error and answered.structured_content is not None
    assert {"cpu", "accel"} <= {b["name"] for b in answered.structured_content["backends"]}
    # the installed package carries the brief (pyproject's force-include)
    assert brief.messages[0].content.text == resources.brief("mcp")  # type: ignore[union-attr]
    assert (data / "venv" / ".autoresearch-version").is_file() and int((data / ".install-seconds").read_text()) > 0
    async with Client(launch_params(env, tmp_path), mode="legacy") as c:  # installed: the server itself, at once
        with anyio.fail_after(60):
            again = await c.call_tool("diff_backends", {"repo": str(example_repo)})
    assert not again.is_error


def unusable_folders(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Data folders the launcher cannot use, with what it must say of each (root writes through modes)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    root = os.geteuid() == 0
    return {"not a folder": (a_file, "is not a folder"),
            "cannot be created": (Path("/sys/autoresearch-data") if root else locked / "data", "cannot be created"),
            "not writable": (Path("/sys/kernel") if root else locked, "is not writable")}


@pytest.mark.parametrize("case", ["not a folder", "cannot be created", "not writable"])
async def test_an_unusable_data_folder_says_what_to_do(case: str, tmp_path: Path) -> None:
    folder, says = unusable_folders(tmp_path)[case]
    env = first_start_env(folder, tmp_path, tmp_path)
    direct = subprocess.run(["bash", str(LAUNCH), "--version"], env=env, capture_output=True, text=True, timeout=60)
    async with Client(launch_params(env, tmp_path), mode="legacy") as c:
        listed = [t.name for t in (await c.list_tools()).tools]
        called = await c.call_tool("list_experiments", {})
    for message in (direct.stderr, text_of(called)):
        assert says in message and str(folder) in message and "AUTORESEARCH_PLUGIN_DATA" in message
        assert "mkdir:" not in message
    assert direct.returncode == 1 and "list_experiments" in listed and called.is_error
