"""``refiner verify`` reads table files and sizes blocks concurrently (bounded threads),
finding exactly what the one-request-at-a-time read finds."""

from __future__ import annotations

import glob
import os

import pytest

import refiner_core as mdr
from refiner_core.cli.storage import open_output
from refiner_core.cli.verify import verify_output
from refiner_core.io import file_sizes, map_in_order, read_table_rows
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import max_in_flight

dt = mdr.datatype


def _write(out: str, tmp_path, shards: int, storage_options=None) -> None:
    media = tmp_path / "media"
    media.mkdir()
    rows = []
    for i in range(shards):
        path = media / f"{i:02d}.png"
        path.write_bytes(os.urandom(300 + i))
        rows.append({"i": i, "image": str(path)})
    mdr.from_items(rows, items_per_shard=1, dtypes={"image": dt.image_path()}).write_parquet(
        out, assets=mdr.BlobAssetConfig(checksum="crc32c"), storage_options=storage_options
    ).launch_local()


def _table_reads(proxy) -> list:
    """The proxy's requests for table files (checksum reads of blocks run concurrently
    in both modes)."""
    return [r for r in proxy.records() if r.path.endswith(".parquet")]


def test_verify_on_s3_reads_files_and_sizes_blocks_in_parallel(
    tmp_path, s3_bucket, s3_storage_options, s3_proxy
):
    out = f"s3://{s3_bucket}/out"
    _write(out, tmp_path, 12, s3_storage_options)
    s3_proxy.latency_s = 0.05
    output = open_output(out, s3_proxy.storage_options())

    s3_proxy.clear()
    serial = verify_output(output, threads=1)
    assert max_in_flight(s3_proxy.records(), "HeadObject") == 1
    assert max_in_flight(_table_reads(s3_proxy), "GetObject") == 1

    s3_proxy.clear()
    parallel = verify_output(output, threads=8)
    assert max_in_flight(s3_proxy.records(), "HeadObject") >= 4
    assert max_in_flight(_table_reads(s3_proxy), "GetObject") >= 4

    assert serial.ok and parallel.ok
    assert (parallel.rows, parallel.blobs, parallel.checksums) == (12, 12, 12)
    assert (serial.rows, serial.blobs, serial.checksums) == (12, 12, 12)


def test_parallel_verify_reports_the_same_failures_in_row_order(tmp_path):
    out = str(tmp_path / "out")
    _write(out, tmp_path, 10)
    for shard in ("00003", "00007"):
        [block] = glob.glob(os.path.join(out, "assets", f"{shard}__*", "*", "block-*.bin"))
        with open(block, "r+b") as f:
            f.truncate(10)
    reports = [verify_output(open_output(out), threads=t) for t in (1, 8)]
    assert reports[0].failures == reports[1].failures
    assert reports[1].failure_count == 2
    assert reports[1].failures[0].startswith("row 3 (00003__")
    assert reports[1].failures[1].startswith("row 7 (00007__")
    assert "reaches past the end of the block, which has 10 bytes" in reports[1].failures[0]


def test_a_missing_table_file_is_named_before_anything_is_read(tmp_path):
    out = str(tmp_path / "out")
    _write(out, tmp_path, 3)
    [gone] = glob.glob(os.path.join(out, "00001__*.parquet"))
    os.remove(gone)
    report = verify_output(open_output(out), threads=4)
    assert report.failures == [f"table file {gone} is missing"]
    assert report.rows == 0


def test_the_helpers_keep_order_and_bound_their_threads(tmp_path):
    with pytest.raises(ValueError, match="max_workers must be a positive integer, got 0"):
        list(map_in_order(str, [1], max_workers=0))
    assert list(map_in_order(lambda n: -n, range(100), max_workers=3)) == [-n for n in range(100)]
    path = tmp_path / "a.bin"
    path.write_bytes(b"12345")
    assert file_sizes([str(path), str(path), str(tmp_path / "b")]) == {
        str(path): 5,
        str(tmp_path / "b"): None,
    }
    with pytest.raises(ValueError, match=r"reads 'parquet' or 'jsonl' files, not 'csv'"):
        read_table_rows(str(path), "csv")


