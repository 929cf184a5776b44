"""One publisher per dataset partition: the pointer moves only over the version a run began on.

Two runs of one partition may write their versions at the same time, but only one of
them may become what readers see. Every version records the version published when
it began (``base_version``); publishing it is a compare-and-swap on the pointer:

1. the run takes the partition folder's ownership (an owner record created
   exclusively under ``<partition>/_refiner/owners/``: ``O_EXCL`` locally, a
   conditional put on S3), waiting while another run is publishing;
2. it checks that the pointer still names its base version; if another run published
   since, this version is refused with :class:`~refiner_dagster.SupersededError`
   naming that run, and nothing is deleted;
3. it writes the pointer (and deletes the versions it replaces), then releases.

So of two concurrent runs the first to finish publishes; the other fails instead of
recording a materialization whose version the next publication would delete.

Example:
    >>> import tempfile
    >>> from refiner_dagster.storage import DatasetStorage
    >>> storage = DatasetStorage(tempfile.mkdtemp())
    >>> first = storage.begin(["frames"], "a", "v-1", {"dagster_run_id": "run-1"})
    >>> second = storage.begin(["frames"], "a", "v-2", {"dagster_run_id": "run-2"})
    >>> with publishing(first):
    ...     _ = storage.publish(first)
    >>> try:
    ...     with publishing(second):
    ...         pass
    ... except SupersededError as error:
    ...     print(error.winner_run)
    run-1
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import refiner_core as mdr
from refiner_core.integration import OutputOwnership

from .storage import DatasetVersion, SupersededError

# The pointer as read, or ``None`` when nothing is published yet.
Pointer = dict[str, Any] | None

__all__ = ["PUBLISH_WAIT_S", "publishing", "refuse_moved_pointer"]

# How long a publication waits for another run's publication of the same partition.
PUBLISH_WAIT_S = 600.0
# An owner that stops heartbeating for this long (it died) no longer blocks publishing.
_STALE_AFTER_S = 60.0
_POLL_S = 0.25


@contextmanager
def publishing(
    version: DatasetVersion,
    *,
    wait_s: float = PUBLISH_WAIT_S,
    first: Callable[[], None] | None = None,
) -> Iterator[Pointer]:
    """Hold ``version``'s partition as its only publisher, after checking that the
    pointer has not moved since the version began (:func:`refuse_moved_pointer`).

    Yields the pointer read under the hold: no other publisher can move it until the
    hold ends, so the publication writes over it without reading it again. ``first``
    runs under the hold before the pointer is read (a check of the caller's own)."""
    run = str(version.record.get("dagster_run_id") or version.name)
    owner = OutputOwnership(version.folder, run_id=run, stale_after_s=_STALE_AFTER_S)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            owner.acquire()
            break
        except mdr.OutputFolderBusy as busy:
            if time.monotonic() > deadline:
                raise mdr.OutputFolderBusy(
                    f"{version.describe()} was not published: {busy} (waited {wait_s:g} s for "
                    "its publication to end)",
                    folder=busy.folder,
                    owner=busy.owner,
                ) from busy
            time.sleep(_POLL_S)
    owner.start_heartbeats()
    try:
        if first is not None:
            first()
        pointer = version.storage.pointer(version.asset_path, version.partition_key)
        refuse_moved_pointer(version, version.storage.pointed(version, pointer))
        yield pointer
    finally:
        owner.release()


def refuse_moved_pointer(version: DatasetVersion, current: DatasetVersion | None) -> None:
    """Raise :class:`SupersededError` when another version was published after ``version``
    began (``current``, the published version, is not its ``base_version``)."""
    if "base_version" not in version.record:
        return  # recorded before versions kept their base: judged by age alone
    if current is None or current.name == version.name:
        return
    base = version.record["base_version"]
    if current.name == base:
        return
    winner = current.record.get("dagster_run_id")
    by = f"run {winner}" if winner else "another run"
    began = f"on top of {base}" if base else "when nothing was published"
    raise SupersededError(
        f"{version.describe()} was superseded: {by} published version {current.name} after "
        f"this version began ({began}), and one run publishes a partition at a time, so this "
        f"one is not published and readers keep {current.name}. Materialize the asset again "
        "once that run is done to replace it",
        winner_version=current.name,
        winner_run=winner,
    )
