"""``reference_integrity`` on a version whose attempts audited themselves: the check
re-verifies only the files of a seeded sample of attempts (which still catches a manifest
that lies when the sample reaches it), and reads in full the files of any attempt that
recorded no audit of its own."""

from __future__ import annotations

import glob
import json
import os

import dagster as dg

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster import reference_scan
from refiner_dagster.reference_scan import scan_references
from tests.s3_fixtures import *  # noqa: F403

from .test_io_manager import partition_root
from .test_write_audit import _finalize, _write


def _episodes(files, per_shard=2):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(name="episodes", io_manager_key="refiner")
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(
            items, items_per_shard=per_shard, dtypes={"image": mdr.datatype.image_path()}
        )

    return episodes


def _manifest_of(version_url: str, shard: str) -> tuple[str, dict]:
    [path] = glob.glob(os.path.join(version_url, "_refiner", "attempts", f"{shard}__*.json"))
    with open(path) as f:
        return path, json.load(f)


def _truncate_block_of(version_url: str, shard: str) -> None:
    [block] = glob.glob(os.path.join(version_url, "assets", f"{shard}__*", "*", "block-*.bin"))
    with open(block, "r+b") as f:
        f.truncate(3)


def test_an_attempt_without_its_own_audit_is_read_in_full(dagster_instance, media):
    episodes = _episodes(media(8))
    finalized = rd.build_finalization_asset(episodes)
    pending = _write(dagster_instance, episodes, finalized)
    # shard 00001 as an older writer leaves it: no audit of its own; its block is broken
    path, manifest = _manifest_of(pending.url, "00001")
    del manifest["reference_audit"]
    with open(path, "w") as f:
        json.dump(manifest, f)
    _truncate_block_of(pending.url, "00001")
    [table_file] = manifest["files"]

    result, check = _finalize(dagster_instance, episodes, finalized)
    assert not result.success and not check.passed
    assert check.metadata["attempts_audited_at_write"].value == 3
    assert check.metadata["failures_recorded_at_write"].value == 0
    assert f"of {table_file}" in check.metadata["first_failures"].value
    assert not os.path.exists(os.path.join(partition_root(dagster_instance), "_current.json"))

    summary = pending.summary()
    assert summary is not None and summary.unaudited_files == (table_file,)
    for seed in range(4):
        # one audited attempt's file sampled, the unaudited one read whole: 2 + 2 references
        report = scan_references(pending, sample_files=1, seed=seed)
        assert (report.total, report.checked) == (8, 4)
        assert report.failure_count == 2
        assert all(f"of {table_file}" in line for line in report.failures)


def test_the_seeded_sample_catches_a_lying_manifest_it_reaches(dagster_instance, media):
    episodes = _episodes(media(16))
    finalized = rd.build_finalization_asset(episodes)
    pending = _write(dagster_instance, episodes, finalized)
    # the manifests recorded a clean audit; then a block of shard 00005 is cut short,
    # so its manifest claims more than is true
    _truncate_block_of(pending.url, "00005")
    [lying] = _manifest_of(pending.url, "00005")[1]["files"]

    # the default sample (64 attempts) covers all 8: publication is refused
    result, check = _finalize(dagster_instance, episodes, finalized)
    assert not result.success and not check.passed
    assert check.metadata["references_checked"].value == 16
    assert "reaches past the block's 3 bytes" in check.metadata["first_failures"].value

    # one attempt sampled: the seed decides whether the sample reaches the lie
    summary = pending.summary()
    assert summary is not None and summary.unaudited_files == ()
    files = [f for f in summary.files if f.endswith(".parquet")]
    assert len(files) == 8
    hits = [s for s in range(50) if reference_scan.sampled_files(files, 1, s) == [lying]]
    misses = [s for s in range(50) if reference_scan.sampled_files(files, 1, s) != [lying]]
    assert hits and misses
    caught = scan_references(pending, sample_files=1, seed=hits[0])
    assert (caught.total, caught.checked, caught.failure_count) == (16, 2, 2)
    assert f"of {lying}" in caught.failures[0]
    missed = scan_references(pending, sample_files=1, seed=misses[0])
    assert (missed.total, missed.checked, missed.failure_count) == (16, 2, 0)
    # the same seed chooses the same attempts every time
    assert reference_scan.sampled_files(files, 3, 7) == reference_scan.sampled_files(files, 3, 7)


def test_the_sampled_audit_on_s3_reads_only_the_sampled_table_files(
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

    files = [f for f in version.summary().files if f.endswith(".parquet")]
    assert len(files) == 8
    s3_proxy.clear()
    report = scan_references(version, sample_files=2, seed=1)
    tables = {
        r.path.rsplit("/", 1)[1]
        for r in s3_proxy.records("GetObject")
        if r.path.endswith(".parquet")
    }
    # the two sampled attempts' files, and the first file for the table's schema
    assert tables == {*reference_scan.sampled_files(files, 2, 1), files[0]}
    assert (report.total, report.checked, report.failure_count) == (16, 4, 0)
    # the two sampled attempts' references lie in at most two blocks, sized once each
    assert report.blocks <= 2
    block_heads = [r for r in s3_proxy.records("HeadObject") if r.path.endswith(".bin")]
    assert len(block_heads) == report.blocks


def test_a_sample_of_no_attempts_is_refused_naming_the_option(media):
    import pytest

    episodes = _episodes(media(2))
    finalized = rd.build_finalization_asset(episodes, checks=False)
    with pytest.raises(ValueError, match="sample_files must be a positive integer, got 0"):
        rd.build_dataset_checks(finalized, sample_files=0)
    assert len(rd.build_dataset_checks(finalized, sample_files=3)) == 2
