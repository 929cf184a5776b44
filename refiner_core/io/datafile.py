"""Files and folders on any fsspec filesystem, with atomic writes.

``DataFolder("s3://bucket/out", storage_options={...})`` resolves the filesystem
once; when it is s3fs, refiner's concurrent multipart writer is installed for
the process. Paths handed back to users are absolute local paths or full URLs.

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> folder = DataFolder(tempfile.mkdtemp())
    >>> with folder.open_atomic("part-0.txt") as f:
    ...     _ = f.write(b"hello")
    >>> open(folder.url_of("part-0.txt"), "rb").read()
    b'hello'
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import re
import sys
import tempfile
import uuid
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from .kernel_copy import copy_file

if TYPE_CHECKING:  # fsspec is imported on first use: a tenth of `import refiner_core`
    import fsspec

_KEPT_ACROSS_FORK: list[Any] = []


def _keep_io_state_across_fork() -> None:
    """Keep fsspec's event loop and cached filesystems referenced in a forked child.

    A forked child shares the parent's epoll instance. If the child garbage-collected
    the parent's loop or its open connections (fsspec drops them after a fork), their
    cleanup would unregister the parent's descriptors from that shared epoll, and the
    parent's next call on the loop would stall until some timer woke it up.
    """
    if "fsspec" not in sys.modules:
        return  # nothing of fsspec's exists yet
    import fsspec
    import fsspec.asyn

    kept: list[Any] = [fsspec.asyn.loop[0], fsspec.asyn.iothread[0]]
    classes = [fsspec.AbstractFileSystem]
    while classes:
        cls = classes.pop()
        classes.extend(cls.__subclasses__())
        cache = cls.__dict__.get("_cache")
        if cache:
            kept.extend(cache.values())
    _KEPT_ACROSS_FORK[:] = kept


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=lambda: _keep_io_state_across_fork())


def is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return isinstance(fs, _local_filesystem_class())


@functools.cache
def _local_filesystem_class() -> type:
    """fsspec's local filesystem class, imported on first use (asked once per asset)."""
    from fsspec.implementations.local import LocalFileSystem

    return LocalFileSystem


def is_s3(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)
    return "s3" in protocol or "s3a" in protocol


def is_s3fs(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is s3fs's filesystem (the one whose requests :func:`read_object` and
    :class:`DataFolder` trim)."""
    return is_s3(fs) and hasattr(fs, "_lsdir") and hasattr(fs, "max_concurrency")


def read_object(fs: fsspec.AbstractFileSystem, path: str) -> bytes:
    """The whole file at ``path``, in one ``GET`` on S3; ``FileNotFoundError`` when it
    does not exist.

    Given no range, s3fs asks for the object's size first (a ``HEAD``) to split large
    objects into concurrent ranged reads; the small records read this way are fetched
    whole instead.

    >>> import os, tempfile, fsspec
    >>> path = os.path.join(tempfile.mkdtemp(), "record.json")
    >>> _ = open(path, "wb").write(b"{}")
    >>> read_object(fsspec.filesystem("file"), path)
    b'{}'
    """
    if is_s3fs(fs):
        return fs.cat_file(path, max_concurrency=1)
    return fs.cat_file(path)


def resolve(url: str, storage_options: dict[str, Any] | None = None):
    """Return ``(fs, path)`` for ``url``; installs the s3 multipart writer for s3fs."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"expected a non-empty path or URL, got {url!r}")
    from fsspec.core import url_to_fs

    fs, path = url_to_fs(os.fspath(url), **(storage_options or {}))
    if is_s3(fs):
        from .s3_multipart import install_if_s3

        install_if_s3(fs)
    if is_local(fs):
        path = os.path.abspath(path)
    return fs, path


def full_url(fs: fsspec.AbstractFileSystem, path: str) -> str:
    """The user-facing address of ``path``: absolute local path or ``proto://...`` URL."""
    if is_local(fs):
        return os.path.abspath(path)
    return fs.unstrip_protocol(path)


class DataFile:
    """One file or object, local or behind any fsspec URL.

    Example:
        >>> import tempfile, os
        >>> p = os.path.join(tempfile.mkdtemp(), "x.bin")
        >>> _ = open(p, "wb").write(b"abcdef")
        >>> DataFile(p).read_range(2, 3)
        b'cde'
    """

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None, *, fs=None):
        if fs is None:
            fs, path = resolve(url, storage_options)
        else:
            path = url
        self.fs = fs
        self.path = path

    @property
    def url(self) -> str:
        return full_url(self.fs, self.path)

    def size(self) -> int:
        return int(self.fs.size(self.path))

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def read_range(self, offset: int, size: int) -> bytes:
        """One ranged read of bytes ``[offset, offset + size)``."""
        if size == 0:
            return b""
        return self.fs.cat_file(self.path, start=offset, end=offset + size)

    def open(self, mode: str = "rb", **kwargs: Any) -> IO[bytes]:
        return self.fs.open(self.path, mode, **kwargs)


