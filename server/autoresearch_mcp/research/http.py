"""The HTTP seam of the research tools: one httpx client, a disk cache keyed by request, rate
limiting with an injectable clock, and retries of transient failures.

Every remote answer the research tools use goes through `HttpClient.get`, so caching, politeness
and error messages are decided in one place.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import tempfile
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import KW_ONLY, dataclass, field
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import httpx
from tenacity import Retrying, retry_if_exception, stop_after_attempt, wait_exponential

from autoresearch_mcp import __version__
from autoresearch_mcp.errors import ExternalError

log = logging.getLogger(__name__)

USER_AGENT = (
    f"autoresearch-mcp/{__version__} (research assistant for code optimization; "
    f"python-httpx/{httpx.__version__})"
)
# Request headers that change the answer: the token (what it may see, its rate limit) and the format.
_VARYING_HEADERS = frozenset({"authorization", "accept"})
# Response headers worth keeping in the cache: the callers read rate limits and redirects.
_KEPT_HEADERS = ("content-type", "retry-after", "x-ratelimit-remaining", "x-ratelimit-reset", "etag")


class Clock(Protocol):
    """Time as the HTTP layer sees it; tests pass a fake that never really sleeps."""

    def now(self) -> float:
        """Wall-clock seconds since the epoch (cache ages)."""
        ...

    def monotonic(self) -> float:
        """Seconds for measuring intervals (request spacing)."""
        ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


SYSTEM_CLOCK = SystemClock()


class RateLimiter:
    """At most one request every `interval` seconds, shared by every thread that holds it."""

    def __init__(self, interval: float, clock: Clock = SYSTEM_CLOCK) -> None:
        self.interval = interval
        self.clock = clock
        self._next_slot = -math.inf
        self._lock = threading.Lock()

    def acquire(self) -> None:
        # A slot is reserved under the lock and waited for outside it, so concurrent callers queue
        # up one interval apart instead of all waking at the same moment.
        with self._lock:
            now = self.clock.monotonic()
            slot = max(now, self._next_slot)
            self._next_slot = slot + self.interval
        if slot > now:
            self.clock.sleep(slot - now)


class DiskCache:
    """JSON documents on disk, one file per key, written atomically."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _path(self, key: str) -> Path:
        digest = hashlib.sha256(key.encode()).hexdigest()
        return self.root / digest[:2] / f"{digest}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            doc = json.loads(self._path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return doc if isinstance(doc, dict) and doc.get("key") == key else None

    def put(self, key: str, doc: Mapping[str, Any]) -> None:
        path = self._path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    json.dump({**doc, "key": key}, fh)
                os.replace(tmp, path)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as exc:  # a cache that cannot be written only costs speed
            log.warning("cannot write cache entry %s: %s", path, exc)


@dataclass(frozen=True)
class Response:
    """An answer, from the network or from the disk cache."""

    url: str
    status: int
    headers: dict[str, str]
    text: str
    fetched_at: float
    from_cache: bool = False
    stale: bool = False  # served from the cache because the network failed

    def json(self) -> Any:
        return json.loads(self.text)


class Throttled(ExternalError):
    """The service asked us to slow down (429, or 503 with Retry-After)."""


class RetryableStatus(Exception):
    """A 5xx answer worth another attempt."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


def _is_transient(exc: BaseException) -> bool:
    return isinstance(exc, httpx.TimeoutException | RetryableStatus)


def retry_after_seconds(value: str | None, now: float) -> float | None:
    """Retry-After as seconds: it is either a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - now)
    except (TypeError, ValueError):
        return None


def service_name(url: str) -> str:
    return urlsplit(url).netloc or url


