"""Sampled checksum verification for the ``reference_integrity`` check.

References written with ``checksum=`` carry ``"<algorithm>:<hex>"``. Verifying one
means reading its bytes, so the check verifies all of them on small datasets (at
most ``full_below`` checksummed references) and a seeded random ``rate`` of them
above that. The bytes are read with :func:`refiner_core.iter_blobs`: nearby ranges
of a block in one request, blocks concurrently, memory bounded.

Example:
    >>> import os, tempfile, refiner_core as mdr
    >>> from refiner_core.io.checksum import checksum_of
    >>> p = os.path.join(tempfile.mkdtemp(), "block-00000.bin")
    >>> _ = open(p, "wb").write(b"abcdef")
    >>> refs = [("column 'v' row 0", {"path": p, "offset": 0, "size": 3,
    ...                               "checksum": checksum_of(b"abc", "crc32c")}),
    ...         ("column 'v' row 1", {"path": p, "offset": 3, "size": 3,
    ...                               "checksum": checksum_of(b"xyz", "crc32c")})]
    >>> audit = verify_checksums(refs, rate=0.5, full_below=10)
    >>> audit.verified, audit.failure_count, audit.failures[0].startswith("column 'v' row 1:")
    (2, 1, True)
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import refiner_core as mdr
from refiner_core.io import checksum_of, parse_checksum

DEFAULT_CHECKSUM_SAMPLE_RATE = 0.01
DEFAULT_CHECKSUM_FULL_BELOW = 10_000
_SHOWN = 5


@dataclass
class ChecksumAudit:
    """How many checksums were verified, how many failed, and the first failures."""

    candidates: int = 0
    verified: int = 0
    failure_count: int = 0
    failures: list[str] = field(default_factory=list)


def choose(count: int, *, rate: float, full_below: int, seed: int) -> list[int]:
    """Indices of the references to verify: all of them up to ``full_below``, else a
    seeded sample of ``rate`` of them (at least one), in order.

    >>> choose(3, rate=0.1, full_below=5, seed=0), len(choose(1000, rate=0.1, full_below=5, seed=0))
    ([0, 1, 2], 100)
    """
    if count <= full_below:
        return list(range(count))
    wanted = min(count, max(1, round(count * rate)))
    return sorted(random.Random(seed).sample(range(count), wanted))


def verify_checksums(
    refs: Sequence[tuple[str, dict[str, Any]]],
    *,
    rate: float = DEFAULT_CHECKSUM_SAMPLE_RATE,
    full_below: int = DEFAULT_CHECKSUM_FULL_BELOW,
    seed: int = 0,
    storage_options: dict[str, Any] | None = None,
) -> ChecksumAudit:
    """Verify the checksums of ``(where, reference)`` pairs that carry one (a sample of
    them above ``full_below``); every mismatch is reported naming ``where`` and the range."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"checksum sample rate must be in (0, 1], got {rate!r}")
    audit = ChecksumAudit()
    carrying = [(where, ref) for where, ref in refs if ref.get("checksum")]
    audit.candidates = len(carrying)
    chosen = [
        carrying[i] for i in choose(len(carrying), rate=rate, full_below=full_below, seed=seed)
    ]
    blobs = mdr.iter_blobs((ref for _, ref in chosen), storage_options=storage_options)
    for (where, ref), data in zip(chosen, blobs, strict=True):
        audit.verified += 1
        problem = _mismatch(ref, data)
        if problem:
            audit.failure_count += 1
            if len(audit.failures) < _SHOWN:
                audit.failures.append(f"{where}: {problem}")
    return audit


def _mismatch(ref: dict[str, Any], data: bytes | None) -> str | None:
    expected = ref["checksum"]
    try:
        algorithm, _ = parse_checksum(expected)
    except ValueError as exc:
        return f"malformed checksum: {exc}"
    actual = checksum_of(data or b"", algorithm)
    if actual == expected.lower():
        return None
    end = ref["offset"] + ref["size"]
    return (
        f"checksum mismatch in {ref['path']} [{ref['offset']}, {end}): expected {expected}, "
        f"the bytes have {actual}"
    )
