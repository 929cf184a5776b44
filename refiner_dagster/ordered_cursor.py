"""The source sensor's cursor when names arrive in order: where each listing stopped, and when.

With ``names_ordered=True`` (see :func:`refiner_dagster.sensors.build_source_sensor`)
a tick lists only the names after the last one seen (:mod:`.ordered_listing`), so it
costs what arrived since the previous tick. The cursor is a short list of *passes*:
``(key, listed_at)`` says every name up to ``key`` (after the previous pass's key) was
listed at ``listed_at``. Each pass is at most one entry and old entries merge, so the
cursor holds at most :data:`MAX_PASSES` keys whatever the folder holds.

Every ``full_scan_every`` ticks a *full scan* lists the whole folder again, judging
each name the earlier passes already covered by its modification time: a file
modified at or after ``listed_at - lookback`` of the pass that covered its name (a late
upload with a low name, an overwritten file) is requested; older files are not. The
scan may take several ticks (``max_files_per_tick``); it then resets the passes to
one entry stamped with the time the scan started. A file modified within the lookback
of a pass that did request it is requested again by the next full scan with the same
run key, which Dagster skips (run keys carry the content version).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = ["MAX_PASSES", "ORDERED_CURSOR_VERSION", "OrderedCursor", "PassResult", "run_pass"]

ORDERED_CURSOR_VERSION = 3
MAX_PASSES = 32


class _Source(Protocol):
    @property
    def path(self) -> str: ...

    @property
    def modified(self) -> float | None: ...


@dataclass
class OrderedCursor:
    """Passes so far (``(key, listed_at)``, keys ascending; a ``None`` key covers every
    name) and the state of a full scan: ticks since the last one finished, and where a
    scan in progress resumes (``scan_after``) and when it started (``scan_started``)."""

    passes: list[tuple[str | None, float]] = field(default_factory=list)
    ticks: int = 0
    scan_after: str | None = None
    scan_started: float | None = None

    @property
    def after(self) -> str | None:
        """The last name any pass covered (``None``: none yet, or every name)."""
        return self.passes[-1][0] if self.passes else None

    def covering(self, path: str) -> float | None:
        """``listed_at`` of the pass that covered ``path``, or ``None`` for a new name."""
        if self.passes and self.passes[-1][0] is None:
            return self.passes[-1][1]
        # the first pass whose key is at or after ``path`` (keys ascend)
        return next((at for key, at in self.passes if key is None or path <= key), None)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OrderedCursor:
        passes = [(None if k is None else str(k), float(t)) for k, t in data.get("passes", [])]
        scan_started = data.get("scan_started")
        return cls(
            passes=passes,
            ticks=int(data.get("ticks", 0)),
            scan_after=data.get("scan_after"),
            scan_started=float(scan_started) if scan_started is not None else None,
        )

    @classmethod
    def from_watermark(cls, mark: float | None) -> OrderedCursor:
        """Continue from a modification-time cursor: one full scan judges every name by ``mark``."""
        return cls(passes=[(None, mark)] if mark is not None else [])

    def dumps(self) -> str:
        return json.dumps(
            {
                "v": ORDERED_CURSOR_VERSION,
                "passes": [[k, t] for k, t in self.passes],
                "ticks": self.ticks,
                "scan_after": self.scan_after,
                "scan_started": self.scan_started,
            },
            separators=(",", ":"),
        )


@dataclass
class PassResult:
    """One tick's outcome: what to request, the next cursor, whether more is waiting."""

    requested: list[Any]
    cursor: OrderedCursor
    truncated: bool
    full_scan: bool


def run_pass(
    cursor: OrderedCursor,
    *,
    list_after: Callable[[str | None], Iterator[tuple[str, dict[str, Any]]]],
    make_source: Callable[[str, dict[str, Any]], _Source | None],
    max_files: int,
    full_scan_every: int,
    lookback: float,
    min_age: float,
    now: float,
) -> PassResult:
    """List from the cursor, pick the files to request, and move the cursor.

    ``make_source`` turns a listed name into a source, or ``None`` to ignore it (pattern,
    a name that cannot be a partition key).
    """
    full = (
        cursor.scan_started is not None
        or cursor.after is None
        or cursor.ticks + 1 >= full_scan_every
    )
    start = cursor.scan_after if full else cursor.after
    requested: list[Any] = []
    last: str | None = None
    stopped = False
    for relpath, info in list_after(start):
        source = make_source(relpath, info)
        if source is None:
            last = relpath
            continue
        listed_at = cursor.covering(relpath)
        young = min_age > 0 and source.modified is not None and now - source.modified < min_age
        if listed_at is not None:
            # Young files already covered are caught by the next full scan.
            if young or (source.modified is not None and source.modified < listed_at - lookback):
                last = relpath
                continue
        elif young:
            stopped = True  # a new name still being written: later names wait for it
            break
        if len(requested) >= max_files:
            stopped = True
            break
        requested.append(source)
        last = relpath
    truncated = stopped and len(requested) >= max_files
    if full:
        return PassResult(
            requested, _after_scan(cursor, start, last, stopped, now), truncated, True
        )
    passes = list(cursor.passes)
    if last is not None:
        passes.append((last, now))
    return PassResult(requested, OrderedCursor(_merged(passes), cursor.ticks + 1), truncated, False)


def _after_scan(
    cursor: OrderedCursor, start: str | None, last: str | None, stopped: bool, now: float
) -> OrderedCursor:
    started = cursor.scan_started if cursor.scan_started is not None else now
    if stopped:
        position = last if last is not None else start
        return OrderedCursor(list(cursor.passes), cursor.ticks + 1, position, started)
    keys = [k for k in (cursor.after, start, last) if k is not None]
    return OrderedCursor([(max(keys), started)] if keys else [], 0)


def _merged(passes: list[tuple[str | None, float]]) -> list[tuple[str | None, float]]:
    """Merge the oldest passes until at most MAX_PASSES remain; the earlier time wins,
    so a merged range is judged at least as eagerly as before (more repeats, no misses)."""
    while len(passes) > MAX_PASSES:
        (_, t0), (k1, t1) = passes[0], passes[1]
        passes[:2] = [(k1, min(t0, t1))]
    return passes
