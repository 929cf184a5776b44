"""refiner_dagster: run refiner_core pipelines as Dagster assets, ops and checks.

- :class:`RefinerBlobIOManager` / :class:`RefinerFileIOManager`: an asset returns a lazy
  ``mdr.Pipeline``; the IO manager writes it (media packed into blocks, or copied one
  file each) into a new version folder under its storage.
- :func:`build_finalization_asset`: the downstream asset that runs the reducer,
  publishes the version and records the counters as materialization metadata.
- :func:`build_dataset_checks`: missing-asset and reference-integrity asset checks.
- :func:`build_dataset_asset`: one dataset asset written by ``plan -> write x N ->
  finalize`` steps, so any Dagster executor spreads the write over processes or machines.
- :func:`refiner_write_graph` / :func:`build_write_job`: plan -> write (fanned out
  with dynamic outputs) -> finalize, for any executor.
- :func:`build_source_sensor` / :func:`build_refresh_schedule`: reprocessing runs for new
  or changed source files, and scheduled dataset refreshes.

Example:
    >>> import dagster as dg, refiner_core as mdr
    >>> import refiner_dagster as rd
    >>> @dg.asset(io_manager_key="refiner")
    ... def episodes() -> mdr.Pipeline:
    ...     return mdr.from_items([{"episode": i} for i in range(3)])
    >>> episodes_finalized = rd.build_finalization_asset(episodes)
    >>> defs = dg.Definitions(
    ...     assets=[episodes, episodes_finalized],
    ...     asset_checks=rd.build_dataset_checks(episodes_finalized),
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
from .fanout import FanoutConfig, FanoutPlan, FanoutTask, build_dataset_asset
from .finalization import build_finalization_asset, finalize_version
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
from .schedules import build_refresh_schedule
from .sensors import build_source_sensor
from .settings import LOAD_KEY, AssetSettings
from .storage import DatasetStorage, DatasetVersion, partition_dirname, short_run_id

__all__ = [
    # IO managers and storage
    "RefinerBlobIOManager",
    "RefinerFileIOManager",
    "DatasetStorage",
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
    "finalize_version",
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
    "build_refresh_schedule",
]
