"""Sources: Parquet inputs, JSONL byte ranges, in-memory items, the shard limit."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr


def write_parquet_file(path, start: int, n: int, **kw) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"i": list(range(start, start + n))}), path, **kw)


def ids(pipeline: mdr.Pipeline) -> list[int]:
    return sorted(r.i for r in pipeline.iter_rows())


# parquet ---------------------------------------------------------------------------


def test_read_parquet_folder_recursive_skipping_underscore_and_dot(tmp_path):
    root = tmp_path / "data"
    write_parquet_file(root / "a.parquet", 0, 5)
    write_parquet_file(root / "nested" / "deeper" / "b.parquet", 5, 5)
    write_parquet_file(root / "c.pq", 10, 5)
    write_parquet_file(root / "_staging" / "skip.parquet", 100, 5)
    write_parquet_file(root / ".hidden" / "skip.parquet", 200, 5)
    write_parquet_file(root / "_skip.parquet", 300, 5)
    write_parquet_file(root / ".skip.parquet", 400, 5)
    (root / "README.md").write_text("not data")
    assert ids(mdr.read_parquet(str(root))) == list(range(15))


def test_read_parquet_globs_and_lists(tmp_path):
    for k in range(4):
        write_parquet_file(tmp_path / f"part-{k}.parquet", 10 * k, 10)
    write_parquet_file(tmp_path / "other" / "x.parquet", 100, 3)
    assert ids(mdr.read_parquet(str(tmp_path / "part-*.parquet"))) == list(range(40))
    assert ids(mdr.read_parquet(str(tmp_path / "part-[13].parquet"))) == list(range(10, 20)) + list(
        range(30, 40)
    )
    listed = [str(tmp_path / "part-0.parquet"), str(tmp_path / "other")]
    assert ids(mdr.read_parquet(listed)) == list(range(10)) + [100, 101, 102]
    # the same file named twice is read once
    twice = [str(tmp_path / "part-0.parquet"), str(tmp_path / "part-*.parquet")]
    assert ids(mdr.read_parquet(twice)) == list(range(40))


def test_read_parquet_shards_by_row_groups(tmp_path):
    path = tmp_path / "in.parquet"
    write_parquet_file(path, 0, 1000, row_group_size=100)
    pipeline = mdr.read_parquet(str(path), num_shards=5)
    shards = pipeline.plan()
    assert len(shards) == 5 and [s.id for s in shards] == [f"{k:05d}" for k in range(5)]
    assert ids(pipeline) == list(range(1000))
    group_bytes = pq.ParquetFile(path).metadata.row_group(0).total_byte_size
    whole = mdr.read_parquet(str(path), target_shard_bytes=group_bytes)
    assert len(whole.plan()) == 10  # one row group per shard
    assert ids(whole) == list(range(1000))
    tiny = mdr.read_parquet(str(path), target_shard_bytes=1)
    assert len(tiny.plan()) == 1000  # row groups over the target are cut, down to one row
    assert ids(tiny) == list(range(1000))


def test_read_parquet_columns_and_dtypes(tmp_path):
    path = tmp_path / "in.parquet"
    pq.write_table(pa.table({"i": [1, 2], "s": ["a", "b"], "f": [0.5, 1.5]}), path)
    rows = mdr.read_parquet(str(path), columns=["i", "f"], dtypes={"i": pa.int16()}).materialize()
    assert [r.to_dict() for r in rows] == [{"i": 1, "f": 0.5}, {"i": 2, "f": 1.5}]
    with pytest.raises(ValueError, match="nope"):
        mdr.read_parquet(str(path), columns=["nope"]).materialize()


def test_corrupt_parquet_error_names_the_file(tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    write_parquet_file(inputs / "good.parquet", 0, 3)
    bad = inputs / "bad.parquet"
    bad.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(ValueError, match="bad.parquet") as info:
        mdr.read_parquet(str(inputs)).materialize()
    assert str(bad) in str(info.value)
    # the same under launch_local
    with pytest.raises((ValueError, mdr.StageFailed), match="bad.parquet"):
        mdr.read_parquet(str(inputs)).write_parquet(str(tmp_path / "out")).launch_local()


def test_corrupt_data_pages_error_names_the_file(tmp_path):
    path = tmp_path / "damaged.parquet"
    pq.write_table(pa.table({"s": [f"row {i} " * 20 for i in range(2000)]}), path)
    data = bytearray(path.read_bytes())
    for k in range(100, len(data) // 2):  # the footer stays readable, the pages do not
        data[k] = (data[k] * 7 + 3) % 256
    path.write_bytes(bytes(data))
    pipeline = mdr.read_parquet(str(path))
    assert len(pipeline.plan()) == 1
    with pytest.raises(ValueError, match="damaged.parquet"):
        pipeline.materialize()
    with pytest.raises(mdr.StageFailed, match=r"shard 00000.*damaged\.parquet"):
        pipeline.write_parquet(str(tmp_path / "out")).launch_local()
    assert not list((tmp_path / "out").glob("*.parquet"))


def test_missing_inputs(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        mdr.read_parquet(str(tmp_path / "nothing-here")).materialize()
    with pytest.raises(FileNotFoundError):
        mdr.read_parquet(str(tmp_path / "*.parquet")).materialize()
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="empty"):
        mdr.read_parquet(str(tmp_path / "empty")).materialize()


# jsonl -----------------------------------------------------------------------------


def jsonl_lines(n: int, seed: int = 3) -> list[dict]:
    rng = random.Random(seed)
    return [{"i": i, "text": "x" * rng.randint(0, 40)} for i in range(n)]


@pytest.mark.parametrize("trailing_newline", [True, False])
@pytest.mark.parametrize("num_shards", [1, 2, 7, 37, 500])
def test_read_jsonl_byte_range_shards_cover_every_line_once(tmp_path, num_shards, trailing_newline):
    lines = jsonl_lines(120)
    text = "\n".join(json.dumps(line) for line in lines)
    if trailing_newline:
        text += "\n"
    path = tmp_path / "episodes.jsonl"
    path.write_text(text)
    pipeline = mdr.read_jsonl(str(path), num_shards=num_shards)
    shards = pipeline.plan()
    # one file cut at line starts: exactly num_shards ranges, or one per line if fewer
    assert len(shards) == min(num_shards, len(lines))
    assert len({s.payload[0][1] for s in shards}) == len(shards)
    rows = pipeline.materialize()
    assert [r.to_dict() for r in rows] == lines


def test_read_jsonl_blocks_of_large_lines_are_bounded_in_bytes(tmp_path):
    # lines of about 10 kB (base64 media, say): 50 kB of them make a block
    lines = [{"i": i, "image": "A" * 10_000} for i in range(200)]
    path = tmp_path / "media.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    source = mdr.read_jsonl(str(path)).source
    (shard,) = source.plan()
    blocks = list(source.read(shard, batch_rows=1024, batch_bytes=50_000))
    assert [len(b) for b in blocks] == [5] * 40
    assert [r.to_dict() for b in blocks for r in b] == lines
    (whole,) = source.read(shard, batch_rows=1024)
    assert len(whole) == 200


def test_read_jsonl_tiny_ranges_and_many_files(tmp_path):
    parts = [jsonl_lines(15, seed=k) for k in range(3)]
    for k, lines in enumerate(parts):
        body = "\n".join(json.dumps({**line, "file": k}) for line in lines)
        (tmp_path / f"part-{k}.jsonl").write_text(body + ("\n\n" if k == 1 else ""))
    pipeline = mdr.read_jsonl(str(tmp_path), target_shard_bytes=5)
    rows = pipeline.materialize()
    assert [(r.file, r.i) for r in rows] == [(k, i) for k in range(3) for i in range(15)]
    # the same, spread over worker processes and written out
    out = tmp_path / "out"
    stats = pipeline.write_parquet(str(out)).launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 45
    back = mdr.read_parquet(str(out)).materialize()
    assert sorted((r.file, r.i) for r in back) == [(k, i) for k in range(3) for i in range(15)]


def test_read_jsonl_num_shards_groups_small_files(tmp_path):
    for k in range(10):
        (tmp_path / f"part-{k}.jsonl").write_text(json.dumps({"file": k}) + "\n")
    pipeline = mdr.read_jsonl(str(tmp_path), num_shards=2)
    shards = pipeline.plan()
    assert [len(s.payload) for s in shards] == [5, 5]
    assert sorted(r.file for r in pipeline.materialize()) == list(range(10))


def test_read_parquet_num_shards_is_never_exceeded(tmp_path):
    path = tmp_path / "in.parquet"
    write_parquet_file(path, 0, 300, row_group_size=100)  # three equal row groups
    pipeline = mdr.read_parquet(str(path), num_shards=2)
    assert len(pipeline.plan()) == 2
    assert ids(pipeline) == list(range(300))


def test_inputs_on_different_filesystems_are_each_read_from_their_own(tmp_path):
    import fsspec

    local = tmp_path / "local.parquet"
    write_parquet_file(local, 0, 10)
    memory = fsspec.filesystem("memory")
    with memory.open("/refiner-test/remote.parquet", "wb") as f:
        pq.write_table(pa.table({"i": list(range(10, 15))}), f)
    lines = "".join(json.dumps({"i": i}) + "\n" for i in range(3))
    memory.pipe("/refiner-test/remote.jsonl", lines.encode())
    (tmp_path / "local.jsonl").write_text(json.dumps({"i": 3}) + "\n")
    try:
        parquet = mdr.read_parquet([str(local), "memory://refiner-test/remote.parquet"])
        assert sorted(ids(parquet)) == list(range(15))
        jsonl = mdr.read_jsonl(
            ["memory://refiner-test/remote.jsonl", str(tmp_path / "local.jsonl")]
        )
        assert sorted(r.i for r in jsonl.materialize()) == [0, 1, 2, 3]
    finally:
        memory.rm("/refiner-test", recursive=True)


def test_read_jsonl_bad_line_names_file_and_byte(tmp_path):
    path = tmp_path / "broken.jsonl"
    path.write_text('{"a": 1}\n{"a": \n')
    with pytest.raises(ValueError, match=r"broken\.jsonl.*byte 9"):
        mdr.read_jsonl(str(path)).materialize()


# items -------------------------------------------------------------------------------


def test_from_items_non_mappings_become_item_rows():
    rows = mdr.from_items([1, "two", None, [3], {"a": 4}, mdr.Row({"b": 5})]).materialize()
    assert [r.to_dict() for r in rows] == [
        {"item": 1},
        {"item": "two"},
        {"item": None},
        {"item": [3]},
        {"a": 4},
        {"b": 5},
    ]


def test_from_items_sharding():
    pipeline = mdr.from_items(range(25), items_per_shard=10)
    shards = pipeline.plan()
    assert [s.id for s in shards] == ["00000", "00001", "00002"]
    assert [r.item for r in pipeline.iter_rows()] == list(range(25))
    assert mdr.from_items([]).plan() == []


def test_from_items_accepts_generators():
    rows = mdr.from_items({"i": i} for i in range(3)).materialize()
    assert [r.i for r in rows] == [0, 1, 2]


# shard limit ---------------------------------------------------------------------------


def test_ten_thousand_shards_is_the_limit():
    assert mdr.MAX_SHARDS == 10_000
    assert len(mdr.from_items(range(10_000), items_per_shard=1).plan()) == 10_000
    # refused when built, before any plan or launch
    with pytest.raises(ValueError, match="10001 shards, over the limit of 10000") as info:
        mdr.from_items(range(10_001), items_per_shard=1)
    assert "items_per_shard=2 or more" in str(info.value)


def test_num_shards_over_the_limit_fails_when_built(tmp_path):
    with pytest.raises(ValueError, match="10000"):
        mdr.read_jsonl(str(tmp_path / "x.jsonl"), num_shards=10_001)
    with pytest.raises(ValueError, match="10000"):
        mdr.read_parquet(str(tmp_path / "x.parquet"), num_shards=10_001)


def test_jsonl_plan_over_the_limit(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({"i": i}) + "\n" for i in range(1500)))  # > 10,000 bytes
    with pytest.raises(ValueError, match="10000"):
        mdr.read_jsonl(str(path), target_shard_bytes=1).plan()
