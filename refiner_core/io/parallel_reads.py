"""Reads that wait on the store, run concurrently: file sizes, table files, any ordered map.

An audit of a large output spends its time waiting: a ``HEAD`` per block, a few
requests per table file. These helpers put those waits in a bounded thread pool
(fsspec filesystems are safe to share between threads) and hand results back in input
order, holding at most ``2 * max_workers`` results ahead of the consumer.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "block.bin")
    >>> _ = open(path, "wb").write(b"abc")
    >>> file_sizes([path, os.path.join(folder, "gone.bin")]) == {
    ...     path: 3, os.path.join(folder, "gone.bin"): None}
    True
    >>> list(map_in_order(lambda n: n * n, range(5), max_workers=2))
    [0, 1, 4, 9, 16]
"""

from __future__ import annotations

import collections
import io
import json
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import IO, Any, TypeVar

from .datafile import is_s3, resolve

# Threads of an audit's reads: enough to hide tens of milliseconds per request.
DEFAULT_READ_THREADS = 16
# botocore's default connection pool: an s3fs client runs at most this many requests at once.
S3_DEFAULT_CONNECTIONS = 10
# On S3 a table file is first asked for as its last WHOLE_READ_BYTES: one GET, no HEAD,
# and the whole file when it is smaller; a bigger one is then read through a file object.
WHOLE_READ_BYTES = 1024 * 1024

T = TypeVar("T")
R = TypeVar("R")


def pooled_options(
    url: str, storage_options: dict[str, Any] | None, connections: int
) -> dict[str, Any] | None:
    """``storage_options`` for reading ``url`` with ``connections`` requests at once: on
    S3 the client's connection pool grows to ``connections`` (botocore keeps
    :data:`S3_DEFAULT_CONNECTIONS`, so more threads would queue for a connection),
    unless the options set a pool size of their own. Elsewhere they are unchanged.

    >>> pooled_options("s3://bucket/out", {"anon": True}, 32)
    {'anon': True, 'config_kwargs': {'max_pool_connections': 32}}
    >>> pooled_options("/data/out", None, 32) is None
    True
    """
    if not url.startswith(("s3://", "s3a://")) or connections <= S3_DEFAULT_CONNECTIONS:
        return storage_options
    options = dict(storage_options or {})
    config = dict(options.get("config_kwargs") or {})
    config.setdefault("max_pool_connections", connections)
    options["config_kwargs"] = config
    return options


def map_in_order(
    fn: Callable[[T], R], items: Iterable[T], *, max_workers: int = DEFAULT_READ_THREADS
) -> Iterator[R]:
    """``fn`` over ``items`` in ``max_workers`` threads, results in input order; at most
    ``2 * max_workers`` calls are started ahead of the result being consumed. An
    exception of a call is raised when its result is reached."""
    if isinstance(max_workers, bool) or not isinstance(max_workers, int) or max_workers < 1:
        raise ValueError(f"max_workers must be a positive integer, got {max_workers!r}")
    pending: collections.deque[Future[R]] = collections.deque()
    pool = ThreadPoolExecutor(max_workers)
    try:
        for item in items:
            pending.append(pool.submit(fn, item))
            if len(pending) >= 2 * max_workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    finally:
        for future in pending:
            future.cancel()
        pool.shutdown(wait=True)


def file_sizes(
    urls: Iterable[str],
    *,
    storage_options: dict[str, Any] | None = None,
    max_workers: int = DEFAULT_READ_THREADS,
) -> dict[str, int | None]:
    """The size of each distinct URL (``None`` when it does not exist), looked up
    concurrently; ``storage_options`` apply to URLs with a protocol."""
    unique = list(dict.fromkeys(urls))

    def size(url: str) -> int | None:
        options = storage_options if "://" in url else None
        fs, path = resolve(url, pooled_options(url, options, max_workers))
        try:
            return int(fs.size(path))
        except FileNotFoundError:
            return None

    return dict(zip(unique, map_in_order(size, unique, max_workers=max_workers), strict=True))


def open_table_file(fs: Any, path: str) -> IO[bytes]:
    """``path`` open for reading. On S3 a file under :data:`WHOLE_READ_BYTES` comes back
    in memory, fetched with one request (a file object would ask for its size, then its
    footer, then its columns: a round trip each); elsewhere, and for bigger files, it is
    ``fs.open(path, "rb")``.

    >>> import fsspec, tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "t.jsonl")
    >>> _ = open(path, "wb").write(b'{"a": 1}\\n')
    >>> with open_table_file(fsspec.filesystem("file"), path) as f:
    ...     f.read()
    b'{"a": 1}\\n'
    """
    if is_s3(fs):
        tail = fs.cat_file(path, start=-WHOLE_READ_BYTES)
        if len(tail) < WHOLE_READ_BYTES:
            return io.BytesIO(tail)
    return fs.open(path, "rb")


def read_table_rows(
    url: str,
    format: str,
    *,
    columns: list[str] | None = None,
    storage_options: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Every row of one Parquet or JSONL table file as plain values (``columns`` only,
    when given); blob references come back as ``{path, offset, size, ...}`` dicts."""
    fs, path = resolve(url, storage_options if "://" in url else None)
    if format == "parquet":
        import pyarrow.parquet as pq

        with open_table_file(fs, path) as f:
            return pq.read_table(f, columns=columns).to_pylist()
    if format == "jsonl":
        with open_table_file(fs, path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        if columns is None:
            return rows
        return [{name: row.get(name) for name in columns} for row in rows]
    raise ValueError(f"read_table_rows reads 'parquet' or 'jsonl' files, not {format!r} ({url})")
