"""Finalization assets: run a dataset's reducer, publish the version, record its counters.

The dataset asset's IO manager only *writes* a version; the finalization asset
built by :func:`build_finalization_asset` runs the engine's finalization stages on
it (keep one attempt per shard, delete rejected attempts' files and blocks, commit
Lance fragments, write ``_refiner/summary.json``), then publishes the version by
writing the ``_current.json`` pointer last, and deletes older versions. Its
materialization metadata is read back from the persisted summary.
"""

from typing import Any

import dagster as dg

import refiner_core as mdr
from refiner_core.manifests import DatasetSummary

from .metadata import summary_metadata
from .settings import DATASET_KEY, LOAD_KEY
from .storage import DatasetVersion, one_version


def asset_config_from_record(record: dict[str, Any]) -> Any:
    """Rebuild the ``assets=`` config a version was written with from its record."""
    assets = dict(record.get("assets") or {})
    mode = assets.pop("mode", None)
    for config in (mdr.BlobAssetConfig, mdr.FileAssetConfig):
        if mode == config.form:
            return config(**assets)
    return None


def finalize_version(version: DatasetVersion) -> DatasetSummary:
    """Run the reducer over ``version``'s persisted manifests and publish it.

    Idempotent: finalizing an already published version runs the reducer again
    (nothing left to delete) and re-writes the same pointer. Returns the summary the
    reducer wrote to ``<version>/_refiner/summary.json``.
    """
    run_id = version.engine_run_id
    if not run_id:
        raise RuntimeError(
            f"{version.describe()} has no completed write (state {version.state!r}); "
            "materialize the dataset asset again"
        )
    current = version.storage.current(version.asset_path, version.partition_key)
    if (
        current is not None
        and current.name != version.name
        and current.record.get("created_at", 0.0) > version.record.get("created_at", 0.0)
    ):
        raise RuntimeError(
            f"{version.describe()} was superseded: the newer version {current.name} is already "
            "published, so this one is not published. Materialize the dataset asset again to "
            "replace it"
        )
    # Finalization reads only the persisted manifests: the writer's pipeline never runs.
    sequence = version.writer(mdr.from_items([]), asset_config_from_record(version.record))
    summary = sequence.finalize(run_id)
    version.storage.publish(
        version,
        rows_written=summary.rows_written,
        files_written=summary.counters.get("files_written", 0),
        first_file=summary.files[0] if summary.files else None,
    )
    return summary


def build_finalization_asset(
    dataset_asset: dg.AssetsDefinition,
    *,
    name: str | None = None,
    key_prefix: str | list[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    io_manager_key: str | None = None,
    retry_policy: dg.RetryPolicy | None = None,
    tags: dict[str, str] | None = None,
) -> dg.AssetsDefinition:
    """The downstream asset that finalizes and publishes ``dataset_asset``'s pending version.

    It loads the written version from the dataset's refiner IO manager, runs the
    reducer (rejected-attempt cleanup, Lance commit), publishes the version with an
    atomic pointer write, deletes older versions, and returns a
    ``MaterializeResult`` whose metadata comes from the persisted summary: rows
    written, assets packed, blocks and bytes, coalesced blobs / references / bytes,
    range copies, missing assets, cells set to null, rows dropped, rejected attempts
    removed, and a markdown table. Partitions follow the dataset's.

    Downstream assets may take it as an input: they receive the published table as a
    lazy pipeline, like an input on the dataset asset itself.

    The default key is the dataset key with ``_finalized`` appended to its last part.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import RefinerBlobIOManager, build_finalization_asset
        >>> @dg.asset(io_manager_key="refiner")
        ... def episodes() -> mdr.Pipeline:
        ...     return mdr.from_items([{"episode": 1}])
        >>> episodes_finalized = build_finalization_asset(episodes)
        >>> episodes_finalized.key.to_user_string()
        'episodes_finalized'
    """
    if not isinstance(dataset_asset, dg.AssetsDefinition) or len(dataset_asset.keys) != 1:
        raise TypeError(
            "build_finalization_asset takes the AssetsDefinition of one dataset asset "
            f"(an @dg.asset), got {dataset_asset!r}"
        )
    dataset_key = dataset_asset.key
    io_key = io_manager_key or dataset_asset.get_io_manager_key_for_asset_key(dataset_key)
    final_name = name or f"{dataset_key.path[-1]}_finalized"
    if key_prefix is None:
        prefix = list(dataset_key.path[:-1])
    else:
        prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix)
    key = dg.AssetKey([*prefix, final_name])
    group = group_name or dataset_asset.group_names_by_key.get(dataset_key)
    dataset_name = dataset_key.to_user_string()

    @dg.asset(
        key=key,
        ins={"dataset": dg.AssetIn(key=dataset_key, metadata={LOAD_KEY: "pending"})},
        partitions_def=dataset_asset.partitions_def,
        io_manager_key=io_key,
        group_name=group,
        description=description
        or f"Finalizes and publishes the refiner dataset {dataset_name} (reducer + pointer).",
        metadata={DATASET_KEY: dataset_name},
        kinds={"refiner"},
        retry_policy=retry_policy,
        tags=tags,
    )
    def _finalize(context: dg.AssetExecutionContext, dataset: Any) -> dg.MaterializeResult:
        version = one_version(dataset, key.to_user_string())
        context.log.info(f"finalizing {version.describe()}")
        summary = finalize_version(version)
        metadata = summary_metadata(summary, uri=version.url)
        metadata["refiner/version"] = dg.MetadataValue.text(version.name)
        # The dataset asset's own materialization said "written"; its page shows this
        # observation as the version's current state.
        context.log_event(
            dg.AssetObservation(
                asset_key=dataset_key,
                partition=context.partition_key if context.has_partition_key else None,
                metadata={
                    "refiner/state": dg.MetadataValue.text(f"published by {key.to_user_string()}"),
                    "refiner/version": dg.MetadataValue.text(version.name),
                    "dagster/uri": dg.MetadataValue.path(version.url),
                },
            )
        )
        return dg.MaterializeResult(metadata=metadata)

    return _finalize
