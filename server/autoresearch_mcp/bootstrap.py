"""The plugin's first start: MCP's handshake and lists answered at once while the package installs.

Claude Code gives up on a server that has not answered `initialize` after 30 s, and installing the
package takes about a minute. So when nothing is installed yet, bin/autoresearch-mcp-launch runs this
script (standard library only, on the system python3) in front of a second launcher that installs the
package and then runs the real server. Until that server is up, this script answers `initialize`,
`ping` and the lists (`tools/list`, `prompts/list`...) from bootstrap.json: what the real server
answers to them, written by scripts/generate.py and held to the real server by the tests. It then
replays the client's `initialize` to the server, swallows the answer, and relays every message both
ways, unchanged. A request that needs the server meanwhile waits for it (at most --wait-s seconds),
then answers with how long the install has taken and how long is left; when the install fails, it
answers with the install's error.

The handshake era only: `server/discover` (protocol 2026-07-28) is answered "method not found", which
tells a client to fall back to `initialize`.

    python3 bootstrap.py [--wait-s S] [--estimate-s S] [--log PATH] -- COMMAND...
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

SNAPSHOT = Path(__file__).with_suffix(".json")
LISTS = {"tools": ("tools/list",), "prompts": ("prompts/list",),
         "resources": ("resources/list", "resources/templates/list")}  # per capability the server names
REPLAY_ID = "autoresearch-bootstrap-initialize"  # the replayed initialize: its answer stays here
METHOD_NOT_FOUND = -32601
NOT_READY = -32000  # JSON-RPC's range for server errors
STDERR_LINES = 20  # of the install's last words, quoted when it fails


class Relay:
    """One client on stdin/stdout, one server process behind it, and the snapshot in between."""

    def __init__(self, snapshot: dict[str, Any], command: list[str], wait_s: float, estimate_s: float,
                 log: str | None) -> None:
        self.snapshot, self.wait_s, self.estimate_s, self.log = snapshot, wait_s, estimate_s, log
        self.started = time.monotonic()
        # Lock order: state, then a pipe. Once ready, messages pass under their pipe's lock alone, so a
        # server busy writing never waits for a client message, nor the other way round.
        self.state = threading.Lock()
        self.to_client = threading.Lock()
        self.to_server = threading.Lock()
        self.ready = False  # the server answered the replayed initialize (never goes back)
        self.failed: str | None = None  # why the server will never answer
        self.negotiated: str | None = None  # the protocol version the client was told
        self.queue: list[tuple[float, dict[str, Any] | None, bytes]] = []  # (deadline, message, line)
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self.server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE)

    def run(self) -> int:
        for target in (self._server_out, self._server_err, self._ticker):
            threading.Thread(target=target, daemon=True).start()
        for line in sys.stdin.buffer:
            if line.strip():
                self._from_client(line)
        # The client left. A running server shuts down on the end of its input (wait for it, passing its
        # log on); an install under way goes on alone (its output goes to its log file) and serves next time.
        with self.state:
            ready = self.ready
        with self.to_server:
            _close(self.server.stdin)
        return self.server.wait() if ready else 0

    # --- client -> server ------------------------------------------------------------------------

    def _from_client(self, line: bytes) -> None:
        if not self.ready:
            with self.state:
                if not self.ready:
                    self._before_server(line)
                    return
        self._send(line)

    def _before_server(self, line: bytes) -> None:
        """A client message while the server is not up (the state lock is held)."""
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        msg: dict[str, Any] | None = parsed if isinstance(parsed, dict) else None
        method = msg.get("method") if msg is not None else None
        if msg is None or "id" not in msg:  # a notification
            if method == "notifications/cancelled":  # of a request that waits here, or was answered here
                cancelled = (msg or {}).get("params", {}).get("requestId")
                self.queue = [q for q in self.queue if q[1] is None or q[1].get("id") != cancelled]
            elif method != "notifications/initialized":  # the relay sends its own after the replay
                self.queue.append((float("inf"), msg, line))
            return
        known = answer(self.snapshot, msg)
        if method == "initialize" and self.negotiated is None:
            assert known is not None
            self.negotiated = known["result"]["protocolVersion"]
            self._send(json.dumps({**msg, "id": REPLAY_ID}).encode() + b"\n")
        if known is not None:
            self._reply(known)
        elif self.failed is not None:
            self._reply(_refusal(msg, self.failed))
        else:
            self.queue.append((time.monotonic() + self.wait_s, msg, line))

    # --- server -> client ------------------------------------------------------------------------

    def _server_out(self) -> None:
        assert self.server.stdout is not None
        for line in self.server.stdout:
            if REPLAY_ID.encode() in line and not self.ready:
                with self.state:
                    if self._replayed(line):
                        continue
            with self.to_client:
                _write(sys.stdout.buffer, line)
        code = self.server.wait()
        with self.state:
            if not self.ready:
                self._fail(f"its start ended (exit {code}) before it answered")
                return
        os._exit(code)  # the server is gone, and so is this relay: the client sees the end, as with any server

    def _replayed(self, line: bytes) -> bool:
        """Whether `line` answers the replayed initialize; then the server is up (the state lock is held)."""
        msg = json.loads(line)
        if msg.get("id") != REPLAY_ID:
            return False
        if "error" in msg:
            self._fail(f"it refused the client's initialize: {msg['error'].get('message')}")
            return True
        agreed = msg.get("result", {}).get("protocolVersion")
        if agreed != self.negotiated:
            print(f"autoresearch: the server agreed on protocol {agreed}, the client was told {self.negotiated}: "
                  "regenerate bootstrap.json (python scripts/generate.py)", file=sys.stderr, flush=True)
        self.to_server.acquire()  # before anyone can see `ready`: the waiting messages go first
        try:
            self.ready = True
            _write(self.server.stdin, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
            for _, _, waiting in self.queue:
                _write(self.server.stdin, waiting)
            self.queue = []
        finally:
            self.to_server.release()
        print(f"autoresearch: the server is up after {time.monotonic() - self.started:.0f} s; relaying",
              file=sys.stderr, flush=True)
        return True

    def _server_err(self) -> None:
        assert self.server.stderr is not None
        for raw in self.server.stderr:
            text = raw.decode(errors="replace")
            self.stderr_tail.append(text.rstrip())
            sys.stderr.write(text)
            sys.stderr.flush()

    # --- waiting, failing ------------------------------------------------------------------------

    def _ticker(self) -> None:
        """Answer the requests that waited their whole time for a server that is still installing."""
        while True:
            time.sleep(0.25)
            with self.state:
                if self.ready or self.failed is not None:
                    return
                now = time.monotonic()
                for _, msg, _ in (q for q in self.queue if q[0] <= now):
                    assert msg is not None  # only requests have a deadline
                    self._reply(_refusal(msg, self._installing()))
                self.queue = [q for q in self.queue if q[0] > now]

    def _installing(self) -> str:
        elapsed = time.monotonic() - self.started
        left = self.estimate_s - elapsed
        eta = f"about {left:.0f} s left" if left >= 5 else f"longer than the {self.estimate_s:.0f} s expected"
        where = f" (its log: {self.log})" if self.log else ""
        return (f"autoresearch is still installing its environment, the first start of this plugin version: "
                f"{elapsed:.0f} s so far, {eta}{where}. The tools work as soon as it is done: call again then.")

    def _fail(self, why: str) -> None:
        """The server will not come: every waiting request, and every later one, gets the reason (the state
        lock is held)."""
        time.sleep(0.2)  # the last words on its stderr
        tail = "\n".join(line for line in self.stderr_tail if line)
        self.failed = (f"autoresearch could not start its server: {why}." + (f"\n{tail}\n" if tail else " ")
                       + "Fix that, then reconnect the server (/mcp in Claude Code) or restart the client.")
        for _, msg, _ in self.queue:
            if msg is not None and "id" in msg:
                self._reply(_refusal(msg, self.failed))
        self.queue = []

    # --- the two pipes ---------------------------------------------------------------------------

    def _reply(self, msg: dict[str, Any]) -> None:
        with self.to_client:
            _write(sys.stdout.buffer, json.dumps(msg, ensure_ascii=False).encode() + b"\n")

    def _send(self, line: bytes) -> None:
        with self.to_server:
            _write(self.server.stdin, line)


def _write(pipe: IO[bytes] | None, line: bytes) -> None:
    try:
        assert pipe is not None
        pipe.write(line)
        pipe.flush()
    except (OSError, ValueError):
        pass  # that side is gone: the client's end of input, or the server's exit, says so


def _close(pipe: IO[bytes] | None) -> None:
    try:
        if pipe is not None:
            pipe.close()
    except OSError:
        pass


def _refusal(msg: dict[str, Any], text: str) -> dict[str, Any]:
    """A tool call's refusal as a tool result (the model reads it); any other request's as an error."""
    if msg.get("method") == "tools/call":
        return _result(msg, {"content": [{"type": "text", "text": text}], "isError": True})
    return _error(msg, NOT_READY, text)


def answer(snapshot: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any] | None:
    """The server's own answer to a request that needs no server, from its snapshot; None for the rest."""
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        versions = snapshot["versions"]
        requested = params.get("protocolVersion")
        negotiated = requested if requested in versions else versions[-1]
        return _result(msg, {**snapshot["initialize"], "protocolVersion": negotiated})
    if method == "ping":
        return _result(msg, {})
    if method in snapshot["lists"] and not params.get("cursor"):
        return _result(msg, snapshot["lists"][method])
    if method == "server/discover":
        return _error(msg, METHOD_NOT_FOUND, "Method not found", method)
    return None


