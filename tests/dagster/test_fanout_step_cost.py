"""What a fan-out run pays in step processes: fewer write steps for small plans."""

from __future__ import annotations

import dagster as dg
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from refiner_dagster.fanout_steps import group_shards
from tests.dagster import fanout_defs as defs


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
