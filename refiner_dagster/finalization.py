"""Finalization assets: reduce a dataset's written version, audit it, then publish it.

The dataset asset's IO manager only *writes* a version; the finalization asset
built by :func:`build_finalization_asset` runs write → audit → publish on it
(:mod:`refiner_dagster.publish`): the engine's finalization stages (keep one
attempt per shard, delete rejected attempts' files and blocks, commit Lance
fragments, write ``_refiner/summary.json``), then the ``missing_assets`` and
``reference_integrity`` checks on the unpublished version, and only if no
ERROR-severity check failed the ``_current.json`` pointer. Its materialization
metadata is read back from the persisted summary, with Dagster's standard table
metadata (:mod:`refiner_dagster.table_metadata`).
"""

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import dagster as dg

from refiner_core.manifests import DatasetSummary

from .checks import AUDITS_KEY, DEFAULT_SAMPLE_SIZE, DEFAULT_SAMPLE_THRESHOLD, MISSING_ASSETS_CHECK
from .checks import REFERENCE_INTEGRITY_CHECK as INTEGRITY_CHECK
from .lerobot_format import declares_lerobot, lerobot_metadata, video_integrity_spec
from .metadata import summary_metadata
from .publish import AuditFailedError, AuditPolicy
from .retention import DEFAULT_KEEP_VERSIONS, Retention
from .settings import DATASET_KEY, LOAD_KEY, validate_asset_metadata
from .storage import DatasetVersion, one_version
from .table_metadata import table_metadata

__all__ = ["AUDITS_KEY", "build_finalization_asset", "dataset_pool", "published_metadata"]


class _Default:
    def __repr__(self) -> str:
        return "<default>"


_DEFAULT: Any = _Default()


def dataset_pool(dataset_key: dg.AssetKey) -> str:
    """The default concurrency pool of a dataset's finalization: ``refiner/<asset key>``.

    >>> dataset_pool(dg.AssetKey(["robotics", "episodes"]))
    'refiner/robotics/episodes'
    """
    return "refiner/" + "/".join(dataset_key.path)


def published_metadata(version: DatasetVersion, summary: DatasetSummary) -> dict[str, Any]:
    """Materialization metadata of a published version: counters, table metadata, version."""
    metadata = summary_metadata(summary, uri=version.url)
    if version.partition_key is not None:
        metadata.pop("dagster/row_count", None)
    metadata.update(table_metadata(version, summary))
    metadata.update(lerobot_metadata(version, summary))
    metadata["refiner/version"] = dg.MetadataValue.text(version.name)
    return metadata


def check_single_partition_backfills(policy: dg.BackfillPolicy | None, what: str) -> None:
    """Refuse backfill policies that put several partitions in one run (one version each)."""
    if policy is None:
        return
    if policy.max_partitions_per_run != 1:  # None: every partition in a single run
        raise dg.DagsterInvalidDefinitionError(
            f"{what} has backfill_policy {policy!r}, which puts several partitions in one run; "
            "refiner writes and publishes one version per partition and run. Use "
            "dg.BackfillPolicy.multi_run(max_partitions_per_run=1) or leave backfill_policy unset"
        )


