"""What a fan-out run pays in step processes: fewer write steps for small plans, and a
forkserver preloaded with ``refiner_dagster.preload``."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.fanout_steps import group_shards
from tests.dagster import fanout_defs as defs
from tests.dagster.fanout_defs import expected_rows, published, rows_of

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def items(shards: int):
    """A pipeline of ``shards`` one-row shards."""

    def fn(context) -> mdr.Pipeline:
        return mdr.from_items([{"i": i} for i in range(shards)], items_per_shard=1)

    return fn


def planned(dagster_instance, tmp_path, shards: int, config=None, **kwargs) -> list[int]:
    """Shards per write step of the plan step of an asset over ``shards`` shards."""
    asset = rd.build_dataset_asset(items(shards), name="sized", **kwargs)
    plan_op = asset.node_def.node_dict["sized_plan"].definition
    resources = {"refiner": rd.RefinerBlobIOManager(base_url=str(tmp_path / f"out-{shards}"))}
    with dg.build_op_context(resources=resources, instance=dagster_instance) as context:
        plan, *tasks = list(plan_op(context, config or rd.FanoutConfig()))
    if kwargs.get("static_tasks") is not None:
        (listed,) = tasks
        tasks_value = listed.value
    else:
        tasks_value = [t.value for t in tasks]
    assert plan.value.shards == shards and plan.value.tasks == len(tasks_value)
    return [len(t.shards) for t in tasks_value]


def test_small_plans_get_fewer_write_steps_and_large_ones_do_not(dagster_instance, tmp_path):
    rule = {"min_shards_per_task": 4}
    # the default keeps one write step per shard up to max_tasks
    assert planned(dagster_instance, tmp_path, 4) == [1, 1, 1, 1]
    # small plans: shards // 4 write steps, at least one
    assert planned(dagster_instance, tmp_path, 4, **rule) == [4]
    assert planned(dagster_instance, tmp_path, 7, **rule) == [7]
    assert planned(dagster_instance, tmp_path, 12, **rule) == [4, 4, 4]
    # a large plan still gets its 64 write steps, as without the rule
    large = planned(dagster_instance, tmp_path, 1000, **rule)
    assert len(large) == 64 and sum(large) == 1000
    # run config overrides the asset's rule; max_tasks still caps it
    override = rd.FanoutConfig(min_shards_per_task=2)
    assert planned(dagster_instance, tmp_path, 12, override, **rule) == [2] * 6
    assert planned(dagster_instance, tmp_path, 12, max_tasks=2, **rule) == [6, 6]
    # static_tasks: the list holds the fewer groups; spare write steps get none
    assert planned(dagster_instance, tmp_path, 8, static_tasks=4, **rule) == [4, 4]


def test_min_shards_per_task_is_a_positive_integer():
    assert group_shards(list(range(10)), max_tasks=4, min_shards_per_task=3) == [
        [0, 1, 2, 3],
        [4, 5, 6],
        [7, 8, 9],
    ]
    assert group_shards(list(range(3)), max_tasks=8, min_shards_per_task=5) == [[0, 1, 2]]
    with pytest.raises(ValueError, match="min_shards_per_task must be a positive integer, got 0"):
        group_shards([1], max_tasks=2, min_shards_per_task=0)
    with pytest.raises(ValueError, match="min_shards_per_task must be a positive integer"):
        rd.build_dataset_asset(defs.frames_pipeline, name="x", min_shards_per_task=0)
    with pytest.raises(ValueError):
        rd.FanoutConfig(min_shards_per_task=0)


def test_preload_module_loads_storage_and_engine_and_leaves_nothing_open(tmp_path):
    probe = (
        "import importlib.util, os, sys, threading, tempfile\n"
        "before = set(os.listdir(tempfile.gettempdir()))\n"
        "fds = len(os.listdir('/proc/self/fd'))\n"
        "import refiner_dagster.preload\n"
        "wanted = ['refiner_core', 'refiner_dagster', 'pyarrow.parquet', 'sqlalchemy', 'alembic']\n"
        "wanted += ['pandas'] if importlib.util.find_spec('pandas') else []\n"
        "print([m for m in wanted if m not in sys.modules])\n"
        "print(threading.active_count(), len(os.listdir('/proc/self/fd')) - fds)\n"
        "print(sorted(set(os.listdir(tempfile.gettempdir())) - before))\n"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path), "DAGSTER_DISABLE_TELEMETRY": "1"}
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    missing, counts, new_files = out.stdout.splitlines()
    assert missing == "[]"  # everything a step imports is loaded once, in the forkserver
    assert counts == "1 0"  # no thread and no open file or connection for the forks to inherit
    assert new_files == "[]"


def test_a_small_plan_runs_one_write_step_on_a_preloaded_forkserver(
    dagster_home, tmp_path, monkeypatch
):
    media = tmp_path / "media"
    media.mkdir()
    for i in range(defs.NUM_ROWS):
        (media / f"frame_{i:03d}.bin").write_bytes(defs.media_bytes(i))
    monkeypatch.setenv(defs.MEDIA_ENV, str(media))
    monkeypatch.setenv(defs.BASE_ENV, str(tmp_path / "out"))
    for name in (defs.LOG_ENV, defs.FAULT_ENV, defs.S3_ENDPOINT_ENV):
        monkeypatch.delenv(name, raising=False)
    # a fresh interpreter: the forkserver is one per process and keeps its environment
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-m", "tests.dagster.fanout_preload_defs"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    run = json.loads(out.stdout.strip().splitlines()[-1])
    assert run["success"], out.stderr[-3000:]
    assert run["steps"] == [
        "small_plan.small_plan_finalize",
        "small_plan.small_plan_plan",
        "small_plan.small_plan_write[task_00000]",
    ]
    assert rows_of(published("small_plan")) == expected_rows()
    assert published("small_plan").summary().shards == 6