def _result(msg: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": msg["id"], "result": result}


def _error(msg: dict[str, Any], code: int, text: str, data: Any = None) -> dict[str, Any]:
    error: dict[str, Any] = {"code": code, "message": text}
    if data is not None:
        error["data"] = data
    return {"jsonrpc": "2.0", "id": msg["id"], "error": error}


def record(command: list[str], versions: list[str]) -> dict[str, Any]:
    """The snapshot of the server `command` runs: its answers to `initialize` at the newest of `versions`
    (the handshake versions it accepts, oldest first) and to the lists its capabilities name."""
    with tempfile.TemporaryDirectory() as cwd, subprocess.Popen(
            command, cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as server:
        stdin, stdout = server.stdin, server.stdout
        assert stdin is not None and stdout is not None
        asked = 0

        def ask(method: str, params: dict[str, Any] | None = None) -> Any:
            nonlocal asked
            asked += 1
            request = {"jsonrpc": "2.0", "id": asked, "method": method, **({"params": params} if params else {})}
            stdin.write(json.dumps(request) + "\n")
            stdin.flush()
            answer = json.loads(stdout.readline())
            if "result" not in answer:
                raise RuntimeError(f"{method}: the server answered {answer}")
            return answer["result"]

        initialize = ask("initialize", {"protocolVersion": versions[-1], "capabilities": {},
                                        "clientInfo": {"name": "autoresearch-bootstrap", "version": "0"}})
        stdin.write('{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        lists = {method: ask(method) for capability, methods in LISTS.items()
                 if capability in initialize["capabilities"] for method in methods}
        stdin.close()
    return {"versions": list(versions), "initialize": initialize, "lists": lists}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bootstrap.py", description=__doc__.splitlines()[0])
    parser.add_argument("--wait-s", type=float, default=60.0, help="how long a request waits for the server")
    parser.add_argument("--estimate-s", type=float, default=90.0, help="how long the install is expected to take")
    parser.add_argument("--log", help="the install's log, named in the answers while it runs")
    parser.add_argument("command", nargs="+", help="what installs, then runs, the server (after --)")
    args = parser.parse_args(argv)
    try:
        snapshot = json.loads(SNAPSHOT.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # without it, the plain way: the server answers when it is up
        print(f"autoresearch: no usable {SNAPSHOT.name} ({exc}); starting the server directly", file=sys.stderr)
        os.execvp(args.command[0], args.command)
    return Relay(snapshot, args.command, args.wait_s, args.estimate_s, args.log).run()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
