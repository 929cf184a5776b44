"""JSON Lines source, sharded by byte ranges cut at newlines."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from ..datatype import fields_from_dtypes
from ..io.datafile import full_url, resolve
from ..row import Row
from .base import DEFAULT_TARGET_SHARD_BYTES, Shard, check_num_shards, check_positive, make_shards
from .files import expand_inputs


class JsonlSource:
    """Reads ``.jsonl``/``.json`` files; a shard owns the lines that start in its byte range."""

    name = "read_jsonl"

    def __init__(
        self,
        inputs: Any,
        *,
        dtypes: dict[str, Any] | None = None,
        num_shards: int | None = None,
        target_shard_bytes: int = DEFAULT_TARGET_SHARD_BYTES,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        check_num_shards(num_shards)
        check_positive("target_shard_bytes", target_shard_bytes)
        self.inputs = inputs
        self.fields = fields_from_dtypes(dtypes)
        self.num_shards = num_shards
        self.target_shard_bytes = target_shard_bytes
        self.storage_options = storage_options

    def plan(self) -> list[Shard]:
        files = expand_inputs(
            self.inputs,
            suffixes=(".jsonl", ".json", ".ndjson"),
            storage_options=self.storage_options,
            what="read_jsonl",
        )
        sizes = [(path, int(fs.size(path))) for fs, path in files]
        total = sum(s for _, s in sizes)
        target = self.target_shard_bytes
        if self.num_shards is not None:
            target = max(1, -(-total // self.num_shards))
        payloads = []
        for path, size in sizes:
            start = 0
            while start < size:
                end = min(size, start + target)
                payloads.append((path, start, end))
                start = end
        return make_shards(payloads, source="read_jsonl")

    def schema_hint(self):
        return None

    def read(self, shard: Shard, *, batch_rows: int) -> Iterator[list[Row]]:
        path, start, end = shard.payload
        fs = self._filesystem()
        url = full_url(fs, path)
        with fs.open(path, "rb") as f:
            position = start
            if start > 0:
                f.seek(start - 1)
                skipped = f.readline()
                position = start - 1 + len(skipped)
            block: list[Row] = []
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
                if len(block) >= batch_rows:
                    yield block
                    block = []
            if block:
                yield block

    def _filesystem(self):
        first = self.inputs if isinstance(self.inputs, str) else list(self.inputs)[0]
        return resolve(first, self.storage_options)[0]
