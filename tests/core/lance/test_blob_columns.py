"""read_lance of Lance's own blob columns (``lance-encoding:blob``): the bytes they hold,
never Lance's descriptor structs, in every Lance file format that stores blobs."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import refiner_core as mdr
from refiner_core.lance.blobs import BLOB_KEY

from .helpers import facts, write_dataset

CLIPS = [b"clip-0" * 3, None, b"", b"clip-3"]
BLOB = pa.field("clip", pa.large_binary(), metadata={BLOB_KEY: b"true"})


def blob_dataset(uri: str, clips: list[bytes | None], **kwargs) -> None:
    schema = pa.schema([pa.field("id", pa.int64()), BLOB])
    write_dataset(pa.table({"id": range(len(clips)), "clip": clips}, schema=schema), uri, **kwargs)


@pytest.mark.parametrize("file_format", ["2.0", "2.1", "2.2"])
def test_blob_columns_read_as_bytes(tmp_path: Path, file_format: str) -> None:
    uri = str(tmp_path / "clips.lance")
    blob_dataset(uri, CLIPS, data_storage_version=file_format)
    pipeline = mdr.read_lance(uri)
    rows = sorted(pipeline.materialize(), key=lambda r: r.id)
    assert [r.clip for r in rows] == CLIPS
    field = pipeline.source.schema_hint().field("clip")
    assert field.type == pa.large_binary() and field.metadata[BLOB_KEY] == b"true"
    block = next(pipeline.source.read(pipeline.plan()[0], batch_rows=100))
    assert block.schema.field("clip") == field
    only = mdr.read_lance(uri, columns=["clip"]).materialize()
    assert sorted(r.clip or b"" for r in only) == sorted(c or b"" for c in CLIPS)


def test_blob_batches_stay_within_batch_bytes(tmp_path: Path) -> None:
    """Large blobs live outside the fragment's data files; batches are still sized by bytes."""
    uri = str(tmp_path / "big.lance")
    clips = [bytes([i]) * (1 << 20) for i in range(8)]  # 1 MiB each, in Lance's blob files
    blob_dataset(uri, clips)
    source = mdr.read_lance(uri).source
    (shard,) = source.plan()
    tables = list(source.read(shard, batch_rows=65_536, batch_bytes=2 << 20))
    assert max(t.num_rows for t in tables) <= 2
    assert pa.concat_tables(tables).column("clip").to_pylist() == clips


def test_blob_columns_written_elsewhere(tmp_path: Path) -> None:
    """To Parquet as bytes, to Lance as a blob column again, and packed as an asset."""
    uri = str(tmp_path / "clips.lance")
    blob_dataset(uri, CLIPS)

    mdr.read_lance(uri).write_parquet(str(tmp_path / "pq")).launch_local()
    [path] = (tmp_path / "pq").glob("*.parquet")
    assert sorted(pq.read_table(path).to_pylist(), key=lambda r: r["id"]) == [
        {"id": i, "clip": c} for i, c in enumerate(CLIPS)
    ]

    again = str(tmp_path / "again.lance")
    mdr.read_lance(uri).write_lance(again).launch_local()
    stored = facts(again)["schema"].field("clip")
    assert getattr(stored.type, "extension_name", "").startswith("lance.blob")
    assert [r.clip for r in sorted(mdr.read_lance(again).materialize(), key=lambda r: r.id)] == (
        CLIPS
    )

    packed = tmp_path / "packed"
    mdr.read_lance(uri, dtypes={"clip": mdr.datatype.video_bytes()}).write_parquet(
        str(packed), assets=mdr.BlobAssetConfig()
    ).launch_local()
    [path] = packed.glob("*.parquet")
    rows = sorted(pq.read_table(path).to_pylist(), key=lambda r: r["id"])
    assert [mdr.read_blob(r["clip"]) if r["clip"] else None for r in rows] == CLIPS