def build_finalization_asset(
    dataset_asset: dg.AssetsDefinition,
    *,
    name: str | None = None,
    key_prefix: str | list[str] | None = None,
    group_name: str | None = None,
    description: str | None = None,
    io_manager_key: str | None = None,
    retry_policy: dg.RetryPolicy | None = None,
    tags: Mapping[str, str] | None = None,
    checks: bool = True,
    max_missing_fraction: float | None = None,
    sample_threshold: int = DEFAULT_SAMPLE_THRESHOLD,
    sample_size: int = DEFAULT_SAMPLE_SIZE,
    seed: int = 0,
    automation_condition: dg.AutomationCondition | None = _DEFAULT,
    pool: str | None = _DEFAULT,
    op_tags: Mapping[str, Any] | None = None,
    owners: Sequence[str] | None = None,
    code_version: str | None = None,
    backfill_policy: dg.BackfillPolicy | None = None,
    kinds: set[str] | None = None,
    keep_versions: int | None = None,
    keep_for: float | timedelta | None = None,
) -> dg.AssetsDefinition:
    """The downstream asset that audits and publishes ``dataset_asset``'s pending version.

    It loads the written version from the dataset's refiner IO manager and runs write →
    audit → publish: the reducer (rejected-attempt cleanup, Lance commit), then, with
    ``checks=True`` (the default), the ``missing_assets`` and ``reference_integrity``
    checks declared as its ``check_specs`` on the still unpublished version (and
    ``video_integrity`` on a ``refiner/format: lerobot`` dataset). The
    ``_current.json`` pointer moves only if no ERROR-severity check failed; otherwise the
    run fails naming the checks and readers keep the previous version. Missing source
    assets are a WARN unless their share is above ``max_missing_fraction``, which makes
    them an ERROR that blocks publication. ``sample_threshold`` / ``sample_size`` /
    ``seed`` bound the integrity scan.

    The materialization metadata comes from the persisted summary: rows written, assets
    packed, blocks and bytes, coalesced blobs / references / bytes, range copies, missing
    assets, cells set to null, rows dropped, rejected attempts removed, a markdown table,
    and the standard ``dagster/column_schema``, ``dagster/table_name``,
    ``dagster/row_count`` (``dagster/partition_row_count`` when partitioned) and
    ``dagster/uri``. Partitions follow the dataset's.

    Automation: ``automation_condition`` defaults to ``dg.AutomationCondition.eager()``,
    so while the daemon evaluates automation conditions (``dagster dev`` runs it, with
    the default automation condition sensor on the Automation page of the UI) every
    write of the dataset is followed by its finalization. Pass
    ``automation_condition=None`` to finalize only when asked.

    Concurrency: ``pool`` defaults to ``refiner/<dataset key>`` (:func:`dataset_pool`);
    give the dataset asset the same ``pool=`` and set a limit of 1 for it
    (``dagster instance concurrency set refiner/<key> 1``) to serialize its writes and
    publications. The other arguments (``op_tags``, ``owners``, ``tags``,
    ``code_version``, ``backfill_policy``, ``kinds``, ``group_name``, ``description``,
    ``retry_policy``) are passed to ``@dg.asset``. A backfill policy that puts several
    partitions in one run is refused here, as it is on the dataset asset.

    Retention: after publishing, versions beyond the dataset's retention policy are
    deleted (its IO manager's ``keep_versions`` / ``keep_for``, or its
    ``refiner/keep_versions`` / ``refiner/keep_for`` metadata); ``keep_versions`` and
    ``keep_for`` (seconds or a ``timedelta``) given here replace that policy
    (:class:`~refiner_dagster.retention.Retention`).

    Downstream assets may take it as an input: they receive the published table as a
    lazy pipeline, like an input on the dataset asset itself. The default key is the
    dataset key with ``_finalized`` appended to its last part.

    Example:
        >>> import dagster as dg, refiner_core as mdr
        >>> from refiner_dagster import RefinerBlobIOManager, build_finalization_asset
        >>> @dg.asset(io_manager_key="refiner")
        ... def episodes() -> mdr.Pipeline:
        ...     return mdr.from_items([{"episode": 1}])
        >>> episodes_finalized = build_finalization_asset(episodes, max_missing_fraction=0.01)
        >>> episodes_finalized.key.to_user_string()
        'episodes_finalized'
        >>> sorted(c.name for c in episodes_finalized.check_specs)
        ['missing_assets', 'reference_integrity']
    """
    if not isinstance(dataset_asset, dg.AssetsDefinition) or len(dataset_asset.keys) != 1:
        raise TypeError(
            "build_finalization_asset takes the AssetsDefinition of one dataset asset "
            f"(an @dg.asset), got {dataset_asset!r}"
        )
    dataset_key = dataset_asset.key
    dataset_name = dataset_key.to_user_string()
    validate_asset_metadata(
        dataset_asset.metadata_by_key.get(dataset_key), where=f"asset {dataset_name}"
    )
    check_single_partition_backfills(dataset_asset.backfill_policy, f"asset {dataset_name}")
    check_single_partition_backfills(backfill_policy, f"the finalization of {dataset_name}")
    policy = AuditPolicy(
        max_missing_fraction=max_missing_fraction,
        sample_threshold=sample_threshold,
        sample_size=sample_size,
        seed=seed,
    )
    retention = (
        Retention(DEFAULT_KEEP_VERSIONS if keep_versions is None else keep_versions, keep_for)
        if keep_versions is not None or keep_for is not None
        else None
    )
    io_key = io_manager_key or dataset_asset.get_io_manager_key_for_asset_key(dataset_key)
    final_name = name or f"{dataset_key.path[-1]}_finalized"
    if key_prefix is None:
        prefix = list(dataset_key.path[:-1])
    else:
        prefix = [key_prefix] if isinstance(key_prefix, str) else list(key_prefix)
    key = dg.AssetKey([*prefix, final_name])
    group = group_name or dataset_asset.group_names_by_key.get(dataset_key)
    lerobot = declares_lerobot(dataset_asset.metadata_by_key.get(dataset_key))
    specs = audit_check_specs(key, policy, lerobot=lerobot) if checks else []
    metadata: dict[str, Any] = {DATASET_KEY: dataset_name}
    if checks:
        metadata[AUDITS_KEY] = True

    @dg.asset(
        key=key,
        ins={"dataset": dg.AssetIn(key=dataset_key, metadata={LOAD_KEY: "pending"})},
        partitions_def=dataset_asset.partitions_def,
        io_manager_key=io_key,
        group_name=group,
        description=description
        or f"Audits and publishes the refiner dataset {dataset_name} (reducer, checks, pointer).",
        metadata=metadata,
        kinds=set(kinds) if kinds is not None else {"refiner"},
        retry_policy=retry_policy,
        tags=dict(tags) if tags is not None else None,
        check_specs=specs or None,
        automation_condition=dg.AutomationCondition.eager()
        if automation_condition is _DEFAULT
        else automation_condition,
        pool=dataset_pool(dataset_key) if pool is _DEFAULT else pool,
        op_tags=dict(op_tags) if op_tags is not None else None,
        owners=list(owners) if owners is not None else None,
        code_version=code_version,
        backfill_policy=backfill_policy,
    )
    def _finalize(context: dg.AssetExecutionContext, dataset: Any):
        version = _loaded_version(dataset, key, dataset_name, io_key)
        context.log.info(f"finalizing {version.describe()}")
        # a local import: the IO managers publish with this module's metadata
        from .io_manager import writer_for

        writer = writer_for(context.op_execution_context, io_key, f"asset {key.to_user_string()}")
        try:
            finalized = writer.finalize(
                version,
                audit=policy if specs else None,
                retention=retention,
                published_by=context.run.run_id,
            )
        except AuditFailedError as error:
            yield from error.results
            raise dg.Failure(
                description=str(error), metadata={"failed_checks": error.failed}
            ) from error
        yield from finalized.checks
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
        yield dg.MaterializeResult(metadata=published_metadata(version, finalized.summary))

    return _finalize


