"""Atomic file writes: a reader never sees a half-written file (write a temp file, then rename)."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


class DataError(ValueError):
    """Bad input data (a missing, malformed or stale file); the message names the file, and the line
    or field where it can. `python -m flows run` exits 2 on it, as on invalid parameters (a usage error:
    nothing ran)."""


def one_line(err: BaseException, limit: int = 200) -> str:
    """A library's error message on one line, cut at `limit` characters: what a DataError quotes
    after the file's name (torch's and pickle's messages run over several lines)."""
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= limit else text[: limit - 1] + "…"


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path`; rename it onto `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        tmp_path.unlink(missing_ok=True)


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside `path`; it replaces `path` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            shutil.rmtree(old, ignore_errors=True)
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_json(path: str | os.PathLike, obj: Any, sort_keys: bool = True) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=sort_keys) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"{path}: line {err.lineno}: not valid JSON ({err.msg})") from err
    except UnicodeDecodeError as err:  # binary bytes (an image, a pickle) where JSON text belongs
        raise DataError(f"{path}: not UTF-8 JSON text (byte {err.start}: {err.reason})") from err


def sha256_file(path: str | os.PathLike) -> str:
    """Hex sha256 of a file, read in 1 MiB blocks (pinned inputs: texture slides, corpora)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def json_digest(obj: Any) -> str:
    """16 hex digits of the sha256 of `obj` as canonical JSON: a fingerprint of a configuration."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


CACHE_MIN_BYTES = 16 << 20


def files_digest(paths, root: str | os.PathLike, cache: str | os.PathLike | None = None) -> str:
    """sha256 over the contents of `paths` (files, or folders taken recursively, in sorted order),
    each file named by its path relative to `root`. A path that does not exist is an error: a run
    whose inputs are missing must not get a version. With `cache` (a JSON file), each file's own
    digest is remembered by (path, size, mtime), so multi-GB token shards are read once, not on
    every run (DVC keeps the same kind of state for the same reason). Files under CACHE_MIN_BYTES are
    always read: cheap to hash, and a same-size rewrite within the filesystem's timestamp
    granularity (a few ms) would fool the stamp."""
    root = Path(root)
    files: list[Path] = []
    for path in map(Path, paths):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*") if p.is_file()]
        else:
            raise FileNotFoundError(f"{path}: input missing (no such file or folder)")
    known: dict[str, Any] = {}
    if cache is not None and Path(cache).is_file():
        try:
            known = json.loads(Path(cache).read_text())
        except json.JSONDecodeError:
            known = {}  # a cache is only a shortcut: a damaged one is rebuilt
    digest = hashlib.sha256()
    changed = False
    for f in sorted(files):
        stat = f.stat()
        key = str(f.resolve())
        stamp = [stat.st_size, stat.st_mtime_ns]
        entry: list[Any] | None = known.get(key) if stat.st_size >= CACHE_MIN_BYTES else None
        if entry is None or entry[:2] != stamp:
            entry = stamp + [sha256_file(f)]
            if stat.st_size >= CACHE_MIN_BYTES:
                known[key] = entry
                changed = True
        digest.update(str(f.relative_to(root) if f.is_relative_to(root) else f).encode())
        digest.update(entry[2].encode())
    if cache is not None and changed:
        write_json(cache, known)
    return digest.hexdigest()[:16]
