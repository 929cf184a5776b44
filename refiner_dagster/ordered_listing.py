"""Listing a watched folder in key order, resumed after a key.

S3 returns object keys in UTF-8 byte order, which is Python's ``str`` order, and
``ListObjectsV2`` takes a ``StartAfter`` key: a listing resumed after the last key a
sensor saw reads only the pages holding newer names. :func:`iter_files_after` does the
same on local disk with a sorted walk that sorts a folder ``d`` as ``d/`` (so the walk
visits full relative paths in the order S3 would) and skips every folder whose names
all sort at or before the key, so date-partitioned folders (``2024/06/01/...``) that
can no longer change are never opened. Other filesystems fall back to a full sorted
listing filtered by the key.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> for name in ("2024/01/a.parquet", "2024/02/b.parquet", "2024/03/c.parquet"):
    ...     os.makedirs(os.path.dirname(f"{root}/{name}"), exist_ok=True)
    ...     open(f"{root}/{name}", "wb").close()
    >>> stats = ListingStats()
    >>> [p for p, _ in iter_files_after(root, "2024/02/b.parquet", stats=stats)]
    ['2024/03/c.parquet']
    >>> stats.entries  # the root, 2024/, 02/ (it holds the key) and 03/; 01/ is never opened
    4
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ListingStats", "iter_files_after"]

_PAGE_SIZE = 1000


@dataclass
class ListingStats:
    """What a listing cost: folder entries visited (local) and LIST pages (object stores)."""

    entries: int = 0
    pages: int = 0


def _hidden(name: str) -> bool:
    return name.startswith(("_", "."))


def iter_files_after(
    url: str,
    after: str | None,
    *,
    storage_options: Mapping[str, Any] | None = None,
    stats: ListingStats | None = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Yield ``(relative path, info)`` for files under ``url`` whose path sorts after ``after``.

    Paths come in ascending ``str`` order, ``/``-separated and relative to ``url``;
    names (or folders) starting with ``_`` or ``.`` are skipped. ``info`` carries
    ``size`` and ``mtime`` (local) or ``size``, ``ETag`` and ``LastModified`` (S3), the
    fields the sensor's content versions are made from, plus ``path`` (the fsspec
    path). ``after=None`` lists everything. The generator lists lazily: stop iterating
    and no further page is read.
    """
    from fsspec.core import url_to_fs

    fs, root = url_to_fs(url, **dict(storage_options or {}))
    root = root.rstrip("/")
    stats = stats if stats is not None else ListingStats()
    protocols = {fs.protocol} if isinstance(fs.protocol, str) else set(fs.protocol)
    if "file" in protocols or "local" in protocols:
        if os.path.isdir(root):
            yield from _walk_local(root, "", after, stats)
    elif protocols & {"s3", "s3a"}:
        yield from _list_s3(fs, root, after, stats)
    else:
        yield from _list_any(fs, root, after, stats)


def _walk_local(
    folder: str, prefix: str, after: str | None, stats: ListingStats
) -> Iterator[tuple[str, dict[str, Any]]]:
    stats.entries += 1
    with os.scandir(folder) as scan:
        entries = [(e.name + "/" if e.is_dir() else e.name, e) for e in scan if not _hidden(e.name)]
    entries.sort(key=lambda pair: pair[0])
    for name, entry in entries:
        relpath = prefix + name
        if name.endswith("/"):
            # Every path below sorts before ``after`` unless ``after`` lies inside it.
            if after is not None and relpath < after and not after.startswith(relpath):
                continue
            yield from _walk_local(entry.path, relpath, after, stats)
        elif after is None or relpath > after:
            st = entry.stat()
            yield relpath, {"path": entry.path, "size": st.st_size, "mtime": st.st_mtime}


def _list_s3(fs: Any, root: str, after: str | None, stats: ListingStats):
    bucket, _, prefix = root.partition("/")
    key_prefix = prefix + "/" if prefix else ""
    request: dict[str, Any] = {"Bucket": bucket, "Prefix": key_prefix, "MaxKeys": _PAGE_SIZE}
    if after is not None:
        request["StartAfter"] = key_prefix + after
    while True:
        page = fs.call_s3("list_objects_v2", **request)
        stats.pages += 1
        for obj in page.get("Contents", []):
            relpath = obj["Key"][len(key_prefix) :]
            if not relpath or relpath.endswith("/") or any(map(_hidden, relpath.split("/"))):
                continue
            yield (
                relpath,
                {
                    "path": f"{bucket}/{obj['Key']}",
                    "size": obj.get("Size", 0),
                    "ETag": obj.get("ETag"),
                    "LastModified": obj.get("LastModified"),
                },
            )
        token = page.get("NextContinuationToken")
        if not page.get("IsTruncated") or not token:
            return
        request.pop("StartAfter", None)
        request["ContinuationToken"] = token


def _list_any(fs: Any, root: str, after: str | None, stats: ListingStats):
    fs.invalidate_cache(root)
    if not fs.exists(root):
        return
    stats.pages += 1
    found = []
    for path, info in fs.find(root, detail=True).items():
        relpath = path[len(root) :].lstrip("/") if path.startswith(root) else path
        if info.get("type") == "directory" or not relpath:
            continue
        if any(map(_hidden, relpath.split("/"))) or (after is not None and relpath <= after):
            continue
        found.append((relpath, {**info, "path": path}))
    found.sort(key=lambda pair: pair[0])
    yield from found
