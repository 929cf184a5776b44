"""``RefinerDatasetComponent``: a refiner dataset declared in YAML.

One component defines a dataset asset (its pipeline run into versioned storage by a
refiner IO manager), its finalization asset (write → audit → publish, with the
``missing_assets`` and ``reference_integrity`` checks), the IO manager resource, and
optionally a refresh schedule. In a ``dg`` project, ``dg scaffold defs
refiner_dagster.RefinerDatasetComponent <folder>`` writes a ``defs.yaml`` like::

    type: refiner_dagster.RefinerDatasetComponent
    attributes:
      key: robotics/episodes
      pipeline: my_project.pipelines:episodes     # module:function returning mdr.Pipeline
      packing: blobs                              # blobs (packed blocks) | files (one each)
      format: parquet                             # jsonl | lance | lerobot (+ lerobot: {fps: 30})
      target_bytes: 268435456
      missing_policy: set_null
      storage:
        base_url: s3://bucket/datasets            # default: the instance's storage folder
        s3: {endpoint_url: "{{ env.S3_ENDPOINT }}", region_name: eu-west-1}
      partitions: {daily_start: "2024-01-01"}     # or {static: [left, right]}
      automation: {eager: true, cron: "0 4 * * *"}
      checks: {max_missing_fraction: 0.01}

A ``fanout:`` block writes the dataset in ``plan -> write x N -> finalize`` steps
instead (:func:`~refiner_dagster.build_dataset_asset`, one graph-backed asset, any
executor), with the same storage, partitions, cron and checks; its finalize step
audits and publishes, so there is no ``<key>_finalized`` asset and no ``eager``::

    type: refiner_dagster.RefinerDatasetComponent
    attributes:
      key: robotics/episodes                      # episodes names the steps: unique
      pipeline: my_project.pipelines:episodes
      partitions: {daily_start: "2024-01-01"}
      checks: {max_missing_fraction: 0.01}        # blocking: a failure keeps the old version
      fanout:
        max_tasks: 32                             # or static_tasks: 32 (dask executor)
        retry_policy: {max_retries: 2, delay: 10}
        pool: refiner-writes
        op_tags: {dagster-k8s/config: {container_config: {resources: {limits: {memory: 8Gi}}}}}

The pipeline function takes no argument, or ``partition_key`` (on a dataset without
partitions, only with a default). Data lands under ``<base_url>/<key>/[<partition>/]v-<run id>/``; readers see
the version its finalization published. ``dg check defs`` reports a mistake in the
file (an unknown field, a bad value) naming the field and the fix.

Example:
    >>> from refiner_dagster import RefinerDatasetComponent
    >>> component = RefinerDatasetComponent(
    ...     key="examples/numbers", pipeline="refiner_dagster.component:example_pipeline")
    >>> component.io_manager_key
    'refiner_examples__numbers'
"""

import importlib
from collections.abc import Callable
from typing import Annotated, Any, Literal

import dagster as dg
from pydantic import Field

import refiner_core as mdr

from .component_blocks import block_resolver
from .fanout import build_dataset_asset
from .fanout_component import FanoutSettings, context_pipeline, step_name
from .finalization import build_finalization_asset, dataset_pool
from .io_manager import RefinerBlobIOManager, RefinerFileIOManager
from .lerobot_component import LeRobotSettings, component_metadata
from .lerobot_format import LEROBOT_FORMAT
from .schedules import build_refresh_schedule
from .strict_fields import StrictFields

__all__ = ["RefinerDatasetComponent", "example_pipeline"]


def example_pipeline() -> mdr.Pipeline:
    """Three rows; the pipeline a freshly scaffolded component points at until replaced."""
    return mdr.from_items([{"item": i, "label": f"example {i}"} for i in range(3)])


class S3Settings(StrictFields, dg.Model):
    """The dagster-aws ``S3Resource`` fields a dataset on S3 needs (env vars via templates)."""

    endpoint_url: str | None = Field(default=None, description="S3 endpoint (MinIO, moto...).")
    region_name: str | None = Field(default=None, description="AWS region.")
    aws_access_key_id: str | None = Field(default=None, description="Access key id.")
    aws_secret_access_key: str | None = Field(default=None, description="Secret access key.")
    profile_name: str | None = Field(default=None, description="AWS profile to use.")


