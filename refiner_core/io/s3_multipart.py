"""Concurrent, abort-safe multipart uploads for s3fs writes.

:func:`install` makes ``S3FileSystem.open(path, "wb")`` return a subclass of s3fs's
``S3File`` that sends each part of the s3fs block size as soon as it is full, with
up to :data:`WINDOW_PARTS` parts in flight (a sliding window: a finished part frees
its slot at once, and the writer keeps filling the next part meanwhile). Closing the
file waits for the parts and completes them in part-number order. Files closed
before reaching one part stay a single PutObject, as in stock s3fs. Any failure,
including an exception escaping ``with fs.open(path, "wb")``, stops sending, waits
for the parts in flight and aborts the multipart upload, so no object and no open
upload remain at the key.

Each upload declares the checksum its parts carry: the ``ChecksumAlgorithm`` given in
``s3_additional_kwargs``, or else CRC32, the one botocore already computes for every
part unless its ``request_checksum_calculation`` is ``"when_required"`` (then none, as
in stock s3fs). S3 then checks each part against it and stores the object with a
composite checksum of the parts, as boto3's ``upload_fileobj`` does, rather than
ignoring the parts' checksums and computing a whole-object checksum on Complete.

Creating, completing and aborting uploads, credentials, endpoints, retries
(``fs.retries``), the event loop and the directory cache are s3fs's own; only the
part window and the failure path differ. Reads and every other fsspec backend are
unchanged.
"""

from __future__ import annotations

import io
import logging
import math
import os
import posixpath
import threading
from types import TracebackType
from typing import IO, Any

import s3fs
import s3fs.core
from fsspec import AbstractFileSystem
from fsspec.implementations.chained import ChainedFileSystem
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem

from .log_redaction import install_log_redaction
from .part_window import PartWindow
from .s3_errors import with_s3_context
from .upstream import check_hooks

__all__ = [
    "install",
    "install_if_s3",
    "is_s3_backed",
    "open_output",
    "part_size_for",
    "take_failed_aborts",
]

logger = logging.getLogger(__name__)

MIN_PART_SIZE = 5 * 2**20
"""S3's smallest allowed part (every part but the last)."""
MAX_OBJECT_SIZE = 5 * 2**40
"""S3's largest object: 5 TiB."""
MAX_PARTS = 10_000
"""S3's largest part count for one multipart upload."""
WINDOW_PARTS = 4
"""Parts in flight at once; peak memory is about this many parts plus the one being filled."""

_STOCK_S3FILE: type[s3fs.core.S3File] = getattr(
    s3fs.core.S3File, "_refiner_stock_class", s3fs.core.S3File
)
_install_lock = threading.Lock()
_REWIND_HOOK_ID = "refiner-rewind-part-body"


_failed_aborts: list[dict[str, str]] = []
_failed_aborts_lock = threading.Lock()


def take_failed_aborts() -> list[dict[str, str]]:
    """Uploads (``bucket``, ``key``, ``upload_id``) whose abort failed in this process since
    the last call; the caller records them so their abort can be retried later."""
    with _failed_aborts_lock:
        taken = list(_failed_aborts)
        _failed_aborts.clear()
    return taken


class _PartBuffer(io.BytesIO):
    """One part's bytes, sent as a file object so aiohttp streams it without a copy."""


def _rewind_part_body(params: dict[str, Any], **_: Any) -> None:
    # s3fs retries a failed call with the same Body object; start each attempt at byte 0.
    body = params.get("Body")
    if isinstance(body, _PartBuffer):
        body.seek(0)


