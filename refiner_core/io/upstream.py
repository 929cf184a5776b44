"""The internals of s3fs and fsspec that refiner relies on, each checked by name.

refiner uses the public APIs of fsspec, s3fs and botocore everywhere but in two
places, where the documented behaviour cannot be had otherwise:

- **Concurrent, abort-safe multipart writes** (:mod:`refiner_core.io.s3_multipart`)
  subclass s3fs's ``S3File`` and install the subclass in ``s3fs.core``, because
  ``S3FileSystem._open`` looks the class up there and s3fs offers no hook for it.
  The subclass overrides the buffered-file protocol (``_initiate_upload``,
  ``_upload_chunk``, ``commit``, ``discard``) and uses ``_abort_mpu`` and the
  filesystem's ``_call_s3`` coroutine, so that parts go through s3fs's own retries;
  each part's call runs on the filesystem's own event loop (its public ``loop``).
- **Forked workers** (:mod:`refiner_core.io.datafile`) keep fsspec's event loop
  (``fsspec.asyn.loop``/``iothread``) and its cached filesystem instances (the
  ``_cache`` dict that fsspec's ``_Cached`` metaclass puts on every filesystem class)
  referenced across ``fork``, so a child's garbage collection never unregisters the
  parent's sockets from the epoll instance they share.

:data:`HOOKS` lists every such name with the reason it is used, and
:func:`check_hooks` verifies them against the installed releases. It runs once
when the multipart writer is installed, and in the test suite, so an s3fs or
fsspec release that renames or reshapes one of them fails at once with a message
naming it, never halfway through an upload. pyproject.toml pins the range of
releases these checks were run on.

Example:
    >>> check_hooks()  # nothing to report on the tested releases
    >>> [hook.name for hook in HOOKS][1:3]
    ['s3fs.core.S3File._initiate_upload', 's3fs.core.S3File._upload_chunk']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import RefinerError

__all__ = ["HOOKS", "Hook", "UpstreamChangedError", "check_hooks"]


class UpstreamChangedError(RefinerError, RuntimeError):
    """An s3fs or fsspec internal that refiner relies on is gone or changed shape."""


@dataclass(frozen=True, slots=True)
class Hook:
    """One third-party internal, where refiner uses it and how to check it is there."""

    name: str
    used_by: str
    check: Callable[[], str | None]
    """Returns ``None`` when the internal is as expected, else what differs."""


def _s3file():
    import s3fs.core

    return getattr(s3fs.core.S3File, "_refiner_stock_class", s3fs.core.S3File)


def _method(owner: Callable[[], type], name: str, *params: str, coroutine: bool = False):
    def check() -> str | None:
        cls = owner()
        function = cls.__dict__.get(name)
        if not callable(function):
            return f"{cls.__name__} no longer defines {name}"
        if coroutine and not inspect.iscoroutinefunction(function):
            return f"{name} is no longer a coroutine function"
        found = list(inspect.signature(function).parameters)
        missing = [p for p in params if p not in found]
        if missing:
            return f"{name}{inspect.signature(function)} has no parameter {', '.join(missing)}"
        return None

    return check


def _s3file_is_looked_up_at_open() -> str | None:
    import s3fs.core

    source = inspect.getsource(s3fs.core.S3FileSystem._open)
    if "S3File(" not in source:
        return "S3FileSystem._open no longer builds its file with the module-level S3File"
    return None


def _s3file_attributes() -> str | None:
    source = inspect.getsource(_s3file().__init__)
    absent = [
        name
        for name in ("mpu", "parts", "s3_additional_kwargs", "_request_payer_kw")
        if f"self.{name} = " not in source
    ]
    return f"S3File no longer sets {', '.join(absent)}" if absent else None


def _event_loop_slots() -> str | None:
    import fsspec.asyn

    for name in ("loop", "iothread"):
        slot = getattr(fsspec.asyn, name, None)
        if not (isinstance(slot, list) and len(slot) == 1):
            return f"fsspec.asyn.{name} is no longer a one-element list"
    return None


def _instance_cache() -> str | None:
    import fsspec
    from fsspec.implementations.local import LocalFileSystem

    LocalFileSystem()
    if not isinstance(LocalFileSystem.__dict__.get("_cache"), dict):
        return "filesystem classes no longer keep their instances in a _cache dict"
    if not isinstance(fsspec.AbstractFileSystem.__dict__.get("_cache"), dict):
        return "fsspec.AbstractFileSystem has no _cache dict"
    return None


def _filesystem():
    import s3fs

    return s3fs.S3FileSystem


HOOKS: tuple[Hook, ...] = (
    Hook(
        "s3fs.core.S3File looked up by S3FileSystem._open",
        "io.s3_multipart.install",
        _s3file_is_looked_up_at_open,
    ),
    Hook(
        "s3fs.core.S3File._initiate_upload",
        "io.s3_multipart.BatchedS3File._send_buffer",
        _method(_s3file, "_initiate_upload", "self"),
    ),
    Hook(
        "s3fs.core.S3File._upload_chunk",
        "io.s3_multipart.BatchedS3File (override)",
        _method(_s3file, "_upload_chunk", "self", "final"),
    ),
    Hook(
        "s3fs.core.S3File._abort_mpu",
        "io.s3_multipart.BatchedS3File._fail",
        _method(_s3file, "_abort_mpu", "self"),
    ),
    Hook(
        "s3fs.core.S3File.commit / discard",
        "io.s3_multipart.BatchedS3File (overrides)",
        lambda: _method(_s3file, "commit", "self")() or _method(_s3file, "discard", "self")(),
    ),
    Hook(
        "s3fs.core.S3File attributes mpu, parts, s3_additional_kwargs, _request_payer_kw",
        "io.s3_multipart.BatchedS3File",
        _s3file_attributes,
    ),
    Hook(
        "s3fs.S3FileSystem._call_s3",
        "io.s3_multipart.BatchedS3File._send_part",
        _method(_filesystem, "_call_s3", "method", coroutine=True),
    ),
    Hook(
        "s3fs.S3FileSystem.set_session / get_s3",
        "io.s3_multipart.BatchedS3File._send_part",
        lambda: (
            _method(_filesystem, "set_session", coroutine=True)()
            or _method(_filesystem, "get_s3", "bucket", coroutine=True)()
        ),
    ),
    Hook(
        "s3fs.S3FileSystem._lsdir",
        "io.datafile.DataFolder._entries (one listing of a folder)",
        _method(_filesystem, "_lsdir", "path", "refresh", coroutine=True),
    ),
    Hook("fsspec.asyn.loop / iothread", "io.datafile (at fork)", _event_loop_slots),
    Hook("fsspec filesystem class _cache", "io.datafile (at fork)", _instance_cache),
)


def check_hooks() -> None:
    """Raise :class:`UpstreamChangedError` naming every hook the installed releases lack."""
    problems = [
        f"{hook.name} (used by {hook.used_by}): {why}" for hook in HOOKS if (why := hook.check())
    ]
    if problems:
        import fsspec
        import s3fs

        raise UpstreamChangedError(
            f"s3fs {s3fs.__version__} / fsspec {fsspec.__version__} changed internals that "
            "refiner relies on: "
            + "; ".join(problems)
            + ". Install the s3fs/fsspec releases pinned in refiner's requirements."
        )
