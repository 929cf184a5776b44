"""Digest indexes: where an output's packed assets are, by content, for later outputs.

A ``BlobAssetConfig(dedupe="content")`` attempt records, when it closes, one Parquet file
``_refiner/digests/<shard>__<attempt>.parquet`` with a row per distinct asset it stored:
``size``, ``digest`` (the content digest it keyed on), ``path`` (the block, relative to
the output folder, or the full URL of a block of an earlier output it reused) and
``offset``. The digest's algorithm is the file's ``refiner.digest``
metadata: CRC32C for local outputs, SHA-256 for object stores (see :mod:`.dedupe`).

A later writer given ``dedupe_against=(earlier folder, ...)`` reads the indexes of the
earlier folder's kept attempts (those with a manifest under ``_refiner/attempts``): one
listing of each of the two folders, then the index files, once per process and folder
(:data:`CACHED_FOLDERS` folders stay loaded). An asset whose size and digest are in one
of them is not written again: its cell gets the earlier ``{path, offset, size}``.

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> out = DataFolder(tempfile.mkdtemp())
    >>> key = ("content", 5, b"\\x01\\x02\\x03\\x04")
    >>> ref = {"path": out.url_of("assets/00000__0123456789ab/image/block-00000.bin"),
    ...        "offset": 0, "size": 5}
    >>> write_digest_index(out, "00000__0123456789ab", "crc32c", [(key, ref)])
    >>> out.write_bytes("_refiner/attempts/00000__0123456789ab.json", b"{}")
    >>> earlier = EarlierDigests([out.url], None)
    >>> earlier.algorithm, earlier.find(key)[0]["offset"], earlier.has_size(5)
    ('crc32c', 0, True)
"""

from __future__ import annotations

import collections
import io
import threading
from collections.abc import Hashable, Iterable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ...errors import RefinerError
from ...io.datafile import DataFolder
from ...manifests._attempts import MANIFEST_DIR

DIGEST_DIR = "_refiner/digests"
ALGORITHM_KEY = b"refiner.digest"
CACHED_FOLDERS = 4
_SCHEMA = pa.schema(
    [
        ("size", pa.uint64()),
        ("digest", pa.binary()),
        ("path", pa.string()),
        ("offset", pa.uint64()),
    ]
)


def digest_index_path(attempt: str) -> str:
    return f"{DIGEST_DIR}/{attempt}.parquet"


def write_digest_index(
    folder: DataFolder,
    attempt: str,
    algorithm: str,
    stored: Iterable[tuple[Any, dict[str, Any]]],
) -> None:
    """Write the index of ``stored`` (``(content key, reference)`` pairs) for ``attempt``."""
    prefix = folder.url.rstrip("/") + "/"
    rows: dict[str, list[Any]] = {name: [] for name in _SCHEMA.names}
    for key, reference in stored:
        _, size, digest = key
        path = reference["path"]
        rows["size"].append(size)
        rows["digest"].append(digest)
        rows["path"].append(path[len(prefix) :] if path.startswith(prefix) else path)
        rows["offset"].append(reference["offset"])
    schema = _SCHEMA.with_metadata({ALGORITHM_KEY: algorithm.encode()})
    buffer = io.BytesIO()
    pq.write_table(pa.table(rows, schema=schema), buffer)
    folder.write_bytes(digest_index_path(attempt), buffer.getvalue())


class NoDigestIndex(RefinerError, ValueError):
    """An earlier folder given to ``dedupe_against`` has no digest index to match against."""


class _FolderDigests:
    """The merged digest index of one earlier folder's kept attempts."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None) -> None:
        folder = DataFolder(url, storage_options)
        self.url = folder.url
        kept = {name.removesuffix(".json") for name in folder.listdir(MANIFEST_DIR)}
        names = [n for n in folder.listdir(DIGEST_DIR) if n.removesuffix(".parquet") in kept]
        if not names:
            raise NoDigestIndex(
                f"dedupe_against: {self.url} has no digest index ({DIGEST_DIR}/ holds none for "
                "its kept attempts), so its assets cannot be matched by content. Digest indexes "
                "are written by BlobAssetConfig(dedupe='content'); rewrite that output with it, "
                "or leave the folder out of dedupe_against"
            )
        self.algorithm = ""
        self.sizes: set[int] = set()
        self.entries: dict[tuple[int, bytes], list[tuple[str, int]]] = {}
        for name in names:
            table = pq.read_table(io.BytesIO(folder.read_bytes(f"{DIGEST_DIR}/{name}")))
            algorithm = (table.schema.metadata or {}).get(ALGORITHM_KEY, b"").decode()
            if self.algorithm and algorithm != self.algorithm:
                raise ValueError(
                    f"dedupe_against: the digest indexes of {self.url} use both "
                    f"{self.algorithm} and {algorithm}; rewrite the output in one place"
                )
            self.algorithm = algorithm
            columns = table.to_pydict()
            for size, digest, path, offset in zip(
                columns["size"], columns["digest"], columns["path"], columns["offset"], strict=True
            ):
                self.entries.setdefault((size, digest), []).append((path, offset))
                self.sizes.add(size)
        self._folder = folder

    def references(self, size: int, digest: bytes) -> list[dict[str, Any]]:
        return [
            {"path": _url(self._folder, path), "offset": offset, "size": size}
            for path, offset in self.entries.get((size, digest), ())
        ]


def _url(folder: DataFolder, path: str) -> str:
    """A recorded path as a URL: relative ones are in ``folder``, others are kept."""
    return path if path.startswith("/") or "://" in path else folder.url_of(path)


_CACHE: collections.OrderedDict[str, _FolderDigests] = collections.OrderedDict()
_CACHE_LOCK = threading.Lock()


def _load(url: str, storage_options: dict[str, Any] | None) -> _FolderDigests:
    """The folder's index, loaded once per process (the last few folders stay cached)."""
    with _CACHE_LOCK:
        found = _CACHE.get(url)
        if found is not None:
            _CACHE.move_to_end(url)
            return found
    loaded = _FolderDigests(url, storage_options)
    with _CACHE_LOCK:
        _CACHE[url] = loaded
        while len(_CACHE) > CACHED_FOLDERS:
            _CACHE.popitem(last=False)
    return loaded


class EarlierDigests:
    """The digest indexes of the folders a writer deduplicates against."""

    def __init__(self, urls: Iterable[str], storage_options: dict[str, Any] | None) -> None:
        self.folders = [_load(url, storage_options) for url in urls]
        algorithms = {f.algorithm for f in self.folders}
        if len(algorithms) > 1:
            named = ", ".join(f"{f.url} ({f.algorithm})" for f in self.folders)
            raise ValueError(
                f"dedupe_against: the folders key their assets on different digests: {named}. "
                "Deduplicate against folders written to the same kind of storage"
            )
        self.algorithm = algorithms.pop() if algorithms else ""

    def has_size(self, size: int) -> bool:
        return any(size in f.sizes for f in self.folders)

    def find(self, key: Hashable | None) -> list[dict[str, Any]]:
        """Earlier references of the asset of content ``key`` (none for other keys)."""
        if not isinstance(key, tuple) or len(key) != 3 or key[0] != "content":
            return []
        _, size, digest = key
        return [ref for f in self.folders for ref in f.references(size, digest)]
