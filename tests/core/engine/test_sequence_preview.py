"""Previews on a writer's sequence: the rows it would write, with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest
import s3fs

import refiner_core as mdr
from tests.s3_fixtures import *  # noqa: F403

from .helpers import read_output_rows


def _images(folder: Path, count: int) -> list[dict]:
    folder.mkdir()
    rows = []
    for i in range(count):
        path = folder / f"frame{i}.png"
        path.write_bytes(bytes([i]) * 100)
        rows.append({"episode": i, "image": str(path)})
    return rows


def _pipeline(rows: list[dict]) -> mdr.Pipeline:
    return (
        mdr.from_items(rows, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()})
        .filter(lambda r: r.episode != 1)
        .map(lambda r: {"double": r.episode * 2})
    )


@pytest.mark.parametrize("writer", ["write_parquet", "write_jsonl", "write_lance"])
def test_previews_show_the_rows_to_write_and_write_nothing(tmp_path, writer):
    rows = _images(tmp_path / "media", 5)
    out = tmp_path / "out"
    seq = getattr(_pipeline(rows), writer)(str(out), assets=mdr.BlobAssetConfig())

    everything = seq.materialize()
    assert [r.episode for r in everything] == [0, 2, 3, 4]
    assert [r.double for r in everything] == [0, 4, 6, 8]
    # the cells are the source paths: no asset was packed for a preview
    assert [r.image for r in everything] == [rows[i]["image"] for i in (0, 2, 3, 4)]
    assert [r.episode for r in seq.take(2)] == [0, 2]
    assert seq.take(0) == []
    assert [r.to_dict() for r in seq.iter_rows()] == [r.to_dict() for r in everything]
    with pytest.raises(ValueError, match="non-negative integer"):
        seq.take(-1)
    assert not out.exists()


def test_preview_matches_what_the_launch_writes(tmp_path):
    out = tmp_path / "out"
    seq = mdr.from_items([{"n": n} for n in range(7)], items_per_shard=3).write_parquet(str(out))
    preview = [r.to_dict() for r in seq.materialize()]
    assert not out.exists()
    seq.launch_local(num_workers=1)
    assert read_output_rows(out) == preview


def test_preview_writes_nothing_to_s3(s3_bucket, s3_storage_options):
    url = f"s3://{s3_bucket}/table"
    seq = mdr.from_items([{"n": n} for n in range(3)]).write_parquet(
        url, storage_options=s3_storage_options
    )
    assert [r.n for r in seq.take(5)] == [0, 1, 2]
    fs = s3fs.S3FileSystem(**s3_storage_options)
    assert fs.find(s3_bucket) == []


def test_previews_need_a_write_stage():
    plain = mdr.PipelineSequence.of(mdr.from_items([{"n": 1}]))
    for preview in (plain.materialize, plain.iter_rows, lambda: plain.take(1)):
        with pytest.raises(ValueError, match="not a write"):
            preview()
