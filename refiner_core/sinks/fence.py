"""Finalization's fence: ownership is checked before every destructive step.

A finalization that lost its output folder (paused past the lease while another run
took the folder over) must neither delete nor overwrite anything. :class:`Fence`
checks the launch's :class:`~refiner_core.io.ownership.Lease` before each deletion
batch and each summary write, and on S3 makes the summary write conditional on the
summary it last saw (``If-Match`` its ETag, or ``If-None-Match: *`` when there was
none), so a summary another run wrote in between is never overwritten even if the
pause falls between the check and the write.

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> fence = Fence(DataFolder(tempfile.mkdtemp()), None)  # no lease: checks pass
    >>> fence.check()
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from ..io.datafile import DataFolder, is_s3, is_s3fs
from ..io.ownership import Lease
from ..manifests import DatasetSummary
from ..manifests._attempts import SUMMARY_PATH


class Fence:
    """The ownership checks and the conditional summary writes of one finalization."""

    def __init__(self, folder: DataFolder, lease: Lease | None) -> None:
        self.folder = folder
        self.lease = lease
        self._etag: str | None = None
        if lease is not None and is_s3(folder.fs):
            self._etag = self._current_etag()

    def check(self) -> None:
        """Raise :class:`~refiner_core.io.ownership.OwnershipLost` if the folder was taken."""
        if self.lease is not None:
            self.lease.check()

    def write_summary(self, summary: DatasetSummary) -> None:
        """Write ``summary`` after checking the lease; on S3 only over the summary this
        finalization last saw."""
        self.check()
        if self.lease is None or not is_s3(self.folder.fs):
            summary.write(self.folder)
            return
        data = json.dumps(summary.to_json(), indent=1).encode()
        path = self.folder.join(SUMMARY_PATH)
        condition: dict[str, Any] = (
            {"IfMatch": self._etag} if self._etag is not None else {"mode": "create"}
        )
        try:
            response = self.folder.fs.pipe_file(path, data, **condition)
        except Exception:
            self.check()  # another run wrote it: say which
            raise
        etag = response.get("ETag") if isinstance(response, dict) else None
        self._etag = etag or self._current_etag()

    def _current_etag(self) -> str | None:
        path = self.folder.join(SUMMARY_PATH)
        fs = self.folder.fs
        fs.invalidate_cache(path)
        with contextlib.suppress(FileNotFoundError):
            if is_s3fs(fs):
                return _head_etag(fs, path)
            return fs.info(path).get("ETag")
        return None


def _head_etag(fs: Any, path: str) -> str | None:
    """The ETag of the object at ``path`` from one ``HEAD``; ``FileNotFoundError`` when it
    does not exist (s3fs's ``info`` would then also list ``path/`` for a folder)."""
    import fsspec.asyn

    bucket, key, _ = fs.split_path(path)
    head = fsspec.asyn.sync(fs.loop, fs._call_s3, "head_object", fs.kwargs, Bucket=bucket, Key=key)
    return head.get("ETag")
