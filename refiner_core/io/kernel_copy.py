"""Copying bytes between two local files inside the kernel, without a round trip through Python.

Packing many small local files is bound by the copies: ``read`` then ``write`` moves every
byte twice (page cache to a Python buffer and back). ``os.copy_file_range`` moves it once,
page cache to page cache, and on filesystems that share extents (XFS, Btrfs) not at all.
Where the kernel refuses it (another filesystem, an old kernel, a file system without
support), ``os.sendfile`` and finally ``pread``/``pwrite`` take over.

Example:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(f"{folder}/a", "wb") as f:
    ...     _ = f.write(b"0123456789")
    >>> src = os.open(f"{folder}/a", os.O_RDONLY)
    >>> dst = os.open(f"{folder}/b", os.O_WRONLY | os.O_CREAT)
    >>> copy_range(src, 2, dst, 0, 5)
    >>> os.close(src); os.close(dst)
    >>> open(f"{folder}/b", "rb").read()
    b'23456'
"""

from __future__ import annotations

import errno
import os

CHUNK = 8 * 1024 * 1024
# errors meaning "this kernel or filesystem cannot do it this way", not "the copy failed"
_UNSUPPORTED = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP}
_copy_file_range_works = hasattr(os, "copy_file_range")
_sendfile_works = hasattr(os, "sendfile")


def copy_range(src: int, src_offset: int, dst: int, dst_offset: int, size: int) -> None:
    """Copy ``size`` bytes from ``src`` at ``src_offset`` to ``dst`` at ``dst_offset``.

    Neither descriptor's file position moves. ``EOFError`` when ``src`` ends first."""
    global _copy_file_range_works, _sendfile_works
    done = 0
    while done < size and _copy_file_range_works:
        try:
            n = os.copy_file_range(
                src, dst, min(CHUNK, size - done), src_offset + done, dst_offset + done
            )
        except OSError as exc:
            if exc.errno not in _UNSUPPORTED or done:
                raise
            _copy_file_range_works = False
            break
        if n == 0:
            raise EOFError(f"the source ended {size - done} bytes early")
        done += n
    if done < size and _sendfile_works:
        done = _sendfile_rest(src, src_offset, dst, dst_offset, size, done)
    while done < size:
        chunk = os.pread(src, min(CHUNK, size - done), src_offset + done)
        if not chunk:
            raise EOFError(f"the source ended {size - done} bytes early")
        done += os.pwrite(dst, chunk, dst_offset + done)


def copy_file(source: str, destination: str, size: int | None = None) -> int:
    """Copy the local file ``source`` to ``destination`` (created or truncated); returns
    the number of bytes copied. ``FileNotFoundError`` when ``source`` does not exist.

    ``size``, when the caller has just stat'ed ``source``, saves an ``fstat``; a source
    that shrank since then raises ``EOFError``."""
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if size is None:
            size = os.fstat(src).st_size
        dst = os.open(destination, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
        try:
            copy_range(src, 0, dst, 0, size)
        finally:
            os.close(dst)
    finally:
        os.close(src)
    return size


def _sendfile_rest(src: int, src_offset: int, dst: int, dst_offset: int, size: int, done: int):
    """``sendfile`` writes at ``dst``'s file position, so it is moved there and back."""
    global _sendfile_works
    position = os.lseek(dst, 0, os.SEEK_CUR)
    os.lseek(dst, dst_offset + done, os.SEEK_SET)
    try:
        while done < size:
            try:
                n = os.sendfile(dst, src, src_offset + done, min(CHUNK, size - done))
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED or done:
                    raise
                _sendfile_works = False
                return done
            if n == 0:
                raise EOFError(f"the source ended {size - done} bytes early")
            done += n
    finally:
        os.lseek(dst, position, os.SEEK_SET)
    return done
