"""Reading the exact byte range a ``{path, offset, size}`` blob reference points at."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .checksum import reference_checksum, verify_checksum
from .read_sources import check_range, judge, naming, read_policy


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


def read_blob(
    ref: Mapping[str, Any],
    *,
    storage_options: dict[str, Any] | None = None,
    verify: bool = False,
    allowed_sources: Sequence[str] | None = None,
) -> bytes:
    """Read exactly bytes ``[offset, offset + size)`` of ``ref["path"]`` with one ranged read.

    The path is judged first, as asset writers judge theirs: files under ``/proc``,
    ``/sys`` and ``/dev`` (RAM folders such as ``/dev/shm`` excepted) and non-regular
    files are refused, and with ``allowed_sources``
    (or :func:`~refiner_core.io.read_sources.set_read_sources` for the process) only the
    listed URL prefixes and local folders are read. A range that does not fit in the
    object is an ``EOFError`` before any buffer is made for it.

    By default that read is all it does. ``verify=True`` also checks the bytes against
    the reference's ``checksum`` (written by ``BlobAssetConfig(checksum=...)``) and raises
    :class:`~refiner_core.io.checksum.ChecksumMismatchError` naming the path, offset and
    both digests when they differ; a reference without a checksum is a ``ValueError``.

    Example:
        >>> import tempfile, os, refiner_core as mdr
        >>> p = os.path.join(tempfile.mkdtemp(), "block.bin")
        >>> _ = open(p, "wb").write(b"abcdefgh")
        >>> mdr.read_blob({"path": p, "offset": 3, "size": 2})
        b'de'
    """
    path, offset, size = validate_reference(ref)
    expected = required_checksum(ref) if verify else None
    data = b""
    if size:
        target = judge(path, storage_options, read_policy(allowed_sources))
        check_range(target, path, offset, size)
        with naming(path, offset, size, storage_options):
            data = read_range(target.fs, target.path, offset, size, url=path)
    if expected is not None:
        verify_checksum(data, expected, describe=describe_reference(path, offset, size))
    return data


def describe_reference(path: str, offset: int, size: int) -> str:
    return f"blob reference {path!r} [{offset}, {offset + size})"


def required_checksum(ref: Mapping[str, Any]) -> str:
    """The checksum of ``ref`` for ``verify=True``; ``ValueError`` when it has none."""
    checksum = reference_checksum(ref)
    if checksum is None:
        raise ValueError(
            f"blob reference {ref.get('path')!r} at offset {ref.get('offset')} has no checksum "
            "to verify: write it with BlobAssetConfig(checksum='sha256' or 'crc32c'), "
            "or read it with verify=False"
        )
    return checksum


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
