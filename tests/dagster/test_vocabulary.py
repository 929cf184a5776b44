"""The IO managers speak refiner_core's vocabulary: Dagster's config rejects other words,
and records, summaries and metadata name the asset form the same way."""

from __future__ import annotations

import json
import os
import typing

import dagster as dg
import pydantic
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_core.vocabulary import Format, MissingPolicy

from .test_io_manager import current_pointer, output_metadata, partition_root


@dg.asset(io_manager_key="refiner")
def frames() -> mdr.Pipeline:
    return mdr.from_items(
        [{"i": i, "image": bytes([i]) * 4} for i in range(3)],
        dtypes={"image": mdr.datatype.image_bytes()},
    )


@pytest.mark.parametrize("manager", [rd.RefinerBlobIOManager, rd.RefinerFileIOManager])
def test_config_fields_are_typed_with_the_core_vocabulary(manager):
    assert manager.model_fields["format"].annotation is Format
    assert manager.model_fields["missing_policy"].annotation is MissingPolicy
    assert typing.get_args(Format) == ("parquet", "jsonl", "lance")


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [("format", "csv", "'parquet', 'jsonl' or 'lance'"), ("missing_policy", "skip", "'drop_row'")],
)
def test_constructing_an_io_manager_with_an_unknown_word_fails(field, value, allowed):
    with pytest.raises(pydantic.ValidationError) as info:
        rd.RefinerBlobIOManager(**{field: value})
    assert field in str(info.value) and allowed in str(info.value)


@pytest.mark.parametrize(("field", "value"), [("format", "csv"), ("missing_policy", "skip")])
def test_dagster_run_config_rejects_an_unknown_word_before_anything_runs(
    dagster_instance, tmp_path, field, value
):
    base = tmp_path / "store"
    with pytest.raises(dg.DagsterInvalidConfigError) as info:
        dg.materialize(
            [frames],
            instance=dagster_instance,
            resources={"refiner": rd.RefinerBlobIOManager.configure_at_launch()},
            run_config={
                "resources": {"refiner": {"config": {"base_url": str(base), field: value}}}
            },
        )
    message = str(info.value)
    assert f"resources:refiner:config:{field}" in message and value in message
    assert not base.exists()


def test_asset_metadata_with_an_unknown_policy_names_the_asset_and_the_key(
    dagster_instance, tmp_path
):
    @dg.asset(io_manager_key="refiner", metadata={"refiner/missing_policy": "skip"})
    def clips() -> mdr.Pipeline:
        return mdr.from_items([{"i": 1}])

    with pytest.raises(
        ValueError, match=r"asset clips: metadata refiner/missing_policy='skip' is not one of"
    ):
        dg.materialize(
            [clips],
            instance=dagster_instance,
            resources={"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / "store"))},
        )


@pytest.mark.parametrize(
    ("manager", "form"), [(rd.RefinerBlobIOManager, "blobs"), (rd.RefinerFileIOManager, "files")]
)
def test_record_summary_and_metadata_name_the_asset_form_alike(
    dagster_instance, tmp_path, manager, form
):
    media = tmp_path / "media"
    media.mkdir()
    for i in range(2):
        (media / f"{i}.png").write_bytes(bytes([i]) * 5)

    @dg.asset(io_manager_key="refiner")
    def shots() -> mdr.Pipeline:
        rows = [{"i": i, "image": str(media / f"{i}.png")} for i in range(2)]
        return mdr.from_items(rows, dtypes={"image": mdr.datatype.image_path()})

    result = dg.materialize(
        [shots, rd.build_finalization_asset(shots)],
        instance=dagster_instance,
        resources={"refiner": manager(num_workers=1, format="jsonl")},
    )
    assert result.success
    metadata = output_metadata(result, "shots_finalized")
    assert metadata["refiner/asset_mode"] == form
    assert metadata["refiner/format"] == "jsonl"
    root = partition_root(dagster_instance, "shots")
    version = current_pointer(root)["version"]
    with open(os.path.join(root, "_versions", f"{version}.json")) as f:
        record = json.load(f)
    assert record["assets"]["mode"] == form
    with open(os.path.join(root, version, "_refiner", "summary.json")) as f:
        summary = json.load(f)
    assert summary["asset_mode"] == form and summary["missing_policy"] == "error"
