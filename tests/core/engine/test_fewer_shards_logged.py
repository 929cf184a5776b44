"""``num_shards`` gives exactly ``min(num_shards, rows)`` shards; a plan that has fewer says
how many and why."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr

LOGGER = "refiner_core.sources.base"


def parquet(tmp_path: Path, rows: int, row_group_size: int) -> str:
    path = tmp_path / "episodes.parquet"
    pq.write_table(pa.table({"n": list(range(rows))}), path, row_group_size=row_group_size)
    return str(path)


def test_fewer_rows_than_shards_is_logged(tmp_path: Path, caplog) -> None:
    path = parquet(tmp_path, rows=3, row_group_size=3)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shards = mdr.read_parquet(path, num_shards=4).plan()
    assert len(shards) == 3
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.getMessage() == (
        "read_parquet: num_shards=4 is an upper bound; planned 3 shard(s) because the input "
        "has only 3 rows"
    )


def test_fewer_jsonl_lines_than_shards_is_logged(tmp_path: Path, caplog) -> None:
    path = tmp_path / "episodes.jsonl"
    path.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(2)))
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shards = mdr.read_jsonl(str(path), num_shards=5).plan()
    (message,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert message.startswith(
        f"read_jsonl: num_shards=5 is an upper bound; planned {len(shards)} shard(s) because"
    )
    assert len(shards) < 5


def test_no_log_when_the_plan_has_every_shard(tmp_path: Path, caplog) -> None:
    path = parquet(tmp_path, rows=10, row_group_size=5)  # 2 row groups, split into 4 ranges
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(mdr.read_parquet(path, num_shards=4).plan()) == 4
    assert not [r for r in caplog.records if r.name == LOGGER]