class BatchedS3File(_STOCK_S3FILE):
    """s3fs ``S3File`` that uploads parts through a sliding window and aborts on any failure.

    Obtained through ``fs.open(path, "wb")`` once :func:`install` ran; data lands at
    ``s3://<bucket>/<key>`` only when the file closes without an error. Example
    (against any S3 endpoint; ``fs`` is an ``s3fs.S3FileSystem``)::

        install()
        with fs.open("bucket/videos/block-0.bin", "wb", block_size=8 * 2**20) as f:
            for chunk in chunks:
                f.write(chunk)  # returns while fewer than 4 parts are in flight
        # s3://bucket/videos/block-0.bin now holds every chunk, or nothing on error
    """

    _refiner_stock_class = _STOCK_S3FILE
    # State of fsspec's buffered file (s3fs ships no types) that this class reads and sets.
    buffer: io.BytesIO
    forced: bool
    closed: bool
    mpu: dict[str, Any] | None
    s3_additional_kwargs: dict[str, Any]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._window: PartWindow | None = None  # created with the multipart upload
        self._next_part = 1
        self._operation = "write"  # the S3 call under way, named by errors
        self._checksum_algorithm: str | None = None  # declared when the upload is created
        super().__init__(*args, **kwargs)

    def write(self, data: Any) -> int:
        """Buffer ``data``; each full part is sent at once, blocking only while
        :data:`WINDOW_PARTS` parts are in flight."""
        if not self.writable():
            raise ValueError("File not in write mode")
        if self.forced:
            raise ValueError("This file has been force-flushed, can only close")
        view = memoryview(data).cast("B")
        if not isinstance(self.buffer, _PartBuffer):  # the plain BytesIO fsspec starts with
            started, self.buffer = self.buffer, _PartBuffer()
            self.buffer.write(started.getbuffer())
        try:
            pos = 0
            while pos < len(view):
                take = min(self.blocksize - self.buffer.tell(), len(view) - pos)
                self.buffer.write(view[pos : pos + take])
                pos += take
                self.loc += take
                self._check_part_count()
                if self.buffer.tell() >= self.blocksize:
                    self._send_buffer()
        except BaseException as exc:
            self._raise_failed(exc)
        return len(view)

    def flush(self, force: bool = False) -> None:
        """Parts are sent as they fill; ``force`` (on close) sends the rest and commits."""
        if self.closed:
            raise ValueError("Flush on closed file")
        if force and self.forced:
            raise ValueError("Force flush cannot be called more than once")
        if force:
            self.forced = True
        if self.readable() or not force:
            return
        try:
            self._upload_chunk(final=True)
        except BaseException as exc:
            self._raise_failed(exc)

    def _upload_chunk(self, final: bool = False) -> bool:
        one_shot_put = (
            self.autocommit and not self.append_block and final and self.tell() < self.blocksize
        )
        if not one_shot_put:
            if self.buffer.tell() or self._window is None:
                self._send_buffer()
            assert self._window is not None  # _send_buffer created it with the upload
            self._operation = "UploadPart"
            self.parts.extend(self._window.finish())
        if self.autocommit and final:
            self.commit()
        return False

    def commit(self) -> None:
        self._operation = "CompleteMultipartUpload" if self.mpu else "PutObject"
        try:
            super().commit()
        except BaseException as exc:
            self._raise_failed(exc)

    def discard(self) -> None:
        self._fail(None)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is not None and "r" not in self.mode and not self.closed:
            self._fail(exc)
            return
        self.close()

    def _send_buffer(self) -> None:
        """Start uploading the buffer as the next part (creating the upload first)."""
        if self._window is None:
            self.offset = 0
            self._operation = "CreateMultipartUpload"
            self._declare_part_checksum()
            self._initiate_upload()
            self._window = PartWindow(self.fs.loop, self._send_part, size=WINDOW_PARTS)
            self._next_part = len(self.parts) + 1  # after a copied part in append mode
        part, self.buffer = self.buffer, _PartBuffer()
        size = part.tell()
        if not size:
            return
        part.seek(0)
        self._operation = "UploadPart"
        self._window.submit(self._next_part, part)
        self._next_part += 1
        self.offset += size

    async def _send_part(self, number: int, part: _PartBuffer) -> dict[str, Any]:
        assert self.mpu is not None  # parts are sent only once the upload was created
        await self.fs.set_session()
        client = await self.fs.get_s3(self.bucket)
        client.meta.events.register(
            "before-parameter-build.s3.UploadPart", _rewind_part_body, unique_id=_REWIND_HOOK_ID
        )
        out = await self.fs._call_s3(
            "upload_part",
            self.s3_additional_kwargs,
            self._request_payer_kw,
            Bucket=self.bucket,
            Key=self.key,
            PartNumber=number,
            UploadId=self.mpu["UploadId"],
            Body=part,
        )
        header = {"PartNumber": number, "ETag": out["ETag"]}
        if self._checksum_algorithm is not None:
            member = f"Checksum{self._checksum_algorithm.upper()}"
            if member in out:
                header[member] = out[member]
        return header

    def _declare_part_checksum(self) -> None:
        """Choose the checksum algorithm that CreateMultipartUpload declares and each
        UploadPart carries: the caller's ``ChecksumAlgorithm``, else CRC32 while botocore
        computes checksums whenever an operation supports them."""
        given = {**self.fs.s3_additional_kwargs, **self.s3_additional_kwargs}
        algorithm = given.get("ChecksumAlgorithm")
        if algorithm is None and not self.append_block:  # a copied first part has none
            config = self.fs.s3.meta.config
            if getattr(config, "request_checksum_calculation", None) == "when_supported":
                algorithm = "CRC32"
                self.s3_additional_kwargs = {
                    **self.s3_additional_kwargs,
                    "ChecksumAlgorithm": algorithm,
                }
        self._checksum_algorithm = algorithm

    def _check_part_count(self) -> None:
        parts = self._next_part - 1 + (1 if self.buffer.tell() else 0)
        if parts > MAX_PARTS:
            limit = MAX_PARTS * self.blocksize
            raise ValueError(
                f"s3://{self.path}: more than {limit} bytes written with a part size of "
                f"{self.blocksize} bytes needs more than S3's {MAX_PARTS} parts; the upload "
                "was aborted. Pass the final size as open_output(fs, path, size_hint=...) "
                "or open the file with a larger block_size."
            )

    def _raise_failed(self, exc: BaseException) -> None:
        """Abort because of ``exc`` and raise it, naming the operation and the object."""
        error = self._in_context(exc)
        self._fail(error)
        if error is exc:
            raise exc
        raise error from exc

    def _in_context(self, exc: BaseException) -> BaseException:
        """``exc`` naming the S3 operation that failed, the object and the attempts made."""
        operation = self._operation
        if self._window is not None and self._window.failed_part is not None:
            operation = f"UploadPart {self._window.failed_part}"
        return with_s3_context(
            exc, operation=operation, url=f"s3://{self.path}", retries=self.fs.retries
        )

    def _fail(self, exc: BaseException | None) -> None:
        """Stop sending, wait for the parts in flight, abort the multipart upload and
        drop buffered data; the file becomes unusable.

        An abort that fails too is remembered for :func:`take_failed_aborts`, so the
        writer's finalization can retry it."""
        upload_id = (self.mpu or {}).get("UploadId")
        try:
            try:
                if self._window is not None:
                    self._window.drain()  # so no part lands after the abort
            finally:
                self._abort_mpu()
        except Exception as abort_exc:
            if upload_id is not None:
                with _failed_aborts_lock:
                    _failed_aborts.append(
                        {"bucket": self.bucket, "key": self.key, "upload_id": upload_id}
                    )
            message = (
                f"aborting multipart upload {upload_id} for s3://{self.path} also failed "
                f"({abort_exc!r}); the output's finalization retries it, or abort it with "
                "fs.abort_mpu(bucket, key, upload_id) or let a bucket lifecycle rule remove "
                "incomplete uploads"
            )
            if exc is None:
                raise
            exc.add_note(message)
            logger.warning(message)
        finally:
            self.mpu = None
            self._window = None
            self.buffer = io.BytesIO()  # the buffered data is dropped; writes now fail
            self.closed = True


