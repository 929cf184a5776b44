"""Readers see only committed data: a finalized output folder reads as the files its
summary lists, an unfinalized one is an error unless ``uncommitted=True``, plain
folders read as before. Local disk and moto S3."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import s3fs

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403

pytestmark = pytest.mark.timeout(120)


def _fail_shard_2(row):
    if row["i"] >= 8:
        raise RuntimeError("shard 2 fails")
    return row


def _parquet_bytes(rows: list[dict]) -> bytes:
    buffer = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), buffer)
    return buffer.getvalue()


@pytest.fixture(params=["local", "s3"])
def place(request, tmp_path):
    """``(url, storage_options, put)`` of a fresh output folder; ``put(name, data)`` adds
    a file to it the way a user would (not through refiner)."""
    if request.param == "local":
        root = tmp_path / "out"

        def put_local(name: str, data: bytes) -> None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)

        return str(root), None, put_local
    bucket = request.getfixturevalue("s3_bucket")
    options = request.getfixturevalue("s3_storage_options")
    fs = s3fs.S3FileSystem(**options)

    def put_s3(name: str, data: bytes) -> None:
        fs.pipe_file(f"{bucket}/out/{name}", data)

    return f"s3://{bucket}/out", options, put_s3


def _ids(pipeline: mdr.Pipeline) -> list[int]:
    return sorted(row["i"] for row in pipeline.iter_rows())


def test_a_finalized_folder_reads_as_its_committed_files_only(place):
    url, options, put = place
    items = mdr.from_items([{"i": i} for i in range(12)], items_per_shard=4)
    stats = items.write_parquet(url, storage_options=options).launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 12
    put("foreign.parquet", _parquet_bytes([{"i": 100}]))
    put("nested/also-foreign.parquet", _parquet_bytes([{"i": 101}]))
    put("99999__aaaaaaaaaaaa.parquet", _parquet_bytes([{"i": 102}]))  # looks like an attempt
    assert _ids(mdr.read_parquet(url, storage_options=options)) == list(range(12))
    # uncommitted=True reads every data file of the folder
    everything = _ids(mdr.read_parquet(url, storage_options=options, uncommitted=True))
    assert everything == [*range(12), 100, 101, 102]


def test_an_unfinalized_folder_is_an_error_unless_asked(place):
    url, options, _ = place
    items = mdr.from_items([{"i": i} for i in range(12)], items_per_shard=4)
    with pytest.raises(mdr.StageFailed, match="shard 2 fails"):
        items.map(_fail_shard_2).write_parquet(url, storage_options=options).launch_local()
    with pytest.raises(mdr.UncommittedOutput) as caught:
        mdr.read_parquet(url, storage_options=options).plan()
    message = str(caught.value)
    assert url.rstrip("/") in message and "never finalized" in message
    assert "uncommitted=True" in message and "rundir" in message
    partial = _ids(mdr.read_parquet(url, storage_options=options, uncommitted=True))
    assert partial == list(range(8))


def test_a_failed_rerun_leaves_the_earlier_committed_data_readable(tmp_path):
    out = str(tmp_path / "out")
    first = mdr.from_items([{"i": i} for i in range(4)], items_per_shard=2)
    first.write_parquet(out).launch_local()
    second = mdr.from_items([{"i": i} for i in range(4, 16)], items_per_shard=4)
    with pytest.raises(mdr.StageFailed):
        second.map(_fail_shard_2).write_parquet(out).launch_local()
    # the second run's finished attempts are in the folder, but not committed
    assert _ids(mdr.read_parquet(out, uncommitted=True)) == [0, 1, 2, 3, 4, 5, 6, 7]
    assert _ids(mdr.read_parquet(out)) == [0, 1, 2, 3]


def test_jsonl_outputs_read_the_same_way(tmp_path):
    out = tmp_path / "out"
    items = mdr.from_items([{"i": i} for i in range(6)], items_per_shard=2)
    items.write_jsonl(str(out)).launch_local()
    (out / "foreign.jsonl").write_text(json.dumps({"i": 100}) + "\n")
    assert _ids(mdr.read_jsonl(str(out))) == list(range(6))
    crashed = tmp_path / "crashed"
    with pytest.raises(mdr.StageFailed):
        mdr.from_items([{"i": i} for i in range(12)], items_per_shard=4).map(
            _fail_shard_2
        ).write_jsonl(str(crashed)).launch_local()
    with pytest.raises(mdr.UncommittedOutput, match="read_jsonl: .*crashed is a refiner output"):
        mdr.read_jsonl(str(crashed)).plan()
    assert _ids(mdr.read_jsonl(str(crashed), uncommitted=True)) == list(range(8))


def test_plain_folders_read_every_file_as_before(tmp_path):
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    pq.write_table(pa.table({"i": [1, 2]}), plain / "a.parquet")
    pq.write_table(pa.table({"i": [3]}), plain / "sub" / "b.parquet")
    pq.write_table(pa.table({"i": [99]}), plain / "_skipped.parquet")
    assert _ids(mdr.read_parquet(str(plain))) == [1, 2, 3]


def test_a_parent_folder_reads_each_output_inside_it_by_its_summary(tmp_path):
    parent = tmp_path / "parent"
    mdr.from_items([{"i": i} for i in range(3)]).write_parquet(str(parent / "a")).launch_local()
    mdr.from_items([{"i": i} for i in range(3, 5)]).write_parquet(str(parent / "b")).launch_local()
    pq.write_table(pa.table({"i": [50]}), parent / "a" / "foreign.parquet")
    pq.write_table(pa.table({"i": [60]}), parent / "loose.parquet")
    assert _ids(mdr.read_parquet(str(parent))) == [0, 1, 2, 3, 4, 60]