class DataFolder:
    """A folder (or object prefix) that a writer owns, local or behind any fsspec URL."""

    def __init__(self, url: str, storage_options: dict[str, Any] | None = None):
        fs, path = resolve(url, storage_options)
        self._fs = fs
        self._pid = os.getpid()
        self._url = url
        self.path = path.rstrip("/") or "/"
        self.storage_options = dict(storage_options or {})
        self._made_dirs: set[str] = set()

    @property
    def fs(self) -> fsspec.AbstractFileSystem:
        """The filesystem, resolved again in a forked worker (async clients do not survive fork)."""
        if self._pid != os.getpid():
            self._fs = resolve(self._url, self.storage_options)[0]
            self._pid = os.getpid()
        return self._fs

    def __repr__(self) -> str:
        return f"DataFolder({self.url!r})"

    def __reduce__(self):
        return (DataFolder, (self.url, self.storage_options))

    @property
    def url(self) -> str:
        return full_url(self.fs, self.path)

    def join(self, relative: str) -> str:
        """The filesystem path of ``relative`` inside this folder (never outside it)."""
        check_relative(relative, what="path")
        return posixpath.join(self.path, relative)

    def url_of(self, relative: str) -> str:
        return full_url(self.fs, self.join(relative))

    def file(self, relative: str) -> DataFile:
        return DataFile(self.join(relative), fs=self.fs)

    def exists(self, relative: str = "") -> bool:
        return bool(self.fs.exists(self.join(relative) if relative else self.path))

    def find(self, relative: str = "") -> list[str]:
        """Paths (relative to this folder) of every file below ``relative``."""
        base = self.join(relative) if relative else self.path
        prefix = self.path.rstrip("/") + "/"
        try:
            with self._context("ListObjectsV2", base):
                found = self.fs.find(base)
        except FileNotFoundError:
            return []
        return sorted(p[len(prefix) :] if p.startswith(prefix) else p for p in found)

    def listdir(self, relative: str = "") -> list[str]:
        """Names of the entries directly in ``relative`` (this folder when empty; one
        listing; empty if it is absent)."""
        base = self.join(relative) if relative else self.path
        try:
            with self._context("ListObjectsV2", base):
                entries = self._entries(base)
        except FileNotFoundError:
            return []
        return sorted(
            e.rstrip("/").rsplit("/", 1)[-1] for e in entries if e.rstrip("/") != base.rstrip("/")
        )

    def listdir_sizes(self, relative: str = "") -> dict[str, int]:
        """The files directly in ``relative`` (this folder when empty) by name, with
        their sizes in bytes, from one listing (the same one as :meth:`listdir`);
        empty if it is absent. Subfolders are left out."""
        base = self.join(relative) if relative else self.path
        try:
            with self._context("ListObjectsV2", base):
                entries = self._detailed_entries(base)
        except FileNotFoundError:
            return {}
        return {
            e["name"].rstrip("/").rsplit("/", 1)[-1]: int(e.get("size") or 0)
            for e in entries
            if e.get("type") == "file" and e["name"].rstrip("/") != base.rstrip("/")
        }

    def _entries(self, base: str) -> list[str]:
        if is_s3fs(self.fs):
            return [entry["name"] for entry in self._detailed_entries(base)]
        return self.fs.ls(base, detail=False, refresh=True)

    def _detailed_entries(self, base: str) -> list[dict[str, Any]]:
        fs = self.fs
        if is_s3fs(fs):
            # one listing: s3fs's ls lists the parent folder too when ``base`` has no entries
            import fsspec.asyn

            return list(fsspec.asyn.sync(fs.loop, fs._lsdir, base, refresh=True))
        return list(fs.ls(base, detail=True, refresh=True))

    def same_filesystem(self, fs: fsspec.AbstractFileSystem) -> bool:
        """Whether files on ``fs`` can be copied into this folder by :meth:`copy_from`."""
        return fs is self.fs or (is_local(fs) and is_local(self.fs))

    def copy_from(self, fs: fsspec.AbstractFileSystem, path: str, relative: str) -> int | None:
        """Copy ``path`` (on a filesystem :meth:`same_filesystem` accepts) to ``relative``
        without streaming it through this process: a local copy inside the kernel
        (:mod:`refiner_core.io.kernel_copy`), or the object store's server-side copy.
        Returns the bytes copied when the copy tells (local files), else ``None``.
        ``FileNotFoundError`` when ``path`` does not exist."""
        if is_local(fs):
            directory, _, name = relative.rpartition("/")
            return copy_file(
                path, f"{self.local_dir(directory)}/{name}" if directory else self.join(name)
            )
        destination = self.join(relative)
        with self._context(f"CopyObject from {full_url(fs, path)}", destination):
            fs.copy(path, destination)
        return None

    def local_dir(self, relative: str) -> str:
        """The path of the folder ``relative`` in this local folder, made on first use
        (once per ``DataFolder``, however many files then go in)."""
        path = self.join(relative)
        if path not in self._made_dirs:
            os.makedirs(path, exist_ok=True)
            self._made_dirs.add(path)
        return path

    def rm(self, relative: str, recursive: bool = False) -> None:
        """Delete ``relative`` (with everything below it when ``recursive``); nothing
        there is no error. On S3 a recursive delete of nothing costs one listing."""
        path = self.join(relative)
        with contextlib.suppress(FileNotFoundError), self._context("DeleteObjects", path):
            if recursive and is_s3fs(self.fs) and not self._holds(relative):
                return
            self.fs.rm(path, recursive=recursive)

    def _holds(self, relative: str) -> bool:
        """Whether S3 has an object at ``relative`` or below it, by one listing of the keys
        starting with it (s3fs otherwise asks ``HEAD`` and two listings per level)."""
        path = self.join(relative)
        found = self.fs.find(self.path, prefix=relative)
        return any(p == path or p.startswith(path + "/") for p in found)

    def read_bytes(self, relative: str) -> bytes:
        """The whole file (one ``GET`` on S3, :func:`read_object`); never answered from a
        directory listing cached before another process wrote it."""
        path = self.join(relative)
        if not is_local(self.fs):
            self.fs.invalidate_cache(path)
        with self._context("GetObject", path):
            return read_object(self.fs, path)

    def _context(self, operation: str, path: str) -> contextlib.AbstractContextManager:
        """On S3, errors of the block name ``operation``, the object and the attempts."""
        fs = self.fs
        if not is_s3(fs):
            return contextlib.nullcontext()
        from .s3_errors import s3_context

        return s3_context(operation, full_url(fs, path), retries=fs.retries)

    def write_bytes(self, relative: str, data: bytes) -> None:
        with self.open_atomic(relative) as f:
            f.write(data)

    @contextlib.contextmanager
    def open_atomic(self, relative: str, *, size_hint: int | None = None) -> Iterator[IO[bytes]]:
        """Open ``relative`` for writing so that it only appears once fully written.

        What "only once fully written" rests on, per store:

        - local disk: the file is written under a hidden temporary name and renamed on
          success;
        - S3 (s3fs): the object is published when its multipart upload completes; a
          failed or interrupted write aborts the upload;
        - any other fsspec store (``memory://``, GCS, Azure, ...): the bytes go to a local
          temporary file first and are handed to the store's ``put_file`` only after the
          write succeeded, so a failed write leaves nothing. Object stores publish the
          upload whole; a filesystem-like store that ``put_file`` writes in place (SFTP,
          HDFS, SMB) can still show a partial file if the process dies during that
          upload.
        """
        target = self.join(relative)
        if is_local(self.fs):
            directory, name = os.path.split(target)
            os.makedirs(directory, exist_ok=True)
            tmp = os.path.join(directory, temp_name(name))
            try:
                with open(tmp, "wb") as f:
                    yield f
                os.replace(tmp, target)
            except BaseException:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(tmp)
                raise
            return
        from .s3_multipart import is_s3_backed, open_output

        if is_s3_backed(self.fs):
            with open_output(self.fs, target, size_hint=size_hint) as f:
                yield f
            return
        with tempfile.TemporaryDirectory(prefix="refiner-upload-") as spool:
            staged = os.path.join(spool, "staged")
            with open(staged, "wb") as f:
                yield f
            self.fs.put_file(staged, target)


_TEMP_NAME = re.compile(r"\.(?P<name>.+)\.[0-9a-f]{8}\.tmp\Z")


def temp_name(name: str) -> str:
    """The hidden name a local atomic write of ``name`` uses until it completes."""
    return f".{name}.{uuid.uuid4().hex[:8]}.tmp"


def completed_name(temp: str) -> str | None:
    """The file name a :func:`temp_name` would have become, else ``None``.

    >>> completed_name(temp_name("part-00001.parquet"))
    'part-00001.parquet'
    """
    match = _TEMP_NAME.match(temp)
    return match["name"] if match else None


def check_relative(relative: str, *, what: str) -> str:
    """Reject a relative path that could escape its folder; return it unchanged."""
    if not isinstance(relative, str) or not relative:
        raise ValueError(f"{what} must be a non-empty relative path, got {relative!r}")
    bad = (
        relative.startswith(("/", "~"))
        or "\\" in relative
        or "://" in relative
        or any(part in ("..", "") for part in relative.split("/"))
        or (len(relative) > 1 and relative[1] == ":")
    )
    if bad:
        raise ValueError(
            f"{what} {relative!r} must stay inside the output folder: use a relative path "
            "without '..', empty parts, backslashes, drive letters or '://'"
        )
    return relative
