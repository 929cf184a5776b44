"""The publish history a dataset's pointer carries: which version was published when.

Every time the ``_current.json`` pointer of a versioned dataset folder moves (a publish
or a rollback) the new pointer carries the moves before it, newest last::

    {"version": "v-b", ..., "history": [
        {"version": "v-a", "at": 1700000000.0, "action": "publish", "run": "6f1c..."},
        {"version": "v-b", "at": 1700000600.0, "action": "publish", "run": "0a2b..."}]}

``at`` is seconds since the epoch (UTC). The history is what ``as_of=`` reads: the
version readers saw at a given time is the last one moved to at or before it. It keeps
the newest :data:`MAX_HISTORY` moves; an older time is answered "nothing known then".

Example:
    >>> from datetime import datetime, timezone
    >>> pointer = {"version": "v-b", "history": [
    ...     {"version": "v-a", "at": 100.0}, {"version": "v-b", "at": 200.0}]}
    >>> version_at(pointer, datetime.fromtimestamp(150, timezone.utc))
    'v-a'
    >>> version_at(pointer, datetime.fromtimestamp(50, timezone.utc)) is None
    True
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

HISTORY_KEY = "history"
MAX_HISTORY = 1000


def pointer_history(pointer: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The pointer moves ``pointer`` records, oldest first.

    A pointer written before histories were kept counts as one move to its version at
    its ``published_at`` (when it has one).
    """
    if pointer is None:
        return []
    entries = pointer.get(HISTORY_KEY)
    if isinstance(entries, list):
        moves = [
            e
            for e in entries
            if isinstance(e, dict)
            and isinstance(e.get("version"), str)
            and isinstance(e.get("at"), int | float)
        ]
        return sorted(moves, key=lambda e: e["at"])
    published_at = pointer.get("published_at")
    if isinstance(published_at, int | float):
        return [{"version": pointer["version"], "at": float(published_at), "action": "publish"}]
    return []


def moved_pointer(
    previous: dict[str, Any] | None,
    fields: dict[str, Any],
    version: str,
    *,
    at: float,
    action: str,
    **details: Any,
) -> dict[str, Any]:
    """The pointer that moves readers to ``version`` at ``at``: ``fields`` (the version's
    record, its url) plus the history of ``previous`` with this move appended."""
    move = {"version": version, "at": at, "action": action}
    move.update({k: v for k, v in details.items() if v is not None})
    moves = [*pointer_history(previous), move][-MAX_HISTORY:]
    return {**fields, "version": version, HISTORY_KEY: moves}


def version_at(pointer: dict[str, Any] | None, when: datetime) -> str | None:
    """The version readers saw at ``when`` (``None``: nothing published then, as far as
    the history goes)."""
    found = None
    for move in pointer_history(pointer):
        if utc(move["at"]) > when:  # at microsecond resolution, as the caller sees times
            break
        found = move["version"]
    return found


def first_published(pointer: dict[str, Any] | None) -> datetime | None:
    """When the oldest move the history keeps happened, as a UTC datetime."""
    moves = pointer_history(pointer)
    return utc(moves[0]["at"]) if moves else None


def utc(seconds: float) -> datetime:
    """Seconds since the epoch as an aware UTC datetime."""
    return datetime.fromtimestamp(seconds, UTC)


def check_as_of(as_of: Any, what: str) -> datetime | None:
    """``as_of`` when it is ``None`` or a timezone-aware ``datetime``."""
    if as_of is None:
        return None
    if not isinstance(as_of, datetime):
        raise TypeError(
            f"{what}: as_of={as_of!r} is not a datetime; pass a timezone-aware datetime such "
            "as datetime(2024, 5, 1, 12, 0, tzinfo=timezone.utc)"
        )
    if as_of.tzinfo is None or as_of.utcoffset() is None:
        raise ValueError(
            f"{what}: as_of={as_of!r} has no timezone, so the moment it names is ambiguous; "
            "pass an aware datetime, e.g. as_of.replace(tzinfo=timezone.utc) for a UTC time"
        )
    return as_of
