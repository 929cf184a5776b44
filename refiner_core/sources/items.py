"""In-memory items as a source: mappings become rows, other values ``{"item": value}``."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ..datatype import fields_from_dtypes
from ..row import Row
from ..validation import check_positive
from .base import MAX_SHARDS, Shard, make_shards
from .row_ranges import ShardHint


class ItemsSource:
    """A list of Python values split into shards of ``items_per_shard``.

    Items that would make more than ``MAX_SHARDS`` shards are refused when the source
    is built, not when it is launched."""

    name = "from_items"

    def __init__(
        self,
        items: Iterable[Any],
        *,
        items_per_shard: int = 1000,
        dtypes: dict[str, Any] | None = None,
    ) -> None:
        check_positive("items_per_shard", items_per_shard)
        if isinstance(items, (str, bytes, Mapping)):
            raise TypeError("from_items expects an iterable of items (e.g. a list of dicts)")
        self.items = list(items)
        self.items_per_shard = items_per_shard
        _check_shard_count(len(self.items), items_per_shard)
        self.fields = fields_from_dtypes(dtypes)

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        n = self.items_per_shard
        slices = [(i, min(i + n, len(self.items))) for i in range(0, len(self.items), n)]
        return make_shards(slices, source="from_items")

    def schema_hint(self) -> None:
        return None

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[list[Row]]:
        start, end = shard.payload
        for block_start in range(start, end, batch_rows):
            block = []
            for item in self.items[block_start : min(end, block_start + batch_rows)]:
                if isinstance(item, Row):
                    block.append(item)
                elif isinstance(item, Mapping):
                    block.append(Row(item))
                else:
                    block.append(Row._wrap({"item": item}))
            yield block


def _check_shard_count(count: int, items_per_shard: int) -> None:
    """Refuse, when the pipeline is built, items that would plan more than ``MAX_SHARDS``."""
    shards = -(-count // items_per_shard)
    if shards > MAX_SHARDS:
        needed = -(-count // MAX_SHARDS)
        raise ValueError(
            f"from_items: {count} items at items_per_shard={items_per_shard} make {shards} "
            f"shards, over the limit of {MAX_SHARDS} shards per plan; pass "
            f"items_per_shard={needed} or more"
        )
