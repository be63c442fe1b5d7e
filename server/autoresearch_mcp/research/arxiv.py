"""Searching arXiv through its API (https://info.arxiv.org/help/api/user-manual.html).

Free text becomes a title-or-abstract query; fielded syntax passes through untouched. The Atom
answer is parsed into `Paper` models. arXiv asks for at most one request every 3 seconds, so every
request to arXiv in the process shares `LIMITER`.
"""

from __future__ import annotations

import calendar
import datetime as dt
import functools
import logging
import re
from dataclasses import dataclass
from xml.etree.ElementTree import Element

from defusedxml import ElementTree

from autoresearch_mcp.errors import ExternalError, InputError
from autoresearch_mcp.models import ArxivSort, Paper, SearchArxivResult
from autoresearch_mcp.research.codelinks import CodeLinks
from autoresearch_mcp.research.http import HttpClient, RateLimiter, Response, shared_client
from autoresearch_mcp.settings import Settings

log = logging.getLogger(__name__)

LIMITER = RateLimiter(3.0)
MAX_RESULTS = 50
_SEARCH_TTL_S = 12 * 3600

_NS = {
    "atom": "http://www.w3.org/2005/Atom",
    "opensearch": "http://a9.com/-/spec/opensearch/1.1/",
    "arxiv": "http://arxiv.org/schemas/atom",
}
_NEW_ID = r"\d{4}\.\d{4,5}"
_OLD_ID = r"[a-z]+(?:-[a-z]+)*(?:\.[A-Z]{2})?/\d{7}"
_ID_RE = re.compile(rf"(?P<id>{_NEW_ID}|{_OLD_ID})(?:v(?P<version>\d+))?")
_URL_ID_RE = re.compile(r"^(?:https?://)?(?:www\.|export\.)?arxiv\.org/(?:abs|pdf|html)/(?P<rest>.+)$")
_FIELDED_RE = re.compile(
    r"\b(?:ti|au|abs|co|jr|cat|rn|id|all|submittedDate|lastUpdatedDate):|\b(?:AND|OR|ANDNOT)\b|[()]"
)
_CATEGORY_RE = re.compile(r"^[a-z]+(?:-[a-z]+)*(?:\.[A-Za-z-]+)?$")
_DATE_RE = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?$")


@dataclass(frozen=True)
class ArxivId:
    id: str
    version: int | None

    def __str__(self) -> str:
        return f"{self.id}v{self.version}" if self.version else self.id


def parse_arxiv_id(text: str) -> ArxivId:
    """`2401.12345`, `2401.12345v2`, `arXiv:2401.12345`, `hep-th/9901001` or an arxiv.org URL."""
    raw = text.strip()
    candidate = re.sub(r"^arxiv:", "", raw, flags=re.IGNORECASE)
    if url := _URL_ID_RE.match(candidate):
        candidate = url["rest"].rstrip("/").removesuffix(".pdf")
    match = _ID_RE.fullmatch(candidate)
    if not match:
        raise InputError(
            f"{text!r} is not an arXiv identifier. Expected a form like 2401.12345, 2401.12345v2, "
            "hep-th/9901001 or https://arxiv.org/abs/2401.12345 (search_arxiv returns `arxiv_id`)."
        )
    version = match["version"]
    return ArxivId(match["id"], int(version) if version else None)


def build_query(
    query: str,
    categories: list[str] | None = None,
    date_from: str | None = None,
    date_to: str | None = None,
) -> str:
    """The arXiv `search_query` for a request: free text, categories and a submitted-date range."""
    text = " ".join(query.split())
    if not text:
        raise InputError(
            "The query is empty. Pass words to find in titles and abstracts (e.g. 'quantized matmul "
            "cpu'), or arXiv syntax such as 'cat:cs.PF AND ti:inference'."
        )
    parts = [text if _FIELDED_RE.search(text) else _title_or_abstract(text)]
    if categories:
        bad = [c for c in categories if not _CATEGORY_RE.match(c.strip())]
        if bad:
            raise InputError(
                f"Unknown category syntax {bad}: expected arXiv categories such as cs.LG, cs.PF, "
                "cs.DC, math.NA or hep-th."
            )
        parts.append("(" + " OR ".join(f"cat:{c.strip()}" for c in categories) + ")")
    if date_from or date_to:
        first = _parse_date(date_from, "date_from", end=False) if date_from else dt.date(1991, 1, 1)
        last = _parse_date(date_to, "date_to", end=True) if date_to else dt.datetime.now(dt.UTC).date()
        if first > last:
            raise InputError(f"date_from ({first}) is after date_to ({last}): swap them.")
        parts.append(f"submittedDate:[{first:%Y%m%d}0000 TO {last:%Y%m%d}2359]")
    if len(parts) == 1:
        return parts[0]
    return " AND ".join([f"({parts[0]})", *parts[1:]])


def _title_or_abstract(text: str) -> str:
    terms = []
    for phrase, word in re.findall(r'"([^"]+)"|(\S+)', text):
        term = f'"{phrase.strip()}"' if phrase.strip() else re.sub(r'[()":]', "", word)
        if term:
            terms.append(f"(ti:{term} OR abs:{term})")
    if not terms:
        raise InputError(f"The query {text!r} has no searchable words.")
    return " AND ".join(terms)


def _parse_date(value: str, name: str, *, end: bool) -> dt.date:
    match = _DATE_RE.match(value.strip())
    if not match:
        raise InputError(f"{name}={value!r}: expected YYYY-MM-DD (or YYYY-MM, or YYYY).")
    year, month, day = int(match[1]), int(match[2] or (12 if end else 1)), match[3]
    try:
        last_day = calendar.monthrange(year, month)[1]
        return dt.date(year, month, int(day) if day else (last_day if end else 1))
    except ValueError as exc:
        raise InputError(f"{name}={value!r} is not a calendar date ({exc}).") from exc


