"""Shards that fit the work: exact shard counts from row ranges, enough shards for every
worker when rows point at media, and plans that stay the same from launch to launch."""

from __future__ import annotations

import json
import os
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.sources.row_ranges import SHARDS_PER_WORKER

from .helpers import CallLog, read_output_rows

MEDIA = {"clip": mdr.datatype.video_path()}


def index_file(path, rows: int, **kw) -> str:
    """A media index: one row per clip, in one row group unless ``row_group_size``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"i": list(range(rows)), "clip": [f"/clips/{i:05d}.mp4" for i in range(rows)]})
    pq.write_table(table, path, **kw)
    return str(path)


def rows_by_shard(pipeline: mdr.Pipeline, shards) -> list[list[int]]:
    source = pipeline.source
    return [
        [i for block in source.read(shard, batch_rows=7) for i in block.column("i").to_pylist()]
        for shard in shards
    ]


def test_one_row_group_file_in_four_shards_runs_on_two_worker_processes(tmp_path):
    path = index_file(tmp_path / "index.parquet", 1000)
    assert pq.ParquetFile(path).metadata.num_row_groups == 1
    pipeline = mdr.read_parquet(path, num_shards=4)
    shards = pipeline.plan()
    assert [s.id for s in shards] == ["00000", "00001", "00002", "00003"]

    out = tmp_path / "out"
    stats = (
        pipeline.map(lambda row: {"pid": os.getpid()})
        .write_parquet(str(out))
        .launch_local(num_workers=2)
    )
    assert stats.stages[0].shards == 4
    rows = read_output_rows(out)
    assert sorted(r["i"] for r in rows) == list(range(1000))  # every row once
    pids = {r["pid"] for r in rows}
    assert len(pids) == 2 and os.getpid() not in pids  # two worker processes did the work


@pytest.mark.parametrize("num_shards", [1, 2, 3, 4, 7, 49, 50, 51, 500])
def test_num_shards_gives_exactly_that_many_shards_or_one_per_row(tmp_path, num_shards):
    path = index_file(tmp_path / "index.parquet", 50)
    pipeline = mdr.read_parquet(path, num_shards=num_shards)
    shards = pipeline.plan()
    assert len(shards) == min(num_shards, 50)
    parts = rows_by_shard(pipeline, shards)
    assert all(parts)  # no empty shard
    assert [i for part in parts for i in part] == list(range(50))  # in order, each row once


@pytest.mark.parametrize("num_shards", [1, 2, 5, 6, 9, 13, 40, 116, 117, 300])
def test_row_groups_of_several_files_are_grouped_or_cut_to_the_exact_count(tmp_path, num_shards):
    # 117 rows: files of 40, 70 and 7 rows in row groups of 30, 25 and 7 rows
    offset = 0
    for name, rows, group in [("a", 40, 30), ("b", 70, 25), ("c", 7, 7)]:
        table = pa.table({"i": list(range(offset, offset + rows))})
        pq.write_table(table, tmp_path / f"{name}.parquet", row_group_size=group)
        offset += rows
    pipeline = mdr.read_parquet(str(tmp_path), num_shards=num_shards)
    shards = pipeline.plan()
    assert len(shards) == min(num_shards, 117)
    parts = rows_by_shard(pipeline, shards)
    assert all(parts)
    assert [i for part in parts for i in part] == list(range(117))


def damage_row_group(path: str, index: int) -> None:
    """Overwrite the data pages of row group ``index`` (the footer stays readable)."""
    meta = pq.ParquetFile(path).metadata.row_group(index)
    with open(path, "r+b") as f:
        for c in range(meta.num_columns):
            chunk = meta.column(c)
            start = chunk.dictionary_page_offset or chunk.data_page_offset
            f.seek(start)
            f.write(b"\xff" * chunk.total_compressed_size)


def test_a_shard_reads_only_the_row_groups_its_rows_are_in(tmp_path):
    path = index_file(tmp_path / "index.parquet", 400, row_group_size=100)
    damage_row_group(path, 3)
    pipeline = mdr.read_parquet(path, num_shards=8)  # two shards per row group
    shards = pipeline.plan()
    assert len(shards) == 8
    # the six shards in row groups 0 to 2 never touch the damaged one
    assert [i for part in rows_by_shard(pipeline, shards[:6]) for i in part] == list(range(300))
    for shard in shards[6:]:
        with pytest.raises(ValueError, match="index.parquet"):
            rows_by_shard(pipeline, [shard])


def test_asset_columns_get_enough_shards_for_every_worker(tmp_path):
    path = index_file(tmp_path / "index.parquet", 1000)
    marked = mdr.read_parquet(path, dtypes=MEDIA)
    assert len(marked.plan()) == 1  # one worker is busy with one shard
    assert len(marked.plan(workers=2)) == 2 * SHARDS_PER_WORKER
    assert len(marked.plan(workers=3)) == 3 * SHARDS_PER_WORKER
    assert len(marked.plan(workers=500)) == 1000  # no more shards than rows
    # a plain table is planned by its bytes whatever the worker count
    assert len(mdr.read_parquet(path).plan(workers=2)) == 1
    # a column marked by a later step counts too
    later = mdr.read_parquet(path).map(lambda r: {"clip2": r.clip}, dtypes={"clip2": MEDIA["clip"]})
    assert len(later.plan(workers=2)) == 2 * SHARDS_PER_WORKER
    # an explicit num_shards wins
    assert len(mdr.read_parquet(path, dtypes=MEDIA, num_shards=3).plan(workers=2)) == 3


def test_asset_marks_stored_in_the_file_count_and_unread_columns_do_not(tmp_path):
    field = MEDIA["clip"].to_field("clip")
    table = pa.table({"i": list(range(100)), "clip": ["/x.mp4"] * 100})
    table = table.cast(pa.schema([pa.field("i", pa.int64()), field]))
    pq.write_table(table, tmp_path / "marked.parquet")
    path = str(tmp_path / "marked.parquet")
    assert len(mdr.read_parquet(path).plan(workers=2)) == 2 * SHARDS_PER_WORKER
    assert len(mdr.read_parquet(path, columns=["i"]).plan(workers=2)) == 1


def test_the_shard_minimum_stays_under_the_shard_limit(tmp_path):
    path = index_file(tmp_path / "index.parquet", 30_000)
    shards = mdr.read_parquet(path, dtypes=MEDIA).plan(workers=4000)
    assert len(shards) == mdr.MAX_SHARDS


def test_jsonl_media_index_is_cut_at_lines_for_every_worker(tmp_path):
    lines = [{"i": i, "clip": f"/clips/{i}.mp4", "note": "n" * (i % 13)} for i in range(300)]
    path = tmp_path / "index.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    marked = mdr.read_jsonl(str(path), dtypes=MEDIA)
    assert len(marked.plan()) == 1
    shards = marked.plan(workers=2)
    assert len(shards) == 2 * SHARDS_PER_WORKER
    source = marked.source
    parts = [[r["i"] for b in source.read(s, batch_rows=16) for r in b] for s in shards]
    assert all(parts) and [i for part in parts for i in part] == list(range(300))


def test_plans_are_the_same_every_time(tmp_path):
    parquet = mdr.read_parquet(index_file(tmp_path / "index.parquet", 999), dtypes=MEDIA)
    path = tmp_path / "index.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(999)))
    for pipeline in (parquet, mdr.read_jsonl(str(path), dtypes=MEDIA)):
        first, second = pipeline.plan(workers=3), pipeline.plan(workers=3)
        assert len(first) == 3 * SHARDS_PER_WORKER
        assert [(s.id, s.payload) for s in first] == [(s.id, s.payload) for s in second]


def test_resume_plans_as_the_first_launch_and_redoes_nothing_committed(tmp_path):
    log = CallLog(tmp_path / "log")
    marker = tmp_path / "fail"
    marker.touch()

    def fn(row):
        log.record("call", row.i)
        if row.i == 700 and marker.exists():
            raise RuntimeError("transient outage")
        return {"seen": True}

    path = index_file(tmp_path / "index.parquet", 800)
    out, rundir = tmp_path / "out", tmp_path / "run"
    sequence = mdr.read_parquet(path, dtypes=MEDIA).map(fn).write_parquet(str(out))
    with pytest.raises(mdr.StageFailed, match="transient outage"):
        sequence.launch_local(num_workers=2, rundir=str(rundir))
    committed = [
        json.loads(p.read_text())["shard_id"] for p in (rundir / "stage-000").glob("*.json")
    ]
    assert committed and "00007" not in committed  # row 700 is in the last of 8 shards
    called_once = {int(tag) for _, tag in log.events("call")}

    marker.unlink()
    # relaunched with another worker count: planned for 2 workers, as the first launch was
    stats = sequence.launch_local(num_workers=3, rundir=str(rundir))
    write = stats.stages[0]
    assert (write.shards, write.shards_skipped) == (8, len(committed))
    calls: dict[int, int] = {}
    for _, tag in log.events("call"):
        calls[int(tag)] = calls.get(int(tag), 0) + 1
    rows_per_shard = 800 // 8
    for shard_id in committed:  # rows of committed shards were called exactly once
        first = int(shard_id) * rows_per_shard
        assert all(calls[i] == 1 for i in range(first, first + rows_per_shard)), shard_id
    assert called_once <= set(calls)
    assert sorted(r["i"] for r in read_output_rows(out)) == list(range(800))


MB = 1_000_000


def wide_file(path, rows: int, row_bytes: int, **kw) -> str:
    """A table of ``rows`` rows carrying ``row_bytes`` of incompressible bytes each."""
    rng = random.Random(7)
    payload = [rng.randbytes(row_bytes) for _ in range(rows)]
    pq.write_table(pa.table({"i": list(range(rows)), "frame": payload}), path, **kw)
    return str(path)


def test_target_shard_bytes_cuts_an_oversized_row_group_into_shards(tmp_path):
    # one row group of about 40 MB, a 10 MB target: four shards of its rows
    path = wide_file(tmp_path / "wide.parquet", 4_000, 10_000, compression="none")
    meta = pq.ParquetFile(path).metadata
    assert meta.num_row_groups == 1 and meta.row_group(0).total_byte_size > 40 * MB
    pipeline = mdr.read_parquet(path, target_shard_bytes=10 * MB)
    shards = pipeline.plan()
    assert len(shards) == 4
    parts = rows_by_shard(pipeline, shards)
    assert [i for part in parts for i in part] == list(range(4_000))  # in order, each row once
    assert max(len(p) for p in parts) - min(len(p) for p in parts) <= 1
    assert mdr.read_parquet(path, target_shard_bytes=10 * MB).plan() == shards  # stable

    out = tmp_path / "out"
    pipeline.map(lambda r: {"size": len(r.frame)}).filter(lambda r: r.i % 100 == 0).write_parquet(
        str(out)
    ).launch_local(num_workers=1)
    assert [(r["i"], r["size"]) for r in read_output_rows(out)] == [
        (i, 10_000) for i in range(0, 4_000, 100)
    ]


def test_row_groups_under_the_target_stay_whole_beside_a_cut_one(tmp_path):
    # row groups of 1000, 100 and 100 rows of 5 kB: 5 MB, then two of 0.5 MB
    path = wide_file(tmp_path / "mixed.parquet", 1_200, 5_000, compression="none")
    path2 = tmp_path / "groups.parquet"
    table = pq.read_table(path)
    with pq.ParquetWriter(path2, table.schema, compression="none") as writer:
        for start, size in ((0, 1_000), (1_000, 100), (1_100, 100)):
            writer.write_table(table.slice(start, size), row_group_size=size)
    pipeline = mdr.read_parquet(str(path2), target_shard_bytes=2 * MB)
    shards = pipeline.plan()
    parts = rows_by_shard(pipeline, shards)
    assert [i for part in parts for i in part] == list(range(1_200))
    # the 5 MB group in three ranges; the two small groups together in one shard
    assert [len(p) for p in parts] == [333, 333, 334, 200]


def test_cuts_past_the_shard_limit_are_refused_with_the_target_that_fits(tmp_path):
    path = index_file(tmp_path / "index.parquet", 20_000)
    with pytest.raises(ValueError, match=r"over the limit of 10000.*target_shard_bytes to at"):
        mdr.read_parquet(path, target_shard_bytes=1).plan()
