"""How fast a repeated search_arxiv answers through the MCP server (target: under 50 ms).

A local HTTP server on 127.0.0.1 plays arXiv (a 10-paper Atom feed) and Hugging Face (no code
links), so the first, uncached call goes through the real httpx path; the repeated calls are then
answered from the disk cache. Run: /work/venv/bin/python benchmarks/bench_research.py
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import anyio
from mcp import Client

from autoresearch_mcp.app import build_server

REPEATS = 50
TARGET_MS = 50.0


def atom_feed(papers: int) -> bytes:
    entries = "".join(
        f"""<entry><id>http://arxiv.org/abs/2401.{n:05d}v1</id>
<updated>2024-01-02T00:00:00Z</updated><published>2024-01-01T00:00:00Z</published>
<title>Paper {n} on fused
  CPU kernels</title><summary>  An abstract about kernel fusion number {n}. {"Details. " * 60}</summary>
<author><name>Ada Lovelace</name></author><author><name>Alan Turing</name></author>
<link href="http://arxiv.org/abs/2401.{n:05d}v1" rel="alternate" type="text/html"/>
<link title="pdf" href="http://arxiv.org/pdf/2401.{n:05d}v1" rel="related" type="application/pdf"/>
<arxiv:primary_category xmlns:arxiv="http://arxiv.org/schemas/atom" term="cs.LG"/>
<category term="cs.LG" scheme="http://arxiv.org/schemas/atom"/></entry>"""
        for n in range(papers)
    )
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>ArXiv Query</title>
<opensearch:totalResults xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">1234</opensearch:totalResults>
<opensearch:startIndex xmlns:opensearch="http://a9.com/-/spec/opensearch/1.1/">0</opensearch:startIndex>
{entries}</feed>""".encode()


class Handler(BaseHTTPRequestHandler):
    requests = 0

    def do_GET(self) -> None:
        Handler.requests += 1
        if self.path.startswith("/api/query"):
            status, body, kind = 200, atom_feed(10), "application/atom+xml"
        else:
            status, body, kind = 404, b'{"error":"Paper not found"}', "application/json"
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


async def measure() -> tuple[float, list[float], int]:
    arguments = {"query": "kernel fusion cpu", "max_results": 10, "categories": ["cs.LG"]}
    async with Client(build_server()) as client:
        began = time.perf_counter()
        first = await client.call_tool("search_arxiv", arguments)
        first_ms = (time.perf_counter() - began) * 1000
        assert not first.is_error, first.content
        requests_after_first = Handler.requests
        repeated = []
        for _ in range(REPEATS):
            began = time.perf_counter()
            result = await client.call_tool("search_arxiv", arguments)
            repeated.append((time.perf_counter() - began) * 1000)
            assert not result.is_error and result.structured_content is not None
            assert result.structured_content["from_cache"] is True
    return first_ms, repeated, Handler.requests - requests_after_first


def main() -> None:
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the figures
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    with tempfile.TemporaryDirectory() as cache:
        os.environ.update(
            AUTORESEARCH_ARXIV_URL=f"{url}/api/query",
            AUTORESEARCH_HF_API_URL=f"{url}/hf",
            AUTORESEARCH_CACHE_DIR=cache,
        )
        first_ms, repeated, extra_requests = anyio.run(measure)
    server.shutdown()
    median = statistics.median(repeated)
    p95 = sorted(repeated)[int(0.95 * len(repeated)) - 1]
    print(f"search_arxiv, 10 papers, in-process MCP client, local HTTP server on {url}")
    print(f"  first call (network, parse, 10 Hugging Face lookups): {first_ms:8.1f} ms")
    print(f"  cached call over {REPEATS} repeats: median {median:6.2f} ms, p95 {p95:6.2f} ms, "
          f"max {max(repeated):6.2f} ms")
    print(f"  network requests during the cached calls: {extra_requests}")
    verdict = "PASS" if median < TARGET_MS else "FAIL"
    print(f"  target: cached median under {TARGET_MS:.0f} ms -> {verdict}")


if __name__ == "__main__":
    main()
