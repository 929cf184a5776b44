"""Usage counters: requests, retries and tokens, per worker process.

Each ``generate_text`` callable keeps its own :class:`UsageCounter` (read it as
``callable.usage``) and every count also goes to one process-wide counter (read it
with :func:`usage_snapshot`). Counters belong to the process that made the requests:
a forked or unpickled copy starts from zero.
"""

from __future__ import annotations

import threading
from typing import Any

from .process import current_pid

USAGE_FIELDS = ("requests_ok", "requests_failed", "retries", "input_tokens", "output_tokens")
_KNOWN = frozenset(USAGE_FIELDS)


class UsageCounter:
    """Thread-safe counters for one process.

    - ``requests_ok``: ``generate`` calls that returned a response.
    - ``requests_failed``: ``generate`` calls that raised (after any retries), including
      malformed responses and structured-output validation failures.
    - ``retries``: extra HTTP attempts made after a retryable failure.
    - ``input_tokens`` / ``output_tokens``: as reported by the provider, for every
      answered request (also when its structured output then failed validation,
      since those tokens were billed).

    >>> counter = UsageCounter()
    >>> counter.add(requests_ok=1, input_tokens=12, output_tokens=3)
    >>> counter.snapshot()["input_tokens"]
    12
    """

    def __init__(self, parent: UsageCounter | None = None) -> None:
        self._start(parent)

    def _start(self, parent: UsageCounter | None) -> None:
        self._parent = parent
        self._lock = threading.Lock()
        self._pid = current_pid()
        self._counts = dict.fromkeys(USAGE_FIELDS, 0)

    def _own_process(self) -> None:
        # Counts inherited through fork belong to the parent process.
        pid = current_pid()
        if pid != self._pid:
            self._pid = pid
            self._counts = dict.fromkeys(USAGE_FIELDS, 0)

    def add(self, **deltas: int) -> None:
        """Add to one or more counters (names from ``USAGE_FIELDS``)."""
        unknown = deltas.keys() - _KNOWN
        if unknown:
            raise ValueError(
                f"unknown usage counter(s) {sorted(unknown)}; known: {list(USAGE_FIELDS)}"
            )
        with self._lock:
            self._own_process()
            for name, delta in deltas.items():
                self._counts[name] += int(delta)
        if self._parent is not None:
            self._parent.add(**deltas)

    def snapshot(self) -> dict[str, int]:
        """A copy of the counters as a plain dict."""
        with self._lock:
            self._own_process()
            return dict(self._counts)

    def reset(self) -> None:
        """Set every counter back to zero (the parent counter is left alone)."""
        with self._lock:
            self._counts = dict.fromkeys(USAGE_FIELDS, 0)

    def __getstate__(self) -> dict[str, Any]:
        # A copy shipped to another process starts from zero and reports to that
        # process's own totals.
        return {"parent": self._parent is not None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._start(_PROCESS_TOTALS if state.get("parent") else None)

    def __repr__(self) -> str:
        return f"UsageCounter({self.snapshot()})"


_PROCESS_TOTALS = UsageCounter()


def process_counter() -> UsageCounter:
    """The process-wide counter every ``generate_text`` callable reports to."""
    return _PROCESS_TOTALS


def usage_snapshot() -> dict[str, int]:
    """Totals for this process over every ``generate_text`` callable.

    >>> import refiner_core.inference as inference
    >>> sorted(inference.usage_snapshot())
    ['input_tokens', 'output_tokens', 'requests_failed', 'requests_ok', 'retries']
    """
    return _PROCESS_TOTALS.snapshot()
