"""Git runs in one place: the gitops modules (git/gitops.py, which callers ask, and its siblings gitrun, gitread
and gittrees). No other module of the package imports GitPython, builds a git command line, calls GitPython's
command wrapper (`repo.git.x(...)`) or its object API (`repo.head`, `repo.index`...), or opens a repository
itself; they call named gitops functions.

The exceptions are the functions listed in HOOKS: the PreToolUse guard (guard.py) parses the git
command lines the agent sends and asks git read-only questions with the standard library (guardrepo.py; it
runs with the system python3, before the package's environment exists), and the Stop hook (hooks.py), run at the
end of every turn, finds the session without importing GitPython."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "server" / "autoresearch_mcp"
# the gitops modules: gitops (what callers ask), gitrun (the runner), gitread (reading), gittrees (writing objects)
GITOPS = {PACKAGE / "git" / f"{name}.py" for name in ("gitops", "gitrun", "gitread", "gittrees")}
# guard.py (parsing the agent's git command lines), guardrepo.py (the guard asking git with the stdlib) and
# hooks.py (the Stop hook)
HOOKS = {"guard.py": {"_Guard.invocation"}, "guardrepo.py": {"GitQuestions._git"}, "hooks.py": {"_session_root"}}
OBJECT_API = {"git", "head", "heads", "index", "active_branch", "is_dirty", "iter_commits", "is_ancestor",
              "untracked_files", "commit", "tree", "refs", "branches", "remotes", "references"}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p not in GITOPS)


def _violations(source: str, rel: str) -> list[str]:
    """Each place module `rel` (its path in the package) runs git or reaches for GitPython, as 'where: what'."""
    tree = ast.parse(source)
    found: list[str] = []

    def visit(node: ast.AST, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            scope = where
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                scope = f"{where}.{child.name}" if where else child.name
            if scope not in HOOKS.get(rel, set()):
                found.extend(f"{rel}:{getattr(child, 'lineno', '?')}: {what}" for what in _offences(child))
            visit(child, scope)

    visit(tree, "")
    return found


def _offences(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import) and any(a.name == "git" or a.name.startswith("git.") for a in node.names):
        return ["imports GitPython"]
    if isinstance(node, ast.ImportFrom) and node.module and (node.module == "git" or node.module.startswith("git.")):
        return ["imports GitPython"]
    if isinstance(node, ast.List | ast.Tuple) and node.elts and _is_git(node.elts[0]):
        return ["builds a git command line"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
        name = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
        if name in ("Repo", "Git"):
            return [f"opens a repository itself ({name}(...))"]
        if name in ("run", "Popen", "call", "check_call", "check_output", "execvp", "spawnlp") and node.args \
                and _is_git(node.args[0]):
            return ["runs git"]
    if isinstance(node, ast.Attribute) and node.attr in OBJECT_API and _is_repo(node.value):
        return [f"uses GitPython's {'command wrapper' if node.attr == 'git' else 'object API'} (.{node.attr})"]
    return []


def _is_git(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value == "git"


def _is_repo(node: ast.expr) -> bool:
    """A repository handle: repo, self.repo, slot_repo, plan.repo..."""
    name = node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else ""
    return name.endswith("repo") or name in ("upstream", "other", "bare")


def test_no_module_but_gitops_runs_git() -> None:
    offences = [v for path in _modules()
                for v in _violations(path.read_text(encoding="utf-8"), path.relative_to(PACKAGE).as_posix())]
    assert not offences, "git belongs in the gitops modules (call a named gitops function):\n" + "\n".join(offences)


@pytest.mark.parametrize("source, what", [
    ("import subprocess\nsubprocess.run(['git', 'status'])\n", "builds a git command line"),
    ("def f(repo):\n    return repo.git.rev_parse('HEAD')\n", "command wrapper"),
    ("def f(self):\n    return self.repo.head.commit\n", "object API"),
    ("import git\n", "imports GitPython"),
    ("from autoresearch_mcp.git import gitops\nr = gitops.Repo('.')\n", "opens a repository itself"),
    ("import subprocess\ncmd = 'git'\nsubprocess.run(('git', '-C', '.', 'log'))\n", "builds a git command line"),
])
def test_the_check_finds_each_way_of_running_git(source: str, what: str) -> None:
    offences = _violations(source, "session.py")
    assert any(what in v for v in offences), offences


def test_the_hooks_exception_is_for_the_hook_modules_only() -> None:
    source = ("class GitQuestions:\n    def _git(self):\n        import subprocess\n"
              "        subprocess.run(['git', 'log'])\n")
    assert _violations(source, "guardrepo.py") == []
    assert _violations(source, "notes.py") != []


def test_the_gitops_modules_exist() -> None:
    assert all(path.is_file() for path in GITOPS), "GITOPS names a module that is gone: update it"


@pytest.mark.parametrize("module", sorted(HOOKS))
def test_the_hooks_exception_names_functions_that_exist(module: str) -> None:
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    names = {f"{c.name}.{f.name}" for c in tree.body if isinstance(c, ast.ClassDef)
             for f in c.body if isinstance(f, ast.FunctionDef)}
    names |= {f.name for f in tree.body if isinstance(f, ast.FunctionDef)}
    assert names >= HOOKS[module], f"{module} no longer has {HOOKS[module] - names}: update HOOKS"
