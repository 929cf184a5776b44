"""Build a pipeline step from its kind (``"map"``, ``"batch_map_async"`` ...) and arguments."""

from __future__ import annotations

from typing import Any

from .async_steps import BatchMapAsyncStep, MapAsyncStep
from .steps import BatchMapStep, FilterStep, FlatMapStep, MapStep, Step, check_callable


def make_step(kind: str, fn: Any = None, *, factory: Any = None, **options: Any) -> Step:
    """Validate arguments and build a step; errors surface when the pipeline is built."""
    classes = {
        "map": MapStep,
        "filter": FilterStep,
        "flat_map": FlatMapStep,
        "batch_map": BatchMapStep,
        "map_async": MapAsyncStep,
        "batch_map_async": BatchMapAsyncStep,
    }
    if kind in ("map", "filter", "flat_map"):
        check_callable(kind, fn, None, allow_factory=False)
    else:
        check_callable(kind, fn, factory)
    return classes[kind](fn=fn, factory=factory, **options)
