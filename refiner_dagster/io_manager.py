"""IO managers that run an asset's lazy ``mdr`` pipeline into versioned storage.

An asset returns a lazy :class:`refiner_core.Pipeline`; ``handle_output`` runs its
write stage with worker processes on the step's machine into a new version folder,
packing media with ``BlobAssetConfig`` (:class:`RefinerBlobIOManager`) or copying
it with ``FileAssetConfig`` (:class:`RefinerFileIOManager`). The version becomes
visible to readers once its finalization asset (:func:`build_finalization_asset`)
has run the reducer and published it. ``load_input`` hands downstream assets a lazy
pipeline over the published table: blob references and paths, never media bytes.

Storage layout (see :mod:`refiner_dagster.storage`)::

    <base_url>/<asset/key>/[<partition>/]v-<run id>/   table files, assets/, _refiner/
    <base_url>/<asset/key>/[<partition>/]_current.json published pointer

``base_url`` defaults to ``<Dagster instance storage>/refiner``, refused when the
instance is temporary (ephemeral, or ``DAGSTER_HOME`` unset; see :mod:`.instance_storage`).

What an input receives follows its type annotation (``mdr.Pipeline``: a lazy
pipeline over the published version; ``DatasetVersion``: the published handle) or
its ``refiner/load`` metadata (``"table"``, ``"version"``, or ``"pending"``: the
written, unfinalized version finalization assets load); ``columns`` and
``allow_missing_partitions`` input metadata are honoured, and ``refiner/version``
(a version name or the moment it was published) loads another version than the
published one (see :mod:`.loading`).
Several upstream partitions arrive as a dict keyed by partition key.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import dagster as dg
from pydantic import Field, PrivateAttr

import refiner_core as mdr
from refiner_core import manifests
from refiner_core.vocabulary import AssetForm, Format, MissingPolicy

from .finalization import published_metadata
from .instance_storage import default_base_url
from .loading import (
    allow_missing,
    dataset_path,
    input_columns,
    input_mode,
    input_version,
    locate,
    select_columns,
)
from .metadata import counters_metadata
from .progress_log import launch_in_step
from .publish import AuditFailedError, AuditPolicy
from .settings import ASSET_COLUMNS_KEY, LOAD_MODES
from .storage import DatasetStorage, DatasetVersion, s3_storage_options, short_run_id
from .strict_fields import StrictFields
from .tables import open_version, written_asset_columns
from .writer import DatasetWriter


def written_metadata(
    version: DatasetVersion,
    counters: dict[str, int],
    engine_run_id: str,
    asset_columns: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Output metadata of a written (not yet published) version."""
    return {
        **counters_metadata(counters, keys=(*manifests.COUNTER_KEYS, "shards")),
        "dagster/uri": dg.MetadataValue.path(version.url),
        "refiner/version": dg.MetadataValue.text(version.name),
        "refiner/format": dg.MetadataValue.text(version.format),
        "refiner/run_id": dg.MetadataValue.text(engine_run_id),
        "refiner/state": dg.MetadataValue.text("written (its finalization asset publishes it)"),
        ASSET_COLUMNS_KEY: dg.MetadataValue.json(asset_columns),
    }


