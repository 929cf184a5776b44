"""Errors that name where a run went wrong."""

from __future__ import annotations


class RefinerError(Exception):
    """Base class of refiner's own errors."""


class CallbackResultError(RefinerError, TypeError):
    """A callback (or a factory) returned a value of the wrong kind; says what to return."""


class StepError(RefinerError):
    """A callback raised: names the step (index and kind) and the shard.

    The original exception is the ``__cause__``.
    """

    def __init__(self, message: str, *, step_index: int, step_kind: str, shard_id: str | None):
        super().__init__(message)
        self.step_index = step_index
        self.step_kind = step_kind
        self.shard_id = shard_id


class StageFailed(RefinerError):
    """A stage of ``launch_local`` failed; the message names the stage, shard and cause."""

    def __init__(self, message: str, *, stage: int, shard_id: str | None = None):
        super().__init__(message)
        self.stage = stage
        self.shard_id = shard_id
