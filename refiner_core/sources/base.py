"""The source protocol: plan shards, then read one shard as blocks."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import pyarrow as pa

from ..row import Row
from ..validation import check_positive

if TYPE_CHECKING:  # row_ranges imports this module
    from .row_ranges import ShardHint

logger = logging.getLogger(__name__)

MAX_SHARDS = 10_000
DEFAULT_TARGET_SHARD_BYTES = 128 * 1024 * 1024

Block: TypeAlias = pa.Table | list[Row]


@dataclass(frozen=True)
class Shard:
    """One unit of work: a slice of the source that one worker reads.

    ``id`` is a zero-padded index (``"00042"``); ``payload`` is whatever the source
    needs to read it (files and row groups, a byte range, items). Shards are small
    and picklable so they can travel between processes and Dagster steps.
    """

    id: str
    payload: Any = None


def shard_id(index: int) -> str:
    return f"{index:05d}"


_SAFE_SHARD_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def check_shard_ids(shards: list[Shard], *, source: str) -> list[Shard]:
    """``shards`` when every id is a safe, unique file-name fragment; ``ValueError`` otherwise.

    Shard ids name data files, asset folders and manifests, so one holding ``/``,
    starting with ``.`` or ``_`` (hidden, or ``..``), or holding ``__`` (the separator
    before the attempt id) would write outside the output or where readers never look.

    >>> check_shard_ids([Shard("cam-a"), Shard("cam-b")], source="demo")[1].id
    'cam-b'
    """
    seen: set[str] = set()
    for shard in shards:
        sid = shard.id
        if not isinstance(sid, str) or not _SAFE_SHARD_ID.match(sid) or "__" in sid:
            raise ValueError(
                f"{source} planned a shard with id {sid!r}; shard ids name files inside the "
                "output, so they must be 1-128 characters of letters, digits, '.', '-' and '_', "
                "start with a letter or digit and hold no '__' (so '..', 'a/b' and hidden "
                "names are refused). Give the shard a plain id such as 'cam-a-00001'"
            )
        if sid in seen:
            raise ValueError(
                f"{source} planned two shards with id {sid!r}; each shard needs its own id, or "
                "one would overwrite the other's files"
            )
        seen.add(sid)
    return shards


def make_shards(payloads: list[Any], *, source: str) -> list[Shard]:
    """Number payloads as shards, enforcing the per-plan shard limit."""
    if len(payloads) > MAX_SHARDS:
        raise ValueError(
            f"{source} planned {len(payloads)} shards, over the limit of {MAX_SHARDS} shards per "
            "plan; raise target_shard_bytes or pass a smaller num_shards"
        )
    return [Shard(shard_id(i), p) for i, p in enumerate(payloads)]


def group_runs(weights: list[int], *, target: int, num_shards: int | None) -> list[list[int]]:
    """Split pieces (in order, by index) into runs of whole pieces.

    With ``num_shards`` the runs are balanced by weight into at most that many runs;
    otherwise a run closes before it would pass ``target``.

    Example:
        >>> group_runs([10] * 4, target=25, num_shards=None)
        [[0, 1], [2, 3]]
        >>> group_runs([10] * 5, target=1, num_shards=2)
        [[0, 1], [2, 3, 4]]
    """
    if not weights:
        return []
    if not any(weights):
        weights = [1] * len(weights)
    if num_shards is not None:
        total = sum(weights)
        groups: dict[int, list[int]] = {}
        seen = 0
        for i, weight in enumerate(weights):
            middle = seen + weight / 2
            groups.setdefault(min(num_shards - 1, int(middle * num_shards / total)), []).append(i)
            seen += weight
        return [groups[k] for k in sorted(groups)]
    runs: list[list[int]] = [[]]
    current = 0
    for i, weight in enumerate(weights):
        if runs[-1] and current + weight > target:
            runs.append([])
            current = 0
        runs[-1].append(i)
        current += weight
    return runs


def log_short_plan(source: str, num_shards: int | None, planned: int, rows: str) -> None:
    """Say why a plan has fewer shards than ``num_shards`` asked for: a shard holds at
    least one row (``rows`` names what the input has, e.g. ``"3 rows"``)."""
    if num_shards is not None and planned < num_shards:
        logger.warning(
            "%s: num_shards=%d is an upper bound; planned %d shard(s) because the input "
            "has only %s",
            source,
            num_shards,
            planned,
            rows,
        )


def check_num_shards(num_shards: int | None) -> None:
    if num_shards is None:
        return
    check_positive("num_shards", num_shards)
    if num_shards > MAX_SHARDS:
        raise ValueError(f"num_shards={num_shards} is over the limit of {MAX_SHARDS} shards")


def check_columns(columns: Any) -> None:
    if columns is not None and (
        isinstance(columns, str) or not all(isinstance(c, str) for c in columns)
    ):
        raise TypeError(f"columns must be a list of column names, got {columns!r}")


@runtime_checkable
class Source(Protocol):
    """What a source implements. Register new ones in ``refiner_core.sources``."""

    name: str

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        """List the shards; called when a stage starts, not when the pipeline is built.

        ``hint`` says how many workers share the shards and whether rows point at media; the
        same input and hint must always give the same shards."""

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[Block]:
        """Yield the shard's blocks (Arrow tables or lists of rows) of at most about
        ``batch_rows`` rows and, where the source can tell how large its rows are before
        reading them, about ``batch_bytes`` bytes (so wide rows, e.g. inline images,
        never make a block of ``batch_rows`` of them)."""

    def schema_hint(self) -> pa.Schema | None:
        """Known column types (with asset marks), or ``None``."""
