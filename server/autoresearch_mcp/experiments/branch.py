"""The session branch against the ledger: it is where commit_winner left it, or the session stops.

Only commit_winner moves the session branch, and it records every commit it makes in the ledger
(`CommitRecord`); the ledger's last word on the branch is that commit, or the head the session's latest
validation measured (`LedgerView.heads`). The branch is compared with it after every job, before every
launch and commit, when a session resumes and before finalize_session. A commit the ledger does not
know counts only when it is exactly what commit_winner makes, for a winner it would commit, and a crash
kept it from being recorded (between the branch's move and the record): it is then recorded as
reconciled. Anything else (a commit the hook could not stop, a hand-written ref, a reset) stops the
session with an error that names what changed and how to put the branch back.

Until the session launches its first experiment, its branch also takes set-up commits: commits of its benchmark
and checks alone (issue 52), so a bench start_session warned about can be fixed. Such commits are the session's
only once start_session validated them: before that, nothing is launched on them.

Every other `autoresearch/*` ref is held to the ledger too (issue 32): a ref that shadows a session branch
(`refs/tags/autoresearch/<tag>`, an `autoresearch/<tag>` file at the top of the git directory...: git takes
the short name for it first), a session branch made a symbolic ref (git runs no reference-transaction hook
for `git symbolic-ref`), and a branch of an earlier session the ledger knows that no longer holds the
commit the ledger left it at stop the session until they are deleted or put back.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from autoresearch_mcp.errors import StateError
from autoresearch_mcp.experiments import platforms as platforms_
from autoresearch_mcp.git import gitops
from autoresearch_mcp.store.config import SessionConfig
from autoresearch_mcp.store.ledger import ExperimentState, LedgerView
from autoresearch_mcp.store.records import CommitRecord, Record

TRAILER = "Autoresearch-Experiment"  # commit_winner's trailer naming the experiment a commit keeps


def check(repo: gitops.Repo, config: SessionConfig, view: LedgerView, append: Callable[[Record], None],
          validating: bool = False) -> list[str]:
    """Hold the session branch to the ledger: record the commits commit_winner made but could not record
    (`append` writes a record and folds it into `view`), and return them; raise StateError, saying what
    changed and what to do, when the branch is anywhere else, or another autoresearch/* ref is not the ledger's.
    Set-up commits (set_up_commits) pass when start_session is `validating` them, and stop everything else until
    it has."""
    strays = _strays(repo, config, view)
    if strays:
        raise StateError(
            "refs that are not the ledger's stand beside the session branches: " + "; ".join(strays) + ". Something "
            "other than the server wrote them, so no experiment is judged, launched or committed until they are "
            f"gone. A person can fix them in a terminal, in {repo.working_dir}, with the commands above "
            "(core.hooksPath=/dev/null lets a session branch through autoresearch's reference-transaction hook)")
    expected = view.heads.get(config.session_id)
    if expected is None:  # no validated start yet: nothing to hold the branch to
        return []
    ref = gitops.branch_ref(repo, config.branch)
    if ref is not None and not ref.symref and ref.sha == expected:
        return []
    if ref is None:
        raise StateError(_moved(repo, config, expected, None, "the branch was deleted"))
    if ref.symref:
        raise StateError(_moved(repo, config, expected, ref.sha, f"it was made a symbolic ref to {ref.symref}"))
    if not _contains(repo, ref.sha, expected):
        raise StateError(_moved(repo, config, expected, ref.sha, f"it no longer contains {expected[:12]} (a reset, "
                                                                 "a rebase or an amended commit)"))
    set_up = set_up_commits(repo, config, view, expected, ref.sha)
    if set_up:
        if validating:
            return []
        raise StateError(
            f"the session branch {config.branch} has {len(set_up)} commit(s) of its benchmark and checks since "
            f"start_session validated {expected[:12]} ({'; '.join(set_up)}), not validated yet: call "
            f"start_session(tag={config.tag!r}) again, which validates them and records them as the session's "
            "benchmark; then launch")
    reconciled: list[str] = []
    parent = expected
    for sha in gitops.first_parent_commits(repo, expected, ref.sha):
        info = gitops.commit_info(repo, sha)
        title = info.message.strip().splitlines()[0] if info.message.strip() else sha[:12]
        exp, why = _kept_by_commit_winner(repo, config, view, sha, info, parent)
        if exp is None:
            done = (f"; the commit_winner commit(s) before it, which a crash had left unrecorded, are now recorded: "
                    f"{', '.join(c[:12] for c in reconciled)}") if reconciled else ""
            raise StateError(_moved(repo, config, parent, ref.sha, f"commit {sha[:12]} ({title!r}) {why}{done}"))
        append(CommitRecord(experiment_id=exp.experiment_id, commit=sha, parent=parent, branch=config.branch,
                            title=title, reconciled=True))
        reconciled.append(sha)
        parent = sha
    return reconciled


def launched(view: LedgerView, session_id: str) -> bool:
    """Whether the session has launched an experiment: from then on its benchmark and checks stay as its
    experiments were measured with."""
    return any(e.launch.session_id == session_id for e in view.experiments.values())


def set_up_commits(repo: gitops.Repo, config: SessionConfig, view: LedgerView, start: str, tip: str) -> list[str]:
    """The commits from `start` to `tip` (each sha and title), when every one is a set-up commit: one commit on the
    one before it that changes the session's scripts (gitops.SCRIPTS) and nothing else, on the branch of a session
    that has launched no experiment. Empty otherwise."""
    if launched(view, config.session_id):
        return []
    found, parent = [], start
    for sha in gitops.first_parent_commits(repo, start, tip):
        info = gitops.commit_info(repo, sha)
        changed = gitops.changed_paths(repo, parent, sha)
        if info.parents != [parent] or not changed or not set(changed) <= set(gitops.SCRIPTS):
            return []
        title = info.message.strip().splitlines()[0] if info.message.strip() else ""
        found.append(f"{sha[:12]} {title[:80]!r}")
        parent = sha
    return found


def open_set_up(repo: gitops.Repo, config: SessionConfig, head: str) -> None:
    """Let the session branch take set-up commits (start_session, while the session has launched nothing): the
    ref the reference-transaction hook and the PreToolUse guard read."""
    gitops.update_ref(repo, gitops.SETUP_REF + config.tag, head)


def close_set_up(repo: gitops.Repo, config: SessionConfig) -> None:
    """The session launches: its branch takes no more set-up commits."""
    ref = gitops.SETUP_REF + config.tag
    sha = gitops.rev_parse(repo, ref)
    if sha is not None:
        with contextlib.suppress(gitops.GitError):  # another launch deleted it meanwhile
            gitops.delete_ref(repo, ref, sha)


def _strays(repo: gitops.Repo, config: SessionConfig, view: LedgerView) -> list[str]:
    """What is wrong with the autoresearch/* refs other than the current session branch's commits, each with
    the command that fixes it."""
    found = [f"{name} shadows a session branch (git resolves the short name to it before refs/heads/): delete it "
             f"(`{fix}`)" for name, fix in gitops.shadowing_refs(repo).items()]
    known = {s.branch or f"autoresearch/{s.tag}": s.session_id for s in view.sessions if s.branch or s.tag}
    known[config.branch] = config.session_id
    for ref in gitops.list_refs(repo, gitops.SESSION_BRANCHES):
        name = ref.name.removeprefix(gitops.BRANCH_REF)
        session = known.get(name)
        expected = view.heads.get(session) if session else None
        back = (f"`git -c core.hooksPath=/dev/null update-ref --no-deref {ref.name} {expected}`" if expected
                else f"`git -c core.hooksPath=/dev/null symbolic-ref -d {ref.name}`")
        if ref.symref and name != config.branch:  # the current branch's own check says more
            found.append(f"{ref.name} is a symbolic ref to {ref.symref}: put it back ({back})")
        elif session and session != config.session_id and expected and not _contains(repo, ref.sha, expected):
            found.append(f"{ref.name}, session {session}'s branch, no longer contains {expected[:12]}, where "
                         f"commit_winner left it: put it back ({back})")
    return found


def _contains(repo: gitops.Repo, tip: str, commit: str) -> bool:
    try:
        return gitops.is_ancestor(repo, commit, tip)
    except gitops.GitError:  # the recorded commit is gone from the repository
        return False


def _kept_by_commit_winner(repo: gitops.Repo, config: SessionConfig, view: LedgerView, sha: str,
                           info: gitops.CommitInfo, parent: str) -> tuple[ExperimentState | None, str]:
    """The experiment `sha` keeps when commit_winner made it on `parent`, else (None, why it did not)."""
    if info.parents != [parent]:
        return None, f"is not a commit on {parent[:12]} alone (commit_winner makes one commit on the session head)"
    exp_id = gitops.trailer(info.message, TRAILER)
    if exp_id is None:
        return None, f"has no {TRAILER} trailer: commit_winner did not make it"
    exp = view.experiments.get(exp_id)
    if exp is None or exp.launch.session_id != config.session_id:
        return None, f"names experiment {exp_id[:40]!r}, which is not one of this session's"
    if exp.commit is not None:
        return None, f"names experiment {exp_id}, which is already committed as {exp.commit.commit[:12]}"
    if exp.launch.base_commit != parent:
        return None, (f"names experiment {exp_id}, which was measured against {exp.launch.base_commit[:12]}, not "
                      f"{parent[:12]}")
    if gitops.tree_of(repo, sha) != exp.launch.candidate_tree:
        return None, f"names experiment {exp_id}, but does not hold its measured candidate (the files differ)"
    why = _refused(exp, config)
    if why:
        return None, f"names experiment {exp_id}, which commit_winner refuses: {why}"
    return exp, ""


def _refused(exp: ExperimentState, config: SessionConfig) -> str | None:
    """Why commit_winner would not commit `exp` on its base (None: it would)."""
    if exp.status != "done" or exp.verdict != "improved":
        return f"it is {exp.status} with verdict {exp.verdict!r}"
    if not exp.checks_passed:
        return "its checks did not pass"
    if exp.launch.incremental:
        return "it was measured on an incremental build, never confirmed on a clean one"
    other = platforms_.refusal(exp.experiment_id, config.all_platforms[1:], exp.platforms)
    if other:
        return other
    if config.holdout is not None and (exp.holdout is None or exp.holdout.verdict == "regressed"):
        return "the hidden holdout did not pass"
    return None


def _moved(repo: gitops.Repo, config: SessionConfig, expected: str, actual: str | None, what: str) -> str:
    checked_out = actual is not None and gitops.current_branch(repo) == config.branch
    fix = (f"reset --keep {expected}" if checked_out  # moves the work tree with it, keeping local changes
           else f"update-ref --no-deref refs/heads/{config.branch} {expected}")
    return (f"the session branch {config.branch} is at {actual[:12] if actual else 'nothing'}, but the ledger says "
            f"commit_winner left it at {expected[:12]}: {what}. Something other than commit_winner moved it, so no "
            "experiment is judged, launched or committed until it is back. A person can put it back in a terminal, "
            f"in {repo.working_dir}: `git -c core.hooksPath=/dev/null {fix}` (autoresearch's reference-transaction "
            "hook refuses every other move of the branch; core.hooksPath=/dev/null lets this one through); or "
            "start a new session with another tag")
