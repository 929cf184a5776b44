"""reference_integrity verifies the checksums that references carry (refiner/checksum)."""

from __future__ import annotations

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.io.checksum import checksum_of
from refiner_dagster.checks import REFERENCE_INTEGRITY_CHECK

from .test_io_manager import current_pointer, partition_root


def _dataset(files, *, checksum: str | None, **check_options):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]
    metadata = {"refiner/checksum": checksum} if checksum else {}

    @dg.asset(name="episodes", io_manager_key="refiner", metadata=metadata)
    def _episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=2, dtypes={"image": mdr.datatype.image_path()})

    finalized = rd.build_finalization_asset(_episodes, checks=False)  # checks run standalone
    return [_episodes, finalized], rd.build_dataset_checks(finalized, **check_options)


def _integrity(instance, assets, checks, **kwargs):
    result = dg.materialize(
        [*assets, *checks],
        instance=instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
        **kwargs,
    )
    (found,) = [
        e for e in result.get_asset_check_evaluations() if e.check_name == REFERENCE_INTEGRITY_CHECK
    ]
    return found, {k: v.value for k, v in found.metadata.items()}


def _published_rows(instance) -> list:
    url = current_pointer(partition_root(instance, "episodes"))["url"]
    return sorted(mdr.read_parquet(url).materialize(), key=lambda r: r.episode)


def test_every_checksum_of_a_small_dataset_is_verified_and_a_flipped_byte_fails(
    dagster_instance, media
):
    files = media(5)
    assets, checks = _dataset(files, checksum="sha256")
    check, meta = _integrity(dagster_instance, assets, checks)
    assert check.passed
    assert meta["checksums_verified"] == 5 and meta["checksum_failures"] == 0
    rows = _published_rows(dagster_instance)
    assert [r.image["checksum"] for r in rows] == [checksum_of(d, "sha256") for _, d in files]

    # flip one byte of the third reference's bytes inside its block
    ref = rows[2].image
    with open(ref["path"], "r+b") as block:
        block.seek(ref["offset"] + 3)
        byte = block.read(1)
        block.seek(ref["offset"] + 3)
        block.write(bytes([byte[0] ^ 0x01]))

    check, meta = _integrity(
        dagster_instance, assets, checks, selection=dg.AssetSelection.checks(*checks)
    )
    assert not check.passed
    assert check.severity == dg.AssetCheckSeverity.ERROR
    assert meta["checksum_failures"] == 1 and meta["failures"] == 1
    detail = meta["first_failures"]
    # the attempts audited themselves, so the check re-read their files: the third row is
    # the first of shard 00001's file
    assert "column 'image' row 0 of 00001__" in detail
    assert (
        f"checksum mismatch in {ref['path']} [{ref['offset']}, {ref['offset'] + ref['size']})"
        in detail
    )
    assert ref["checksum"] in detail
    with pytest.raises(mdr.ChecksumMismatchError, match="checksum mismatch"):
        mdr.read_blob(ref, verify=True)


def test_above_the_full_threshold_a_rate_of_checksums_is_verified(dagster_instance, media):
    assets, checks = _dataset(
        media(8), checksum="crc32c", checksum_full_below=4, checksum_sample_rate=0.25
    )
    check, meta = _integrity(dagster_instance, assets, checks)
    assert check.passed
    assert meta["references_checked"] == 8
    assert meta["checksums_verified"] == 2


def test_references_without_checksums_verify_none(dagster_instance, media):
    assets, checks = _dataset(media(3), checksum=None)
    check, meta = _integrity(dagster_instance, assets, checks)
    assert check.passed and meta["checksums_verified"] == 0
    assert set(_published_rows(dagster_instance)[0].image) == {"path", "offset", "size"}


def test_dedupe_counters_reach_the_finalization_metadata(dagster_instance, media):
    files = media(3)
    items = [{"episode": i, "image": files[i % 3][0]} for i in range(9)]

    @dg.asset(name="episodes", io_manager_key="refiner", metadata={"refiner/dedupe": "content"})
    def _episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=9, dtypes={"image": mdr.datatype.image_path()})

    finalized = rd.build_finalization_asset(_episodes, checks=False)  # checks run standalone
    result = dg.materialize(
        [_episodes, finalized],
        instance=dagster_instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    (event,) = [
        e
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("episodes_finalized")
    ]
    meta = {k: v.value for k, v in event.materialization.metadata.items()}
    assert meta["assets_deduplicated"] == 6
    assert meta["bytes_deduplicated"] == 2 * sum(len(data) for _, data in files)
    assert meta["block_bytes"] == sum(len(data) for _, data in files)
    rows = _published_rows(dagster_instance)
    assert [mdr.read_blob(r.image) for r in rows] == [files[i % 3][1] for i in range(9)]