class _RefinerIOManager(StrictFields, dg.ConfigurableIOManager):
    """Shared config and behaviour of the blob and file IO managers."""

    base_url: str | None = Field(
        default=None,
        description=(
            "Local folder or fsspec URL (s3://bucket/prefix, gs://..., memory://...) under which "
            "dataset versions land. Default: '<Dagster instance storage directory>/refiner', "
            "which needs a lasting instance (DAGSTER_HOME set)."
        ),
    )
    storage_options: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra fsspec/s3fs options for base_url, applied over those taken from s3.",
    )
    # Typed as Dagster's resource base class so that importing this module does not
    # import dagster-aws (seconds of import time); any dagster-aws S3Resource fits.
    s3: dg.ConfigurableResource | None = Field(
        default=None,
        description=(
            "dagster-aws S3Resource whose credentials, region and endpoint_url are used for "
            "s3:// base URLs (turned into s3fs storage options)."
        ),
    )
    source_storage_options: dict[str, Any] | None = Field(
        default=None,
        description=(
            "fsspec options for reading the media the rows point to. Default: the s3 "
            "resource's options when base_url is not on S3 (media on S3, tables elsewhere), "
            "else the output's options for media on the output's kind of store."
        ),
    )
    format: Format = Field(
        default="parquet",
        description="Table format: 'parquet', 'jsonl' or 'lance' (per asset: refiner/format).",
    )
    subdir: str = Field(
        default="assets",
        description="Folder for media inside each version folder (per asset: refiner/subdir).",
    )
    missing_policy: MissingPolicy = Field(
        default="error",
        description=(
            "What a missing source asset does: 'error' fails the shard, 'set_null' nulls the "
            "cell, 'drop_row' drops the row (per asset: refiner/missing_policy)."
        ),
    )
    max_in_flight: int = Field(
        default=16,
        description="Concurrent asset copies per worker (per asset: refiner/max_in_flight).",
    )
    num_workers: int | None = Field(
        default=None,
        description=(
            "Worker processes the write stage uses on the step's machine; default: the CPUs "
            "this process may use minus those the load average shows busy, at least 1 (per "
            "asset: refiner/num_workers). Never more than the number of shards."
        ),
    )
    checksum: str | None = Field(
        default=None,
        description=(
            "'sha256' or 'crc32c': blob references carry a checksum (files: a "
            "<column>_checksum column); default none (per asset: refiner/checksum)."
        ),
    )
    finalize_inline: bool = Field(
        default=False,
        description=(
            "Finalize and publish in the asset's own step, for assets without a finalization "
            "asset (per asset: refiner/finalize_inline)."
        ),
    )

    keep_versions: int = Field(
        default=3,
        description=(
            "Published versions of each dataset (partition) kept after a publish, the published "
            "one included; older ones are deleted, oldest first (per asset: refiner/keep_versions)."
        ),
    )
    keep_for: float | None = Field(
        default=None,
        description=(
            "Seconds: also keep every version readers saw this recently, so as_of= and "
            "rollbacks reach back that far; default none, by count only (per asset: "
            "refiner/keep_for)."
        ),
    )

    progress_log_seconds: float = Field(
        default=10.0,
        description=(
            "The engine's progress lines go to the Dagster run log at most once per this many "
            "seconds per stage (and each stage's last line); they always reach the step's stderr."
        ),
    )

    _instance: dg.DagsterInstance | None = PrivateAttr(default=None)
    _run_id: str | None = PrivateAttr(default=None)

    # configuration ---------------------------------------------------------------
    _asset_mode: ClassVar[AssetForm]  # the form of the asset config each IO manager builds

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        """Remember the instance (default storage) and the run (its own pending version)."""
        self._instance = context.instance
        self._run_id = context.run.run_id if context.run is not None else None

    def _defaults(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "subdir": self.subdir,
            "missing_policy": self.missing_policy,
            "target_bytes": getattr(self, "target_bytes", 1 << 30),
            "num_workers": self.num_workers,
            "max_in_flight": self.max_in_flight,
            "finalize_inline": self.finalize_inline,
            "dedupe": getattr(self, "dedupe", None),
            "checksum": self.checksum,
            "keep_versions": self.keep_versions,
            "keep_for": self.keep_for,
        }

    def resolved_source_options(self) -> dict[str, Any] | None:
        """fsspec options for the media sources (see ``source_storage_options``)."""
        if self.source_storage_options is not None:
            return dict(self.source_storage_options)
        if self.s3 is not None and not self._base_on_s3():
            return s3_storage_options(self.s3)
        return None

    def _base_on_s3(self) -> bool:
        return str(self.base_url or "").startswith(("s3://", "s3a://"))

    def resolved_storage_options(self) -> dict[str, Any]:
        """fsspec options: the S3Resource's (for ``s3://`` URLs), then ``storage_options``."""
        options: dict[str, Any] = {}
        if self.s3 is not None and self._base_on_s3():
            options.update(s3_storage_options(self.s3))
        options.update(self.storage_options or {})
        return options

    def storage(
        self, instance: dg.DagsterInstance | None = None, *, writing: bool = False
    ) -> DatasetStorage:
        """Where versions land; ``instance`` gives the default base folder, which
        ``writing`` refuses when the instance is temporary (see :mod:`.instance_storage`)."""
        base = self.base_url
        if base is None:
            if instance is None:
                raise ValueError(
                    "the refiner IO manager has no base_url and no Dagster instance to put data "
                    "under; set base_url (a folder or fsspec URL)"
                )
            if writing:
                base = default_base_url(instance, owner=type(self).__name__)
            else:
                base = os.path.join(instance.storage_directory(), "refiner")
        return DatasetStorage(base, self.resolved_storage_options())

    def writer(self, instance: dg.DagsterInstance | None = None) -> DatasetWriter:
        """The service that writes, finalizes and publishes versions with this IO manager's
        settings; ``instance`` (default: the run's) gives the default storage folder and
        tells which runs are live."""
        instance = instance or self._instance
        return DatasetWriter(
            self.storage(instance, writing=True),
            self._asset_mode,
            self._defaults(),
            self.resolved_source_options(),
            instance,
        )

    # output ----------------------------------------------------------------------
    def handle_output(self, context: dg.OutputContext, obj: Any) -> None:
        where = f"asset {context.asset_key.to_user_string()}"
        if isinstance(obj, DatasetVersion):
            # Written and finalized by a fan-out dataset asset's own steps.
            context.add_output_metadata({"dagster/uri": dg.MetadataValue.path(obj.url)})
            return
        if (
            isinstance(obj, dict)
            and obj
            and all(isinstance(v, DatasetVersion) for v in obj.values())
        ):
            # A fan-out run over a partition range: each partition's metadata is set already.
            return
        pipeline = _as_pipeline(obj, where)
        writer = self.writer()
        version, settings, assets = writer.begin(
            context.asset_key,
            _single_partition(context, where),
            context.run_id,
            context.definition_metadata,
        )
        context.log.info(f"writing {version.describe()} with {settings.num_workers} worker(s)")
        rundir = self._rundir(context.run_id, version)
        counters = writer.write(
            version,
            pipeline,
            assets,
            launch=lambda sequence: launch_in_step(
                sequence, context, settings.num_workers, self.progress_log_seconds, rundir=rundir
            ),
            rundir=rundir,
            # with a retry policy the unpublished version stays for the retry to resume
            # (readers never see it; publishing a later version deletes it)
            keep_on_failure=context.op_def.retry_policy is not None,
        )
        asset_columns = written_asset_columns(pipeline, self._asset_mode)
        if not asset_columns:
            context.log.warning(
                f"{where} has no asset columns, so {type(self).__name__} packed or copied no "
                "media (assets_written=0): declare them with dtypes=, e.g. "
                "dtypes={'image': mdr.datatype.image_path()} on the source or map step"
            )
        engine_run_id = str(version.engine_run_id)
        metadata = written_metadata(version, counters, engine_run_id, asset_columns)
        if settings.finalize_inline:
            try:
                finalized = writer.finalize(version, audit=AuditPolicy())
            except AuditFailedError as exc:
                raise dg.Failure(
                    description=str(exc), metadata={"failed_checks": exc.failed}
                ) from exc
            metadata.update(published_metadata(version, finalized.summary))
            metadata["refiner/state"] = dg.MetadataValue.text("published")
        context.add_output_metadata(metadata)

    def _rundir(self, dagster_run_id: str, version: DatasetVersion) -> str | None:
        """A local folder that lets a retry of the step skip the shards already written."""
        if self._instance is None:
            return None
        relative = version.storage.relative_folder(version.asset_path, version.partition_key)
        return os.path.join(
            self._instance.storage_directory(),
            "refiner_runs",
            short_run_id(dagster_run_id),
            relative,
        )

    # input -----------------------------------------------------------------------
    def load_input(self, context: dg.InputContext) -> Any:
        """What the input receives follows its annotation and metadata (:mod:`.loading`)."""
        mode = input_mode(context)
        wanted = input_version(context)
        columns = input_columns(context) if mode == "table" else None
        asset_path = dataset_path(context)
        storage = self.storage(context.instance)
        partitions: list[str | None] = (
            list(context.asset_partition_keys) if context.has_asset_partitions else [None]
        )
        run_version = f"v-{short_run_id(self._run_id)}" if self._run_id else None
        skip_missing = allow_missing(context) and partitions != [None]
        loaded: dict[str | None, Any] = {}
        for key in partitions:
            try:
                version = locate(storage, asset_path, key, mode, run_version, wanted)
            except FileNotFoundError:
                if skip_missing:
                    context.log.info(f"input {context.name!r}: partition {key!r} has no version")
                    continue
                raise
            if mode != "table":
                loaded[key] = version
            elif columns is not None:
                loaded[key] = select_columns(version, columns, f"input {context.name!r}")
            else:
                loaded[key] = open_version(version)
        if partitions == [None]:
            return loaded[None]
        if len(partitions) == 1 and context.has_partition_key and loaded:
            return loaded[partitions[0]]
        return loaded


