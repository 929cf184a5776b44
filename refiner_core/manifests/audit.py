"""The reference audit an attempt records in its manifest, and its sum in the summary.

Each write attempt checks the asset references it wrote when it closes (see
:mod:`refiner_core.sinks.reference_audit`) and records a :class:`ReferenceAudit`: how
many references it checked, how many failed, and the first few failures, each naming
the shard, the row, the column and the referenced path. Finalization sums the committed
attempts' audits into the dataset summary.

Example:
    >>> bad = ReferenceFailure(shard="00001", row=7, column="image",
    ...                        path="s3://b/out/assets/x/block-00000.bin",
    ...                        problem="the block does not exist")
    >>> a = ReferenceAudit(checked=10, attempts=1)
    >>> b = ReferenceAudit(checked=5, failure_count=1, failures=(bad,), attempts=1)
    >>> total = ReferenceAudit.combine([a, b])
    >>> total.checked, total.failure_count, total.attempts, total.ok
    (15, 1, 2, False)
    >>> total.failures[0].describe()
    "shard 00001 row 7, column 'image' (s3://b/out/assets/x/block-00000.bin): the block does not exist"
    >>> ReferenceAudit.from_json(total.to_json(), where="example") == total
    True
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# Failures an audit keeps by name; the rest are only counted.
SHOWN_FAILURES = 5


@dataclass(frozen=True)
class ReferenceFailure:
    """One reference that does not resolve: where it is (shard, row of the shard's
    output, column), what it points at (``path``) and what is wrong (``problem``)."""

    shard: str
    row: int
    column: str
    path: str
    problem: str

    def describe(self) -> str:
        return (
            f"shard {self.shard} row {self.row}, column {self.column!r} ({self.path}): "
            f"{self.problem}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "row": self.row,
            "column": self.column,
            "path": self.path,
            "problem": self.problem,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReferenceFailure:
        return cls(
            shard=str(data["shard"]),
            row=int(data["row"]),
            column=str(data["column"]),
            path=str(data["path"]),
            problem=str(data["problem"]),
        )


@dataclass(frozen=True)
class ReferenceAudit:
    """What a reference audit checked and found.

    ``checked``: references checked (in bounds of their block, or the file exists with
    the size written); ``checksums_verified``: of those, how many had their checksum
    read back and verified; ``failure_count``: references that failed either check,
    ``failures`` the first :data:`SHOWN_FAILURES` of them; ``attempts``: how many
    attempt audits this sums (1 for an attempt's own).
    """

    checked: int = 0
    failure_count: int = 0
    checksums_verified: int = 0
    failures: tuple[ReferenceFailure, ...] = ()
    attempts: int = 0

    @property
    def ok(self) -> bool:
        return self.failure_count == 0

    @classmethod
    def combine(cls, audits: Iterable[ReferenceAudit]) -> ReferenceAudit:
        """The sum of ``audits``, keeping the first failures in the order given."""
        checked = failure_count = checksums = attempts = 0
        failures: list[ReferenceFailure] = []
        for audit in audits:
            checked += audit.checked
            failure_count += audit.failure_count
            checksums += audit.checksums_verified
            attempts += audit.attempts
            failures.extend(audit.failures[: SHOWN_FAILURES - len(failures)])
        return cls(checked, failure_count, checksums, tuple(failures), attempts)

    def to_json(self) -> dict[str, Any]:
        return {
            "checked": self.checked,
            "failure_count": self.failure_count,
            "checksums_verified": self.checksums_verified,
            "failures": [f.to_json() for f in self.failures],
            "attempts": self.attempts,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], *, where: str) -> ReferenceAudit:
        """Read the JSON form; ``where`` names the file it came from in errors."""
        try:
            return cls(
                checked=int(data.get("checked", 0)),
                failure_count=int(data.get("failure_count", 0)),
                checksums_verified=int(data.get("checksums_verified", 0)),
                failures=tuple(ReferenceFailure.from_json(f) for f in data.get("failures", ())),
                attempts=int(data.get("attempts", 0)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"the reference audit in {where} is malformed ({type(exc).__name__}: {exc})"
            ) from exc


def read_audit(data: Mapping[str, Any], *, where: str) -> ReferenceAudit | None:
    """The ``reference_audit`` entry of a manifest's or summary's JSON form, if any."""
    value = data.get("reference_audit")
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"the reference audit in {where} is not an object: {value!r}")
    return ReferenceAudit.from_json(value, where=where)
