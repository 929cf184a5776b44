"""A misspelled field of any refiner_dagster config class is refused with the intended name."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest

import refiner_dagster as rd
from refiner_dagster.component import (
    AutomationSettings,
    CheckSettings,
    PartitionSettings,
    S3Settings,
    StorageSettings,
)
from refiner_dagster.fanout_steps import FanoutConfig

from .test_component import _package

MISSPELLED = [
    (rd.RefinerBlobIOManager, {"base_ulr": "s3://bucket/data"}, "base_url"),
    (rd.RefinerBlobIOManager, {"target_byte": 1 << 20}, "target_bytes"),
    (rd.RefinerFileIOManager, {"missing_polcy": "set_null"}, "missing_policy"),
    (rd.RefinerFileIOManager, {"storage_option": {"anon": True}}, "storage_options"),
    (FanoutConfig, {"maxtasks": 4}, "max_tasks"),
    (S3Settings, {"endpoint": "http://127.0.0.1:9000"}, "endpoint_url"),
    (StorageSettings, {"base_ulr": "/data"}, "base_url"),
    (PartitionSettings, {"daily_strat": "2024-01-01"}, "daily_start"),
    (AutomationSettings, {"corn": "0 * * * *"}, "cron"),
    (CheckSettings, {"max_missing_fractoin": 0.1}, "max_missing_fraction"),
    (
        rd.RefinerDatasetComponent,
        {"key": "a", "pipeline": "m:f", "packign": "files"},
        "packing",
    ),
]


@pytest.mark.parametrize(
    ("config_class", "values", "meant"),
    MISSPELLED,
    ids=[f"{c.__name__}-{next(iter(v))}" for c, v, _ in MISSPELLED],
)
def test_misspelled_field_is_refused_with_the_nearest_name(config_class, values, meant):
    wrong = next(name for name in values if name not in config_class.model_fields)
    with pytest.raises(ValueError) as raised:
        config_class(**values)
    message = str(raised.value)
    assert f"{config_class.__name__} got an unknown field {wrong!r}" in message
    assert f"(did you mean {meant!r}?)" in message
    assert f"valid fields: {', '.join(sorted(config_class.model_fields))}" in message


def test_unrelated_name_lists_the_valid_fields_without_a_guess():
    with pytest.raises(ValueError) as raised:
        rd.RefinerBlobIOManager(colour="blue", base_ulr="/data")
    message = str(raised.value)
    assert "got unknown fields 'colour', 'base_ulr' (did you mean 'base_url'?)" in message
    assert "'colour' (did you mean" not in message


def test_values_stay_out_of_the_error():
    # Config may carry credentials; only the field names are echoed.
    with pytest.raises(ValueError) as raised:
        rd.RefinerBlobIOManager(
            base_url="s3://bucket/data",
            storage_options={"secret": "SECRET-VALUE-123"},
            s3_options={"key": "KEY-VALUE-456"},
        )
    message = str(raised.value)
    assert "'s3_options'" in message
    assert "SECRET-VALUE-123" not in message
    assert "KEY-VALUE-456" not in message


def test_misspelled_io_manager_never_writes_to_the_default_location(dagster_instance, tmp_path):
    @dg.asset(io_manager_key="refiner")
    def numbers() -> None:
        raise AssertionError("the definitions must not get this far")

    with pytest.raises(ValueError, match=r"did you mean 'base_url'\?"):
        dg.materialize(
            [numbers],
            instance=dagster_instance,
            resources={"refiner": rd.RefinerBlobIOManager(base_ulr=str(tmp_path / "data"))},
        )
    assert dagster_instance.get_runs() == []


def test_valid_fields_still_construct(tmp_path):
    manager = rd.RefinerBlobIOManager(base_url=str(tmp_path), target_bytes=1 << 20)
    assert (manager.base_url, manager.target_bytes) == (str(tmp_path), 1 << 20)
    assert FanoutConfig(max_tasks=3).max_tasks == 3


def test_misspelled_key_in_component_yaml_names_the_intended_key(tmp_path: Path):
    defs_module = _package(
        tmp_path,
        "component_project_typo",
        f"""
        type: refiner_dagster.RefinerDatasetComponent
        attributes:
          key: typo
          pipeline: refiner_dagster.component:example_pipeline
          storage:
            base_ulr: {tmp_path / "data"}
        """,
        "",
    )
    with pytest.raises(Exception) as raised:
        dg.load_defs(defs_root=defs_module, project_root=tmp_path)
    chain, error = [], raised.value
    while error is not None:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    text = "\n".join(chain)
    assert "base_ulr" in text
    assert "did you mean 'base_url'?" in text, text