class RefinerBlobIOManager(_RefinerIOManager):
    """Runs an asset's lazy pipeline and packs its media into blocks (``BlobAssetConfig``).

    Each materialization writes ``<base_url>/<asset/key>/[<partition>/]v-<run id>/``:
    table files (Parquet by default) whose asset cells are ``{path, offset, size}``
    references into block files under ``<subdir>/``. Readers see it once the
    finalization asset published it.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import RefinerBlobIOManager, build_finalization_asset
        >>> @dg.asset(io_manager_key="refiner", metadata={"refiner/target_bytes": 1 << 20})
        ... def frames() -> mdr.Pipeline:
        ...     return mdr.from_items([{"image": b"\\x89PNG..."}],
        ...                           dtypes={"image": mdr.datatype.image_bytes()})
        >>> frames_finalized = build_finalization_asset(frames)
        >>> defs = dg.Definitions(assets=[frames, frames_finalized],
        ...                       resources={"refiner": RefinerBlobIOManager()})
    """

    target_bytes: int = Field(
        default=1 << 30,
        description="Block size target in bytes (per asset: refiner/target_bytes).",
    )
    dedupe: str | None = Field(
        default=None,
        description=(
            "'source' or 'content': repeated media is stored once per writer attempt; "
            "default none (per asset: refiner/dedupe)."
        ),
    )

    _asset_mode: ClassVar[AssetForm] = mdr.BlobAssetConfig.form


