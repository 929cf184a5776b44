"""Row transforms. Each step turns an async stream of row blocks into another."""

from __future__ import annotations

import inspect
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..datatype import fields_from_dtypes
from ..errors import CallbackResultError, StepError
from ..row import Row
from ..validation import check_positive
from .callbacks import merge_map_result, rows_from_iterable, step_label

Blocks = AsyncIterator[list[Row]]


class StepContext(Protocol):
    """What a step sees of the run it is part of."""

    @property
    def shard_id(self) -> str | None:
        """The shard whose rows flow through the step."""
        ...

    def callback(self, step: Step) -> Callable[..., Any]:
        """The step's callback in this worker: its ``fn``, or what its factory built."""
        ...


def check_callable(kind: str, fn: Any, factory: Any, *, allow_factory: bool = True) -> None:
    if not allow_factory:
        if not callable(fn):
            raise TypeError(f"{kind} needs a callable, got {fn!r}")
        return
    if (fn is None) == (factory is None):
        raise ValueError(
            f"{kind} takes exactly one of fn or factory= (got {'both' if fn else 'neither'}); "
            "pass a callback, or a zero-argument factory that builds one per worker"
        )
    target = fn if fn is not None else factory
    if not callable(target):
        raise TypeError(
            f"{kind}: {'fn' if fn is not None else 'factory'} must be callable, got {target!r}"
        )


async def maybe_await(value: Any) -> Any:
    if inspect.isawaitable(value):
        return await value
    return value


@dataclass(eq=False)
class Step:
    """A transform; ``index`` is its position in the pipeline, set when it is appended."""

    kind = "step"
    fn: Callable[..., Any] | None = None
    factory: Callable[[], Any] | None = None
    dtypes: dict[str, Any] | None = None
    index: int = -1
    uid: str = field(default_factory=lambda: uuid.uuid4().hex)

    def __post_init__(self) -> None:
        self.fields = fields_from_dtypes(self.dtypes)

    @property
    def label(self) -> str:
        return step_label(self.index, self.kind)

    @property
    def plain_fn(self) -> Callable[..., Any]:
        """The callback of a step kind that takes no factory (``make_step`` checked it)."""
        assert self.fn is not None, f"{self.label} was built without a callback"
        return self.fn

    def fail(self, exc: BaseException, shard_id: str | None) -> StepError:
        error = StepError(
            f"{self.label} failed on shard {shard_id}: {type(exc).__name__}: {exc}",
            step_index=self.index,
            step_kind=self.kind,
            shard_id=shard_id,
        )
        error.__cause__ = exc
        return error

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:  # pragma: no cover - interface
        raise NotImplementedError
        yield


@dataclass(eq=False)
class MapStep(Step):
    kind = "map"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, label, shard = self.plain_fn, self.label, ctx.shard_id
        async for block in blocks:
            out = []
            for row in block:
                try:
                    result = fn(row)
                except Exception as exc:
                    raise self.fail(exc, shard) from exc
                out.append(merge_map_result(row, result, label, shard))
            yield out


@dataclass(eq=False)
class FilterStep(Step):
    kind = "filter"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, shard = self.plain_fn, ctx.shard_id
        async for block in blocks:
            try:
                out = [row for row in block if fn(row)]
            except Exception as exc:
                raise self.fail(exc, shard) from exc
            if out:
                yield out


@dataclass(eq=False)
class FlatMapStep(Step):
    kind = "flat_map"

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        fn, label, shard = self.plain_fn, self.label, ctx.shard_id
        async for block in blocks:
            out: list[Row] = []
            for row in block:
                try:
                    result = fn(row)
                    rows = rows_from_iterable(result, label, shard)
                except CallbackResultError:
                    raise
                except Exception as exc:
                    raise self.fail(exc, shard) from exc
                out.extend(rows)
            if out:
                yield out


async def batches_of(blocks: Blocks, size: int) -> AsyncIterator[list[Row]]:
    """Regroup a block stream into batches of exactly ``size`` rows (the last may be short)."""
    pending: list[Row] = []
    async for block in blocks:
        pending.extend(block)
        start = 0
        while len(pending) - start >= size:
            yield pending[start : start + size]
            start += size
        del pending[:start]
    if pending:
        yield pending


@dataclass(eq=False)
class BatchMapStep(Step):
    kind = "batch_map"
    batch_size: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        check_positive("batch_size", self.batch_size)

    async def run(self, blocks: Blocks, ctx: StepContext) -> Blocks:
        label, shard = self.label, ctx.shard_id
        fn: Callable[..., Any] | None = None
        async for batch in batches_of(blocks, self.batch_size):
            if fn is None:
                fn = ctx.callback(self)
            try:
                result = await maybe_await(fn(batch))
                rows = rows_from_iterable(result, label, shard)
            except CallbackResultError:
                raise
            except Exception as exc:
                raise self.fail(exc, shard) from exc
            if rows:
                yield rows