def test_the_verify_command_takes_a_thread_count(tmp_path):
    from click.testing import CliRunner

    from refiner_core.cli import main

    out = str(tmp_path / "out")
    _write(out, tmp_path, 3)
    for threads in ("1", "4"):
        done = CliRunner().invoke(main, ["verify", out, "--threads", threads])
        assert done.exit_code == 0, done.output
        assert "3 rows, 3 blob references, 0 file paths, 3 checksums" in done.output
    refused = CliRunner().invoke(main, ["verify", out, "--threads", "0"])
    assert refused.exit_code == 2 and "--threads" in refused.output


def test_a_small_table_file_on_s3_is_read_with_one_request(
    tmp_path, s3_bucket, s3_storage_options, s3_proxy
):
    out = f"s3://{s3_bucket}/out"
    _write(out, tmp_path, 4, s3_storage_options)
    output = open_output(out, s3_proxy.storage_options())
    for threads in (1, 4):
        s3_proxy.clear()
        report = verify_output(output, threads=threads)
        assert report.ok and report.rows == 4
        # verify's existence check sizes each file once, its rows then take one GET
        # (and the first file one more, for the schema)
        for i, name in enumerate(output.tables):
            kinds = sorted(r.kind for r in s3_proxy.records() if r.path.endswith(name))
            assert kinds == ["GetObject"] * (2 if i == 0 else 1) + ["HeadObject"], (threads, kinds)
    [name] = output.tables[:1]
    url = f"s3://{s3_bucket}/out/{name}"
    s3_proxy.clear()
    rows = read_table_rows(
        url, "parquet", columns=["image"], storage_options=output.storage_options
    )
    assert len(rows) == 1 and set(rows[0]) == {"image"}
    assert [r.kind for r in s3_proxy.records()] == ["GetObject"]


def test_table_files_on_s3_past_the_one_request_size_and_empty_ones_are_read_whole(
    s3_bucket, s3_storage_options
):
    import s3fs

    from refiner_core.io.parallel_reads import WHOLE_READ_BYTES

    fs = s3fs.S3FileSystem(**s3_storage_options)
    big = [{"n": i, "text": "x" * 200} for i in range(WHOLE_READ_BYTES // 200 + 10)]
    fs.pipe(
        f"{s3_bucket}/big.jsonl",
        b"".join(b'{"n": %d, "text": "%s"}\n' % (row["n"], row["text"].encode()) for row in big),
    )
    fs.pipe(f"{s3_bucket}/empty.jsonl", b"")
    options = s3_storage_options
    assert read_table_rows(f"s3://{s3_bucket}/big.jsonl", "jsonl", storage_options=options) == big
    assert read_table_rows(f"s3://{s3_bucket}/empty.jsonl", "jsonl", storage_options=options) == []


def _block_reads(proxy) -> list:
    return [r for r in proxy.records() if r.kind == "GetObject" and r.path.endswith(".bin")]


def test_verify_on_s3_keeps_a_connection_per_thread_and_one_request_at_a_time_alone(
    tmp_path, s3_bucket, s3_storage_options, s3_proxy
):
    out = f"s3://{s3_bucket}/out"
    _write(out, tmp_path, 24, s3_storage_options)
    s3_proxy.latency_s = 0.1
    output = open_output(out, s3_proxy.storage_options())

    s3_proxy.clear()
    assert verify_output(output, threads=1).checksums == 24
    assert max_in_flight(_block_reads(s3_proxy), "GetObject") == 1

    s3_proxy.clear()
    assert verify_output(output, threads=20).checksums == 24
    # more than botocore's pool of 10 connections
    assert max_in_flight(s3_proxy.records(), "HeadObject") > 10
    assert max_in_flight(_block_reads(s3_proxy), "GetObject") > 10


def test_pooled_options_keep_a_pool_size_the_caller_chose():
    from refiner_core.io import pooled_options

    mine = {"config_kwargs": {"max_pool_connections": 4, "read_timeout": 5}}
    assert pooled_options("s3://b/out", mine, 64) == mine
    assert pooled_options("s3://b/out", {"config_kwargs": {"read_timeout": 5}}, 64) == {
        "config_kwargs": {"read_timeout": 5, "max_pool_connections": 64}
    }
    assert pooled_options("s3://b/out", None, 8) is None
    assert pooled_options("gs://b/out", {"token": "anon"}, 64) == {"token": "anon"}
