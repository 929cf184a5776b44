"""``reference_integrity`` before publishing: the write attempts' recorded audits, and a
seeded sample the check re-verifies itself (so a manifest that lies is caught)."""

from __future__ import annotations

import glob
import json
import os

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.checks import scan_references
from tests.s3_fixtures import *  # noqa: F403
from tests.s3_server import max_in_flight

from .test_io_manager import current_pointer, partition_root

RESOURCES = {"refiner": rd.RefinerBlobIOManager(num_workers=1)}


def _episodes(files):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()})

    return episodes


def _write(instance, episodes, finalized):
    """Materialize the dataset asset only: a written, unpublished version."""
    written = dg.materialize(
        [episodes, finalized], instance=instance, resources=RESOURCES, selection=[episodes]
    )
    assert written.success
    storage = rd.DatasetStorage(partition_root(instance))
    return storage.pending(["episodes"], None)


def _edit_manifests(version_url: str, edit) -> list[str]:
    paths = sorted(glob.glob(os.path.join(version_url, "_refiner", "attempts", "*.json")))
    for path in paths:
        with open(path) as f:
            manifest = json.load(f)
        edit(manifest)
        with open(path, "w") as f:
            json.dump(manifest, f)
    return paths


def _finalize(instance, episodes, finalized):
    result = dg.materialize(
        [episodes, finalized],
        instance=instance,
        resources=RESOURCES,
        selection=[finalized],
        raise_on_error=False,
    )
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    return result, checks["reference_integrity"]


def test_the_sample_catches_a_truncated_block_that_the_manifests_call_fine(dagster_instance, media):
    episodes = _episodes(media(8))
    # 8 references, 2 per block: a sample of 7 holds a reference of every block
    finalized = rd.build_finalization_asset(episodes, sample_threshold=1, sample_size=7, seed=3)
    pending = _write(dagster_instance, episodes, finalized)

    def all_fine(manifest):
        manifest["reference_audit"] = {"checked": 2, "failure_count": 0, "attempts": 1}

    assert len(_edit_manifests(pending.url, all_fine)) == 4
    [block] = glob.glob(os.path.join(pending.url, "assets", "00002__*", "*", "block-*.bin"))
    with open(block, "r+b") as f:
        f.truncate(3)

    result, check = _finalize(dagster_instance, episodes, finalized)
    assert not result.success and not check.passed
    assert check.metadata["references_checked_at_write"].value == 8
    assert check.metadata["failures_recorded_at_write"].value == 0
    assert check.metadata["references_total"].value == 8
    assert check.metadata["references_checked"].value == 7
    assert check.metadata["failures"].value >= 1
    assert "re-checked reference(s) are broken" in check.description
    assert "reaches past the block's 3 bytes" in check.metadata["first_failures"].value
    root = partition_root(dagster_instance, "episodes")
    assert not os.path.exists(os.path.join(root, "_current.json"))


def test_a_failure_a_write_attempt_recorded_blocks_publication(dagster_instance, media):
    episodes = _episodes(media(6))
    finalized = rd.build_finalization_asset(episodes, sample_threshold=1, sample_size=1)
    pending = _write(dagster_instance, episodes, finalized)
    broken = os.path.join(pending.url, "assets", "gone.bin")

    def record_failure(manifest):
        if manifest["shard_id"] != "00001":
            return
        manifest["reference_audit"] = {
            "checked": 2,
            "failure_count": 1,
            "failures": [
                {
                    "shard": "00001",
                    "row": 1,
                    "column": "image",
                    "path": broken,
                    "problem": "the block does not exist",
                }
            ],
            "attempts": 1,
        }

    _edit_manifests(pending.url, record_failure)
    result, check = _finalize(dagster_instance, episodes, finalized)
    assert not result.success and not check.passed
    assert check.metadata["failures_recorded_at_write"].value == 1
    assert check.metadata["attempts_audited_at_write"].value == 3
    assert check.description.startswith("1 broken reference(s) recorded by the write attempts")
    assert (
        f"recorded at write: shard 00001 row 1, column 'image' ({broken}): the block does not "
        "exist" in check.metadata["first_failures"].value
    )


def test_clean_writes_publish_with_the_write_audit_in_the_check(dagster_instance, media):
    episodes = _episodes(media(6))
    finalized = rd.build_finalization_asset(episodes)
    result = dg.materialize([episodes, finalized], instance=dagster_instance, resources=RESOURCES)
    assert result.success
    check = {e.check_name: e for e in result.get_asset_check_evaluations()}["reference_integrity"]
    assert check.passed
    assert check.metadata["references_checked_at_write"].value == 6
    assert check.metadata["attempts_audited_at_write"].value == 3
    assert current_pointer(partition_root(dagster_instance, "episodes"))["rows_written"] == 6


def test_the_full_audit_on_s3_reads_in_parallel_and_finds_what_the_serial_one_finds(
    dagster_instance, media, s3_bucket, s3_proxy
):
    from tests.dagster.fanout_defs import S3_ENDPOINT_ENV, s3_resource

    os.environ[S3_ENDPOINT_ENV] = s3_proxy.endpoint_url
    try:
        refiner = rd.RefinerBlobIOManager(
            base_url=f"s3://{s3_bucket}/data", num_workers=1, s3=s3_resource()
        )
    finally:
        del os.environ[S3_ENDPOINT_ENV]
    episodes = _episodes(media(16))
    finalized = rd.build_finalization_asset(episodes)
    result = dg.materialize(
        [episodes, finalized], instance=dagster_instance, resources={"refiner": refiner}
    )
    assert result.success
    version = refiner.storage().current(["episodes"], None)
    s3_proxy.latency_s = 0.05

    reports = {}
    for threads in (1, 8):
        s3_proxy.clear()
        reports[threads] = scan_references(version, threads=threads)
        heads = max_in_flight(s3_proxy.records(), "HeadObject")
        assert heads == 1 if threads == 1 else heads >= 4
    # the threaded scan reads the table files 8 at a time
    tables = [r for r in s3_proxy.records("GetObject") if r.path.endswith(".parquet")]
    assert max_in_flight(tables, "GetObject") >= 4
    assert reports[1] == reports[8]
    assert (reports[8].total, reports[8].checked, reports[8].blocks) == (16, 16, 8)
    assert reports[8].checked_at_write == 16 and reports[8].failure_count == 0
