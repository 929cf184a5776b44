"""Where blob reads may read from, and the checks every blob read makes before it allocates.

A blob reference may come from a table someone else wrote, so ``read_blob``,
``read_blobs`` and ``iter_blobs`` judge its path as the asset writers judge theirs
(:mod:`refiner_core.io.source_policy`): by default anything but the
pseudo-filesystems ``/proc``, ``/sys`` and ``/dev`` and non-regular files; with
``allowed_sources``, only the listed URL prefixes and local folders. One difference:
files on a RAM filesystem mounted below ``/dev`` (``/dev/shm``) may be read, since an
output folder may live there and its references must read back. The list is
given per call, or once for the process with :func:`set_read_sources`.

A range is checked against the object's size before any buffer is made for it:
always for local files (the policy's ``stat`` gives the size), and for remote
objects when the range is larger than ``SIZE_CHECK_BYTES`` (one size request,
small next to the read it guards). Errors name the reference and the fix.

Example:
    >>> import refiner_core as mdr
    >>> mdr.io.set_read_sources(["s3://datasets/", "/data/tables"])
    >>> mdr.io.set_read_sources(None)  # back to the default: all but /proc, /sys, /dev
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .datafile import is_local, resolve
from .source_policy import RefusedSource, SourcePolicy, check_allowed_sources, is_url

SIZE_CHECK_BYTES = 8 * 1024 * 1024

_process_sources: tuple[str, ...] | None = None


def set_read_sources(allowed_sources: Sequence[str] | None) -> None:
    """Limit every blob read of this process that passes no ``allowed_sources`` to
    these URL prefixes and local folders (``None``: the default, all but pseudo-filesystems).

    Worker processes started with ``spawn`` or ``forkserver`` start from the default.
    """
    global _process_sources
    _process_sources = check_allowed_sources(allowed_sources)


def read_sources() -> tuple[str, ...] | None:
    """The process-wide ``allowed_sources`` of blob reads (``None`` when unset)."""
    return _process_sources


def read_policy(allowed_sources: Sequence[str] | None = None) -> SourcePolicy:
    """The source policy of one read: ``allowed_sources`` or else the process's list."""
    chosen = check_allowed_sources(allowed_sources)
    if chosen is None:
        chosen = _process_sources
    return SourcePolicy(chosen, reader="blob reads", memory_folders=True)


def refusal_hint() -> str:
    return (
        "pass allowed_sources=[...] to the read or call "
        "refiner_core.io.set_read_sources([...]) to read it"
    )


@dataclass
class Target:
    """The object a reference's path names: its filesystem, the path to open on it and
    its size when the policy's ``stat`` already gave it (local files)."""

    fs: Any
    path: str
    size: int | None


def judge(url: str, storage_options: dict[str, Any] | None, policy: SourcePolicy) -> Target:
    """Refuse ``url`` under ``policy`` or return where to read it."""
    try:
        if is_url(url):
            policy.check(url)
            fs, path = resolve(url, storage_options)
            if not is_local(fs):
                return Target(fs, path, None)
            path, size = policy.check_local_file(path, shown=url)  # local://, file-like URLs
            return Target(fs, path, size)
        path, size = policy.check_local_file(url)
    except RefusedSource as exc:
        raise RefusedSource(f"{exc}; for blob reads, {refusal_hint()}") from None
    return Target(resolve(path, storage_options)[0], path, size)


def describe(url: str, offset: int, size: int) -> str:
    return f"blob reference {url!r} [{offset}, {offset + size}) (offset {offset}, size {size})"


def check_range(target: Target, url: str, offset: int, size: int) -> None:
    """``EOFError`` naming the reference when ``[offset, offset + size)`` does not fit in
    the object; asks a remote store for the size only for a large range."""
    available = target.size
    if available is None and size > SIZE_CHECK_BYTES:
        with naming(url, offset, size, None):
            available = int(target.fs.size(target.path))
    if available is not None and offset + size > available:
        raise EOFError(
            f"{describe(url, offset, size)} reaches past the end: the blob has "
            f"{available} bytes; the reference is damaged or points at another object"
        )


@contextlib.contextmanager
def naming(url: str, offset: int, size: int, storage_options: dict[str, Any] | None) -> Iterator:
    """Re-raise a read's error with the reference in its message (same type for OSError,
    ``PermissionError`` saying how to pass credentials when the store had none)."""
    try:
        yield
    except OSError as exc:
        reference = describe(url, offset, size)
        if reference in str(exc):
            raise
        message = f"{reference}: {exc.strerror or exc}"
        try:
            named = type(exc)(exc.errno, message) if exc.errno else type(exc)(message)
        except Exception:  # a subclass built from other arguments (aiohttp's, say)
            exc.add_note(f"while reading {reference}")
            raise exc from None
        raise named from exc
    except Exception as exc:
        if type(exc).__name__ != "NoCredentialsError":
            raise
        given = "" if not storage_options else " (the storage_options given hold none)"
        raise PermissionError(
            f"{describe(url, offset, size)}: no credentials were found to read it{given}; "
            "pass storage_options={'key': ..., 'secret': ...} (plus 'endpoint_url' for a "
            "non-AWS store, or {'anon': True} for a public bucket) to read_blob/read_blobs, "
            "or set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        ) from exc
