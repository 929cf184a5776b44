"""JSON Lines source, sharded by byte ranges cut at newlines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..datatype import fields_from_dtypes
from ..io.datafile import full_url, resolve
from ..io.ranged import open_range
from ..io.versions import Wanted
from ..row import Row
from ..validation import check_positive
from .base import (
    DEFAULT_TARGET_SHARD_BYTES,
    Shard,
    check_num_shards,
    group_runs,
    log_short_plan,
    make_shards,
)
from .files import expand_inputs
from .line_ranges import LineFile, line_range_payloads
from .row_ranges import ShardHint, wanted_shards


class JsonlSource:
    """Reads ``.jsonl``/``.json`` files; a shard owns the lines that start in its byte
    ranges (runs of consecutive ranges, several small files in one shard).

    With ``num_shards`` (or rows pointing at media, run by several workers: see
    :class:`ShardHint`) the plan has exactly ``min(num_shards, lines)`` shards, cut at
    line starts (:func:`line_range_payloads`).

    Example:
        >>> import json, tempfile, refiner_core as mdr
        >>> path = tempfile.mkdtemp() + "/index.jsonl"
        >>> _ = open(path, "w").write("".join(json.dumps({"i": i}) + "\\n" for i in range(10)))
        >>> len(mdr.read_jsonl(path, num_shards=4).plan())
        4
    """

    name = "read_jsonl"

    def __init__(
        self,
        inputs: Any,
        *,
        dtypes: dict[str, Any] | None = None,
        num_shards: int | None = None,
        target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
        storage_options: dict[str, Any] | None = None,
        uncommitted: bool = False,
        version: Wanted = None,
    ) -> None:
        check_num_shards(num_shards)
        check_positive("target_shard_bytes", target_shard_bytes)
        self.inputs = inputs
        self.fields = fields_from_dtypes(dtypes)
        self.num_shards = num_shards
        self.target_shard_bytes = target_shard_bytes
        self.storage_options = storage_options
        self.uncommitted = bool(uncommitted)
        self.version = version

    def plan(self, hint: ShardHint | None = None) -> list[Shard]:
        files = expand_inputs(
            self.inputs,
            suffixes=(".jsonl", ".json", ".ndjson"),
            storage_options=self.storage_options,
            what="read_jsonl",
            uncommitted=self.uncommitted,
            version=self.version,
        )
        sizes = [(full_url(fs, path), int(fs.size(path))) for fs, path in files]
        piece = self.target_shard_bytes
        if self.num_shards is not None:
            piece = max(1, -(-sum(size for _, size in sizes) // self.num_shards))
        ranges = [
            (url, start, min(size, start + piece))
            for url, size in sizes
            for start in range(0, size, piece)
        ]
        groups = group_runs(
            [end - start for _, start, end in ranges],
            target=self.target_shard_bytes,
            num_shards=self.num_shards,
        )
        payloads = [tuple(ranges[i] for i in group) for group in groups]
        minimum = (hint or ShardHint()).min_shards()
        count = wanted_shards(self.num_shards, minimum, len(payloads))
        if count is not None:
            line_files = [
                LineFile(fs, path, url, size)
                for (fs, path), (url, size) in zip(files, sizes, strict=True)
            ]
            payloads = line_range_payloads(line_files, count)
            log_short_plan("read_jsonl", self.num_shards, len(payloads), f"{len(payloads)} lines")
        return make_shards(payloads, source="read_jsonl")

    def schema_hint(self) -> None:
        return None

    def read(
        self, shard: Shard, *, batch_rows: int, batch_bytes: int | None = None
    ) -> Iterator[list[Row]]:
        """The lines that start in each ``(url, start, end)`` byte range of the shard, in
        blocks of ``batch_rows`` lines or fewer once they add up to ``batch_bytes`` (lines
        holding base64 media are large)."""
        for url, start, end in shard.payload:
            yield from self._read_range(url, start, end, batch_rows, batch_bytes)

    def _read_range(
        self, url: str, start: int, end: int, batch_rows: int, batch_bytes: int | None
    ) -> Iterator[list[Row]]:
        fs, path = resolve(url, self.storage_options)
        # from the byte before the range: a line starts at ``start`` only if it ends there
        with open_range(fs, path, max(start - 1, 0), end) as f:
            position = start
            if start > 0:
                skipped = f.readline()
                position = start - 1 + len(skipped)
            block: list[Row] = []
            block_bytes = 0
            while position < end:
                line = f.readline()
                if not line:
                    break
                line_start = position
                position += len(line)
                text = line.strip()
                if not text:
                    continue
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    raise ValueError(
                        f"read_jsonl {url}: invalid JSON in the line starting at byte "
                        f"{line_start}: {exc.msg} (column {exc.colno}). Fix or remove that line"
                    ) from exc
                if not isinstance(value, dict):
                    raise ValueError(
                        f"read_jsonl {url}: the line starting at byte {line_start} holds a "
                        f"{type(value).__name__}, not a JSON object; every line must be one object"
                    )
                block.append(Row._wrap(value))
                block_bytes += len(line)
                if len(block) >= batch_rows or (batch_bytes and block_bytes >= batch_bytes):
                    yield block
                    block = []
                    block_bytes = 0
            if block:
                yield block
