"""Checksums of asset bytes: ``"<algorithm>:<lowercase hex>"`` strings, computed as bytes stream.

``sha256`` comes from :mod:`hashlib`; ``crc32c`` (Castagnoli, as S3 and GCS use it)
from ``google-crc32c``, which uses the CPU's CRC instruction. A checksum is
computed on the bytes as they are written, so adding one never costs a second read.

Example:
    >>> from refiner_core.io.checksum import checksum_of, new_hasher
    >>> checksum_of(b"abc", "crc32c")
    'crc32c:364b3fb7'
    >>> hasher = new_hasher("sha256")
    >>> hasher.update(b"a"); hasher.update(b"bc")
    >>> hasher.checksum() == checksum_of(b"abc", "sha256")
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import google_crc32c

from ..errors import RefinerError

CHECKSUM_ALGORITHMS = ("sha256", "crc32c")


class ChecksumMismatchError(RefinerError, ValueError):
    """The bytes a blob reference points at do not match the checksum it carries."""


class Hasher:
    """An incremental checksum of one algorithm; :meth:`checksum` gives ``"<alg>:<hex>"``."""

    def __init__(self, algorithm: str) -> None:
        check_algorithm(algorithm)
        self.algorithm = algorithm
        self._state: Any = hashlib.sha256() if algorithm == "sha256" else google_crc32c.Checksum()

    def update(self, data: bytes | memoryview) -> None:
        self._state.update(data)

    def digest(self) -> bytes:
        return self._state.digest()

    def checksum(self) -> str:
        return f"{self.algorithm}:{self.digest().hex()}"


def check_algorithm(algorithm: Any, *, what: str = "checksum") -> str:
    """``algorithm`` when it is a known checksum algorithm; ``ValueError`` naming the choices."""
    if algorithm not in CHECKSUM_ALGORITHMS:
        raise ValueError(
            f"{what} {algorithm!r} is not one of {', '.join(map(repr, CHECKSUM_ALGORITHMS))} "
            "(or None for no checksum)"
        )
    return algorithm


def new_hasher(algorithm: str) -> Hasher:
    return Hasher(algorithm)


def checksum_of(data: bytes | memoryview, algorithm: str) -> str:
    """The ``"<algorithm>:<hex>"`` checksum of ``data``."""
    hasher = Hasher(algorithm)
    hasher.update(data)
    return hasher.checksum()


def parse_checksum(value: Any, *, where: str = "") -> tuple[str, str]:
    """``(algorithm, hex)`` of a checksum string; ``ValueError`` saying what is wrong."""
    suffix = f" ({where})" if where else ""
    if not isinstance(value, str) or ":" not in value:
        raise ValueError(
            f"a checksum must be a string '<algorithm>:<hex>' such as 'sha256:9f86…', "
            f"got {value!r}{suffix}"
        )
    algorithm, hex_digest = value.split(":", 1)
    check_algorithm(algorithm, what=f"checksum algorithm{suffix}")
    try:
        bytes.fromhex(hex_digest)
    except ValueError:
        raise ValueError(f"checksum {value!r} has a digest that is not hex{suffix}") from None
    return algorithm, hex_digest.lower()


def reference_checksum(ref: Mapping[str, Any]) -> str | None:
    """The checksum a blob reference carries, or ``None`` when it has none."""
    value = ref.get("checksum") if isinstance(ref, Mapping) else None
    return value if value else None


def carried_checksum(ref: Any, algorithm: str) -> str | None:
    """A reference's checksum when it is of ``algorithm`` (and so can be carried over)."""
    value = reference_checksum(ref) if isinstance(ref, Mapping) else None
    if isinstance(value, str) and value.startswith(f"{algorithm}:"):
        return value
    return None


def verify_checksum(data: bytes, expected: str, *, describe: str) -> None:
    """Raise :class:`ChecksumMismatchError` naming ``describe`` and both digests unless
    ``data`` has the checksum ``expected``."""
    algorithm, _ = parse_checksum(expected, where=describe)
    actual = checksum_of(data, algorithm)
    if actual != expected.lower():
        raise ChecksumMismatchError(
            f"checksum mismatch for {describe}: the reference says {expected}, the bytes have "
            f"{actual}. The block was changed or corrupted after it was written; re-run the "
            "write that produced it"
        )
