"""A fan-out run's step outputs (plan, task lists, manifest lists) outlive it only when
it failed: a published version leaves nothing of them in the run's IO-manager storage,
and a failed run keeps them so re-execution from failure still finishes the version."""

from __future__ import annotations

import os

import dagster as dg

from refiner_dagster.storage import short_run_id
from tests.dagster import fanout_defs as defs
from tests.dagster import test_fanout
from tests.dagster.fanout_defs import expected_rows, published, rows_of

fanout_env = test_fanout.fanout_env  # media, IO manager base folder and row log


def step_dirs(instance: dg.DagsterInstance, run_id: str) -> list[str]:
    """What the default fs_io_manager holds for the run's steps (one folder per step; the
    run's compute logs live beside them)."""
    run_dir = os.path.join(instance.storage_directory(), run_id)
    names = os.listdir(run_dir) if os.path.isdir(run_dir) else []
    return sorted(n for n in names if n.startswith("frames_once."))


def test_a_published_run_leaves_no_step_outputs(dagster_instance, fanout_env):
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job), instance=dagster_instance
    ) as result:
        assert result.success
        run_id = result.run_id
        # the steps did pass their values through the fs_io_manager
        outputs = [e for e in result.all_events if e.event_type_value == "HANDLED_OUTPUT"]
        assert any("frames_once_plan" in e.step_key for e in outputs)
    assert rows_of(published("frames_once")) == expected_rows()
    assert step_dirs(dagster_instance, run_id) == []


def test_a_failed_run_keeps_them_for_reexecution(dagster_instance, fanout_env, monkeypatch):
    monkeypatch.setenv(defs.FAULT_ENV, "raise:7")  # shard 00003 of write step task_00001
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job), instance=dagster_instance
    ) as failed:
        assert not failed.success
        parent = failed.run_id
    kept = step_dirs(dagster_instance, parent)
    assert "frames_once.frames_once_plan" in kept
    assert "frames_once.frames_once_write[task_00000]" in kept

    options = dg.ReexecutionOptions.from_failure(parent, dagster_instance)
    with dg.execute_job(
        dg.reconstructable(defs.frames_once_job),
        instance=dagster_instance,
        reexecution_options=options,
    ) as resumed:
        assert resumed.success
        child = resumed.run_id
    version = published("frames_once")
    assert version.name == f"v-{short_run_id(parent)}"  # the failed run's version, finished
    assert rows_of(version) == expected_rows()
    # published: neither the re-execution nor the run it resumed keeps step outputs
    assert step_dirs(dagster_instance, child) == []
    assert step_dirs(dagster_instance, parent) == []
