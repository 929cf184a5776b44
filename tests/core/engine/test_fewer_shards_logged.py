"""``num_shards`` is an upper bound: when fewer shards are planned, the plan says how many and why."""

from __future__ import annotations

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


def test_fewer_row_groups_than_shards_is_logged(tmp_path: Path, caplog) -> None:
    path = parquet(tmp_path, rows=10, row_group_size=5)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shards = mdr.read_parquet(path, num_shards=4).plan()
    (record,) = [r for r in caplog.records if r.name == LOGGER]
    assert record.getMessage() == (
        f"read_parquet: num_shards=4 is an upper bound; planned {len(shards)} shard(s) because "
        "the input has only 2 row groups, and a shard holds whole ones"
    )


def test_uneven_pieces_are_named_as_the_reason(tmp_path: Path, caplog) -> None:
    big, small = tmp_path / "big.parquet", tmp_path / "small.parquet"
    pq.write_table(pa.table({"pad": ["x" * 100] * 1000}), big)  # one large row group
    pq.write_table(pa.table({"pad": ["y", "z", "w"]}), small, row_group_size=1)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        shards = mdr.read_parquet([str(big), str(small)], num_shards=4).plan()
    (message,) = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    assert len(shards) < 4
    assert message.startswith(
        f"read_parquet: num_shards=4 is an upper bound; planned {len(shards)} shard(s) because "
        "the 4 row groups differ in size: the largest holds "
    )
    assert message.endswith("of the input, more than one shard's share")


def test_no_log_when_the_plan_has_every_shard(tmp_path: Path, caplog) -> None:
    path = parquet(tmp_path, rows=8, row_group_size=2)
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        assert len(mdr.read_parquet(path, num_shards=4).plan()) == 4
    assert not [r for r in caplog.records if r.name == LOGGER]
