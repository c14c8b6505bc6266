"""The dataset registry and its loaders.

Every dataset the course uses is listed in ``datasets/registry.json`` with its URL,
sha256, size and license. ``dataset_path(name)`` finds a verified copy, looking in order:

1. the offline mirror directory named by ``COURSE_DATA_DIR`` (tests and CI use this);
2. the download cache (``COURSE_CACHE_DIR``, default ``~/.cache/sequence-models``);
3. the public URL, downloaded with a progress bar and checked against the sha256
   (skipped when ``COURSE_OFFLINE=1``).

When none works it raises ``DatasetUnavailable`` with a message that names the URL and
the exact path where a copy of the file can be placed by hand.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
from pathlib import Path

__all__ = ["DatasetUnavailable", "registry", "entry", "cache_dir", "sha256_of", "dataset_path", "load_text",
           "downloads_off", "reachable"]


REGISTRY_FILE = Path(__file__).resolve().parent.parent / "datasets" / "registry.json"
DEFAULT_CACHE = Path.home() / ".cache" / "sequence-models"
DOWNLOAD_TIMEOUT_S = 30


class DatasetUnavailable(RuntimeError):
    """A dataset could be found neither in the mirror, the cache nor online."""


def registry() -> dict[str, dict]:
    """Name → entry (filename, url, sha256, bytes, license, description)."""
    with open(REGISTRY_FILE, encoding="utf-8") as f:
        return json.load(f)


def entry(name: str) -> dict:
    """The registry entry of `name`, or a KeyError that lists the known names."""
    known = registry()
    if name not in known:
        raise KeyError(f"unknown dataset {name!r}; the registry has: {', '.join(sorted(known))}")
    return known[name]


def cache_dir() -> Path:
    return Path(os.environ.get("COURSE_CACHE_DIR") or DEFAULT_CACHE)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _verified(path: Path, expected_sha256: str) -> bool:
    return path.is_file() and sha256_of(path) == expected_sha256


def dataset_path(name: str) -> Path:
    """Path to a checksum-verified local copy of dataset `name` (see module doc)."""
    info = entry(name)
    problems = []

    mirror = os.environ.get("COURSE_DATA_DIR")
    if mirror:
        candidate = Path(mirror) / info["filename"]
        if _verified(candidate, info["sha256"]):
            return candidate
        problems.append(
            f"COURSE_DATA_DIR={mirror}: {candidate.name} "
            + ("has the wrong sha256" if candidate.exists() else "is not there")
        )

    cached = cache_dir() / info["filename"]
    if _verified(cached, info["sha256"]):
        return cached

    if downloads_off():
        problems.append("downloads are off (COURSE_OFFLINE=1)")
    else:
        try:
            return _download(info, cached)
        except Exception as exc:  # network errors come in many types
            problems.append(f"download failed: {type(exc).__name__}: {exc}")

    raise DatasetUnavailable(
        f"Dataset {name!r} is not available ({'; '.join(problems)}).\n"
        f"Fix: download {info['url']}\n"
        f"     and save it as {cached}\n"
        f"     (expected sha256 {info['sha256']}, {info['bytes']:,} bytes),\n"
        f"  or point COURSE_DATA_DIR at a folder that holds {info['filename']}."
    )


def downloads_off() -> bool:
    """True when COURSE_OFFLINE is set (1, true or yes): grading and the course's tests never download."""
    return os.environ.get("COURSE_OFFLINE", "").strip().lower() in {"1", "true", "yes"}


def reachable(host: str, port: int = 443, timeout_s: float = 3.0) -> bool:
    """Whether a connection to host:port opens within timeout_s (always False when downloads are off).
    A notebook asks this before a download that would otherwise retry for half a minute offline."""
    if downloads_off():
        return False
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _download(info: dict, target: Path) -> Path:
    import pooch

    target.parent.mkdir(parents=True, exist_ok=True)
    path = pooch.retrieve(
        url=info["url"],
        known_hash=f"sha256:{info['sha256']}",
        fname=target.name,
        path=target.parent,
        downloader=pooch.HTTPDownloader(progressbar=True, timeout=DOWNLOAD_TIMEOUT_S),
    )
    return Path(path)


# What the notebooks that train on Tiny Shakespeare use when it cannot be had (offline, no copy):
# a few of Shakespeare's lines, repeated. It has every character of the "ROMEO:" prompt the samples
# start from.
SHAKESPEARE_SAMPLE = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
                      "First Citizen:\nYou are all resolved rather to die than to famish?\n\nAll:\nResolved. resolved.\n\n"
                      "ROMEO:\nIs the day so young?\n\n") * 40


def load_text(name: str, fallback: str | None = None) -> str:
    """The whole dataset `name` as one UTF-8 string.

    With `fallback`, an unavailable dataset prints the reason and returns `fallback`
    instead of raising, so an experiment still runs (smaller) without the data.
    """
    try:
        path = dataset_path(name)
    except DatasetUnavailable as exc:
        if fallback is None:
            raise
        print(f"{exc}\nUsing the notebook's small built-in text instead.")
        return fallback
    return path.read_text(encoding="utf-8")
