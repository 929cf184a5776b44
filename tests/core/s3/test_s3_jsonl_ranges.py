"""read_jsonl byte-range shards on a real S3 endpoint (moto server over HTTP)."""

from __future__ import annotations

import json

import pytest

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403


def upload_jsonl(tmp_path, s3_server, bucket: str, key: str, lines: list[dict]) -> int:
    """Write ``lines`` as JSON Lines to ``s3://bucket/key``; returns the file's size."""
    path = tmp_path / key
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    s3_server.client().upload_file(str(path), bucket, key)
    return path.stat().st_size


@pytest.mark.parametrize("num_shards", [1, 16])
def test_jsonl_shards_fetch_about_the_file_once(
    tmp_path, s3_server, s3_bucket, s3_proxy, num_shards
):
    lines = [{"i": i, "text": f"{i:06d}" * 300} for i in range(8_000)]  # ~15 MB
    size = upload_jsonl(tmp_path, s3_server, s3_bucket, "episodes.jsonl", lines)
    s3_proxy.clear()

    pipeline = mdr.read_jsonl(
        f"s3://{s3_bucket}/episodes.jsonl",
        num_shards=num_shards,
        storage_options=s3_proxy.storage_options(),
    )
    rows = sorted(pipeline.materialize(), key=lambda r: r.i)
    assert [r.to_dict() for r in rows] == lines
    fetched = sum(r.response_bytes for r in s3_proxy.records("GetObject"))
    # each shard reads its range and the end of the line that crosses it; s3fs's
    # read-ahead fetched 50 MiB past every range (8.5x the file with 16 shards)
    assert fetched <= 1.05 * size, f"{fetched} bytes fetched for a {size}-byte file"


def test_jsonl_lines_longer_than_a_read_are_read_whole_across_range_ends(
    tmp_path, s3_server, s3_bucket, s3_proxy
):
    # 300 kB lines (base64 media, say): every range end falls inside one
    lines = [{"i": i, "image": chr(65 + i % 26) * 300_000} for i in range(20)]
    size = upload_jsonl(tmp_path, s3_server, s3_bucket, "media.jsonl", lines)
    s3_proxy.clear()

    pipeline = mdr.read_jsonl(
        f"s3://{s3_bucket}/media.jsonl", num_shards=8, storage_options=s3_proxy.storage_options()
    )
    assert sorted((r.to_dict() for r in pipeline.materialize()), key=lambda r: r["i"]) == lines
    gets = s3_proxy.records("GetObject")
    # reads past a range end double in size (16 kB, 32 kB, ...): a few per shard
    assert len(gets) <= 8 * 8, len(gets)
    assert sum(r.response_bytes for r in gets) <= 2 * size


def test_jsonl_on_s3_is_cut_into_exactly_num_shards_at_line_starts(
    tmp_path, s3_server, s3_bucket, s3_storage_options
):
    lines = [{"i": i, "text": "t" * (i % 50)} for i in range(500)]
    upload_jsonl(tmp_path, s3_server, s3_bucket, "index.jsonl", lines)
    pipeline = mdr.read_jsonl(
        f"s3://{s3_bucket}/index.jsonl", num_shards=7, storage_options=s3_storage_options
    )
    shards = pipeline.plan()
    assert len(shards) == 7
    local = (tmp_path / "index.jsonl").read_bytes()
    for shard in shards:
        ((_, start, _),) = shard.payload
        assert start == 0 or local[start - 1 : start] == b"\n"  # each starts at a line
    parts = [[r.i for b in pipeline.source.read(s, batch_rows=64) for r in b] for s in shards]
    assert all(parts) and [i for part in parts for i in part] == list(range(500))
