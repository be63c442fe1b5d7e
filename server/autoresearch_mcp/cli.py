"""The command line: `autoresearch-mcp [serve]`, `demo`, `report`, `hook`, `recipe`, `--version`."""

from __future__ import annotations

import argparse
import logging
import sys

from autoresearch_mcp import __version__


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="autoresearch-mcp", description=__doc__)
    parser.add_argument("--version", action="version", version=f"autoresearch-mcp {__version__}")
    parser.add_argument("--log-level", default="INFO", help="log level of the stderr log (default INFO)")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("serve", help="run the MCP server over stdio (the default)")
    demo = sub.add_parser("demo", help="run the whole loop on the bundled example (local, no network)")
    demo.add_argument("--delete", action="store_true", help="delete the demo repository at the end (kept by default)")
    demo.add_argument("--keep", action="store_true", help=argparse.SUPPRESS)  # the default now; still accepted
    report = sub.add_parser("report", help="write .autoresearch/report/ (index.html, progress.png, results.tsv)")
    report.add_argument("repo", nargs="?", default=".", help="the session's repository (default: here)")
    report.add_argument("--secondary", action="append", default=[], metavar="METRIC",
                        help="also chart this metric (repeatable)")
    report.add_argument("--finalize", action="store_true",
                        help="also turn the session's commits into independent review branches")
    hook = sub.add_parser("hook", help="run one of the plugin's Claude Code hooks (the event's JSON on stdin)")
    hook.add_argument("name", choices=["session-start", "stop", "guard"])
    recipe = sub.add_parser("recipe", help="write a ready autoresearch.sh and autoresearch.checks.sh")
    recipe.add_argument("name", help="the recipe (llama.cpp)")
    recipe.add_argument("dir", nargs="?", default=".", help="the project's root (default: here)")
    recipe.add_argument("--force", action="store_true", help="replace existing files with other content")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # stdout is the MCP channel: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in (None, "serve"):
        from autoresearch_mcp.app import serve

        serve()
        return 0
    if args.command == "demo":
        from autoresearch_mcp import demo

        return demo.main(delete=args.delete)
    if args.command == "hook" and args.name == "guard":
        from autoresearch_mcp import guard

        return guard.main()
    if args.command == "hook":
        from autoresearch_mcp import hooks

        return hooks.main([args.name])
    if args.command == "recipe":
        return _recipe(args.name, args.dir, args.force)
    return _report(args.repo, args.secondary, args.finalize)


def _recipe(name: str, folder: str, force: bool) -> int:
    """`autoresearch-mcp recipe NAME [DIR] [--force]`: write the recipe's files and say what is next."""
    from pathlib import Path

    from autoresearch_mcp import recipes
    from autoresearch_mcp.errors import AutoresearchError

    try:
        recipe = recipes.get(name)
        written = recipes.write(recipe, Path(folder), overwrite=force)
    except AutoresearchError as exc:
        print(f"autoresearch-mcp recipe: {exc}", file=sys.stderr)
        return 1
    print(f"{recipe.name}: {recipe.summary}")
    print("wrote: " + (", ".join(written) if written else "nothing (the files are already there)"))
    print(f"metrics: {', '.join(recipe.objectives)} (higher is better)")
    if recipe.needs_model:
        print("model: set AUTORESEARCH_MODEL to a GGUF file, or pass model=... to start_session")
    print(f"next: commit them, then start_session(repo, metric={recipe.metric!r}, direction={recipe.direction!r})")
    return 0


def _report(repo: str, secondary: list[str], finalize: bool) -> int:
    """`autoresearch-mcp report [REPO] [--secondary M] [--finalize]`: print what was written."""
    from autoresearch_mcp.errors import AutoresearchError
    from autoresearch_mcp.finalize import finalize as make_branches
    from autoresearch_mcp.report import write_report

    try:
        result = write_report(repo, secondary)
        print(result.summary)
        print(f"\nreport: {result.html_path}\nchart:  {result.chart_path}\ntable:  {result.tsv_path}")
        if finalize:
            done = make_branches(repo)
            print("\n" + done.message)
            for branch in done.branches:
                print(f"  {branch.name}: {'; '.join(branch.titles)} ({', '.join(branch.files[:5])})")
            for reason in done.grouped:
                print(f"  {reason}")
            print(f"  {done.verification}")
            if not done.verified:
                return 1
    except AutoresearchError as exc:
        print(f"autoresearch-mcp report: {exc}", file=sys.stderr)
        return 1
    return 0