def install() -> None:
    """Make every s3fs binary write in this process use :class:`BatchedS3File`.

    Idempotent and thread-safe; reads and other fsspec backends are unchanged.

    >>> install(); install()
    >>> import s3fs.core
    >>> s3fs.core.S3File.__name__
    'BatchedS3File'
    """
    with _install_lock:
        install_log_redaction()
        if s3fs.core.S3File is BatchedS3File:
            return
        check_hooks()
        # S3FileSystem._open looks the class up in s3fs.core at call time.
        s3fs.core.S3File = BatchedS3File
        s3fs.S3File = BatchedS3File
        logger.debug("s3fs writes now use %s", BatchedS3File.__qualname__)


def _s3_of(fs: AbstractFileSystem) -> s3fs.S3FileSystem | None:
    """The S3FileSystem under ``fs``, looking through dir and caching wrappers."""
    for _ in range(8):
        if isinstance(fs, s3fs.S3FileSystem):
            return fs
        if not isinstance(fs, (DirFileSystem, ChainedFileSystem)):
            return None
        fs = getattr(fs, "fs", None)
    return None


def is_s3_backed(fs: AbstractFileSystem) -> bool:
    """Whether ``fs`` is s3fs, or a dir/caching wrapper around it.

    >>> from fsspec.implementations.local import LocalFileSystem
    >>> is_s3_backed(LocalFileSystem())
    False
    """
    return _s3_of(fs) is not None


