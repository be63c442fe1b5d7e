"""Code repositories of papers, from Hugging Face's paper pages (which absorbed Papers with Code).

Best effort by design: a search must never wait long for it, so lookups run in parallel with a
short timeout and an overall budget, failures are ignored, and an unreachable service is left
alone for a while.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor, wait

from autoresearch_mcp.errors import ExternalError
from autoresearch_mcp.research.http import HttpClient

log = logging.getLogger(__name__)

_TTL_S = 7 * 24 * 3600
_PAUSE_AFTER_FAILURE_S = 600.0


class CodeLinks:
    def __init__(
        self, http: HttpClient, hf_api_url: str, *, timeout_s: float = 3.0, budget_s: float = 4.0
    ) -> None:
        self.http = http
        self.hf_api_url = hf_api_url.rstrip("/")
        self.timeout_s = timeout_s
        self.budget_s = budget_s
        self._paused_until = 0.0
        self._lock = threading.Lock()

    def lookup(self, arxiv_ids: Iterable[str]) -> dict[str, str]:
        """The code repository URL of each paper that has one; papers left out have none known."""
        ids = list(dict.fromkeys(arxiv_ids))
        if not ids or self.http.clock.monotonic() < self._paused_until:
            return {}
        pool = ThreadPoolExecutor(max_workers=min(8, len(ids)), thread_name_prefix="codelinks")
        futures = {pool.submit(self._one, arxiv_id): arxiv_id for arxiv_id in ids}
        done, _late = wait(futures, timeout=self.budget_s)
        # Late lookups finish in the background (bounded by their timeout) and still fill the cache.
        pool.shutdown(wait=False, cancel_futures=True)
        found: dict[str, str] = {}
        for future in done:
            url = future.result()
            if url:
                found[futures[future]] = url
        return found

    def _one(self, arxiv_id: str) -> str | None:
        try:
            response = self.http.get(
                f"{self.hf_api_url}/papers/{arxiv_id}",
                ttl_s=_TTL_S,
                timeout_s=self.timeout_s,
                retry=False,
                cache_statuses=(200, 404),
            )
            if response.status != 200:
                return None
            repo = response.json().get("githubRepo")
        except ExternalError as exc:
            log.info("Hugging Face paper lookup failed (%s); pausing lookups", exc)
            with self._lock:
                self._paused_until = self.http.clock.monotonic() + _PAUSE_AFTER_FAILURE_S
            return None
        except (ValueError, AttributeError):  # not the documented JSON object
            return None
        except Exception:  # best effort: an unexpected failure must not fail the search
            log.warning("Hugging Face paper lookup of %s failed unexpectedly", arxiv_id, exc_info=True)
            return None
        return repo if isinstance(repo, str) and repo.startswith("http") else None
