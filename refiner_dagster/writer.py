"""``DatasetWriter``: the one service that writes, finalizes, audits and publishes versions.

Every way of writing a dataset in Dagster goes through it: the refiner IO managers
(one step writes the whole asset), the steps of :func:`~refiner_dagster.build_dataset_asset`
(plan -> write x N -> finalize) and the finalization assets of
:func:`~refiner_dagster.build_finalization_asset`. An IO manager hands it out with
:meth:`~refiner_dagster.RefinerBlobIOManager.writer`; steps that know the IO manager only
by its resource key get it from :func:`refiner_dagster.io_manager.writer_for`.

Where it writes (see :mod:`refiner_dagster.storage`)::

    <storage>/<asset/key>/[<partition>/]v-<run id>/   table files, assets/, _refiner/
    <storage>/<asset/key>/[<partition>/]_current.json published pointer

Example:
    >>> import tempfile
    >>> import dagster as dg, refiner_core as mdr
    >>> from refiner_dagster import RefinerBlobIOManager
    >>> writer = RefinerBlobIOManager(base_url=tempfile.mkdtemp()).writer()
    >>> version, settings, assets = writer.begin(dg.AssetKey("numbers"), None, "0" * 32, {})
    >>> counters = writer.write(version, mdr.from_items([{"n": 1}, {"n": 2}]), assets)
    >>> writer.finalize(version).summary.rows_written
    2
    >>> [row.n for row in mdr.read_parquet(writer.storage.current(["numbers"], None).url)
    ...  .iter_rows()]
    [1, 2]
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core import integration, manifests
from refiner_core.manifests import AttemptManifest, DatasetSummary, PersistedManifests
from refiner_core.vocabulary import AssetForm

from .append import APPEND, check_append_schema, start_append
from .lerobot_format import LeRobotOptions
from .publish import (
    AuditFailedError,
    AuditPolicy,
    audit_failure,
    audit_version,
    error_failures,
    publish_version,
    reduce_version,
    run_liveness,
)
from .retention import Retention
from .settings import AssetSettings, resolve_settings
from .storage import WRITTEN, DatasetStorage, DatasetVersion, short_run_id
from .tables import written_asset_columns

AssetConfig = mdr.BlobAssetConfig | mdr.FileAssetConfig
# Runs a write-only sequence to its end and returns the engine's stats (the IO manager
# passes one that reports progress to the Dagster run log).
Launcher = Callable[[mdr.PipelineSequence], mdr.LaunchStats]


@dataclass(frozen=True)
class Finalized:
    """A published version: its reducer summary and the audit's check results."""

    version: DatasetVersion
    summary: DatasetSummary
    checks: list[dg.AssetCheckResult] = field(default_factory=list)


