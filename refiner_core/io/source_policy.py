"""Where media may be read from: ``allowed_sources`` and the refused pseudo-filesystems.

A row names the file its asset is copied from, and a blob reference the file it is
read from, so a hostile or careless table could pull any file the worker can read
into a dataset or a reader's hands (``/proc/self/environ`` holds the worker's API
keys). Asset writers and blob reads (:mod:`refiner_core.io.read_sources`) share this
policy. By default every source is allowed except local files under
``/proc``, ``/sys`` and ``/dev`` (by path, or through symlinks by the device the file
is on, which may be any filesystem mounted below them, such as ``/dev/shm``) and
local paths that are not regular files. A chained fsspec URL
(``simplecache::file:///data/a.png``) is judged by its innermost link, the one that
serves the bytes; its outer links must be fsspec's caching layers unless their
protocol is listed as ``"<protocol>::"``. With ``allowed_sources``, a source must also
lie under one of the listed URL prefixes or local folders, local paths resolved
(symlinks included) first; a pseudo-filesystem stays refused unless a listed folder
lies inside it.

Example:
    >>> policy = SourcePolicy(["s3://media/", "/data"])
    >>> policy.check("s3://media/a.png")
    >>> policy.check("s3://other/a.png")
    Traceback (most recent call last):
    ...
    refiner_core.io.source_policy.RefusedSource: source 's3://other/a.png' is outside allowed_sources ['s3://media/', '/data']; add its prefix or folder to allowed_sources to read it
"""

from __future__ import annotations

import contextlib
import functools
import os
import posixpath
import stat
from collections.abc import Sequence

from ..errors import RefinerError
from .url_chain import (
    CACHE_WRAPPERS,
    SEPARATOR,
    WRAPPING_PROTOCOLS,
    Chain,
    protocol_of,
    split_chain,
)

PSEUDO_FILESYSTEMS = ("/proc", "/sys", "/dev")
_LOCAL_PROTOCOLS = ("file", "local")  # fsspec's names for the local filesystem
_PSEUDO_PREFIXES = tuple(f"{root}/" for root in PSEUDO_FILESYSTEMS)


class RefusedSource(RefinerError, PermissionError):
    """A source that ``allowed_sources`` (or the default) refuses."""


def _under(path: str, root: str) -> bool:
    root = root.rstrip("/") or "/"
    return path == root or path.startswith(root if root == "/" else root + "/")


def _pseudo_root(path: str) -> str | None:
    """The pseudo-filesystem root that the absolute, normalised ``path`` lies under, if any."""
    if path in PSEUDO_FILESYSTEMS:
        return path
    if path.startswith(_PSEUDO_PREFIXES):
        return path[: path.index("/", 1)]
    return None


def is_url(value: str) -> bool:
    """Whether ``value`` names a remote object or a URL chain (``file://`` paths are local)."""
    return ("://" in value and not value.startswith("file://")) or SEPARATOR in value


def _is_wrapper_entry(entry: str) -> bool:
    """An ``allowed_sources`` entry such as ``"zip::"`` that admits one wrapper protocol."""
    return entry.endswith(SEPARATOR) and entry[: -len(SEPARATOR)].isidentifier()


def _local(value: str) -> str:
    return os.path.realpath(_strip_file(value))


def check_allowed_sources(value: object) -> tuple[str, ...] | None:
    """``allowed_sources`` as a tuple, or ``ValueError`` saying what a valid one is."""
    if value is None:
        return None
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(
            "allowed_sources must be a list of URL prefixes or local folders "
            f"(e.g. ['s3://bucket/media/', '/data/media']), got {value!r}"
        )
    for entry in value:
        if not isinstance(entry, str) or not entry:
            raise ValueError(
                f"allowed_sources entries must be non-empty strings, got {entry!r} in {value!r}"
            )
        if _is_wrapper_entry(entry):
            continue
        if SEPARATOR in entry or (not is_url(entry) and not os.path.isabs(_strip_file(entry))):
            raise ValueError(
                f"allowed_sources entry {entry!r} must be a URL prefix (s3://bucket/prefix), an "
                "absolute local folder or a wrapper protocol such as 'zip::'"
            )
    return tuple(value)


