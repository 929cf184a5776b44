"""dagster-dask's executor, for runs of time-partitioned assets too.

``dagster_dask.dask_executor`` (0.29 with ``distributed`` 2024.11 or newer) fails every
run of a daily, hourly or other time-window partition before any step starts::

    Exception: Iteration is not allowed on `@record` TimeWindowPartitionsDefinition.

Dagster stores such a run's partitions as a ``TimeWindowPartitionsSubset`` on the run,
and dagster-dask hands the run to ``Client.submit`` as an argument; ``distributed`` walks
every tuple in a task's arguments looking for futures, and the subset (a named tuple)
holds the partitions definition, a Dagster record that refuses to be iterated.

:data:`dask_executor` is the same executor (same config) that hands the workers the run
without that subset. Nothing is lost: the steps read their partition from the run's
``dagster/partition`` (or partition range) tags, as for runs of static partitions.

Example:
    >>> import dagster as dg
    >>> from refiner_dagster.dask_executor import dask_executor
    >>> job = dg.define_asset_job("daily", selection="*", executor_def=dask_executor)
    >>> dask_executor.name
    'dask'
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any, cast

import dagster as dg

try:
    from dagster_dask import dask_executor as _stock_executor
    from dagster_dask.executor import DaskExecutor
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "refiner_dagster.dask_executor needs dagster-dask: pip install 'dagster-dask==0.29.27'"
    ) from error

__all__ = ["dask_executor"]


class _PartitionSafeDaskExecutor(DaskExecutor):
    """dagster-dask's executor, given a run whose arguments ``distributed`` can walk."""

    def execute(self, plan_context: Any, execution_plan: Any) -> Iterator[dg.DagsterEvent]:
        yield from super().execute(_without_partitions_subset(plan_context), execution_plan)


def _without_partitions_subset(plan_context: Any) -> Any:
    """``plan_context`` whose ``dagster_run`` has no ``partitions_subset`` (the run's tags
    still name its partitions)."""
    run = plan_context.dagster_run
    if run.partitions_subset is None:
        return plan_context
    stripped = run._replace(partitions_subset=None)

    class _Context(type(plan_context)):  # type: ignore[misc]
        @property
        def dagster_run(self) -> dg.DagsterRun:
            return stripped

    context = copy.copy(plan_context)
    context.__class__ = _Context
    return context


@dg.executor(
    name=_stock_executor.name,
    config_schema=_stock_executor.config_schema.as_field(),
    requirements=dg.multiple_process_executor_requirements(),
)
def dask_executor(init_context: dg.InitExecutorContext) -> dg.Executor:
    """``dagster_dask.dask_executor`` that also runs time-partitioned runs (same config)."""
    cluster = cast(Mapping[str, Any], init_context.executor_config["cluster"])
    ((cluster_type, cluster_configuration),) = cluster.items()
    return _PartitionSafeDaskExecutor(cluster_type, cluster_configuration)
