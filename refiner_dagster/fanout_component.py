"""The ``fanout:`` block of a ``RefinerDatasetComponent``: write the dataset in fan-out steps.

In ``defs.yaml``::

    type: refiner_dagster.RefinerDatasetComponent
    attributes:
      key: robotics/episodes
      pipeline: my_project.pipelines:episodes
      fanout:
        max_tasks: 32                              # at most 32 write steps
        retry_policy: {max_retries: 2, delay: 10}  # per write step, delay in seconds
        pool: refiner-writes                       # Dagster pool throttling the write steps
        op_tags: {team: robotics}                  # e.g. dagster-k8s/config per write step

With the block, the dataset is one graph-backed asset built by
:func:`~refiner_dagster.build_dataset_asset`, with steps ``<name>_plan -> <name>_write
x N -> <name>_finalize`` (``<name>``: the last part of ``key``, so two fan-out datasets
of one code location need different last parts; Dagster refuses "conflicting node
definitions with the same name" otherwise). The finalize step
audits the version with the dataset asset's own checks and publishes it, so there is
no ``<key>_finalized`` asset. ``static_tasks: N`` gives exactly ``N`` write steps known
before the run starts (for ``dagster_dask.dask_executor``).

Example:
    >>> settings = FanoutSettings(max_tasks=4, retry_policy={"max_retries": 2})
    >>> settings.build_retry_policy().max_retries
    2
    >>> try:
    ...     FanoutSettings(max_tasks=8, static_tasks=4)
    ... except ValueError as error:
    ...     print(str(error).splitlines()[1].strip())
    Value error, fanout.max_tasks=8 cannot exceed fanout.static_tasks=4: lower max_tasks or raise static_tasks [type=value_error]
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from typing import Any

import dagster as dg
from pydantic import Field, ValidationInfo, field_validator, model_validator

import refiner_core as mdr

from .strict_fields import StrictFields


def _number(value: Any, *, field: str, fraction: bool, minimum: int, fix: str) -> int | float:
    """``value`` as an int (or, with ``fraction``, a float), at least ``minimum``; YAML
    templates render strings."""
    number: Any = value
    if isinstance(value, str):
        with contextlib.suppress(ValueError):  # not a number: the error below names it
            number = float(value) if fraction else int(value)
    if (
        isinstance(number, bool)
        or not isinstance(number, (int, float))
        or (isinstance(number, float) and not fraction)
        or number < minimum
    ):
        raise ValueError(f"{field}={value!r} must be {fix}")
    return number


class RetrySettings(StrictFields, dg.Model):
    """How often, and after how long, a failed write step is retried."""

    max_retries: int = Field(default=1, description="Retries of a failed write step (0 or more).")
    delay: float | None = Field(default=None, description="Seconds to wait before each retry.")

    @field_validator("max_retries", mode="before")
    @classmethod
    def _retries(cls, value: Any) -> Any:
        return _number(
            value,
            field="fanout.retry_policy.max_retries",
            fraction=False,
            minimum=0,
            fix="a whole number, 0 or more, e.g. max_retries: 2",
        )

    @field_validator("delay", mode="before")
    @classmethod
    def _delay(cls, value: Any) -> Any:
        if value is None:
            return value
        return _number(
            value,
            field="fanout.retry_policy.delay",
            fraction=True,
            minimum=0,
            fix="seconds, 0 or more, e.g. delay: 10",
        )


class FanoutSettings(StrictFields, dg.Model):
    """The fan-out steps of a dataset: how many write steps, and how they run."""

    max_tasks: int | None = Field(
        default=None,
        description="At most this many write steps (default: one per shard, up to 64).",
    )
    static_tasks: int | None = Field(
        default=None,
        description="Exactly this many write steps, known before the run starts "
        "(executors that skip mapped steps, such as dagster-dask).",
    )
    retry_policy: RetrySettings | None = Field(
        default=None, description="Retry policy of each write step."
    )
    pool: str | None = Field(
        default=None, description="Dagster concurrency pool of the write steps."
    )
    op_tags: dict[str, Any] = Field(
        default_factory=dict,
        description="Tags of each write step (e.g. dagster-k8s/config for its pod).",
    )

    @field_validator("max_tasks", "static_tasks", mode="before")
    @classmethod
    def _tasks(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None:
            return value
        return _number(
            value,
            field=f"fanout.{info.field_name}",
            fraction=False,
            minimum=1,
            fix=f"a positive number of write steps, e.g. {info.field_name}: 8",
        )

    @model_validator(mode="after")
    def _tasks_fit(self) -> FanoutSettings:
        if (
            self.static_tasks is not None
            and self.max_tasks is not None
            and self.max_tasks > self.static_tasks
        ):
            raise ValueError(
                f"fanout.max_tasks={self.max_tasks} cannot exceed "
                f"fanout.static_tasks={self.static_tasks}: lower max_tasks or raise static_tasks"
            )
        return self

    def build_retry_policy(self) -> dg.RetryPolicy | None:
        """The write steps' ``dg.RetryPolicy``, or ``None`` without a ``retry_policy``."""
        if self.retry_policy is None:
            return None
        return dg.RetryPolicy(
            max_retries=self.retry_policy.max_retries, delay=self.retry_policy.delay
        )


def step_name(asset_key: dg.AssetKey, *, where: str) -> str:
    """The last part of a fan-out dataset's key, which names its steps; an identifier.

    >>> step_name(dg.AssetKey(["robotics", "frames"]), where="dataset robotics/frames")
    'frames'
    >>> step_name(dg.AssetKey(["raw-frames"]), where="dataset raw-frames")
    Traceback (most recent call last):
    ...
    ValueError: dataset raw-frames: with a fanout block the last part of key ('raw-frames') names the steps (raw-frames_plan, ...) and must be a Python identifier (letters, digits, _); rename it, e.g. raw_frames
    """
    name = asset_key.path[-1]
    if not name.isidentifier():
        suggestion = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        if not suggestion.isidentifier():
            suggestion = "dataset_" + suggestion
        raise ValueError(
            f"{where}: with a fanout block the last part of key ({name!r}) names the steps "
            f"({name}_plan, ...) and must be a Python identifier (letters, digits, _); "
            f"rename it, e.g. {suggestion}"
        )
    return name


def context_pipeline(
    function: Callable[..., mdr.Pipeline], *, partitioned: bool, where: str
) -> Callable[[Any], mdr.Pipeline]:
    """``fn(context)`` from a component's pipeline function, which takes no argument or
    ``partition_key`` (given on a partitioned dataset; optional on one without partitions).

    >>> def episodes(partition_key: str):
    ...     return partition_key
    >>> context_pipeline(episodes, partitioned=False, where="dataset episodes")
    Traceback (most recent call last):
    ...
    ValueError: dataset episodes: the pipeline takes partition_key but the dataset has no partitions; add partitions (e.g. partitions: {static: [a, b]}) or give partition_key a default
    """
    parameter = inspect.signature(function).parameters.get("partition_key")
    if parameter is not None and not partitioned and parameter.default is parameter.empty:
        raise ValueError(
            f"{where}: the pipeline takes partition_key but the dataset has no partitions; add "
            "partitions (e.g. partitions: {static: [a, b]}) or give partition_key a default"
        )
    pass_key = parameter is not None and partitioned

    def pipeline(context: Any) -> mdr.Pipeline:
        if pass_key:
            return function(partition_key=context.partition_key)
        return function()

    return pipeline
