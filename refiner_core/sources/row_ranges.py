"""Plans of an exact number of shards: runs of whole pieces, or row ranges of pieces.

A piece is what a source can address on its own: a Parquet row group, a Lance
fragment. When a plan wants fewer shards than there are pieces, consecutive pieces are
grouped; when it wants more, pieces are cut into ranges of rows. Either way the plan
has exactly ``min(count, rows)`` shards, each a run of consecutive :class:`RowSpan`
s, balanced by the pieces' weights (bytes), and the same pieces always give the same
plan.

A pipeline whose rows point at media (asset columns) is planned with enough shards to
keep every worker busy (:class:`ShardHint`): a small index table is not the work, the
media it points at is.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

import pyarrow as pa

from ..datatype import asset_of
from .base import MAX_SHARDS

SHARDS_PER_WORKER = 4


@dataclass(frozen=True)
class RowSpan:
    """Rows ``[start, stop)`` of piece number ``piece`` of a plan."""

    piece: int
    start: int
    stop: int


@dataclass(frozen=True)
class ShardHint:
    """What the run tells a source's plan: how many workers share the shards, and
    whether the pipeline declares asset columns.

    A pipeline with asset columns (declared, or marked in the source's own schema) run
    by several workers gets at least ``SHARDS_PER_WORKER`` shards per worker, so that
    workers finishing early find more work; one worker is always busy with one shard.

    Example:
        >>> ShardHint(workers=2, media=True).min_shards()
        8
        >>> ShardHint(workers=2).min_shards() is None
        True
        >>> ShardHint(workers=1, media=True).min_shards() is None
        True
    """

    workers: int = 1
    media: bool = False

    def min_shards(self, schema: pa.Schema | None = None) -> int | None:
        """The fewest shards the plan should have, or ``None`` for no minimum."""
        if self.workers <= 1:
            return None
        if not (self.media or has_asset_columns(schema)):
            return None
        return min(MAX_SHARDS, SHARDS_PER_WORKER * self.workers)


def has_asset_columns(schema: pa.Schema | None) -> bool:
    return schema is not None and any(asset_of(field) is not None for field in schema)


def wanted_shards(num_shards: int | None, minimum: int | None, planned: int) -> int | None:
    """The exact shard count a plan must have, or ``None`` to keep the ``planned`` one:
    ``num_shards`` when given, else ``minimum`` when the plan has fewer shards."""
    if num_shards is not None:
        return num_shards
    if minimum is not None and planned < minimum:
        return minimum
    return None


def split_pieces(rows: list[int], weights: list[int], count: int) -> list[list[RowSpan]]:
    """Exactly ``min(count, sum(rows))`` shards of consecutive row spans, in order,
    covering every row of every piece once.

    Example:
        >>> [[(s.piece, s.start, s.stop) for s in shard]
        ...  for shard in split_pieces([100], [1000], 4)]
        [[(0, 0, 25)], [(0, 25, 50)], [(0, 50, 75)], [(0, 75, 100)]]
        >>> [[s.piece for s in shard] for shard in split_pieces([10] * 5, [1] * 5, 2)]
        [[0, 1, 2], [3, 4]]
    """
    if count < 1:
        raise ValueError(f"a plan needs at least one shard, got {count}")
    live = [i for i, n in enumerate(rows) if n > 0]
    total_rows = sum(rows[i] for i in live)
    count = min(count, total_rows)
    if count == 0:
        return []
    # a piece with rows but no known size still weighs as much as one row
    weight = {i: max(weights[i], 1) for i in live}
    if count <= len(live):
        return [
            [RowSpan(i, 0, rows[i]) for i in run]
            for run in _balanced_runs(live, [weight[i] for i in live], count)
        ]
    cuts = _cuts_per_piece(live, rows, weight, count)
    shards: list[list[RowSpan]] = []
    for i in live:
        k = cuts[i]
        bounds = [rows[i] * j // k for j in range(k + 1)]
        shards.extend([RowSpan(i, bounds[j], bounds[j + 1])] for j in range(k))
    return shards


def cut_to_target(
    rows: list[int], weights: list[int], target: int
) -> tuple[list[RowSpan], list[int]]:
    """Every piece as one span, except those weighing more than ``target``, which are
    cut into equal row ranges of about ``target`` each (their weight over ``target``,
    rounded; one row is never cut). Returns the spans, in order, and their weights.

    Refuses, before building them, cuts that alone pass ``MAX_SHARDS`` (no two ranges
    of one piece fit in one shard of ``target``).

    Example:
        >>> spans, weights = cut_to_target([100, 10], [41, 5], 10)
        >>> [(s.piece, s.start, s.stop) for s in spans], weights
        ([(0, 0, 25), (0, 25, 50), (0, 50, 75), (0, 75, 100), (1, 0, 10)], [10, 10, 10, 10, 5])
    """
    cuts = [
        min(max(n, 1), max(1, (w + target // 2) // target))
        for n, w in zip(rows, weights, strict=True)
    ]
    cut = sum(k for k in cuts if k > 1)
    if cut > MAX_SHARDS:
        raise ValueError(
            f"target_shard_bytes={target} cuts the row groups into {cut} shards, over the "
            f"limit of {MAX_SHARDS} shards per plan; raise target_shard_bytes to at least "
            f"{-(-sum(weights) // MAX_SHARDS)} or pass num_shards"
        )
    spans: list[RowSpan] = []
    span_weights: list[int] = []
    for i, k in enumerate(cuts):
        bounds = [rows[i] * j // k for j in range(k + 1)]
        for j in range(k):
            spans.append(RowSpan(i, bounds[j], bounds[j + 1]))
            span_weights.append(
                weights[i] if k == 1 else weights[i] * (bounds[j + 1] - bounds[j]) // rows[i]
            )
    return spans, span_weights


def _balanced_runs(pieces: list[int], weights: list[int], count: int) -> list[list[int]]:
    """``pieces`` in exactly ``count`` non-empty runs, each cut at the piece boundary
    nearest to its share of the total weight."""
    prefix = [0]
    for w in weights:
        prefix.append(prefix[-1] + w)
    total = prefix[-1]
    bounds = [0]
    b = 0
    for k in range(1, count):
        target = k * total / count
        lowest = bounds[-1] + 1
        highest = len(pieces) - (count - k)  # leave a piece for each run still to come
        b = max(b, lowest)
        while b < highest and abs(prefix[b + 1] - target) <= abs(prefix[b] - target):
            b += 1
        bounds.append(b)
    bounds.append(len(pieces))
    return [pieces[bounds[k] : bounds[k + 1]] for k in range(count)]


def _cuts_per_piece(
    pieces: list[int], rows: list[int], weight: dict[int, int], count: int
) -> dict[int, int]:
    """How many ranges each piece is cut into (at least one, at most its rows, ``count``
    in all): each extra range goes to the piece whose ranges are heaviest."""
    cuts = dict.fromkeys(pieces, 1)
    heap: list[tuple[float, int]] = [(-weight[i], i) for i in pieces if rows[i] > 1]
    heapq.heapify(heap)
    for _ in range(count - len(pieces)):
        _, i = heapq.heappop(heap)
        cuts[i] += 1
        if cuts[i] < rows[i]:
            heapq.heappush(heap, (-weight[i] / cuts[i], i))
    return cuts
