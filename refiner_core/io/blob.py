"""Reading the exact byte range a ``{path, offset, size}`` blob reference points at."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .datafile import resolve


def validate_reference(ref: Any) -> tuple[str, int, int]:
    """Return ``(path, offset, size)`` of a blob reference or raise ``ValueError``."""
    if not isinstance(ref, Mapping):
        raise ValueError(
            f"a blob reference must be a mapping with path, offset and size, got {type(ref).__name__}"
        )
    missing = [k for k in ("path", "offset", "size") if k not in ref]
    if missing:
        raise ValueError(f"blob reference {dict(ref)!r} lacks {missing}")
    path, offset, size = ref["path"], ref["offset"], ref["size"]
    if not isinstance(path, str) or not path:
        raise ValueError(f"blob reference path must be a non-empty string, got {path!r}")
    for name, value in (("offset", offset), ("size", size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(
                f"blob reference {name} must be an integer, got {value!r} (path {path!r})"
            )
        if value < 0:
            raise ValueError(f"blob reference {name} must be >= 0, got {value} (path {path!r})")
    return path, offset, size


def read_blob(ref: Mapping[str, Any], *, storage_options: dict[str, Any] | None = None) -> bytes:
    """Read exactly bytes ``[offset, offset + size)`` of ``ref["path"]`` with one ranged read.

    Example:
        >>> import tempfile, os, refiner_core as mdr
        >>> p = os.path.join(tempfile.mkdtemp(), "block.bin")
        >>> _ = open(p, "wb").write(b"abcdefgh")
        >>> mdr.read_blob({"path": p, "offset": 3, "size": 2})
        b'de'
    """
    path, offset, size = validate_reference(ref)
    if size == 0:
        return b""
    fs, fs_path = resolve(path, storage_options)
    return read_range(fs, fs_path, offset, size, url=path)


def read_range(fs: Any, path: str, offset: int, size: int, *, url: str) -> bytes:
    """Bytes ``[offset, offset + size)`` of ``path`` on ``fs`` in one ranged read;
    ``EOFError`` naming ``url`` and the blob's size when the range reaches past its end."""
    data = fs.cat_file(path, start=offset, end=offset + size) if size else b""
    if len(data) != size:
        raise EOFError(
            f"blob reference {url!r} [{offset}, {offset + size}) reaches past the end: "
            f"the blob has {int(fs.size(path))} bytes"
        )
    return data
