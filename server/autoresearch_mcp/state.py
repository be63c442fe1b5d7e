"""The server's state, held in the MCP lifespan: settings and the bound session."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from autoresearch_mcp import notes
from autoresearch_mcp import session as sessions
from autoresearch_mcp.errors import AutoresearchError, StateError
from autoresearch_mcp.executors import fleet as fleets
from autoresearch_mcp.executors.port import Executor
from autoresearch_mcp.experiments import readouts
from autoresearch_mcp.experiments.manager import ExperimentManager
from autoresearch_mcp.git import gitops
from autoresearch_mcp.models import (
    AddNoteResult,
    Direction,
    ExecutorName,
    ListExperimentsResult,
    StartSessionResult,
)
from autoresearch_mcp.settings import Settings
from autoresearch_mcp.store.config import SessionConfig, load_config, state_dir
from autoresearch_mcp.store.ledger import Ledger
from autoresearch_mcp.worker import procs

log = logging.getLogger(__name__)


@dataclass
class AppState:
    settings: Settings
    session: sessions.Session | None = None
    unbound: str | None = None  # why the session in the working directory was not resumed at start
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _starting: str = ""

    @classmethod
    def create(cls, cwd: Path | None = None) -> AppState:
        """The state at server start; a session left in the working directory is bound again."""
        state = cls(settings=Settings.from_env())
        root = cwd or Path.cwd()
        config = load_config(root) if (root / ".git").exists() else None
        if config is not None:
            try:
                repo = gitops.repo_at(root)
                ledger = Ledger(state_dir(Path(repo.working_dir)) / "ledger.jsonl")  # the session's one
                sessions.check_resume(repo, config, ledger)
                state._bind(repo, config, ledger)
                log.info("resumed session %s of %s", config.tag, root)
            except StateError as exc:
                state.unbound = f"the session {config.tag} in {root} was not resumed: {exc}"
                log.error("%s", state.unbound)
            except Exception:
                log.exception("could not resume the session in %s; call start_session", root)
        return state

    def _bind(self, repo: gitops.Repo, config: SessionConfig, ledger: Ledger,
              fleet: fleets.Fleet | None = None) -> None:
        try:
            env = sessions.script_env(config, self.settings)
        except AutoresearchError as exc:  # experiments then fail with the script's own message
            log.warning("session %s: %s", config.tag, exc)
            env = {}
        fleet = fleet or fleets.build(repo, config, self.settings)
        manager = ExperimentManager(repo, config, ledger, fleet, env, fleet.worktrees, fleet.here)
        manager.recover()
        self.session = sessions.Session(repo, config, ledger, manager)

    def require_session(self) -> sessions.Session:
        if self.session is None:
            raise StateError(self.unbound or "no session: call start_session(repo, metric, direction) first")
        return self.session

    def start_session(
        self, repo: str, metric: str, direction: Direction, executor: ExecutorName | None, tag: str | None,
        platforms: list[Any] | None = None, recipe: str | None = None, model: str | None = None,
    ) -> StartSessionResult:
        # One start at a time: two concurrent starts would both answer success, and only one stay bound.
        if not self._lock.acquire(blocking=False):
            raise StateError(f"another start_session ({self._starting}) is still running; wait for its answer, "
                             "then call start_session again if you still need to")
        try:
            self._starting = f"repo {repo}"
            return self._start(repo, metric, direction, executor, tag, platforms, recipe, model)
        finally:
            self._starting = ""
            self._lock.release()

    def _start(
        self, repo: str, metric: str, direction: Direction, executor: ExecutorName | None, tag: str | None,
        platforms: list[Any] | None, recipe: str | None = None, model: str | None = None,
    ) -> StartSessionResult:
        old = self.session
        if old is not None:
            running = readouts.list_experiments(old.manager, None).running
            if running:
                raise StateError(
                    f"{running} experiment(s) of session {old.config.tag} are still running; "
                    "wait for them or cancel_experiment them before starting or resuming a session")
        # the bound session stays usable if the new one cannot be opened or validated
        made: list[fleets.Fleet] = []

        def executor_for(git_repo: gitops.Repo, config: SessionConfig) -> Executor:
            """The session's executors (a sky session's validate on one of its own workers, which it then keeps)."""
            made.append(fleets.build(git_repo, config, self.settings))
            return made[-1]

        try:
            result, git_repo, config, ledger = sessions.start_session(
                repo, metric, direction, executor, tag, self.settings, executor_for, platforms, recipe=recipe,
                model=model, ledger=old.ledger if old is not None else None)
        except BaseException:
            for ex in made:  # the session is not bound: nothing could release its worker later
                try:
                    ex.release("down")
                except Exception as exc:
                    log.error("could not down the worker that validated the benchmark: %s", exc)
                ex.close()
            raise
        if old is not None:
            old.manager.close()
            self.session = None
            if Path(old.repo.working_dir) != Path(git_repo.working_dir):
                result.warnings.append(
                    f"the session {old.config.tag} of {old.repo.working_dir} is no longer bound: experiment "
                    f"tools now act on {git_repo.working_dir} (start_session there again to switch back)")
        self._bind(git_repo, config, ledger, made[0] if made else None)
        self.unbound = None
        return result

    def list_experiments(self, status: str | None) -> ListExperimentsResult:
        session = self.require_session()
        result = readouts.list_experiments(session.manager, status)
        result.notes = notes.read(session.root)
        result.notes_path = str(notes.notes_path(session.root))
        return result

    def add_note(self, text: str) -> AddNoteResult:
        path, entries = notes.add(self.require_session().root, text)
        return AddNoteResult(notes_path=str(path), entries=entries)

    def close(self) -> None:
        """The server is stopping: waiting calls end, running experiments are cancelled (every process they
        started killed), and so is every command this process itself still runs (a validation's build)."""
        if self.session is not None:
            self.session.manager.close()
        end_own_commands()


def end_own_commands() -> int:
    """Kill every command this process started through procs.run_command that still runs (each carries a
    marker naming this process: see run_command), with its whole process group; how many."""
    mark = f"cmd-{os.getpid()}-"
    ended = 0
    for child in psutil.Process().children(recursive=True):
        try:
            marker = child.environ().get(procs.JOB_ENV, "")
        except psutil.Error:
            continue
        if marker.startswith(mark):
            with contextlib.suppress(psutil.Error, OSError):
                procs.kill_group(child.pid, grace_s=0.5)  # each command leads its own group
                procs.kill_marked(marker)
                ended += 1
    if ended:
        log.warning("ended %d command(s) still running at shutdown", ended)
    return ended