def install_if_s3(fs: AbstractFileSystem) -> bool:
    """Call :func:`install` when ``fs`` is (or wraps) s3fs; return whether it did.

    >>> from fsspec.implementations.local import LocalFileSystem
    >>> install_if_s3(LocalFileSystem())
    False
    """
    if _s3_of(fs) is None:
        return False
    install()
    return True


def part_size_for(size_hint: int | None, block_size: int) -> int:
    """Part size for an object of ``size_hint`` bytes written with s3fs ``block_size``.

    Without a hint the block size is kept; with one the part grows so the object
    fits in :data:`MAX_PARTS` parts, never below S3's 5 MiB minimum.

    >>> part_size_for(None, 50 * 2**20) == 50 * 2**20
    True
    >>> part_size_for(2 * 2**40, 50 * 2**20)  # 2 TiB -> ceil(2 TiB / 10,000)
    219902326
    """
    if size_hint is None:
        return block_size
    if size_hint < 0:
        raise ValueError(f"size_hint must be a byte count >= 0, got {size_hint}")
    if size_hint > MAX_OBJECT_SIZE:
        raise ValueError(
            f"an object of {size_hint} bytes exceeds S3's 5 TiB ({MAX_OBJECT_SIZE} bytes) "
            "object limit; split the output into several files"
        )
    return max(block_size, math.ceil(size_hint / MAX_PARTS), MIN_PART_SIZE)


def open_output(fs: AbstractFileSystem, path: str, *, size_hint: int | None = None) -> IO[bytes]:
    """Open ``path`` on ``fs`` for binary writing; a context manager.

    On s3fs the file is a :class:`BatchedS3File` whose part size follows
    :func:`part_size_for`; elsewhere it is ``fs.open(path, "wb")``, creating missing
    parent directories on local disk.

    >>> import tempfile, fsspec
    >>> out = tempfile.mkdtemp() + "/a/b/blob.bin"
    >>> with open_output(fsspec.filesystem("file"), out, size_hint=5) as f:
    ...     _ = f.write(b"hello")
    >>> open(out, "rb").read()
    b'hello'
    """
    s3 = _s3_of(fs)
    if s3 is not None:
        install()
        return fs.open(path, "wb", block_size=part_size_for(size_hint, s3.default_block_size))
    if isinstance(fs, LocalFileSystem):
        fs.makedirs(os.path.dirname(path), exist_ok=True)
    elif isinstance(fs, DirFileSystem) and isinstance(fs.fs, LocalFileSystem):
        fs.makedirs(posixpath.dirname(path) or "", exist_ok=True)
    return fs.open(path, "wb")