class StorageSettings(StrictFields, dg.Model):
    """Where dataset versions land."""

    base_url: str | None = Field(
        default=None,
        description="Folder or fsspec URL; default '<Dagster instance storage>/refiner'.",
    )
    s3: S3Settings | None = Field(default=None, description="S3 credentials and endpoint.")
    storage_options: dict[str, Any] = Field(
        default_factory=dict, description="Extra fsspec options for base_url."
    )


class PartitionSettings(StrictFields, dg.Model):
    """The dataset's partitions: daily from a date, or a fixed list."""

    daily_start: str | None = Field(
        default=None, description="Daily partitions from this date (YYYY-MM-DD)."
    )
    static: list[str] | None = Field(default=None, description="A fixed list of partition keys.")
    timezone: str = Field(default="UTC", description="Timezone of daily partitions.")

    def build(self) -> dg.PartitionsDefinition:
        if self.static is not None and self.daily_start is None:
            return dg.StaticPartitionsDefinition(list(self.static))
        if self.daily_start is not None and self.static is None:
            return dg.DailyPartitionsDefinition(start_date=self.daily_start, timezone=self.timezone)
        raise ValueError("partitions: set exactly one of daily_start or static")


class AutomationSettings(StrictFields, dg.Model):
    """When the dataset is refreshed and finalized."""

    eager: bool = Field(
        default=True,
        description="Finalize after every write (AutomationCondition.eager on finalization).",
    )
    cron: str | None = Field(
        default=None, description="Refresh the dataset and its finalization on this cron."
    )
    timezone: str = Field(default="UTC", description="Timezone of the cron.")


class CheckSettings(StrictFields, dg.Model):
    """The audits run before a version is published."""

    enabled: bool = Field(default=True, description="Audit before publishing.")
    max_missing_fraction: float | None = Field(
        default=None,
        description="Above this share of missing source assets, block publication (ERROR).",
    )
    sample_threshold: int = Field(
        default=100_000, description="Above this many references the integrity scan samples."
    )
    sample_size: int = Field(default=10_000, description="References checked when sampling.")


class RefinerDatasetScaffolder(dg.Scaffolder):
    """``dg scaffold defs``: a ``defs.yaml`` keyed by the folder name, with the example
    pipeline, so the new dataset loads and materializes before it is edited."""

    def scaffold(self, request: dg.ScaffoldRequest) -> None:
        dg.scaffold_component(
            request,
            {
                "key": request.target_path.name,
                "pipeline": "refiner_dagster.component:example_pipeline",
                "packing": "blobs",
                "missing_policy": "error",
                "checks": {"max_missing_fraction": 0.01},
            },
        )


