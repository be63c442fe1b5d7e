"""Settings read from the environment, with the defaults of DESIGN.md."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import platformdirs


@dataclass(frozen=True)
class Settings:
    arxiv_url: str
    github_api_url: str
    hf_api_url: str
    cache_dir: Path
    github_token: str | None
    arxiv_html_url: str = "https://arxiv.org/html"

    @classmethod
    def from_env(cls) -> Settings:
        env = os.environ
        cache = env.get("AUTORESEARCH_CACHE_DIR") or platformdirs.user_cache_dir("autoresearch-mcp")
        return cls(
            arxiv_url=env.get("AUTORESEARCH_ARXIV_URL", "https://export.arxiv.org/api/query"),
            github_api_url=env.get("AUTORESEARCH_GITHUB_API_URL", "https://api.github.com").rstrip("/"),
            hf_api_url=env.get("AUTORESEARCH_HF_API_URL", "https://huggingface.co/api").rstrip("/"),
            cache_dir=Path(cache).expanduser(),
            github_token=env.get("GITHUB_TOKEN") or None,
            arxiv_html_url=env.get("AUTORESEARCH_ARXIV_HTML_URL", "https://arxiv.org/html").rstrip("/"),
        )