class RefinerFileIOManager(_RefinerIOManager):
    """Runs an asset's lazy pipeline and copies each asset to its own file (``FileAssetConfig``).

    Each materialization writes ``<base_url>/<asset/key>/[<partition>/]v-<run id>/``:
    table files whose asset cells are the copied files' paths under ``<subdir>/``.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import RefinerFileIOManager, build_finalization_asset
        >>> @dg.asset(io_manager_key="refiner", metadata={"refiner/format": "jsonl"})
        ... def clips() -> mdr.Pipeline:
        ...     return mdr.read_parquet("clips.parquet")
        >>> defs = dg.Definitions(assets=[clips, build_finalization_asset(clips)],
        ...                       resources={"refiner": RefinerFileIOManager(base_url="s3://b/p")})
    """

    _asset_mode: ClassVar[AssetForm] = mdr.FileAssetConfig.form


# helpers ---------------------------------------------------------------------------


def writer_for(
    context: dg.OpExecutionContext | dg.AssetCheckExecutionContext, io_manager_key: str, who: str
) -> DatasetWriter:
    """The :class:`DatasetWriter` of the refiner IO manager bound to ``io_manager_key`` in
    the step's resources; ``who`` names the asset or check in the error when the key is
    bound to something else."""
    resource = getattr(context.resources, io_manager_key)
    if not isinstance(resource, _RefinerIOManager):
        raise dg.DagsterInvalidDefinitionError(
            f"{who}: resource {io_manager_key!r} is a {type(resource).__name__}, not a refiner "
            f"IO manager; bind {io_manager_key!r} to rd.RefinerBlobIOManager() or "
            "rd.RefinerFileIOManager() in Definitions(resources=...)"
        )
    return resource.writer(context.instance)


def _as_pipeline(obj: Any, where: str) -> mdr.Pipeline:
    if isinstance(obj, mdr.Pipeline):
        return obj
    if isinstance(obj, mdr.PipelineSequence):
        raise TypeError(
            f"{where} returned a PipelineSequence (a pipeline with a writer already attached); "
            "return the lazy mdr.Pipeline itself, the IO manager writes it"
        )
    raise TypeError(
        f"{where} returned {type(obj).__name__}; assets using a refiner IO manager must return "
        "a lazy mdr.Pipeline (e.g. mdr.read_parquet(...).map(...))"
    )


def _single_partition(context: dg.OutputContext, where: str) -> str | None:
    if not context.has_asset_partitions:
        return None
    keys = list(context.asset_partition_keys)
    if len(keys) != 1:
        raise ValueError(
            f"{where}: one run materializes {len(keys)} partitions at once; the refiner IO "
            "managers write one partition per run. Launch the backfill with one run per partition"
        )
    return keys[0]


__all__ = [
    "LOAD_MODES",
    "RefinerBlobIOManager",
    "RefinerFileIOManager",
    "writer_for",
    "written_metadata",
]
