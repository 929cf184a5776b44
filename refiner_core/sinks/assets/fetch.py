"""Reading asset values (paths, inline bytes, blob references) and telling missing from broken."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from ...errors import RefinerError
from ...io.blob import read_range, validate_reference
from ...io.datafile import is_local, resolve
from ...io.ranged import open_uncached
from ...io.url_chain import SEPARATOR
from .sources import SourcePolicy, is_url

INLINE_LIMIT = 8 * 1024 * 1024
STREAM_CHUNK = 8 * 1024 * 1024


class MissingAsset(RefinerError):
    """The file or object an asset value points to does not exist."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.path = path


@dataclass
class Source:
    """One asset's bytes: in hand (``data``), an open local file (``fd``, for a kernel
    copy; :meth:`close` releases it) or streamed from ``fs``/``path`` when large."""

    size: int
    data: bytes | None = None
    fs: Any = None
    path: str | None = None
    url: str | None = None
    offset: int = 0
    fd: int | None = None

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def chunks(self):
        if self.data is not None:
            yield self.data
            return
        if self.fd is not None:
            done = 0
            while done < self.size:
                chunk = os.pread(self.fd, min(STREAM_CHUNK, self.size - done), self.offset + done)
                if not chunk:
                    raise EOFError(f"{self.url} ended {self.size - done} bytes early")
                done += len(chunk)
                yield chunk
            return
        assert self.path is not None
        with open_uncached(self.fs, self.path) as f:  # no read past a reference's end
            f.seek(self.offset)
            left = self.size
            while left > 0:
                chunk = f.read(min(STREAM_CHUNK, left))
                if not chunk:
                    raise EOFError(f"{self.url} ended {left} bytes early while it was being copied")
                left -= len(chunk)
                yield chunk


class Filesystems:
    """Resolves source URLs: remote ones with ``source_options`` when given, else with
    the output's storage options for the output's protocol and none for others.

    Every URL is first judged by ``policy`` (:class:`RefusedSource` when refused);
    local paths come back as the policy returned them (resolved when it resolves
    them), so the file opened is the file that was judged. A URL chain
    (``simplecache::s3://...``) is opened as fsspec opens it, with ``source_options``."""

    def __init__(
        self,
        protocol: Any,
        storage_options: dict[str, Any],
        source_options: dict[str, Any] | None = None,
        policy: SourcePolicy | None = None,
    ) -> None:
        self.protocol = protocol
        self.storage_options = storage_options
        self.source_options = source_options
        self.policy = policy or SourcePolicy()
        self._cache: dict[str, Any] = {}

    def resolve(self, url: str) -> tuple[Any, str]:
        local = self.policy.check(url)
        if SEPARATOR in url:  # a chain's filesystem is made for its inner URL: never shared
            return resolve(url, self.source_options)
        scheme = url.split("://", 1)[0] if "://" in url else "file"
        fs = self._cache.get(scheme)
        if fs is None:
            fs, path = self._first_resolve(scheme, url)
        elif not is_local(fs):
            from fsspec.core import strip_protocol

            return fs, strip_protocol(url)
        else:
            path = None
        if is_local(fs):
            return fs, local if local is not None else self.policy.check_local(path or url)
        return fs, path

    def local_file(self, url: str) -> tuple[Any, str, int | None] | None:
        """For a local path: its filesystem, the path to open and its size from the
        policy's one ``stat`` (``None`` when that failed); ``None`` for a remote URL."""
        if is_url(url):
            return None
        path, size = self.policy.check_local_file(url)
        fs = self._cache.get("file") or self._first_resolve("file", path)[0]
        return fs, path, size

    def _first_resolve(self, scheme: str, url: str):
        protocols = self.protocol if isinstance(self.protocol, tuple) else (self.protocol,)
        options = self.storage_options if scheme in protocols else None
        if self.source_options is not None and scheme != "file":
            options = dict(self.source_options)
        fs, path = resolve(url, options)
        self._cache[scheme] = fs
        return fs, path


