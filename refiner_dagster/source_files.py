"""Files under a source folder, and the modification-time cursor of the source sensor.

:func:`list_source_files` lists what a sensor tick may request; :class:`SourceCursor` is
the cursor of a sensor over a folder whose names arrive in no particular order: a
modification-time watermark plus the versions seen inside the lookback window, so it
does not grow with the folder. :mod:`.ordered_cursor` is the cursor of the ordered sensor.
"""

from __future__ import annotations

import datetime
import fnmatch
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from refiner_core.io import full_url

from .ordered_cursor import ORDERED_CURSOR_VERSION, OrderedCursor

if TYPE_CHECKING:
    import fsspec

CURSOR_VERSION = 2

__all__ = [
    "CURSOR_VERSION",
    "SourceCursor",
    "SourceFile",
    "list_source_files",
    "content_version",
    "modified_at",
    "next_source_cursor",
]


@dataclass(frozen=True)
class SourceFile:
    """One file under the watched folder, as the sensor saw it.

    ``path`` is relative to the watched folder (``/``-separated), ``url`` is the
    absolute local path or full URL (``s3://bucket/key``), ``version`` the content
    version used in run keys.
    """

    path: str
    url: str
    size: int
    version: str
    modified: float | None = None

    @property
    def run_key(self) -> str:
        return f"{self.path}@{self.version}"


@dataclass
class SourceCursor:
    """The sensor's cursor: a modification-time watermark and the recently seen versions.

    ``mark`` is the newest modification time (seconds) up to which every file was
    requested; ``recent`` maps relative paths modified within the lookback window of
    ``mark`` (and files with no modification time) to the version last requested.
    A version-1 cursor (every file's version) is read as ``recent`` and shrinks on the
    next tick.
    """

    recent: dict[str, str] = field(default_factory=dict)
    mark: float | None = None

    @classmethod
    def parse(cls, raw: str | None) -> SourceCursor:
        if not raw:
            return cls()
        try:
            data = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ValueError(
                f"sensor cursor is not JSON ({exc}); reset the cursor in the Dagster UI "
                "(sensor page, 'Set cursor value') to an empty string to rescan the folder"
            ) from exc
        if isinstance(data, dict) and data.get("v") == ORDERED_CURSOR_VERSION:
            # Back from names_ordered=True: requests again what its passes may not have seen.
            times = [t for _, t in OrderedCursor.from_json(data).passes]
            return cls(mark=min(times) if times else None)
        if not isinstance(data, dict) or data.get("v") not in (1, CURSOR_VERSION):
            raise ValueError(
                f"sensor cursor {raw[:80]!r} is not a version-{CURSOR_VERSION} refiner cursor; "
                "reset it to an empty string to rescan the folder"
            )
        recent = data.get("recent") if data["v"] == CURSOR_VERSION else data.get("seen")
        mark = data.get("mark")
        return cls(
            recent={str(k): str(v) for k, v in (recent or {}).items()},
            mark=float(mark) if isinstance(mark, int | float) else None,
        )

    def dumps(self) -> str:
        return json.dumps(
            {"v": CURSOR_VERSION, "mark": self.mark, "recent": dict(sorted(self.recent.items()))},
            separators=(",", ":"),
        )


def content_version(fs: fsspec.AbstractFileSystem, path: str, info: Mapping[str, Any]) -> str:
    etag = info.get("ETag") or info.get("etag")
    if etag:
        return "etag-" + str(etag).strip('"')
    mtime = modified_at(info)
    if mtime is not None:
        return f"s{int(info.get('size') or 0)}-m{round(mtime * 1_000_000)}"
    return "ukey-" + str(fs.ukey(path))


def modified_at(info: Mapping[str, Any]) -> float | None:
    """Seconds since the epoch from whichever field the filesystem reports, if any."""
    for key in ("mtime", "LastModified", "last_modified", "updated"):
        stamp = info.get(key)
        if isinstance(stamp, int | float):
            return float(stamp)
        if isinstance(stamp, datetime.datetime):
            return stamp.timestamp()
    return None


def _hidden(relpath: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relpath.split("/"))


def list_source_files(
    url: str,
    *,
    pattern: str = "*",
    storage_options: Mapping[str, Any] | None = None,
    min_age_seconds: float = 0.0,
) -> list[SourceFile]:
    """List the files under ``url`` that match ``pattern``, sorted by relative path.

    Names (or folders) starting with ``_`` or ``.`` are skipped, as are files
    modified less than ``min_age_seconds`` ago (still being written).
    """
    from fsspec.core import url_to_fs  # on first tick, not when the code location loads

    fs, root = url_to_fs(url, **dict(storage_options or {}))
    root = root.rstrip("/")
    # Listings are cached per filesystem instance (s3fs); a sensor must see new objects.
    fs.invalidate_cache(root)
    if not fs.exists(root):
        return []
    now = time.time()
    found: list[SourceFile] = []
    for path, info in fs.find(root, detail=True).items():
        if info.get("type") == "directory":
            continue
        relpath = path[len(root) :].lstrip("/") if path.startswith(root) else path
        if not relpath or _hidden(relpath) or not fnmatch.fnmatch(relpath, pattern):
            continue
        if min_age_seconds > 0:
            modified = modified_at(info)
            if modified is not None and now - modified < min_age_seconds:
                continue
        found.append(
            SourceFile(
                path=relpath,
                url=full_url(fs, path),
                size=int(info.get("size") or 0),
                version=content_version(fs, path, info),
                modified=modified_at(info),
            )
        )
    found.sort(key=lambda f: f.path)
    return found


def next_source_cursor(
    cursor: SourceCursor,
    files: list[SourceFile],
    seen: dict[str, str],
    requested: list[SourceFile],
    truncated: bool,
    lookback: float,
) -> SourceCursor:
    """Move the watermark past what was requested; keep only versions inside the window."""
    times = [f.modified for f in (requested if truncated else files) if f.modified is not None]
    if truncated and requested and requested[-1].modified is not None:
        times = [requested[-1].modified]
    mark = max([t for t in (cursor.mark, *times) if t is not None], default=None)
    floor = mark - lookback if mark is not None else None
    recent = {
        f.path: seen[f.path]
        for f in files
        if f.path in seen and (f.modified is None or floor is None or f.modified >= floor)
    }
    return SourceCursor(recent=recent, mark=mark)
