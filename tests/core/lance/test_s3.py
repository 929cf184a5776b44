"""write_lance / read_lance against a moto S3 server, blob assets included."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import refiner_core as mdr
from refiner_core.lance.dataset import lance_storage_options
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import MotoS3

from .helpers import facts, media, payload


def test_storage_options_mapping() -> None:
    options = {
        "key": "k",
        "secret": "s",
        "token": "t",
        "client_kwargs": {"endpoint_url": "http://127.0.0.1:5000", "region_name": "eu-west-1"},
        "default_block_size": 5 << 20,
        "aws_virtual_hosted_style_request": False,
    }
    assert lance_storage_options(options) == {
        "aws_access_key_id": "k",
        "aws_secret_access_key": "s",
        "aws_session_token": "t",
        "aws_endpoint": "http://127.0.0.1:5000",
        "allow_http": "true",
        "aws_region": "eu-west-1",
        "aws_virtual_hosted_style_request": "false",
    }
    assert lance_storage_options({"anon": True}) == {"aws_skip_signature": "true"}
    assert lance_storage_options(None) is None


def test_s3_round_trip_with_blobs(
    tmp_path: Path, s3_server: MotoS3, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    paths = media(tmp_path / "media", 10)
    out = f"s3://{s3_bucket}/robot/episodes.lance"
    seq = mdr.from_items(
        [{"id": i, "image": p} for i, p in enumerate(paths)],
        items_per_shard=4,
        dtypes={"image": mdr.datatype.image_path()},
    ).write_lance(
        out, assets=mdr.BlobAssetConfig(target_bytes=400), storage_options=s3_storage_options
    )
    stats = seq.launch_local(num_workers=2)
    assert stats.summary.commit["version"] == 1
    lance_options = lance_storage_options(s3_storage_options)
    written = facts(out, options=lance_options)
    assert written["rows"] == 10
    keys = s3_server.keys(s3_bucket)
    assert {f"robot/episodes.lance/{f}" for f in written["data_files"]} <= set(keys)
    assert any(k.startswith("robot/episodes.lance/assets/") for k in keys)
    assert any(k.startswith("robot/episodes.lance/_refiner/attempts/") for k in keys)
    assert not [k for k in keys if "/_refiner/lance/journal/" in k]

    rows = mdr.read_lance(out, storage_options=s3_storage_options).materialize()
    assert sorted(r.id for r in rows) == list(range(10))
    for row in rows:
        assert row.image["path"].startswith(f"s3://{s3_bucket}/robot/episodes.lance/assets/")
        assert mdr.read_blob(row.image, storage_options=s3_storage_options) == payload(row.id)


def test_s3_create_over_existing_and_append(
    tmp_path: Path, s3_bucket: str, s3_storage_options: dict[str, Any]
) -> None:
    out = f"s3://{s3_bucket}/t.lance"
    write = mdr.from_items([{"x": 1}, {"x": 2}]).write_lance
    write(out, storage_options=s3_storage_options).launch_local()
    with pytest.raises(ValueError, match=f"already exists at {out} \\(version 1\\)"):
        write(out, storage_options=s3_storage_options).launch_local()
    stats = write(out, mode="append", storage_options=s3_storage_options).launch_local()
    assert stats.summary.commit["version"] == 2
    assert len(mdr.read_lance(out, storage_options=s3_storage_options).materialize()) == 4