@dataclass(eq=False)
class HttpClient:
    """GET with a disk cache, rate limiting and retries; one instance serves all research tools."""

    cache: DiskCache
    _: KW_ONLY
    clock: Clock = SYSTEM_CLOCK
    user_agent: str = USER_AGENT
    attempts: int = 3
    backoff_s: float = 1.0
    _client: httpx.Client | None = field(default=None, init=False, repr=False)
    _client_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def _http(self) -> httpx.Client:
        # Created on first use: a cached answer never pays for TLS setup.
        with self._client_lock:
            if self._client is None:
                self._client = httpx.Client(
                    headers={"User-Agent": self.user_agent}, follow_redirects=True
                )
            return self._client

    def get(
        self,
        url: str,
        *,
        params: Mapping[str, str | int] | None = None,
        headers: Mapping[str, str] | None = None,
        ttl_s: float,
        limiter: RateLimiter | None = None,
        timeout_s: float = 30.0,
        retry: bool = True,
        cache_statuses: Collection[int] = (200,),
    ) -> Response:
        """The answer to GET `url`: from the cache when younger than `ttl_s`, else from the network.

        Timeouts and 5xx answers are retried with exponential backoff. 429 and 503 with a
        Retry-After raise at once, saying how long to wait. When the network fails, a cached answer
        of any age is served (`stale`); without one, ExternalError says the service is unreachable.
        Answers whose status is not in `cache_statuses` are returned but not cached.
        """
        request = httpx.Request("GET", url, params=dict(params or {}))
        key = cache_key(str(request.url), headers or {})
        cached = self.cache.get(key)
        if cached is not None and self.clock.now() - float(cached["fetched_at"]) < ttl_s:
            return _from_doc(cached, stale=False)
        service = service_name(url)
        try:
            answer = self._fetch(str(request.url), dict(headers or {}), limiter, timeout_s, retry)
        except Throttled:
            if cached is not None:
                return _from_doc(cached, stale=True)
            raise
        except RetryableStatus as exc:
            if cached is not None:
                return _from_doc(cached, stale=True)
            status = exc.response.status_code
            raise ExternalError(
                f"{service} answered HTTP {status} to {self.attempts} attempts: the service is having "
                "trouble. Try again in a few minutes."
            ) from exc
        except httpx.RequestError as exc:
            if cached is not None:
                log.info("network failed for %s (%s); serving the cached answer", request.url, exc)
                return _from_doc(cached, stale=True)
            raise _unreachable(service, exc) from exc

        response = Response(
            url=str(answer.url),
            status=answer.status_code,
            headers={h: answer.headers[h] for h in _KEPT_HEADERS if h in answer.headers},
            text=answer.text,
            fetched_at=self.clock.now(),
        )
        if response.status in cache_statuses:
            self.cache.put(key, _to_doc(response))
        return response

    def _fetch(self, url: str, headers: dict[str, str], limiter: RateLimiter | None, timeout_s: float,
               retry: bool) -> httpx.Response:
        """The network's answer to GET `url`, each attempt rate limited; with `retry`, timeouts and 5xx answers
        are tried again with exponential backoff. A throttling answer raises Throttled at once."""

        def attempt() -> httpx.Response:
            if limiter is not None:
                limiter.acquire()
            answer = self._http().get(url, headers=headers, timeout=timeout_s)
            status = answer.status_code
            if status == 429 or (status == 503 and "retry-after" in answer.headers):
                raise _too_many(answer, self.clock.now())
            if status >= 500 and retry:
                raise RetryableStatus(answer)
            return answer

        retrying = Retrying(
            stop=stop_after_attempt(self.attempts if retry else 1),
            wait=wait_exponential(multiplier=self.backoff_s, max=30),
            retry=retry_if_exception(_is_transient),
            sleep=self.clock.sleep,
            reraise=True,
        )
        return retrying(attempt)


def cache_key(url: str, headers: Mapping[str, str]) -> str:
    """The cache key of GET `url`: the headers that change the answer (who asks, in which format)
    count too, as a short hash so that no token is written to disk."""
    varying = sorted((k.lower(), v) for k, v in headers.items() if k.lower() in _VARYING_HEADERS)
    if not varying:
        return f"GET {url}"
    digest = hashlib.sha256(json.dumps(varying).encode()).hexdigest()[:16]
    return f"GET {url} [{digest}]"


def _from_doc(doc: Mapping[str, Any], *, stale: bool) -> Response:
    return Response(
        url=str(doc["url"]),
        status=int(doc["status"]),
        headers=dict(doc.get("headers") or {}),
        text=str(doc["text"]),
        fetched_at=float(doc["fetched_at"]),
        from_cache=True,
        stale=stale,
    )


def _to_doc(response: Response) -> dict[str, Any]:
    """What the cache keeps of an answer (`_from_doc` reads it back)."""
    return {
        "url": response.url,
        "status": response.status,
        "headers": response.headers,
        "text": response.text,
        "fetched_at": response.fetched_at,
    }


def _unreachable(service: str, exc: httpx.RequestError) -> ExternalError:
    """The error for a request that got no usable answer and has none in the cache."""
    if isinstance(exc, httpx.TimeoutException):
        kind = "timed out"
    elif isinstance(exc, httpx.TransportError):
        kind = "is unreachable"
    else:  # too many redirects, an undecodable body
        kind = "sent an unusable answer"
    return ExternalError(
        f"{service} {kind} ({type(exc).__name__}: {exc}). Check the network connection "
        "(is this machine offline or behind a proxy?). Requests answered before are served "
        "from the cache even offline; this one has not been made before."
    )


def _too_many(answer: httpx.Response, now: float) -> Throttled:
    service = service_name(str(answer.url))
    wait = retry_after_seconds(answer.headers.get("retry-after"), now)
    when = f"wait {math.ceil(wait)} s (Retry-After)" if wait is not None else "wait a minute"
    return Throttled(
        f"{service} is throttling requests (HTTP {answer.status_code}): {when} before trying again. "
        "Cached answers are still served meanwhile."
    )


@functools.cache
def shared_client(cache_dir: Path) -> HttpClient:
    """The process's client for one cache directory: connections and the cache are shared."""
    return HttpClient(DiskCache(cache_dir / "http"))