def audit_check_specs(
    key: dg.AssetKey, policy: AuditPolicy, *, lerobot: bool = False
) -> list[dg.AssetCheckSpec]:
    """The blocking ``missing_assets`` and ``reference_integrity`` specs audited before
    publishing, and ``video_integrity`` for a LeRobot dataset."""
    threshold = policy.max_missing_fraction
    missing = "Source assets that were missing, and what the missing policy did (WARN"
    missing += f"; ERROR above {threshold:.2%} missing)." if threshold is not None else ")."
    video = [video_integrity_spec(key)] if lerobot else []
    return [
        dg.AssetCheckSpec(MISSING_ASSETS_CHECK, asset=key, blocking=True, description=missing),
        dg.AssetCheckSpec(
            INTEGRITY_CHECK,
            asset=key,
            blocking=True,
            description=(
                "Every blob reference lies inside an existing block (offset + size <= block "
                f"size), checked before publishing; sampled above {policy.sample_threshold:,} "
                "references, and only sampled when every write attempt audited its own."
            ),
        ),
        *video,
    ]


def _loaded_version(
    loaded: Any, key: dg.AssetKey, dataset_name: str, io_key: str
) -> DatasetVersion:
    version = one_version(loaded, key.to_user_string())
    if not isinstance(version, DatasetVersion):
        raise dg.Failure(
            description=(
                f"{key.to_user_string()} received a {type(version).__name__} for asset "
                f"{dataset_name}, not a written refiner version: the dataset asset's IO manager "
                f"key {io_key!r} is not bound to a refiner IO manager. Set "
                f"io_manager_key='refiner' (or your key) on @dg.asset {dataset_name} and bind "
                "it to rd.RefinerBlobIOManager() or rd.RefinerFileIOManager() in "
                "Definitions(resources=...)"
            )
        )
    return version