@dg.scaffold_with(RefinerDatasetScaffolder)
class RefinerDatasetComponent(StrictFields, dg.Component, dg.Model, dg.Resolvable):
    """A refiner dataset: pipeline → versioned storage → audited, published version.

    Declared in a ``defs.yaml`` (see the module docstring) or in Python; it builds the
    dataset asset, its finalization asset (with checks), the IO manager resource
    ``refiner_<key>`` and, with ``automation.cron``, a refresh job ``<key>_refresh`` and its
    schedule ``<key>_refresh_schedule`` (``<key>`` with ``/`` as ``__``). With ``fanout``,
    the dataset asset is written by fan-out steps and carries the checks itself.

    Example:
        >>> import dagster as dg
        >>> from refiner_dagster import RefinerDatasetComponent
        >>> component = RefinerDatasetComponent(
        ...     key="examples/numbers", pipeline="refiner_dagster.component:example_pipeline",
        ...     storage={"base_url": "/tmp/refiner-component-example"})
        >>> defs = component.build_defs(None)
        >>> sorted(a.key.to_user_string() for a in defs.resolve_all_asset_specs())
        ['examples/numbers', 'examples/numbers_finalized']
        >>> fanned = RefinerDatasetComponent(
        ...     key="examples/numbers", pipeline="refiner_dagster.component:example_pipeline",
        ...     fanout={"max_tasks": 4, "retry_policy": {"max_retries": 2}})
        >>> numbers = fanned.build_defs(None).resolve_assets_def(component.asset_key)
        >>> sorted(numbers.node_def.node_dict), sorted(c.name for c in numbers.check_specs)
        (['numbers_finalize', 'numbers_plan', 'numbers_write'], ['missing_assets', 'reference_integrity'])
    """

    key: str = Field(description="Asset key of the dataset, '/'-separated (robotics/episodes).")
    pipeline: str = Field(description="'package.module:function' returning a lazy mdr.Pipeline.")
    packing: Literal["blobs", "files"] = Field(
        default="blobs",
        description="'blobs' packs media into blocks; 'files' copies each asset to its own file.",
    )
    format: Literal["parquet", "jsonl", "lance", "lerobot"] = Field(
        default="parquet",
        description="Table format of each version, or 'lerobot' (a LeRobot v3.0 dataset).",
    )
    lerobot: Annotated[LeRobotSettings | None, block_resolver(LeRobotSettings, optional=True)] = (
        Field(
            default=None, description="With format 'lerobot': fps (required) and LeRobot options."
        )
    )
    target_bytes: int = Field(default=1 << 30, description="Block size target (blobs).")
    mode: Literal["overwrite", "append"] = Field(
        default="overwrite",
        description="'append': each run adds its rows to the published version, sharing its files.",
    )
    missing_policy: Literal["error", "set_null", "drop_row"] = Field(
        default="error", description="What a missing source asset does."
    )
    num_workers: int | None = Field(
        default=None,
        description="Write worker processes; default: the CPUs this process may use and the "
        "load average shows idle.",
    )
    storage: Annotated[StorageSettings, block_resolver(StorageSettings)] = Field(
        default_factory=StorageSettings, description="Storage."
    )
    partitions: Annotated[
        PartitionSettings | None, block_resolver(PartitionSettings, optional=True)
    ] = Field(default=None, description="Partitions.")
    automation: Annotated[AutomationSettings, block_resolver(AutomationSettings)] = Field(
        default_factory=AutomationSettings, description="Automation."
    )
    checks: Annotated[CheckSettings, block_resolver(CheckSettings)] = Field(
        default_factory=CheckSettings, description="Audits."
    )
    fanout: Annotated[FanoutSettings | None, block_resolver(FanoutSettings, optional=True)] = Field(
        default=None,
        description="Write in plan -> write x N -> finalize steps (build_dataset_asset) instead "
        "of one IO-manager step and a finalization asset.",
    )
    group_name: str | None = Field(default=None, description="Asset group of both assets.")
    description: str | None = Field(default=None, description="Description of the dataset.")

    @property
    def asset_key(self) -> dg.AssetKey:
        return dg.AssetKey.from_user_string(self.key)

    @property
    def io_manager_key(self) -> str:
        return "refiner_" + "__".join(self.asset_key.path)

    def resolve_pipeline(self) -> Callable[..., mdr.Pipeline]:
        """The pipeline function; a wrong reference fails when the definitions load."""
        module_name, _, attr = self.pipeline.partition(":")
        if not module_name or not attr:
            raise ValueError(
                f"dataset {self.key}: pipeline {self.pipeline!r} must be 'package.module:function'"
            )
        try:
            function = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as exc:
            raise ValueError(
                f"dataset {self.key}: pipeline {self.pipeline!r} cannot be imported ({exc})"
            ) from exc
        if not callable(function):
            raise ValueError(f"dataset {self.key}: pipeline {self.pipeline!r} is not a function")
        return function

    def io_manager(self) -> RefinerBlobIOManager | RefinerFileIOManager:
        storage = self.storage
        s3 = None
        if storage.s3 is not None:
            from dagster_aws.s3 import S3Resource  # seconds to import: only for S3 storage

            s3 = S3Resource(**storage.s3.model_dump(exclude_none=True))
        kind = RefinerBlobIOManager if self.packing == "blobs" else RefinerFileIOManager
        # a LeRobot dataset says so in its asset metadata; the IO manager writes tables
        table_format = "parquet" if self.format == LEROBOT_FORMAT else self.format
        options: dict[str, Any] = {"format": table_format, "missing_policy": self.missing_policy}
        if self.packing == "blobs":
            options["target_bytes"] = self.target_bytes
        return kind(
            base_url=storage.base_url,
            storage_options=dict(storage.storage_options),
            s3=s3,
            num_workers=self.num_workers,
            **options,
        )

    def build_defs(self, context: dg.ComponentLoadContext) -> dg.Definitions:
        return self.dataset_defs()

    def dataset_defs(self) -> dg.Definitions:
        """The dataset asset (and, without ``fanout``, its finalization asset), the IO manager
        and the schedule, built without a component tree (a code location may call it on a
        loaded ``defs.yaml``)."""
        partitions_def = self.partitions.build() if self.partitions is not None else None
        function = context_pipeline(
            self.resolve_pipeline(),
            partitioned=partitions_def is not None,
            where=f"dataset {self.key}",
        )
        metadata: dict[str, Any] = {
            "refiner/format": self.format,
            "refiner/missing_policy": self.missing_policy,
        }
        if self.packing == "blobs":
            metadata["refiner/target_bytes"] = self.target_bytes
        if self.mode != "overwrite":
            metadata["refiner/mode"] = self.mode
        metadata.update(component_metadata(self.format, self.lerobot, where=f"dataset {self.key}"))
        if self.fanout is None:
            assets = self._io_manager_assets(function, partitions_def, metadata)
        else:
            assets = [self._fanout_asset(self.fanout, function, partitions_def, metadata)]
        schedules = []
        jobs = []
        if self.automation.cron:
            job = dg.define_asset_job(f"{'__'.join(self.asset_key.path)}_refresh", selection=assets)
            jobs.append(job)
            schedules.append(
                build_refresh_schedule(job, self.automation.cron, self.automation.timezone)
            )
        return dg.Definitions(
            assets=assets,
            resources={self.io_manager_key: self.io_manager()},
            jobs=jobs,
            schedules=schedules,
        )

    def _io_manager_assets(
        self,
        function: Callable[[Any], mdr.Pipeline],
        partitions_def: dg.PartitionsDefinition | None,
        metadata: dict[str, Any],
    ) -> list[dg.AssetsDefinition]:
        """The dataset asset, written by the IO manager, and its finalization asset."""
        key = self.asset_key

        @dg.asset(
            key=key,
            io_manager_key=self.io_manager_key,
            metadata=metadata,
            partitions_def=partitions_def,
            group_name=self.group_name,
            description=self.description or f"Refiner dataset from {self.pipeline}.",
            kinds={"refiner", self.format},
            pool=dataset_pool(key),
        )
        def _dataset(context: dg.AssetExecutionContext) -> mdr.Pipeline:
            return function(context)

        finalized = build_finalization_asset(
            _dataset,
            checks=self.checks.enabled,
            max_missing_fraction=self.checks.max_missing_fraction,
            sample_threshold=self.checks.sample_threshold,
            sample_size=self.checks.sample_size,
            automation_condition=dg.AutomationCondition.eager() if self.automation.eager else None,
        )
        return [_dataset, finalized]

    def _fanout_asset(
        self,
        fanout: FanoutSettings,
        function: Callable[[Any], mdr.Pipeline],
        partitions_def: dg.PartitionsDefinition | None,
        metadata: dict[str, Any],
    ) -> dg.AssetsDefinition:
        """The dataset asset written by fan-out steps; its finalize step audits and publishes."""
        where = f"dataset {self.key}"
        if self.automation.eager and "eager" in self.automation.model_fields_set:
            raise ValueError(
                f"{where}: automation.eager finalizes after each write through a finalization "
                "asset, which a fanout dataset does not have (its finalize step publishes in "
                "the same run); remove eager or the fanout block"
            )
        key = self.asset_key
        return build_dataset_asset(
            function,
            name=step_name(key, where=where),
            key_prefix=list(key.path[:-1]),
            io_manager_key=self.io_manager_key,
            partitions_def=partitions_def,
            group_name=self.group_name,
            description=self.description or f"Refiner dataset from {self.pipeline}.",
            metadata=metadata,
            max_tasks=fanout.max_tasks,
            pool=fanout.pool,
            op_tags=fanout.op_tags,
            retry_policy=fanout.build_retry_policy(),
            static_tasks=fanout.static_tasks,
            checks=self.checks.enabled,
            max_missing_fraction=self.checks.max_missing_fraction,
            sample_threshold=self.checks.sample_threshold,
            sample_size=self.checks.sample_size,
        )