def _strip_file(value: str) -> str:
    return value[7:] if value.startswith("file://") else value


# Kernel and memory filesystems: one mounted below a pseudo-filesystem root is one too.
# Disk-backed mounts there (a bound /dev/termination-log) share a device with real data.
_VIRTUAL_TYPES = frozenset(
    [
        "tmpfs",
        "devtmpfs",
        "devpts",
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "mqueue",
        "hugetlbfs",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "binfmt_misc",
        "autofs",
        "efivarfs",
        "ramfs",
    ]
)


def _mounts_below_pseudo_roots() -> list[tuple[str, str, str]]:
    """``(mount point, root, type)`` of each virtual filesystem mounted under a pseudo root."""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        fields = line.split()
        if len(fields) < 3 or fields[2] not in _VIRTUAL_TYPES:
            continue
        point = fields[1].encode().decode("unicode_escape")  # the table writes " " as \040
        root = _pseudo_root(point)
        if root is not None:
            found.append((point, root, fields[2]))
    return found


def _pseudo_devices() -> dict[int, str]:
    """``st_dev`` of each pseudo-filesystem root and of the virtual filesystems mounted
    below one (``/dev/shm``), so a path that reaches one through a symlink is
    recognised by one ``stat`` instead of resolving every path component."""
    global _PSEUDO_DEVICES
    if _PSEUDO_DEVICES is None:
        found: dict[int, str] = {}
        points = [(root, root) for root in PSEUDO_FILESYSTEMS]
        points += [(point, root) for point, root, _ in _mounts_below_pseudo_roots()]
        for point, root in points:
            try:
                found.setdefault(os.lstat(point).st_dev, root)
            except OSError:
                continue
        _PSEUDO_DEVICES = found
    return _PSEUDO_DEVICES


_PSEUDO_DEVICES: dict[int, str] | None = None


@functools.cache
def _memory_folders() -> dict[int, str]:
    """``st_dev`` and mount point of each RAM filesystem below ``/dev`` (``/dev/shm``):
    scratch space that holds ordinary files, which blob reads may read back."""
    found = {}
    for point, root, kind in _mounts_below_pseudo_roots():
        if root == "/dev" and point != root and kind in ("tmpfs", "ramfs"):
            with contextlib.suppress(OSError):
                found[os.lstat(point).st_dev] = point
    return found