@dataclass(frozen=True)
class DatasetWriter:
    """Writes dataset versions into ``storage`` with one IO manager's settings.

    ``form`` is how media is written (``"blobs"``: packed into blocks; ``"files"``: one
    copy each); ``defaults`` are the IO manager's settings, which an asset's
    ``refiner/*`` definition metadata overrides; ``instance`` tells which Dagster runs
    are still live, so publishing never deletes a version a live run is writing.
    A version lands in ``<storage>/<asset/key>/[<partition>/]v-<run id>/`` and readers
    see it once :meth:`finalize` moved ``_current.json`` to it.

    Example:
        >>> import tempfile, refiner_dagster as rd
        >>> writer = rd.RefinerFileIOManager(base_url=tempfile.mkdtemp()).writer()
        >>> writer.form, writer.storage.current(["clips"], None)
        ('files', None)
    """

    storage: DatasetStorage
    form: AssetForm
    defaults: Mapping[str, Any]
    source_storage_options: dict[str, Any] | None = None
    instance: dg.DagsterInstance | None = None

    # writing ---------------------------------------------------------------------
    def settings(
        self, asset_key: dg.AssetKey, definition_metadata: Mapping[str, Any] | None
    ) -> tuple[AssetSettings, AssetConfig]:
        """The asset's settings (these defaults under its metadata) and its asset config."""
        where = f"asset {asset_key.to_user_string()}"
        settings = resolve_settings(
            dict(self.defaults), dict(definition_metadata or {}), where=where
        )
        return settings, self._asset_config(settings)

    def _asset_config(self, settings: AssetSettings) -> AssetConfig:
        common: dict[str, Any] = {
            "subdir": settings.subdir,
            "missing_policy": settings.missing_policy,
            "max_in_flight": settings.max_in_flight,
            "source_storage_options": self.source_storage_options,
            "checksum": settings.checksum,
        }
        if self.form == mdr.BlobAssetConfig.form:
            return mdr.BlobAssetConfig(
                target_bytes=settings.target_bytes, dedupe=settings.dedupe, **common
            )
        return mdr.FileAssetConfig(**common)

    def begin(
        self,
        asset_key: dg.AssetKey,
        partition: str | None,
        dagster_run_id: str,
        definition_metadata: Mapping[str, Any] | None,
    ) -> tuple[DatasetVersion, AssetSettings, AssetConfig]:
        """Open the run's version folder (kept when the same run writes it again), with the
        asset's settings and asset config."""
        settings, assets = self.settings(asset_key, definition_metadata)
        version = self.storage.begin(
            asset_key.path,
            partition,
            f"v-{short_run_id(dagster_run_id)}",
            {
                "format": settings.format,
                "assets": _asset_record(assets),
                "dagster_run_id": dagster_run_id,
                "asset_key": asset_key.to_user_string(),
                "partition_key": partition,
                "retention": Retention(settings.keep_versions, settings.keep_for).as_record(),
                "mode": settings.mode,
                **LeRobotOptions.record_of(settings.lerobot),
            },
            resume=True,
        )
        if settings.mode == APPEND:
            start_append(version)
        return version, settings, assets

    def reopen(self, asset_path: Sequence[str], partition: str | None, name: str) -> DatasetVersion:
        """Version ``name`` as :meth:`begin` recorded it (for the steps after the first)."""
        return self.storage.version(asset_path, partition, name)

    def write(
        self,
        version: DatasetVersion,
        pipeline: mdr.Pipeline,
        assets: AssetConfig,
        *,
        launch: Launcher | None = None,
        rundir: str | None = None,
        keep_on_failure: bool = False,
    ) -> dict[str, int]:
        """Write every shard of ``pipeline`` into ``version`` and record it written.

        ``launch`` runs the write stage (default: worker processes on this machine);
        ``rundir`` lets a retry skip the shards an earlier try committed. On failure the
        version is discarded unless ``keep_on_failure`` (a retry will resume it).
        Returns the committed counters.
        """
        started = time.monotonic()
        stage = version.writer(pipeline, assets).write_stage
        sequence = mdr.PipelineSequence([stage])
        try:
            stats = launch(sequence) if launch is not None else sequence.launch_local(rundir=rundir)
            counters = committed_counters(version, stats.run_id)
            self.record_written(version, stats.run_id, stage.pipeline, started, counters)
        except BaseException:
            if not keep_on_failure:
                self.storage.discard(version)
                if rundir is not None:
                    shutil.rmtree(rundir, ignore_errors=True)
            raise
        if rundir is not None:
            shutil.rmtree(rundir, ignore_errors=True)
        return counters

    def write_shards(
        self,
        version: DatasetVersion,
        pipeline: mdr.Pipeline,
        assets: AssetConfig,
        shards: Sequence[mdr.Shard],
        *,
        run_id: str,
        attempt_id: str,
    ) -> tuple[list[AttemptManifest], list[AttemptManifest]]:
        """Write the ``shards`` not committed yet as attempt ``attempt_id`` of engine run
        ``run_id``; returns (manifests written now, manifests committed before)."""
        stage = version.writer(pipeline, assets).write_stage
        # only these shards' manifests: one listing, then a read per manifest
        ids = [s.id for s in shards]
        persisted = manifests.read_manifests(version.output_folder(), shard_ids=ids)
        committed = integration.choose_committed(persisted, run_id)
        todo = [s for s in shards if s.id not in committed]
        written = stage.run_task(todo, run_id=run_id, attempt_id=attempt_id) if todo else []
        kept = [committed[s.id] for s in shards if s.id in committed]
        return written, kept

    def record_written(
        self,
        version: DatasetVersion,
        engine_run_id: str,
        pipeline: mdr.Pipeline,
        started: float,
        counters: Mapping[str, int],
    ) -> None:
        """Mark ``version`` written by ``engine_run_id`` (``started``: ``time.monotonic()``)."""
        self.storage.record(
            version,
            state=WRITTEN,
            engine_run_id=engine_run_id,
            written_at=time.time(),
            write_seconds=round(time.monotonic() - started, 3),
            asset_columns=written_asset_columns(pipeline, self.form),
            **{k: counters[k] for k in ("rows_written", "files_written", "shards")},
        )

    # finalizing ------------------------------------------------------------------
    def finalize(
        self,
        version: DatasetVersion,
        *,
        audit: AuditPolicy | None = None,
        persisted: PersistedManifests | None = None,
        retention: Retention | None = None,
        published_by: str | None = None,
    ) -> Finalized:
        """Reduce ``version``, audit it (when ``audit`` is given), then publish it.

        Raises :class:`~refiner_dagster.publish.AuditFailedError` (carrying the check
        results) without publishing when an ERROR-severity check fails; readers keep the
        version they had. ``persisted`` is the version's manifests when already read.
        ``retention`` replaces the policy the version was written with; ``published_by``
        is the Dagster run publishing it (default: the one that wrote it).
        Finalizing a published version again re-runs the reducer (nothing left to
        delete) and re-writes the same pointer.
        """
        summary = reduce_version(version, persisted)
        if version.record.get("mode") == APPEND:
            check_append_schema(version, summary)
        results = audit_version(version, summary, audit) if audit is not None else []
        failed = error_failures(results)
        if failed:
            raise audit_failure(version, failed, results)
        publish_version(
            version,
            summary,
            is_live=run_liveness(self.instance),
            retention=retention,
            published_by=published_by,
        )
        return Finalized(version, summary, results)


def committed_counters(
    version: DatasetVersion,
    engine_run_id: str,
    persisted: PersistedManifests | None = None,
) -> dict[str, int]:
    """Counters summed over the committed attempt of each shard, from persisted manifests
    (``persisted``, when the caller has read them already), with ``shards``."""
    if persisted is None:
        persisted = manifests.read_persisted(version.output_folder())
    committed = integration.choose_committed(persisted.manifests, engine_run_id)
    totals = integration.committed_counters(committed.values())
    totals["shards"] = len(committed)
    return totals


def _asset_record(config: AssetConfig) -> dict[str, Any]:
    """What a version's record keeps of its asset config (to finalize it later)."""
    record: dict[str, Any] = {
        "mode": config.form,
        "subdir": config.subdir,
        "missing_policy": config.missing_policy,
        "max_in_flight": config.max_in_flight,
    }
    if isinstance(config, mdr.BlobAssetConfig):
        record["target_bytes"] = config.target_bytes
        if config.dedupe is not None:
            record["dedupe"] = config.dedupe
    if config.checksum is not None:
        record["checksum"] = config.checksum
    return record


__all__ = ["AuditFailedError", "DatasetWriter", "Finalized", "committed_counters"]
