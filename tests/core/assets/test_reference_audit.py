"""Each write attempt checks the references it wrote when it closes and records the result
in its manifest; finalization sums those results into the summary."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pytest

import refiner_core as mdr
from refiner_core.io import DataFolder
from refiner_core.io.checksum import checksum_of
from refiner_core.manifests import DatasetSummary
from refiner_core.sinks.reference_audit import CHECKSUMS_PER_ATTEMPT, ReferenceRecorder
from tests.s3_fixtures import *  # noqa: F403

from .media import write_files

dt = mdr.datatype


def _items(tmp_path: Path, rows: int) -> list[dict]:
    contents = {f"{i:03d}.png": os.urandom(200 + i) for i in range(rows)}
    paths = write_files(tmp_path / "src", contents)
    names = sorted(paths)
    return [
        {"i": i, "image": paths[names[i]], "frames": [paths[names[i]], paths[names[-1 - i]]]}
        for i in range(rows)
    ]


_DTYPES = {"image": dt.image_path(), "frames": dt.list_(dt.image_path())}


def _manifests(out: str, storage_options: dict | None = None) -> list[dict]:
    folder = DataFolder(out, storage_options)
    found = folder.find("_refiner/attempts")
    return [json.loads(folder.read_bytes(relative)) for relative in found]


def test_blob_attempts_record_every_reference_checked_in_their_manifest(tmp_path):
    out = str(tmp_path / "out")
    sequence = mdr.from_items(_items(tmp_path, 40), dtypes=_DTYPES, items_per_shard=10)
    summary = (
        sequence.write_parquet(
            out, assets=mdr.BlobAssetConfig(checksum="crc32c", target_bytes=2_000)
        )
        .launch_local(num_workers=1)
        .summary
    )
    manifests = _manifests(out)
    assert len(manifests) == 4
    for manifest in manifests:
        audit = manifest["reference_audit"]
        # 10 rows: one image and two frames each
        assert audit["checked"] == 30
        assert audit["failure_count"] == 0 and audit["failures"] == []
        assert audit["checksums_verified"] == CHECKSUMS_PER_ATTEMPT
        assert manifest["counters"]["references_checked"] == 30
    assert summary.reference_audit is not None
    assert summary.reference_audit.checked == 120
    assert summary.reference_audit.attempts == 4
    assert summary.counters["references_checked"] == 120
    assert summary.counters["reference_failures"] == 0
    assert DatasetSummary.read(DataFolder(out)).reference_audit == summary.reference_audit


def test_file_attempts_check_each_copied_file_exists_with_its_size(tmp_path):
    out = str(tmp_path / "out")
    summary = (
        mdr.from_items(_items(tmp_path, 12), dtypes=_DTYPES)
        .write_jsonl(out, assets=mdr.FileAssetConfig())
        .launch_local()
        .summary
    )
    assert summary.reference_audit is not None
    assert (summary.reference_audit.checked, summary.reference_audit.failure_count) == (36, 0)


def test_attempts_without_assets_record_no_audit(tmp_path):
    out = str(tmp_path / "out")
    summary = mdr.from_items([{"i": 1}]).write_parquet(out).launch_local().summary
    assert summary.reference_audit is None
    assert "reference_audit" not in _manifests(out)[0]


def test_attempts_on_s3_list_their_blocks_and_record_the_audit(
    tmp_path, s3_bucket, s3_storage_options
):
    out = f"s3://{s3_bucket}/audit"
    summary = (
        mdr.from_items(_items(tmp_path, 20), dtypes=_DTYPES, items_per_shard=10)
        .write_parquet(
            out,
            assets=mdr.BlobAssetConfig(checksum="sha256", target_bytes=3_000),
            storage_options=s3_storage_options,
        )
        .launch_local(num_workers=1)
        .summary
    )
    audits = [m["reference_audit"] for m in _manifests(out, s3_storage_options)]
    assert [a["checked"] for a in audits] == [30, 30]
    assert all(a["failure_count"] == 0 for a in audits)
    assert summary.reference_audit is not None and summary.reference_audit.ok


def _blob_table(column: str, cells: list) -> pa.Table:
    field = dt.to_field(column, dt.blob_reference("image", checksum=True))
    return pa.table([pa.array(cells, field.type)], schema=pa.schema([field]))


def test_the_recorder_names_row_column_and_path_of_every_broken_reference(tmp_path):
    folder = DataFolder(str(tmp_path))
    block_dir = tmp_path / "assets" / "00000__0123456789ab"
    block_dir.mkdir(parents=True)
    block = str(block_dir / "block-00000.bin")
    with open(block, "wb") as f:
        f.write(b"abcdefgh")
    gone = str(block_dir / "block-00001.bin")
    ok = checksum_of(b"abcd", "crc32c")
    recorder = ReferenceRecorder("00000", "0123456789ab")
    recorder.note(
        _blob_table(
            "image",
            [
                {"path": block, "offset": 0, "size": 4, "checksum": ok},
                {"path": block, "offset": 4, "size": 4, "checksum": ok},  # wrong checksum
                None,
                {"path": block, "offset": 6, "size": 5, "checksum": ok},  # past the end
            ],
        ),
        first_row=100,
    )
    recorder.note(
        _blob_table("image", [{"path": gone, "offset": 0, "size": 1, "checksum": ok}]), 104
    )
    audit = recorder.verify(folder, listed=["assets/00000__0123456789ab"])
    assert (audit.checked, audit.failure_count, audit.checksums_verified) == (4, 3, 2)
    found = {(f.row, f.column, f.path): f.problem for f in audit.failures}
    assert found == {
        (103, "image", block): (
            "range [6, 11) reaches past the end of the block, which has 8 bytes"
        ),
        (104, "image", gone): "the block does not exist",
        (101, "image", block): (
            f"its crc32c is {checksum_of(b'efgh', 'crc32c')[7:]}, the reference says {ok[7:]}"
        ),
    }


def test_the_recorder_flags_a_copied_file_with_another_size(tmp_path):
    path = tmp_path / "assets" / "a" / "0_x.png"
    path.parent.mkdir(parents=True)
    path.write_bytes(b"12345")
    field = dt.to_field("image", dt.image_path())
    table = pa.table(
        [pa.array([str(path), str(tmp_path / "missing.png")])], schema=pa.schema([field])
    )
    recorder = ReferenceRecorder("00003", "0123456789ab")
    recorder.note(table, 0)
    audit = recorder.verify(
        DataFolder(str(tmp_path)),
        listed=["assets/a"],
        copied_sizes={str(path): 9, str(tmp_path / "missing.png"): 3},
    )
    assert audit.failure_count == 2
    problems = [f.describe() for f in audit.failures]
    assert problems == [
        f"shard 00003 row 0, column 'image' ({path}): the file has 5 bytes, not the 9 bytes copied",
        f"shard 00003 row 1, column 'image' ({tmp_path / 'missing.png'}): the file does not exist",
    ]


@pytest.mark.parametrize("value", [{"checked": "many"}, {"failures": [{"row": 1}]}, [1]])
def test_a_malformed_audit_in_a_manifest_names_the_file(value):
    from refiner_core.manifests import AttemptManifest

    data = {
        "run_id": "r",
        "shard_id": "00000",
        "attempt_id": "0123456789ab",
        "started_at": 1.0,
        "completed_at": 2.0,
        "reference_audit": value,
    }
    with pytest.raises(ValueError, match=r"reference audit in x\.json"):
        AttemptManifest.from_json(data, where="x.json")


def test_the_summary_names_the_files_of_attempts_that_recorded_no_audit(tmp_path):
    from refiner_core.sinks import finalize_output

    out = str(tmp_path / "out")
    assets = mdr.BlobAssetConfig(target_bytes=2_000)
    sequence = mdr.from_items(_items(tmp_path, 12), dtypes=_DTYPES, items_per_shard=3)
    summary = sequence.write_parquet(out, assets=assets).launch_local(num_workers=1).summary
    assert summary.unaudited_files == ()
    assert DatasetSummary.read(DataFolder(out)).unaudited_files == ()

    # an attempt written without a self-audit (an older writer): finalize names its file
    folder = DataFolder(out)
    [relative] = [r for r in folder.find("_refiner/attempts") if "00002__" in r]
    manifest = json.loads(folder.read_bytes(relative))
    del manifest["reference_audit"]
    folder.write_bytes(relative, json.dumps(manifest).encode())
    again = finalize_output("parquet", out, summary.run_id, assets=assets)
    assert again.unaudited_files == tuple(manifest["files"])
    assert again.reference_audit is not None and again.reference_audit.attempts == 3
    assert DatasetSummary.read(DataFolder(out)).unaudited_files == tuple(manifest["files"])


def test_a_summary_without_audits_tells_no_files_apart(tmp_path):
    out = str(tmp_path / "out")
    summary = mdr.from_items([{"i": 1}]).write_parquet(out).launch_local().summary
    assert summary.unaudited_files is None
    assert "unaudited_files" not in summary.to_json()


def test_a_malformed_unaudited_files_entry_names_the_summary():
    data = {"output": "/o", "format": "parquet", "run_id": "r", "unaudited_files": "a.parquet"}
    with pytest.raises(ValueError, match=r"dataset summary s\.json is malformed.*file names"):
        DatasetSummary.from_json(data, where="s.json")
