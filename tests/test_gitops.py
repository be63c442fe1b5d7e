"""git/gitops.py: each operation against real repositories in temporary directories."""

from __future__ import annotations

import os
import shutil
import tarfile
import time
from pathlib import Path

import pytest

from autoresearch_mcp.errors import InputError
from autoresearch_mcp.git import gitops, gitrun
from conftest import git, init_repo


@pytest.fixture
def repo(tmp_path: Path) -> gitops.Repo:
    path = tmp_path / "repo"
    path.mkdir()
    (path / "a.txt").write_text("one\n")
    (path / "src").mkdir()
    (path / "src" / "k.c").write_text("int kernel(void) { return 0; }\n")
    init_repo(path)
    return gitops.repo_at(path)


def commit_file(repo: gitops.Repo, name: str, text: str, message: str = "change") -> str:
    path = Path(repo.working_dir) / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    git(Path(repo.working_dir), "add", "-A")
    git(Path(repo.working_dir), "commit", "-q", "-m", message)
    return git(Path(repo.working_dir), "rev-parse", "HEAD")


# --- opening --------------------------------------------------------------------------------------


def test_repo_at_refuses_a_folder_that_is_no_repository(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is not a git repository"):
        gitops.repo_at(tmp_path)


def test_is_work_tree_tells_a_work_tree_from_other_folders(repo: gitops.Repo, tmp_path: Path) -> None:
    top = Path(repo.working_dir)
    assert gitops.is_work_tree(top) and gitops.is_work_tree(top / "src")
    assert not gitops.is_work_tree(top / ".git")
    assert not gitops.is_work_tree(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    assert not gitops.is_work_tree(tmp_path / "plain")


def test_init_repo_and_commit_all_make_a_first_commit_with_the_given_identity(tmp_path: Path) -> None:
    path = tmp_path / "new"
    path.mkdir()
    (path / "f.txt").write_text("x\n")
    sha = gitops.commit_all(gitops.init_repo(path, "trunk"), "first", "Demo Person", "demo@localhost")
    assert git(path, "rev-parse", "trunk") == sha
    assert git(path, "log", "-1", "--format=%s|%an") == "first|Test Person"  # the environment's identity wins
    assert git(path, "status", "--porcelain") == ""


# --- commits, refs and branches -----------------------------------------------------------------


def test_rev_parse_names_commits_and_answers_none_otherwise(repo: gitops.Repo) -> None:
    head = git(Path(repo.working_dir), "rev-parse", "HEAD")
    assert gitops.rev_parse(repo, "main") == head == gitops.rev_parse(repo, head[:10])
    assert gitops.rev_parse(repo, "no-such-branch") is None
    assert gitops.rev_parse(repo, "HEAD^{tree}") is None  # a tree is not a commit


def test_current_branch_is_none_on_a_detached_head(repo: gitops.Repo) -> None:
    assert gitops.current_branch(repo) == "main"
    git(Path(repo.working_dir), "tag", "main-tag")
    gitops.checkout_new_branch(repo, "autoresearch/x", "HEAD")
    assert gitops.current_branch(repo) == "autoresearch/x"
    gitops.checkout(repo, "main-tag")
    assert gitops.current_branch(repo) is None


def test_branch_exists_and_delete_branch(repo: gitops.Repo) -> None:
    git(Path(repo.working_dir), "branch", "topic")
    assert gitops.branch_exists(repo, "topic") and not gitops.branch_exists(repo, "other")
    gitops.delete_branch(repo, "topic")
    assert not gitops.branch_exists(repo, "topic")


def test_valid_ref_follows_git_check_ref_format(repo: gitops.Repo) -> None:
    assert gitops.valid_ref(repo, "refs/heads/autoresearch/2024-01")
    assert not gitops.valid_ref(repo, "refs/heads/autoresearch/a..b")
    assert not gitops.valid_ref(repo, "refs/heads/autoresearch/x.lock")


def test_ancestry_merge_base_and_counts(repo: gitops.Repo) -> None:
    root = git(Path(repo.working_dir), "rev-parse", "HEAD")
    first = commit_file(repo, "b.txt", "b\n", "b")
    second = commit_file(repo, "c.txt", "c\n", "c")
    assert gitops.is_ancestor(repo, root, second) and not gitops.is_ancestor(repo, second, root)
    assert gitops.merge_base(repo, first, second) == first
    assert gitops.count_commits(repo, root, second) == 2 and gitops.count_commits(repo, second, root) == 0
    assert gitops.first_parent_commits(repo, root, second) == [first, second]


def test_merge_base_is_none_for_unrelated_histories(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    git(top, "checkout", "-q", "--orphan", "other")
    git(top, "commit", "-q", "-m", "unrelated")
    assert gitops.merge_base(repo, "main", "other") is None


def test_list_refs_by_prefix_and_newest_first(repo: gitops.Repo) -> None:
    old = git(Path(repo.working_dir), "rev-parse", "HEAD")
    new = commit_file(repo, "b.txt", "b\n")
    gitops.update_ref(repo, "refs/autoresearch/exp/e1", old)
    refs = gitops.list_refs(repo, "refs/autoresearch/")
    assert refs == [gitops.Ref("refs/autoresearch/exp/e1", "autoresearch/exp/e1", old, "")]
    git(Path(repo.working_dir), "branch", "older", old)
    assert [(r.short, r.sha) for r in gitops.list_refs(repo, "refs/heads", newest_first=True)] == \
        [("main", new), ("older", old)]


def test_update_ref_with_an_old_value_refuses_when_the_ref_moved(repo: gitops.Repo) -> None:
    old = git(Path(repo.working_dir), "rev-parse", "HEAD")
    new = commit_file(repo, "b.txt", "b\n")
    zero = "0" * len(old)
    gitops.update_ref(repo, "refs/heads/review", old, zero, reason="test")  # create: must not exist yet
    with pytest.raises(gitops.GitError):
        gitops.update_ref(repo, "refs/heads/review", new, zero)
    with pytest.raises(gitops.GitError):
        gitops.delete_ref(repo, "refs/heads/review", new)
    gitops.update_ref(repo, "refs/heads/review", new, old)
    gitops.delete_ref(repo, "refs/heads/review", new)
    assert not gitops.branch_exists(repo, "review")


def test_worktrees_lists_each_with_its_branch(repo: gitops.Repo, tmp_path: Path) -> None:
    gitops.worktree_add(repo, tmp_path / "wt" / "one", "HEAD")
    git(Path(repo.working_dir), "worktree", "add", "-q", "-b", "side", str(tmp_path / "two"))
    found = {w.path.resolve(): w.branch for w in gitops.worktrees(repo)}
    assert found == {Path(repo.working_dir).resolve(): "refs/heads/main", (tmp_path / "wt" / "one").resolve(): None,
                     (tmp_path / "two").resolve(): "refs/heads/side"}


def test_worktree_prune_forgets_a_deleted_worktree(repo: gitops.Repo, tmp_path: Path) -> None:
    gitops.worktree_add(repo, tmp_path / "gone", "HEAD")
    shutil.rmtree(tmp_path / "gone")
    gitops.worktree_prune(repo)
    assert [w.path.resolve() for w in gitops.worktrees(repo)] == [Path(repo.working_dir).resolve()]


# --- reading commits and trees -----------------------------------------------------------------


def test_commit_info_replays_author_committer_and_message(repo: gitops.Repo) -> None:
    parent = git(Path(repo.working_dir), "rev-parse", "HEAD")
    sha = commit_file(repo, "b.txt", "b\n", "title\n\nbody\n\nTrailer: value")
    info = gitops.commit_info(repo, sha)
    assert info.parents == [parent] and info.message.strip() == "title\n\nbody\n\nTrailer: value"
    assert info.identity["GIT_AUTHOR_NAME"] == "Test Person"
    assert info.identity["GIT_COMMITTER_DATE"] == git(Path(repo.working_dir), "log", "-1", "--format=%cd",
                                                      "--date=raw", sha)


def test_changes_and_line_counts_name_every_path_plainly(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    base = git(top, "rev-parse", "HEAD")
    (top / "a.txt").write_text("one\ntwo\n")
    (top / "src" / "k.c").unlink()
    (top / "odd name\twith tab.txt").write_text("x\n")
    (top / "blob.bin").write_bytes(b"\0\1\2")
    head = commit_file(repo, "new/dir.txt", "y\n")
    changes = {c.path: c.status for c in gitops.changes(repo, base, head)}
    assert changes == {"a.txt": "M", "src/k.c": "D", "odd name\twith tab.txt": "A", "blob.bin": "A",
                       "new/dir.txt": "A"}
    assert gitops.changed_paths(repo, base, head) == sorted(changes)
    counts = {c.path: (c.added, c.deleted) for c in gitops.line_counts(repo, base, head)}
    assert counts["a.txt"] == (1, 0) and counts["src/k.c"] == (0, 1) and counts["blob.bin"] == (None, None)
    assert [c.path for c in gitops.changes(repo, base, head, ["src"])] == ["src/k.c"]


def test_log_gives_typed_entries_newest_first(repo: gitops.Repo) -> None:
    base = git(Path(repo.working_dir), "rev-parse", "HEAD")
    first = commit_file(repo, "b.txt", "b\n", "add b")
    second = commit_file(repo, "src/c.c", "c\n", "add c")
    entries = gitops.log(repo, f"{base}..{second}")
    assert [(e.sha, e.subject, e.author) for e in entries] == [(second, "add c", "Test Person"),
                                                              (first, "add b", "Test Person")]
    assert entries[0].committed.startswith("20") and "T" in entries[0].authored
    assert [e.sha for e in gitops.log(repo, f"{base}..{second}", ["src"])] == [second]
    assert [e.sha for e in gitops.log(repo, second, limit=1)] == [second]


def test_branch_log_gives_messages_with_trailers_and_diffstats_oldest_first(repo: gitops.Repo) -> None:
    start = git(Path(repo.working_dir), "rev-parse", "HEAD")
    first = commit_file(repo, "b.txt", "b\n", "keep b\n\nAutoresearch-Experiment: e1")
    second = commit_file(repo, "a.txt", "two\n", "keep a")
    log = gitops.branch_log(repo, start, "main")
    assert [(c.sha, c.message) for c in log] == [(first, "keep b\n\nAutoresearch-Experiment: e1"),
                                                (second, "keep a")]
    assert "b.txt | 1 +" in log[0].stat and "1 file changed" in log[0].stat
    assert log[0].committed_at > 1e9
    with pytest.raises(gitops.GitError):
        gitops.branch_log(repo, start, "no-such-branch")


def test_tracked_tree_entries_and_blobs(repo: gitops.Repo) -> None:
    head = git(Path(repo.working_dir), "rev-parse", "HEAD")
    assert gitops.tracked(repo, head, "src") == ["src/k.c"] and gitops.tracked(repo, head, "nope") == []
    entries = gitops.tree_entries(repo, head, "src", sizes=True)
    assert [(e.path, e.mode, e.kind, e.size) for e in entries] == [("src/k.c", "100644", "blob", 31)]
    assert gitops.tree_entries(repo, head)[0].size is None  # sizes only when asked
    blobs = gitops.read_blobs(repo, [entries[0].sha, gitops.hash_file(repo, Path(repo.working_dir) / "a.txt")])
    assert blobs == [b"int kernel(void) { return 0; }\n", b"one\n"]


def test_file_at_keeps_every_byte_and_is_none_for_a_missing_file(repo: gitops.Repo) -> None:
    head = commit_file(repo, "setup.sh", "echo hi\n\n")
    assert gitops.file_at(repo, head, "setup.sh") == b"echo hi\n\n"
    assert gitops.file_at(repo, head, "missing.sh") is None
    assert gitops.file_at(repo, head, "src") is None  # a folder is not a file
    assert gitops.file_at(repo, head, "setup.sh", max_bytes=8) is None
    assert gitops.file_at(repo, head, "setup.sh", max_bytes=9) == b"echo hi\n\n"


def test_archive_writes_the_commit_or_only_the_literal_paths(repo: gitops.Repo, tmp_path: Path) -> None:
    head = commit_file(repo, "g[1].txt", "glob\n")
    gitops.archive(repo, head, tmp_path / "all.tar.gz")
    gitops.archive(repo, head, tmp_path / "some.tar.gz", ["g[1].txt"])
    with tarfile.open(tmp_path / "all.tar.gz") as tar:
        assert {"a.txt", "src/k.c", "g[1].txt"} <= set(tar.getnames())
    with tarfile.open(tmp_path / "some.tar.gz") as tar:
        assert tar.getnames() == ["g[1].txt"]


def test_grep_files_finds_whole_words_in_matching_files(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    commit_file(repo, "src/other.c", "int kernels;\n")
    assert gitops.grep_files(top, {"kernel"}, ["*.c"]) == ["src/k.c"]
    assert gitops.grep_files(top, {"kernel"}, ["*.h"]) == []
    assert gitops.grep_files(top, {"nothing_here"}, ["*.c"]) == []


# --- writing objects with a throwaway index ----------------------------------------------------


def test_tree_with_sets_and_removes_entries_without_touching_the_index(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    head = git(top, "rev-parse", "HEAD")
    index_before = (top / ".git" / "index").read_bytes()
    (top / "new.sh").write_text("#!/bin/sh\n")
    blob = gitops.hash_file(repo, top / "new.sh")
    tree = gitops.tree_with(repo, head, [gitops.IndexEntry("100755", blob, "new.sh"),
                                         gitops.IndexEntry("0", "0" * 40, "src/k.c")])
    assert git(top, "ls-tree", "-r", "--name-only", tree).split() == ["a.txt", "new.sh"]
    assert git(top, "ls-tree", tree, "new.sh").startswith("100755 blob")
    assert (top / ".git" / "index").read_bytes() == index_before


def test_merge_trees_combines_independent_changes_and_fails_on_a_conflict(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    base = git(top, "rev-parse", "HEAD")
    left = commit_file(repo, "b.txt", "b\n")
    git(top, "checkout", "-q", "-b", "right", base)
    right = commit_file(repo, "c.txt", "c\n")
    merged = gitops.merge_trees(repo, gitops.tree_of(repo, base), gitops.tree_of(repo, left),
                                gitops.tree_of(repo, right))
    assert git(top, "ls-tree", "-r", "--name-only", merged).split() == ["a.txt", "b.txt", "c.txt", "src/k.c"]
    clash = commit_file(repo, "b.txt", "other\n")
    with pytest.raises(gitops.GitError):
        gitops.merge_trees(repo, gitops.tree_of(repo, base), gitops.tree_of(repo, left),
                           gitops.tree_of(repo, clash))


def test_object_union_reads_commits_of_two_clones_without_writing_into_either(
        repo: gitops.Repo, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(repo.working_dir), str(clone))
    theirs = commit_file(gitops.repo_at(clone), "fork.txt", "fork\n", "fork change")
    objects_before = sorted(p.name for p in (Path(repo.working_dir) / ".git" / "objects").iterdir())
    both = gitops.object_union([repo, gitops.repo_at(clone)], tmp_path / "scratch")
    assert [e.subject for e in gitops.log(both, f"{gitops.head_commit(repo)}..{theirs}")] == ["fork change"]
    assert sorted(p.name for p in (Path(repo.working_dir) / ".git" / "objects").iterdir()) == objects_before


# --- moving HEAD and work trees --------------------------------------------------------------


def test_fast_forward_moves_the_branch_and_refuses_otherwise(repo: gitops.Repo) -> None:
    top = Path(repo.working_dir)
    base = git(top, "rev-parse", "HEAD")
    ahead = commit_file(repo, "b.txt", "b\n")
    gitops.reset_hard(repo, base)
    assert not (top / "b.txt").exists()
    gitops.fast_forward(repo, ahead)
    assert git(top, "rev-parse", "HEAD") == ahead and (top / "b.txt").exists()
    gitops.checkout_new_branch(repo, "side", base)
    side = commit_file(repo, "c.txt", "c\n")
    gitops.checkout(repo, "main")
    with pytest.raises(gitops.GitError):
        gitops.fast_forward(repo, side)  # diverged: not a fast-forward


def test_checkout_detached_moves_a_worktree_whatever_it_held(repo: gitops.Repo, tmp_path: Path) -> None:
    base = git(Path(repo.working_dir), "rev-parse", "HEAD")
    ahead = commit_file(repo, "b.txt", "b\n")
    gitops.worktree_add(repo, tmp_path / "slot", base)
    slot = gitops.repo_at(tmp_path / "slot")
    (tmp_path / "slot" / "a.txt").write_text("edited\n")
    gitops.checkout_detached(slot, ahead)
    assert gitops.head_commit(slot) == ahead and gitops.current_branch(slot) is None
    assert (tmp_path / "slot" / "a.txt").read_text() == "one\n" and (tmp_path / "slot" / "b.txt").exists()


def test_a_git_that_outlasts_the_timeout_is_stopped_with_a_git_error(
        repo: gitops.Repo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gitrun, "TIMEOUT_S", 0.5)
    with pytest.raises(gitops.GitError, match="Timeout"):
        gitrun.run(repo, "-c", "alias.nap=!sleep 30", "nap")


def racy_edit(repo: gitops.Repo) -> Path:
    """A tracked file edited to the same size within the second its index entry and the index were written.

    Git compares whole seconds of a file's time, so such an edit is told from the entry only because the
    entry is no older than the index ("racily clean"); ctime is left out so the test need not fit in a second.
    """
    top = Path(repo.working_dir)
    git(top, "config", "core.trustctime", "false")
    target, index = top / "b.c", Path(repo.git_dir) / "index"
    second = int(time.time()) - 100
    target.write_text("int b(int x) { return x + 2; }\n")
    os.utime(target, (second + 0.1, second + 0.1))
    git(top, "add", "b.c")
    git(top, "commit", "-qm", "b")
    os.utime(index, (second + 0.5, second + 0.5))
    target.write_text("int b(int x) { return x + 3; }\n")
    os.utime(target, (second + 0.7, second + 0.7))
    assert "b.c" in git(top, "diff-files", "--name-only")  # git itself sees it, from the real index
    return target


def test_a_snapshot_sees_a_same_size_edit_made_in_the_second_the_index_was_written(repo: gitops.Repo) -> None:
    racy_edit(repo)
    top = Path(repo.working_dir)
    tree = gitops.snapshot_worktree(repo, git(top, "rev-parse", "HEAD"))
    assert "x + 3" in git(top, "cat-file", "-p", f"{tree}:b.c")


def test_a_reset_saves_a_same_size_edit_made_in_the_second_the_index_was_written(repo: gitops.Repo) -> None:
    target = racy_edit(repo)
    top = Path(repo.working_dir)
    gitops.reset_saving(repo, git(top, "rev-parse", "HEAD"), "saved")
    assert "x + 2" in target.read_text()
    git(top, "stash", "apply", "-q")
    assert "x + 3" in target.read_text()  # the edit was saved, not lost