class SourcePolicy:
    """Judges asset source URLs and paths; :meth:`check` raises :class:`RefusedSource`.

    A local source must be a regular file (never a device, FIFO or folder) and must not
    live on a pseudo-filesystem, by its path or, through symlinks, by the device its
    file is on. With ``allowed`` folders, local paths are resolved and must lie in one.
    ``memory_folders=True`` (blob reads) admits files on RAM filesystems mounted below
    ``/dev``, such as an output folder under ``/dev/shm``; ``reader`` names who refuses.
    """

    def __init__(
        self,
        allowed: Sequence[str] | None = None,
        *,
        reader: str = "asset writers",
        memory_folders: bool = False,
    ) -> None:
        self.allowed = tuple(allowed) if allowed is not None else None
        self.reader = reader
        self.memory_folders = memory_folders
        entries = [a for a in self.allowed or () if not _is_wrapper_entry(a)]
        self._wrappers = frozenset(
            a[: -len(SEPARATOR)] for a in self.allowed or () if _is_wrapper_entry(a)
        )
        self._urls = tuple(a for a in entries if is_url(a))
        self._folders = tuple(_local(a) for a in entries if not is_url(a))

    def check(self, value: str) -> str | None:
        """Refuse ``value`` or return the local path to open (``None`` for a URL, chains
        included: they are opened through fsspec once their innermost link passed)."""
        chain = split_chain(value)
        if chain.chained or protocol_of(chain.target) in WRAPPING_PROTOCOLS:
            self._check_chain(chain)
            return None
        if is_url(value):
            self._check_url(value)
            return None
        return self.check_local(value)

    def _check_chain(self, chain: Chain) -> None:
        for protocol in chain.wrappers:
            if protocol not in CACHE_WRAPPERS and protocol not in self._wrappers:
                raise RefusedSource(
                    f"source {chain.url!r} reads through {protocol!r}, a wrapper that changes "
                    f"which bytes are read; {self.reader} refuse it. Add '{protocol}::' to "
                    "allowed_sources (with the inner URL's prefix or folder) if this is intended"
                )
        if protocol_of(chain.target) in WRAPPING_PROTOCOLS:
            raise RefusedSource(
                f"source {chain.url!r} ends in {protocol_of(chain.target)!r}, which reads "
                "through another filesystem it does not name; write that filesystem's URL "
                f"after '::' (e.g. 'simplecache::s3://bucket/key') so it can be judged"
            )
        target = chain.target
        if protocol_of(target) in _LOCAL_PROTOCOLS:
            self.check_local_file(target.partition("://")[2] or target, shown=chain.url)
        else:
            self._check_url(target, shown=chain.url)

    def _check_url(self, url: str, shown: str | None = None) -> None:
        if self.allowed is None:
            return
        scheme, _, rest = url.partition("://")
        normal = f"{scheme}://{posixpath.normpath(rest)}" if rest else url
        for prefix in self._urls:
            if prefix.endswith(("/", "://")):
                ok = url.startswith(prefix) and normal.startswith(prefix.rstrip("/"))
            else:
                ok = _under(url, prefix) and _under(normal, prefix)
            if ok:
                return
        where = repr(url) if shown is None else f"{shown!r} (read from {url!r})"
        raise RefusedSource(
            f"source {where} is outside allowed_sources {list(self.allowed)}; add its prefix "
            "or folder to allowed_sources to read it"
        )

    def _listed_inside(self, path: str, root: str) -> bool:
        return any(_under(path, f) and _under(f, root) for f in self._folders)

    def _in_memory_folder(self, path: str, device: int | None = None) -> bool:
        if not self.memory_folders:
            return False
        if device is not None:
            return device in _memory_folders()
        return any(_under(path, point) for point in _memory_folders().values())

    def _refuse_pseudo(self, value: str, path: str, root: str) -> None:
        real = os.path.realpath(path)
        shown = repr(value) if real == value else f"{value!r} (resolved to {real!r})"
        raise RefusedSource(
            f"source {shown} is under {root}, a pseudo-filesystem whose files are never "
            f"media; {self.reader} refuse it. List a folder under {root} in "
            "allowed_sources if this is intended"
        )

    def check_local(self, value: str) -> str:
        """Refuse the local source ``value`` or return its absolute path (resolved when
        ``allowed`` lists folders, so the file opened is the file judged)."""
        return self.check_local_file(value)[0]

    def check_local_file(self, value: str, shown: str | None = None) -> tuple[str, int | None]:
        """:meth:`check_local`, and the size of the file judged (``None`` when it could
        not be stat'ed: missing or unreadable, which opening it then reports).
        ``shown`` is what errors call the source (the whole URL of a chain)."""
        if SEPARATOR in value:  # never opened as one local file: fsspec reads it as a chain
            raise RefusedSource(
                f"source {value!r} is a URL chain, not a local file; it is judged and read as a URL"
            )
        path = os.path.abspath(_strip_file(value))
        value = value if shown is None else shown
        if self.allowed is not None:
            path = os.path.realpath(path)
        root = _pseudo_root(path)
        if (
            root is not None
            and not self._listed_inside(path, root)
            and not self._in_memory_folder(path)
        ):
            self._refuse_pseudo(value, path, root)
        if self.allowed is not None and not any(_under(path, f) for f in self._folders):
            shown = repr(value) if path == value else f"{value!r} (resolved to {path!r})"
            raise RefusedSource(
                f"source {shown} is outside allowed_sources {list(self.allowed)}; add its "
                "folder to allowed_sources to read it"
            )
        try:
            info = os.stat(path)
        except OSError:  # missing or unreadable: reported when it is opened
            return path, None
        root = _pseudo_devices().get(info.st_dev)
        if (
            root is not None
            and not self._in_memory_folder(path, info.st_dev)
            and not self._listed_inside(os.path.realpath(path), root)
        ):
            self._refuse_pseudo(value, path, root)
        if not stat.S_ISREG(info.st_mode):
            raise RefusedSource(
                f"source {value!r} is not a regular file (a folder, device, FIFO or socket); "
                "asset sources must be files"
            )
        return path, info.st_size