def describe(value: Any) -> str:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} inline bytes>"
    return repr(value)


def check_path(value: Any) -> str:
    """``value`` if it is a usable path string; ``TypeError`` otherwise (never resolved)."""
    if not isinstance(value, str) or not value:
        raise TypeError(f"expected a non-empty path string, got {describe(value)}")
    return value


def open_source(
    value: Any, form: str, filesystems: Filesystems, *, keep_open: bool = False
) -> Source:
    """Fetch one asset value; raises :class:`MissingAsset` only when its file does not exist.

    With ``keep_open``, a local file path comes back open (``fd``) instead of read, for a
    caller that copies it with :func:`refiner_core.io.kernel_copy.copy_range` and closes it."""
    if form == "bytes":
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected inline bytes, got {type(value).__name__}")
        return Source(size=len(value), data=bytes(value))
    if form == "path":
        local = filesystems.local_file(check_path(value))
        if local is not None:
            return open_local(*local, value, keep_open)
        fs, path = filesystems.resolve(value)
        size = size_or_missing(fs, path, value)
        if size <= INLINE_LIMIT:
            try:
                data = fs.cat_file(path)
            except FileNotFoundError as exc:
                raise MissingAsset(value) from exc
            return Source(size=len(data), data=data)
        return Source(size=size, fs=fs, path=path, url=value)
    if form == "blob":
        url, offset, size = validate_reference(value)
        fs, path = filesystems.resolve(url)
        if size > INLINE_LIMIT:
            available = size_or_missing(fs, path, url)
            if offset + size > available:
                raise EOFError(
                    f"blob reference {url!r} [{offset}, {offset + size}) reaches past the end: "
                    f"the blob has {available} bytes"
                )
            return Source(size=size, fs=fs, path=path, url=url, offset=offset)
        try:
            return Source(size=size, data=read_range(fs, path, offset, size, url=url))
        except FileNotFoundError as exc:
            raise MissingAsset(url) from exc
    raise ValueError(f"unknown asset form {form!r}")


def open_local(fs: Any, path: str, size: int | None, url: str, keep_open: bool = False) -> Source:
    """A local file in one open: its bytes if small (or, with ``keep_open``, the
    descriptor itself, whatever the size).

    Per-file cost matters when packing many small files, so this skips the extra
    opens and stats that ``fs.size`` plus ``fs.cat_file`` would make: ``size`` is the
    source policy's ``stat`` of the file (``fstat`` only when that is ``None``). A file
    that shrinks after it is sized fails its copy with ``EOFError``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError as exc:
        raise MissingAsset(url) from exc
    source = Source(size=0 if size is None else size, url=url, fd=fd)
    if size is None:
        try:
            source.size = os.fstat(fd).st_size
        except BaseException:
            source.close()
            raise
    if keep_open:
        return source
    with contextlib.closing(source):
        if source.size > INLINE_LIMIT:
            return Source(size=source.size, fs=fs, path=path, url=url)
        return Source(size=source.size, data=b"".join(source.chunks()))


def source_size(url: str, filesystems: Filesystems) -> int:
    """Exact size of a source blob; :class:`MissingAsset` when it does not exist."""
    return size_or_missing(*filesystems.resolve(url), url)


def size_or_missing(fs: Any, path: str, url: str) -> int:
    """Size of ``path`` on ``fs``; :class:`MissingAsset` naming ``url`` when it does not exist."""
    try:
        return int(fs.size(path))
    except FileNotFoundError as exc:
        raise MissingAsset(url) from exc


def is_remote(value: Any, form: str) -> bool:
    """Whether reading ``value`` goes over the network (worth a thread and a prefetch window);
    a URL chain counts as remote: it is opened through fsspec, never as a local file."""
    if form == "bytes":
        return False
    url = value.get("path") if isinstance(value, dict) else value
    return isinstance(url, str) and is_url(url)
