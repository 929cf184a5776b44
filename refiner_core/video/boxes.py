"""The top-level boxes of an MP4/MOV file: a cheap check that the file ends where its
boxes say it does (a cut file's last box claims bytes past its end)."""

from __future__ import annotations

import struct
from typing import BinaryIO

# The box types a file of the ISO base media format (MP4, MOV) starts with.
_FIRST_BOXES = {b"ftyp", b"moov", b"mdat", b"free", b"skip", b"wide", b"pnot"}


def box_overrun(handle: BinaryIO, size: int) -> str | None:
    """Why the boxes of the file behind ``handle`` (``size`` bytes) do not fit it, or
    ``None`` when they tile it exactly or it is not an MP4/MOV file. Reads 8-16 bytes per
    top-level box."""
    at, first = 0, True
    while at < size:
        handle.seek(at)
        header = handle.read(16)
        if len(header) < 8:
            return f"a box header at byte {at:,} is cut off by the end of the file ({size:,} bytes)"
        length, kind = struct.unpack(">I4s", header[:8])
        if first and kind not in _FIRST_BOXES:
            return None
        first = False
        if length == 1:
            if len(header) < 16:
                return f"the {kind.decode('latin-1')} box at byte {at:,} is cut off"
            length = struct.unpack(">Q", header[8:16])[0]
        elif length == 0:  # the last box, running to the end of the file
            return None
        if length < 8:
            return f"the box at byte {at:,} has an impossible size {length}"
        if at + length > size:
            return (
                f"the {kind.decode('latin-1')} box at byte {at:,} needs {length:,} bytes but the "
                f"file ends {at + length - size:,} bytes short of it ({size:,} bytes)"
            )
        at += length
    return None
