"""refiner_dagster: run refiner_core pipelines as Dagster assets and checks.

- :class:`RefinerBlobIOManager` / :class:`RefinerFileIOManager`: an asset returns a lazy
  ``mdr.Pipeline``; the IO manager writes it (media packed into blocks, or copied one
  file each) into a new version folder under its storage (a :class:`DatasetStorage`).
  Inputs annotated :class:`DatasetVersion` receive the published version's handle.
- :class:`DatasetWriter`: the one service every write path uses to begin a version, write
  its shards, finalize, audit and publish it (``io_manager.writer()``). A failed audit
  raises :class:`AuditFailedError`; a version older than the published one,
  :class:`SupersededError`.
- :func:`build_dataset_asset`: one dataset asset written by ``plan -> write x N ->
  finalize`` steps, so any Dagster executor spreads the write over processes or machines;
  :class:`FanoutConfig` is its plan step's run config.
- :func:`build_finalization_asset`: the downstream asset that runs the reducer, audits
  the version (missing-asset and reference-integrity checks), publishes it and records
  the counters and table metadata as materialization metadata.
- :func:`build_rollback_job`: a job that points a dataset's readers back at an earlier
  published version and records it as a materialization (``refiner rollback`` in Dagster).
- :func:`build_dataset_checks`: the same checks on a published version (inline-finalized
  datasets, or finalizations built with ``checks=False``).
- :func:`build_source_sensor` / :func:`build_refresh_schedule`: reprocessing runs for new
  or changed source files (:func:`partition_source_url` turns a per-file partition key back into its file), and
  scheduled dataset refreshes.
- :class:`RefinerDatasetComponent`: the same, declared in a ``defs.yaml``.

Helpers live in their modules (``refiner_dagster.storage.short_run_id``,
``refiner_dagster.checks.MISSING_ASSETS_CHECK`` ...).

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

from .checks import build_dataset_checks
from .component import RefinerDatasetComponent
from .fanout import FanoutConfig, build_dataset_asset
from .finalization import build_finalization_asset
from .io_manager import RefinerBlobIOManager, RefinerFileIOManager
from .publish import AuditFailedError
from .rollback import build_rollback_job
from .schedules import build_refresh_schedule
from .sensors import build_source_sensor, partition_source_url
from .storage import DatasetStorage, DatasetVersion, SupersededError
from .writer import DatasetWriter

__all__ = [
    # writing and storage
    "RefinerBlobIOManager",
    "RefinerFileIOManager",
    "DatasetWriter",
    "DatasetStorage",
    "DatasetVersion",
    "AuditFailedError",
    "SupersededError",
    # fan-out dataset assets
    "build_dataset_asset",
    "FanoutConfig",
    # finalization and checks
    "build_finalization_asset",
    "build_dataset_checks",
    # versions
    "build_rollback_job",
    # automation
    "build_source_sensor",
    "partition_source_url",
    "build_refresh_schedule",
    # components
    "RefinerDatasetComponent",
]
