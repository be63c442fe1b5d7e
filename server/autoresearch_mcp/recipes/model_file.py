"""The model file a recipe's benchmark runs (a GGUF for llama.cpp): found, or downloaded once.

Order: the environment variable AUTORESEARCH_MODEL, then `model` in the session config, then the
cached download of `model_url` (an http(s) URL, or `hf:owner/name/path/file.gguf` for a file of a
Hugging Face repository). The path reaches build, bench and checks as AUTORESEARCH_MODEL.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from filelock import FileLock

from autoresearch_mcp.errors import ExternalError, InputError, StateError
from autoresearch_mcp.settings import Settings

ENV = "AUTORESEARCH_MODEL"
GGUF_MAGIC = b"GGUF"
DOWNLOAD_TIMEOUT_S = 60.0


def resolve(
    model: str | None, model_url: str | None, settings: Settings, repo_root: Path,
    env: Mapping[str, str] = os.environ,
) -> Path | None:
    """The model's path, downloading `model_url` into the cache the first time; None if none is set."""
    if env.get(ENV):
        return _checked(Path(env[ENV]).expanduser(), f"the environment variable {ENV}")
    if model:
        path = Path(model).expanduser()
        return _checked(path if path.is_absolute() else repo_root / path, "`model` in .autoresearch/config.json")
    if model_url:
        return download(model_url, settings)
    return None


def _checked(path: Path, origin: str) -> Path:
    if not path.is_file():
        raise StateError(f"the model file {path} (from {origin}) does not exist; fix the path")
    with open(path, "rb") as fh:
        if fh.read(4) != GGUF_MAGIC:
            raise StateError(f"{path} (from {origin}) is not a GGUF file (it does not start with 'GGUF')")
    return path.resolve()


def url_of(model_url: str, settings: Settings) -> str:
    """A download URL for `model_url`; `hf:owner/name/file` becomes the file's resolve URL."""
    if model_url.startswith("hf:"):
        parts = model_url[3:].strip("/").split("/")
        if len(parts) < 3:
            raise InputError(f"model_url {model_url!r}: a Hugging Face file is hf:owner/name/path/file.gguf")
        site = settings.hf_api_url.removesuffix("/api")
        return f"{site}/{parts[0]}/{parts[1]}/resolve/main/{'/'.join(parts[2:])}"
    if urlsplit(model_url).scheme not in ("http", "https"):
        raise InputError(f"model_url {model_url!r} must be an http(s) URL or hf:owner/name/path/file.gguf")
    return model_url


def download(model_url: str, settings: Settings) -> Path:
    """Download once into the cache (a lock keeps two sessions from fetching the same file)."""
    url = url_of(model_url, settings)
    name = Path(urlsplit(url).path).name or "model.gguf"
    folder = settings.cache_dir / "models" / hashlib.sha256(url.encode()).hexdigest()[:16]
    dest = folder / name
    if dest.is_file():
        return dest
    folder.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder / ".lock")):
        if dest.is_file():
            return dest
        part = folder / (name + ".part")
        try:
            with httpx.stream("GET", url, follow_redirects=True, timeout=DOWNLOAD_TIMEOUT_S) as answer:
                if answer.status_code != 200:
                    raise ExternalError(f"downloading the model {url} failed: HTTP {answer.status_code}; check "
                                        "model_url, or download it yourself and set `model` to its path")
                with open(part, "wb") as fh:
                    for chunk in answer.iter_bytes(1 << 20):
                        fh.write(chunk)
        except httpx.HTTPError as exc:
            part.unlink(missing_ok=True)
            raise ExternalError(f"downloading the model {url} failed ({exc}); check the network and "
                                "model_url, or download it yourself and set `model` to its path") from exc
        with open(part, "rb") as fh:
            if fh.read(4) != GGUF_MAGIC:
                part.unlink()
                raise ExternalError(f"{url} did not answer a GGUF file (it does not start with 'GGUF'); "
                                    "check model_url")
        os.replace(part, dest)
    return dest
