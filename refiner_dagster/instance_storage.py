"""The default storage of the refiner IO managers: a folder of the Dagster instance.

Without ``base_url``, datasets land in ``<instance storage directory>/refiner``. That
is only a home for data when the instance outlives the command: an ephemeral instance
(``dg.materialize`` without ``instance=``) keeps its storage in a temporary folder, and
``dagster dev`` or ``dagster asset materialize`` run with ``DAGSTER_HOME`` unset use
a ``.tmp_dagster_home_*`` folder that Dagster deletes on exit. Writing a dataset
there would succeed, pass its checks, and vanish, so it is refused.

Example:
    >>> import dagster as dg
    >>> with dg.instance_for_test() as instance:
    ...     default_base_url(instance, owner="RefinerBlobIOManager").endswith("refiner")
    True
"""

from __future__ import annotations

import os

import dagster as dg

from refiner_core import RefinerError

# The folder prefix Dagster's CLI gives the instance it makes when DAGSTER_HOME is unset.
TEMPORARY_HOME_PREFIX = ".tmp_dagster_home_"


class TemporaryInstanceError(RefinerError, RuntimeError):
    """A dataset would be written where Dagster deletes it when the command exits."""


def temporary_reason(instance: dg.DagsterInstance) -> str | None:
    """Why ``instance``'s storage does not outlive the process, or ``None`` when it does."""
    if instance.is_ephemeral:
        return (
            "the Dagster instance is ephemeral (in memory, with its storage in a temporary "
            "folder), as in dg.materialize(...) without instance="
        )
    storage = os.path.abspath(instance.storage_directory())
    if any(part.startswith(TEMPORARY_HOME_PREFIX) for part in storage.split(os.sep)):
        return (
            "DAGSTER_HOME is not set, so Dagster made a temporary instance in "
            f"{TEMPORARY_HOME_PREFIX}* and deletes it when the command exits"
        )
    return None


def default_base_url(instance: dg.DagsterInstance, *, owner: str) -> str:
    """``<instance storage directory>/refiner``, refused (:class:`TemporaryInstanceError`)
    when the instance is temporary; ``owner`` names the IO manager in the error."""
    base = os.path.join(instance.storage_directory(), "refiner")
    reason = temporary_reason(instance)
    if reason is not None:
        raise TemporaryInstanceError(
            f"{owner} has no base_url, so the dataset would be written under {base}, but "
            f"{reason}: the dataset would be deleted with it. Fix: export "
            "DAGSTER_HOME=/path/to/a/lasting/folder before starting Dagster (or pass "
            "instance=dg.DagsterInstance.get() to dg.materialize), or set base_url on the "
            f"IO manager, e.g. {owner}(base_url='s3://bucket/datasets')"
        )
    return base
