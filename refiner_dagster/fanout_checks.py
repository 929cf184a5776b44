"""The dataset checks of a fan-out dataset asset, which is its own finalization.

:func:`~refiner_dagster.build_dataset_checks` hands a fan-out asset (one whose
dataset key is its own key) to :func:`fanout_dataset_checks`: the same two checks,
reading the published version through the asset's refiner IO manager resource
instead of an input on a separate finalization asset.
"""

import warnings
from typing import Any

import dagster as dg

from .checks import (
    MISSING_ASSETS_CHECK,
    REFERENCE_INTEGRITY_CHECK,
    integrity_result,
    missing_assets_result,
    scan_references,
)
from .storage import DatasetVersion


def fanout_dataset_checks(
    asset: dg.AssetsDefinition, *, blocking: bool, options: dict[str, Any]
) -> list[dg.AssetChecksDefinition]:
    """Missing-asset and reference-integrity checks on the fan-out dataset ``asset``."""
    key = asset.key
    io_key = asset.get_io_manager_key_for_asset_key(key)
    partitions_def = asset.partitions_def

    def published(context: Any) -> DatasetVersion:
        storage = getattr(context.resources, io_key).storage(context.instance)
        partition = context.partition_key if partitions_def is not None else None
        version = storage.current(key.path, partition)
        if version is None:
            raise FileNotFoundError(
                f"asset {key.to_user_string()} has no published version under {storage.url}; "
                "materialize it first"
            )
        return version

    common = {
        "asset": key,
        "blocking": blocking,
        "partitions_def": partitions_def,
        "required_resource_keys": {io_key},
    }
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)

        @dg.asset_check(
            name=MISSING_ASSETS_CHECK,
            description="Source assets that were missing, and what the missing policy did.",
            **common,
        )
        def _missing(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
            return missing_assets_result(published(context).summary())

        @dg.asset_check(
            name=REFERENCE_INTEGRITY_CHECK,
            description="Every blob reference lies inside an existing block.",
            **common,
        )
        def _integrity(context: dg.AssetCheckExecutionContext) -> dg.AssetCheckResult:
            return integrity_result(scan_references(published(context), **options))

    return [_missing, _integrity]