def _text(element: Element | None) -> str:
    return " ".join((element.text or "").split()) if element is not None else ""


def parse_feed(xml: str, html_base: str) -> tuple[int, list[Paper]]:
    """(totalResults, papers) of an arXiv Atom feed; an error entry raises InputError."""
    try:
        root = ElementTree.fromstring(xml)
    except ElementTree.ParseError as exc:
        raise ExternalError(f"arXiv answered with malformed XML ({exc}); try again later.") from exc
    papers = []
    for entry in root.findall("atom:entry", _NS):
        entry_id = _text(entry.find("atom:id", _NS))
        if "/api/errors" in entry_id:
            raise InputError(f"arXiv rejected the request: {_text(entry.find('atom:summary', _NS))}")
        if not _text(entry.find("atom:title", _NS)):
            continue  # an id_list entry for a paper that does not exist
        try:
            papers.append(_paper(entry, html_base))
        except InputError:
            log.warning("skipping an arXiv entry with an unexpected id: %s", entry_id)
    total = _text(root.find("opensearch:totalResults", _NS))
    return (int(total) if total.isdigit() else len(papers)), papers


def _paper(entry: Element, html_base: str) -> Paper:
    parsed = parse_arxiv_id(_text(entry.find("atom:id", _NS)))
    links = {
        (link.get("title") or link.get("rel") or ""): link.get("href", "")
        for link in entry.findall("atom:link", _NS)
    }
    primary = entry.find("arxiv:primary_category", _NS)
    return Paper(
        arxiv_id=parsed.id,
        version=parsed.version,
        title=_text(entry.find("atom:title", _NS)),
        authors=[_text(a.find("atom:name", _NS)) for a in entry.findall("atom:author", _NS)],
        summary=_text(entry.find("atom:summary", _NS)),
        published=_text(entry.find("atom:published", _NS)),
        updated=_text(entry.find("atom:updated", _NS)) or None,
        categories=[c.get("term", "") for c in entry.findall("atom:category", _NS) if c.get("term")],
        primary_category=primary.get("term") if primary is not None else None,
        abs_url=links.get("alternate") or f"https://arxiv.org/abs/{parsed}",
        pdf_url=links.get("pdf") or None,
        html_url=f"{html_base}/{parsed}",
        comment=_text(entry.find("arxiv:comment", _NS)) or None,
        journal_ref=_text(entry.find("arxiv:journal_ref", _NS)) or None,
        doi=_text(entry.find("arxiv:doi", _NS)) or None,
    )


class ArxivClient:
    def __init__(
        self,
        http: HttpClient,
        api_url: str,
        html_base: str,
        code_links: CodeLinks | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self.http = http
        self.api_url = api_url
        self.html_base = html_base.rstrip("/")
        self.code_links = code_links
        self.limiter = limiter or LIMITER

    def _get(self, params: dict[str, str | int]) -> Response:
        response = self.http.get(self.api_url, params=params, ttl_s=_SEARCH_TTL_S, limiter=self.limiter)
        if response.status == 400:
            parse_feed(response.text, self.html_base)  # raises with arXiv's own explanation
        if response.status != 200:
            raise ExternalError(f"arXiv answered HTTP {response.status} to {response.url}; try again later.")
        return response

    def search(
        self,
        query: str,
        max_results: int = 10,
        categories: list[str] | None = None,
        sort_by: ArxivSort = "relevance",
        date_from: str | None = None,
        date_to: str | None = None,
        start: int = 0,
    ) -> SearchArxivResult:
        if not 1 <= max_results <= MAX_RESULTS:
            raise InputError(f"max_results={max_results}: expected 1 to {MAX_RESULTS}; page with `start`.")
        if start < 0:
            raise InputError(f"start={start}: expected 0 or a `next_start` from a previous search.")
        search_query = build_query(query, categories, date_from, date_to)
        response = self._get(
            {
                "search_query": search_query,
                "start": start,
                "max_results": max_results,
                "sortBy": sort_by,
                "sortOrder": "descending",
            }
        )
        total, papers = parse_feed(response.text, self.html_base)
        if self.code_links is not None:
            found = self.code_links.lookup(p.arxiv_id for p in papers)
            papers = [p.model_copy(update={"code_url": found.get(p.arxiv_id)}) for p in papers]
        end = start + len(papers)
        notes = []
        if response.stale:
            notes.append("arXiv is unreachable: this is the cached answer from an earlier search.")
        return SearchArxivResult(
            papers=papers,
            total_results=total,
            start=start,
            next_start=end if papers and end < total else None,
            query=search_query,
            from_cache=response.from_cache,
            notes=notes,
        )

    def html_page(self, arxiv_id: ArxivId) -> Response:
        """The paper's HTML version (LaTeXML) as arXiv answers it, 404 included; not cached here,
        as the reader caches the text it extracts."""
        return self.http.get(
            f"{self.html_base}/{arxiv_id}", ttl_s=0, limiter=self.limiter, cache_statuses=()
        )

    def lookup(self, arxiv_id: ArxivId) -> Paper | None:
        """The paper's metadata (title, abstract, links), or None when arXiv does not know it."""
        _total, papers = parse_feed(self._get({"id_list": str(arxiv_id)}).text, self.html_base)
        return papers[0] if papers else None


@functools.cache
def client_for(settings: Settings) -> ArxivClient:
    """The process's arXiv client for these settings (shared connections, cache and rate limit)."""
    http = shared_client(settings.cache_dir)
    return ArxivClient(
        http, settings.arxiv_url, settings.arxiv_html_url, CodeLinks(http, settings.hf_api_url)
    )
