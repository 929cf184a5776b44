"""share_lance_dataset: a new dataset holding a parent's rows on the parent's files, then appended to."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.errors import StageFailed
from refiner_core.integration import share_lance_dataset
from refiner_core.lance.blobs import BLOB_KEY
from refiner_core.lance.dataset import lance_storage_options
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import MotoS3, S3Proxy

from .helpers import facts, table

PARENT_ROWS = 1000
NEW_ROWS = 100
ASSETS = mdr.BlobAssetConfig(target_bytes=64 * 1024)
WRITES = ("PutObject", "UploadPart", "CompleteMultipartUpload", "CopyObject", "DeleteObject")


def frame(i: int) -> bytes:
    return i.to_bytes(4, "little") * (8 + i % 40)


def media_files(folder: Path, ids: range) -> list[str]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in ids:
        path = folder / f"frame_{i:05d}.bin"
        path.write_bytes(frame(i))
        paths.append(str(path))
    return paths


def write(out: str, media: Path, ids: range, mode: str = "create", **options: Any) -> None:
    rows = [{"id": i, "image": p} for i, p in zip(ids, media_files(media, ids), strict=True)]
    mdr.from_items(
        rows, items_per_shard=400, dtypes={"image": mdr.datatype.image_path()}
    ).write_lance(out, mode=mode, assets=ASSETS, **options).launch_local(num_workers=2)


def check_rows(uri: str, ids: range, options: dict[str, Any] | None = None) -> None:
    """The dataset holds exactly ``ids``, and every image reference reads its frame."""
    rows = table(uri, options=lance_storage_options(options)).to_pylist()
    assert sorted(r["id"] for r in rows) == list(ids)
    for r in rows:
        assert mdr.read_blob(r["image"], storage_options=options) == frame(r["id"])


def snapshot(root: Path) -> dict[str, tuple[int, int, int]]:
    return {
        str(p.relative_to(root)): (p.stat().st_ino, p.stat().st_mtime_ns, p.stat().st_size)
        for p in root.rglob("*")
        if p.is_file()
    }


def test_append_to_a_shared_dataset_leaves_the_parent_untouched(tmp_path: Path) -> None:
    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    write(str(parent), tmp_path / "media", range(PARENT_ROWS))
    before = snapshot(parent)

    shared = share_lance_dataset(str(parent), str(child))
    assert set(facts(str(parent))["data_files"]) <= set(shared)
    assert any(path.startswith("assets/") for path in shared)
    write(str(child), tmp_path / "media", range(PARENT_ROWS, PARENT_ROWS + NEW_ROWS), "append")

    check_rows(str(child), range(PARENT_ROWS + NEW_ROWS))
    assert snapshot(parent) == before  # no parent file added, rewritten or touched
    assert not any((child / path).exists() for path in shared)  # nothing was copied
    check_rows(str(parent), range(PARENT_ROWS))

    for path in sorted(child.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    child.rmdir()
    check_rows(str(parent), range(PARENT_ROWS))


def test_the_shared_list_is_all_the_new_dataset_needs(tmp_path: Path) -> None:
    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    write(str(parent), tmp_path / "old", range(5000, 5300))
    old_files = set(snapshot(parent))
    write(str(parent), tmp_path / "media", range(PARENT_ROWS), "overwrite")
    write(str(parent), tmp_path / "media", range(PARENT_ROWS, PARENT_ROWS + 5), "append")
    facts_before = facts(str(parent))

    shared = share_lance_dataset(str(parent), str(child))
    assert set(facts_before["data_files"]) <= set(shared)
    unneeded = set(snapshot(parent)) - set(shared)
    # The overwritten version's data files and blocks are not needed, nor are refiner's
    # and Lance's own bookkeeping files.
    assert {f for f in old_files if f.startswith(("data/", "assets/"))} <= unneeded
    write(str(child), tmp_path / "media", range(2000, 2000 + NEW_ROWS), "append")

    for relative in unneeded:
        os.remove(parent / relative)
    assert sorted(set(snapshot(parent))) == sorted(shared)
    check_rows(str(child), [*range(PARENT_ROWS + 5), *range(2000, 2000 + NEW_ROWS)])


def _delete_rows(uri: str, predicate: str) -> None:
    import lance

    lance.dataset(uri).delete(predicate)


def _index(uri: str) -> None:
    import lance

    lance.dataset(uri).create_scalar_index("id", "BTREE")


def test_deletion_and_index_files_are_shared(tmp_path: Path) -> None:
    from refiner_core.lance.isolation import call_isolated

    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    write(str(parent), tmp_path / "media", range(PARENT_ROWS))
    call_isolated(_delete_rows, str(parent), "id < 10")
    call_isolated(_index, str(parent))

    shared = share_lance_dataset(str(parent), str(child))
    assert any(p.startswith("_deletions/") for p in shared)
    assert any(p.startswith("_indices/") for p in shared)
    for relative in set(snapshot(parent)) - set(shared):
        os.remove(parent / relative)
    check_rows(str(child), range(10, PARENT_ROWS))


def test_share_and_append_on_s3_writes_nothing_under_the_parent(
    tmp_path: Path, s3_server: MotoS3, s3_bucket: str, s3_proxy: S3Proxy
) -> None:
    options = s3_proxy.storage_options()
    parent, child = f"s3://{s3_bucket}/v1.lance", f"s3://{s3_bucket}/v2.lance"
    write(parent, tmp_path / "media", range(PARENT_ROWS), storage_options=options)
    parent_keys = set(s3_server.keys(s3_bucket))
    s3_proxy.clear()

    shared = share_lance_dataset(parent, child, options)
    assert {f"v1.lance/{path}" for path in shared} <= parent_keys
    new_ids = range(PARENT_ROWS, PARENT_ROWS + NEW_ROWS)
    write(child, tmp_path / "media", new_ids, "append", storage_options=options)

    writes = [r for r in s3_proxy.records() if r.kind in WRITES]
    assert writes, "the clone and the append wrote through the proxy"
    assert not [r for r in writes if r.path.startswith(f"/{s3_bucket}/v1.lance/")]
    check_rows(child, range(PARENT_ROWS + NEW_ROWS), options)
    check_rows(parent, range(PARENT_ROWS), options)


def test_a_folder_that_is_no_lance_dataset_is_refused(tmp_path: Path) -> None:
    parquet = tmp_path / "rows"
    mdr.from_items([{"id": 1}]).write_parquet(str(parquet)).launch_local()
    for parent in (parquet, tmp_path / "missing.lance"):
        child = tmp_path / "child.lance"
        with pytest.raises(ValueError, match=f"{parent} is not a Lance dataset"):
            share_lance_dataset(str(parent), str(child))
        assert not child.exists()


def test_rows_of_another_schema_are_refused_before_anything_is_written(tmp_path: Path) -> None:
    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    mdr.from_items([{"id": i, "name": "a"} for i in range(5)]).write_lance(
        str(parent)
    ).launch_local()
    wrong = pa.schema([("id", pa.string()), ("name", pa.string())])
    with pytest.raises(ValueError, match=rf"{parent}.*'id' is string but .* stores int64"):
        share_lance_dataset(str(parent), str(child), schema=wrong)
    assert not child.exists()

    # Without a schema, the append itself refuses the rows and leaves the clone as it was.
    share_lance_dataset(str(parent), str(child))
    files = snapshot(child)
    with pytest.raises(StageFailed, match=rf"{child}.*'id' is string but .* stores int64"):
        mdr.from_items([{"id": "x", "name": "b"}]).write_lance(
            str(child), mode="append"
        ).launch_local()
    assert sorted(table(str(child)).column("id").to_pylist()) == list(range(5))
    assert not [f for f in set(snapshot(child)) - set(files) if f.startswith("data/")]


def test_a_folder_that_holds_files_is_not_shared_into(tmp_path: Path) -> None:
    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    mdr.from_items([{"id": 1}]).write_lance(str(parent)).launch_local()
    child.mkdir()
    (child / "note.txt").write_text("keep")
    with pytest.raises(ValueError, match=f"{child} already holds files"):
        share_lance_dataset(str(parent), str(child))
    assert [p.name for p in child.iterdir()] == ["note.txt"]


def test_lance_blob_files_beside_the_data_files_are_shared(tmp_path: Path) -> None:
    parent, child = tmp_path / "v1.lance", tmp_path / "v2.lance"
    clips = [os.urandom(200_000 if i % 3 == 0 else 100) for i in range(12)]
    field = pa.field("clip", pa.large_binary(), metadata={BLOB_KEY: b"true"})
    mdr.from_items(
        [{"id": i, "clip": c} for i, c in enumerate(clips)], dtypes={"clip": field}
    ).write_lance(str(parent)).launch_local()

    shared = share_lance_dataset(str(parent), str(child))
    assert any(path.endswith(".blob") for path in shared)
    for relative in set(snapshot(parent)) - set(shared):
        os.remove(parent / relative)
    rows = mdr.read_lance(str(child)).materialize()
    assert sorted((r.id, r.clip) for r in rows) == list(enumerate(clips))
