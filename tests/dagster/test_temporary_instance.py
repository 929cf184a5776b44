"""A dataset is never written under a Dagster instance that deletes its storage on exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.storage import CURRENT_POINTER

from .conftest import TELEMETRY_OFF


def _episodes_asset(files):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(files)]

    @dg.asset(io_manager_key="refiner", metadata={"refiner/finalize_inline": True})
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(items, dtypes={"image": mdr.datatype.image_path()})

    return episodes


def _failure_message(result: dg.ExecuteInJobResult) -> str:
    [failure] = [e for e in result.all_events if e.is_step_failure]
    error = failure.step_failure_data.error
    messages = []
    while error is not None:
        messages.append(error.message)
        error = error.cause
    return "\n".join(messages)


def _files_under(folder: str) -> list[str]:
    return [os.path.join(root, name) for root, _, names in os.walk(folder) for name in names]


def _assert_refused(result: dg.ExecuteInJobResult, reason: str) -> None:
    assert not result.success
    message = _failure_message(result)
    assert "RefinerBlobIOManager has no base_url" in message
    assert reason in message
    assert "export DAGSTER_HOME=" in message
    assert "set base_url on the IO manager" in message


def test_ephemeral_instance_refuses_the_default_base_url(media):
    # dg.materialize without instance= runs on an ephemeral instance
    result = dg.materialize(
        [_episodes_asset(media(2))],
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    _assert_refused(result, "the Dagster instance is ephemeral")


def test_ephemeral_instance_leaves_nothing_in_its_storage(media, tmp_path):
    storage = tmp_path / "ephemeral"
    instance = dg.DagsterInstance.ephemeral(tempdir=str(storage))
    assert instance.is_ephemeral
    result = dg.materialize(
        [_episodes_asset(media(2))],
        instance=instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    _assert_refused(result, "the Dagster instance is ephemeral")
    assert _files_under(os.path.join(instance.storage_directory(), "refiner")) == []


def test_instance_in_a_temporary_dagster_home_is_refused(media, tmp_path, monkeypatch):
    # What `dagster dev` / `dagster asset materialize` make when DAGSTER_HOME is unset:
    # a persistent instance in ./.tmp_dagster_home_*, deleted when the command exits.
    home = tmp_path / ".tmp_dagster_home_k3x9"
    home.mkdir()
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with dg.instance_for_test(temp_dir=str(home), overrides=TELEMETRY_OFF) as instance:
        assert not instance.is_ephemeral
        result = dg.materialize(
            [_episodes_asset(media(2))],
            instance=instance,
            resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
            raise_on_error=False,
        )
        _assert_refused(result, "DAGSTER_HOME is not set")
        assert _files_under(os.path.join(instance.storage_directory(), "refiner")) == []


def test_explicit_base_url_works_on_an_ephemeral_instance(media, tmp_path):
    base = tmp_path / "datasets"
    result = dg.materialize(
        [_episodes_asset(media(2))],
        resources={"refiner": rd.RefinerBlobIOManager(base_url=str(base), num_workers=1)},
    )
    assert result.success
    assert (base / "episodes" / CURRENT_POINTER).is_file()


@pytest.mark.parametrize("kind", ["dagster_home", "local_temp"])
def test_lasting_instances_keep_the_default_base_url(media, tmp_path, request, kind):
    if kind == "dagster_home":
        instance = request.getfixturevalue("dagster_instance")
    else:
        (tmp_path / "home").mkdir()
        instance = dg.DagsterInstance.local_temp(
            tempdir=str(tmp_path / "home"), overrides=TELEMETRY_OFF
        )
        request.addfinalizer(instance.dispose)
    assert not instance.is_ephemeral
    result = dg.materialize(
        [_episodes_asset(media(2))],
        instance=instance,
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
    )
    assert result.success
    root = os.path.join(instance.storage_directory(), "refiner", "episodes")
    assert os.path.isfile(os.path.join(root, CURRENT_POINTER))


def test_fanout_dataset_on_an_ephemeral_instance_is_refused_at_plan(media):
    items = [{"episode": i, "image": path} for i, (path, _) in enumerate(media(2))]

    def frames(context) -> mdr.Pipeline:
        return mdr.from_items(items, dtypes={"image": mdr.datatype.image_path()})

    result = dg.materialize(
        [rd.build_dataset_asset(frames, name="frames")],
        resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
        raise_on_error=False,
    )
    assert not result.success
    [failed] = [e.step_key for e in result.all_events if e.is_step_failure]
    assert failed.endswith("plan")
    assert "export DAGSTER_HOME=" in _failure_message(result)


DEFS = """
import dagster as dg
import refiner_core as mdr
import refiner_dagster as rd


@dg.asset(io_manager_key="refiner")
def episodes() -> mdr.Pipeline:
    return mdr.from_items([{"episode": i} for i in range(3)])


episodes_finalized = rd.build_finalization_asset(episodes)

defs = dg.Definitions(
    assets=[episodes, episodes_finalized],
    resources={"refiner": rd.RefinerBlobIOManager(num_workers=1)},
)
"""


def test_cli_materialize_without_dagster_home_fails_with_the_fix(tmp_path):
    # The README's own-data command, run as a user would but without DAGSTER_HOME.
    (tmp_path / "my_defs.py").write_text(DEFS)
    env = {k: v for k, v in os.environ.items() if k != "DAGSTER_HOME"}
    env["DAGSTER_DISABLE_TELEMETRY"] = "1"
    dagster = Path(sys.executable).with_name("dagster")
    done = subprocess.run(
        [str(dagster), "asset", "materialize", "-f", "my_defs.py", "--select", "*"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "RefinerBlobIOManager has no base_url" in output
    assert "DAGSTER_HOME is not set" in output
    assert "export DAGSTER_HOME=" in output
    assert [p.name for p in tmp_path.iterdir()] == ["my_defs.py"]  # Dagster removed its home
