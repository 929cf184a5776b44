"""refiner_dagster: run refiner_core pipelines as Dagster assets, ops and checks.

- :class:`RefinerBlobIOManager` / :class:`RefinerFileIOManager`: an asset returns a lazy
  ``mdr.Pipeline``; the IO manager writes it (media packed into blocks, or copied one
  file each) into a new version folder under its storage.
- :class:`DatasetWriter`: the one service every write path uses to begin a version, write
  its shards, finalize, audit and publish it (``io_manager.writer()``).
- :func:`build_finalization_asset`: the downstream asset that runs the reducer, audits
  the version (missing-asset and reference-integrity checks), publishes it and records
  the counters and table metadata as materialization metadata.
- :func:`build_dataset_checks`: the same checks on a published version (inline-finalized
  datasets, or finalizations built with ``checks=False``).
- :func:`build_dataset_asset`: one dataset asset written by ``plan -> write x N ->
  finalize`` steps, so any Dagster executor spreads the write over processes or machines.
- :func:`refiner_write_graph` / :func:`build_write_job`: plan -> write (fanned out
  with dynamic outputs) -> finalize, for any executor.
- :func:`build_source_sensor` / :func:`build_refresh_schedule`: reprocessing runs for new
  or changed source files, and scheduled dataset refreshes.
- :class:`RefinerDatasetComponent`: the same, declared in a ``defs.yaml``.

Example:
    >>> import dagster as dg, refiner_core as mdr
    >>> import refiner_dagster as rd
    >>> @dg.asset(io_manager_key="refiner")
    ... def episodes() -> mdr.Pipeline:
    ...     return mdr.from_items([{"episode": i} for i in range(3)])
    >>> episodes_finalized = rd.build_finalization_asset(episodes)  # audits, then publishes
    >>> defs = dg.Definitions(
    ...     assets=[episodes, episodes_finalized],
    ...     resources={"refiner": rd.RefinerBlobIOManager()},
    ... )
"""

from __future__ import annotations

from .checks import (
    MISSING_ASSETS_CHECK,
    REFERENCE_INTEGRITY_CHECK,
    IntegrityReport,
    build_dataset_checks,
    missing_assets_result,
    scan_references,
)
from .component import RefinerDatasetComponent
from .fanout import FanoutConfig, FanoutPlan, FanoutTask, build_dataset_asset
from .finalization import build_finalization_asset, dataset_pool
from .io_manager import RefinerBlobIOManager, RefinerFileIOManager
from .metadata import summary_markdown, summary_metadata
from .ops import (
    PlanConfig,
    WriteTask,
    build_finalize_op,
    build_plan_op,
    build_write_job,
    build_write_op,
    refiner_write_graph,
)
from .publish import AuditFailedError, AuditPolicy
from .schedules import build_refresh_schedule
from .sensors import build_source_sensor, partition_source_url
from .settings import LOAD_KEY, AssetSettings, validate_asset_metadata
from .storage import (
    DatasetStorage,
    DatasetVersion,
    SupersededError,
    partition_dirname,
    short_run_id,
)
from .table_metadata import column_schema
from .writer import DatasetWriter

__all__ = [
    # IO managers and storage
    "RefinerBlobIOManager",
    "RefinerFileIOManager",
    "DatasetStorage",
    "DatasetWriter",
    "SupersededError",
    "DatasetVersion",
    "AssetSettings",
    "LOAD_KEY",
    "partition_dirname",
    "short_run_id",
    # fan-out dataset assets
    "build_dataset_asset",
    "FanoutConfig",
    "FanoutPlan",
    "FanoutTask",
    # finalization and checks
    "build_finalization_asset",
    "dataset_pool",
    "AuditPolicy",
    "AuditFailedError",
    "validate_asset_metadata",
    "column_schema",
    "build_dataset_checks",
    "missing_assets_result",
    "scan_references",
    "IntegrityReport",
    "MISSING_ASSETS_CHECK",
    "REFERENCE_INTEGRITY_CHECK",
    "summary_metadata",
    "summary_markdown",
    # ops and graphs
    "refiner_write_graph",
    "build_write_job",
    "build_plan_op",
    "build_write_op",
    "build_finalize_op",
    "PlanConfig",
    "WriteTask",
    # automation
    "build_source_sensor",
    "partition_source_url",
    "build_refresh_schedule",
    # components
    "RefinerDatasetComponent",
]
