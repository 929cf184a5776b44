"""A Dagster job that points a dataset's readers back at an earlier published version.

:func:`build_rollback_job` does what ``refiner rollback`` does (one atomic pointer
move, nothing deleted, refused when the pointer moved meanwhile; see
:mod:`refiner_core.io.dataset_history`), from the Dagster UI or API, and then records an
``AssetMaterialization`` of the dataset's published asset (its finalization asset, or a
:func:`~refiner_dagster.build_dataset_asset` asset itself) whose ``dagster/uri`` is the
rolled-back-to version. A materialization rather than an observation: what the asset
holds did change, so its latest materialization names the version readers now get,
and downstream assets whose automation waits on new materializations run again on the
rolled-back rows (they load it through the pointer either way).

Run config of its one op, ``rollback``: ``to`` (a version name; default the published
version's parent), ``reason``, ``by`` (default: the run's ``dagster/user`` tag, else the
run id) and ``partition`` (required for a partitioned dataset).

Example:
    >>> import dagster as dg, refiner_core as mdr, refiner_dagster as rd
    >>> @dg.asset(io_manager_key="refiner")
    ... def episodes() -> mdr.Pipeline:
    ...     return mdr.from_items([{"episode": 1}])
    >>> job = rd.build_rollback_job(episodes)
    >>> job.name
    'episodes_rollback'
"""

from typing import Any

import dagster as dg
from pydantic import Field

from refiner_core.io import RollbackRefused, rollback

from .settings import DATASET_KEY, unwrap_metadata
from .storage import DatasetVersion

__all__ = ["RollbackConfig", "build_rollback_job"]


class RollbackConfig(dg.Config):
    """What to roll back to, and why."""

    to: str | None = Field(
        default=None,
        description="The version to publish again (v-...); default: the published one's parent.",
    )
    reason: str = Field(default="", description="Why; recorded in the pointer and the event.")
    by: str | None = Field(
        default=None,
        description="Who; default: the run's dagster/user tag, else 'dagster run <run id>'.",
    )
    partition: str | None = Field(
        default=None, description="The partition to roll back (a partitioned dataset needs it)."
    )


def _keys(
    asset_or_key: dg.AssetsDefinition | dg.AssetKey | str, published_key: dg.AssetKey | None
) -> tuple[dg.AssetKey, dg.AssetKey, bool]:
    """(dataset key, key of the asset readers load it through, whether it is partitioned)."""
    if isinstance(asset_or_key, dg.AssetsDefinition):
        if len(asset_or_key.keys) != 1:
            raise TypeError(
                "build_rollback_job takes one dataset asset (or its finalization asset), got "
                f"{len(asset_or_key.keys)} keys; pass the asset's key instead"
            )
        key = asset_or_key.key
        partitioned = asset_or_key.partitions_def is not None
        dataset = unwrap_metadata(asset_or_key.metadata_by_key.get(key, {}).get(DATASET_KEY))
        if dataset:  # a finalization asset, or a fan-out dataset asset: it publishes itself
            return dg.AssetKey.from_user_string(str(dataset)), published_key or key, partitioned
    else:
        key = (
            dg.AssetKey.from_user_string(asset_or_key)
            if isinstance(asset_or_key, str)
            else (asset_or_key)
        )
        partitioned = False
    if not isinstance(key, dg.AssetKey):
        raise TypeError(f"build_rollback_job takes an asset or an asset key, got {asset_or_key!r}")
    default = dg.AssetKey([*key.path[:-1], f"{key.path[-1]}_finalized"])
    return key, published_key or default, partitioned


def build_rollback_job(
    asset_or_key: dg.AssetsDefinition | dg.AssetKey | str,
    *,
    io_manager_key: str = "refiner",
    name: str | None = None,
    published_key: dg.AssetKey | str | None = None,
    tags: dict[str, str] | None = None,
) -> dg.JobDefinition:
    """A job that rolls ``asset_or_key``'s dataset back to an earlier published version.

    ``asset_or_key``: the dataset asset, its finalization asset, a
    :func:`~refiner_dagster.build_dataset_asset` asset, or the dataset's key.
    ``io_manager_key`` names the refiner IO manager holding its versions (bind it in the
    ``Definitions`` resources). The ``AssetMaterialization`` goes on ``published_key``
    (default: the finalization asset given, or ``<dataset>_finalized``). Run config:
    :class:`RollbackConfig`. A refused rollback fails the run with the reason and moves
    nothing.
    """
    given = (
        dg.AssetKey.from_user_string(published_key)
        if isinstance(published_key, str)
        else (published_key)
    )
    dataset_key, target_key, partitioned = _keys(asset_or_key, given)
    dataset_name = dataset_key.to_user_string()
    job_name = name or f"{'__'.join(dataset_key.path)}_rollback"

    @dg.op(
        name="rollback",
        required_resource_keys={io_manager_key},
        description=f"Points readers of {dataset_name} at an earlier published version.",
    )
    def _rollback(context: dg.OpExecutionContext, config: RollbackConfig) -> None:
        from .io_manager import writer_for

        if partitioned and config.partition is None:
            raise dg.Failure(
                f"{dataset_name} is partitioned: set the run config's partition to the "
                "partition key to roll back"
            )
        storage = writer_for(context, io_manager_key, f"rollback of {dataset_name}").storage
        folder = storage.partition_folder(dataset_key.path, config.partition)
        by = config.by or context.run.tags.get("dagster/user") or f"dagster run {context.run_id}"
        try:
            pointer = rollback(
                folder, to=config.to, reason=config.reason or None, by=by, run=context.run_id
            )
        except RollbackRefused as exc:
            raise dg.Failure(description=str(exc)) from exc
        version = DatasetVersion(
            storage, list(dataset_key.path), config.partition, pointer["version"], pointer
        )
        moved = pointer["rolled_back"]
        context.log.info(f"rolled {dataset_name} back from {moved['from']} to {version.name}")
        context.log_event(_materialization(target_key, version, moved))

    @dg.job(
        name=job_name,
        tags=tags,
        description=f"Rolls the refiner dataset {dataset_name} back to an earlier version.",
    )
    def _job() -> None:
        _rollback()

    return _job


def _materialization(
    key: dg.AssetKey, version: DatasetVersion, moved: dict[str, Any]
) -> dg.AssetMaterialization:
    why = moved.get("reason") or "no reason given"
    metadata: dict[str, Any] = {
        "dagster/uri": dg.MetadataValue.path(version.url),
        "refiner/version": dg.MetadataValue.text(version.name),
        "refiner/state": dg.MetadataValue.text(
            f"rolled back to {version.name}, by {moved.get('by')}, why: {why}"
        ),
        "refiner/rolled_back_from": dg.MetadataValue.text(str(moved.get("from"))),
        "refiner/rolled_back_by": dg.MetadataValue.text(str(moved.get("by"))),
        "refiner/rollback_reason": dg.MetadataValue.text(why),
    }
    rows = version.record.get("rows_written")
    if isinstance(rows, int) and version.partition_key is None:
        metadata["dagster/row_count"] = dg.MetadataValue.int(rows)
    return dg.AssetMaterialization(
        asset_key=key, partition=version.partition_key, metadata=metadata
    )
