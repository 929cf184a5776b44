"""How many published versions of a dataset stay on storage after a newer one is published.

A :class:`Retention` keeps the ``keep_versions`` most recently published versions (the
published one included) and, with ``keep_for``, also every version that readers saw
within the last ``keep_for`` seconds (it stopped being the published version less than
``keep_for`` ago), so ``as_of=`` any moment in that window and a rollback to any of
those versions keep working. Versions beyond both are deleted after each publish,
oldest first; the published one and one whose Dagster run is still live never are.

Set it on the IO manager (``keep_versions=``, ``keep_for=`` in seconds) or per asset
with ``refiner/keep_versions`` / ``refiner/keep_for`` definition metadata (also the
``metadata=`` of :func:`~refiner_dagster.build_dataset_asset`). The version record keeps
the policy it was written with, so every write path publishes with it.

Example:
    >>> from datetime import timedelta
    >>> Retention(keep_versions=2, keep_for=timedelta(days=7)).keep_for
    604800.0
    >>> Retention(keep_versions=0)
    Traceback (most recent call last):
    ...
    ValueError: keep_versions=0 must be a whole number of at least 1 (the published version always stays)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from refiner_core.io import pointer_history

DEFAULT_KEEP_VERSIONS = 3


@dataclass(frozen=True)
class Retention:
    """The published versions kept: the newest ``keep_versions``, plus (when ``keep_for``
    is set) those readers saw less than ``keep_for`` seconds ago."""

    keep_versions: int = DEFAULT_KEEP_VERSIONS
    keep_for: float | None = None

    def __init__(
        self, keep_versions: int = DEFAULT_KEEP_VERSIONS, keep_for: float | timedelta | None = None
    ) -> None:
        if (
            isinstance(keep_versions, bool)
            or not isinstance(keep_versions, int)
            or keep_versions < 1
        ):
            raise ValueError(
                f"keep_versions={keep_versions!r} must be a whole number of at least 1 "
                "(the published version always stays)"
            )
        seconds = keep_for.total_seconds() if isinstance(keep_for, timedelta) else keep_for
        if seconds is not None and (
            isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0
        ):
            raise ValueError(
                f"keep_for={keep_for!r} must be a number of seconds (or a timedelta) of at "
                "least 0, or None to keep versions by count only"
            )
        object.__setattr__(self, "keep_versions", keep_versions)
        object.__setattr__(self, "keep_for", None if seconds is None else float(seconds))

    def as_record(self) -> dict[str, Any]:
        """The policy as a version record stores it."""
        return {"keep_versions": self.keep_versions, "keep_for": self.keep_for}

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> Retention:
        """The policy a version record stores (the default for records without one)."""
        stored = (record or {}).get("retention") or {}
        return cls(
            keep_versions=stored.get("keep_versions", DEFAULT_KEEP_VERSIONS),
            keep_for=stored.get("keep_for"),
        )

    def expired(
        self, pointer: dict[str, Any], published: dict[str, float], now: float
    ) -> list[str]:
        """The previously published versions beyond this policy, oldest first.

        ``pointer`` is the new pointer (its history says when each version was moved to
        and away from); ``published`` maps each other published version on storage to
        its ``published_at``, used for versions the history no longer mentions.
        """
        current = pointer["version"]
        last_moved: dict[str, float] = {}
        left_at: dict[str, float] = {}
        moves = pointer_history(pointer)
        for before, after in zip(moves, [*moves[1:], None], strict=True):
            last_moved[before["version"]] = before["at"]
            if after is not None and after["version"] != before["version"]:
                left_at[before["version"]] = after["at"]
        candidates = sorted(
            (name for name in published if name != current),
            key=lambda name: last_moved.get(name, published[name]),
            reverse=True,
        )
        beyond = candidates[self.keep_versions - 1 :]
        if self.keep_for is not None:
            horizon = now - self.keep_for
            beyond = [n for n in beyond if left_at.get(n, published[n]) < horizon]
        return list(reversed(beyond))
