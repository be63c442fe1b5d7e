"""The command line: `autoresearch-mcp [serve]`, `--version`."""

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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # stdout is the MCP channel: every log line goes to stderr.
    logging.basicConfig(stream=sys.stderr, level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command in (None, "serve"):
        from autoresearch_mcp.app import build_server

        build_server().run()
        return 0
    return 2
