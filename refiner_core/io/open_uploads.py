"""Multipart uploads whose abort failed: recorded by the attempt, aborted again at finalization.

When an S3 write fails and its abort fails too (the store is down), the upload stays
open and keeps its parts (billed, invisible to listings of objects). The attempt
that owned it records ``{bucket, key, upload_id}`` under
``<output>/_refiner/open_uploads/<shard>__<attempt>.json``; the output's finalization
aborts each recorded upload again, deletes the records it settled and reports any
upload still open in the summary (``open_uploads``), with the command to abort it.

Example:
    >>> import tempfile
    >>> from refiner_core.io import DataFolder
    >>> retry_open_uploads(DataFolder(tempfile.mkdtemp()))
    {'uploads_aborted': 0, 'open_uploads': []}
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .datafile import DataFolder

OPEN_UPLOADS_DIR = "_refiner/open_uploads"

logger = logging.getLogger(__name__)


def record_failed_aborts(folder: DataFolder, attempt: str) -> list[dict[str, str]]:
    """Persist the uploads whose abort failed in this process under ``attempt``'s name."""
    # only the S3 multipart writer records failed aborts; a process that never loaded it has none
    multipart = sys.modules.get(f"{__package__}.s3_multipart")
    uploads = multipart.take_failed_aborts() if multipart is not None else []
    if not uploads:
        return []
    relative = f"{OPEN_UPLOADS_DIR}/{attempt}.json"
    try:
        folder.write_bytes(relative, json.dumps(uploads, indent=1).encode())
    except Exception as exc:  # the store that failed the abort may fail this too
        logger.warning(
            "could not record %d open multipart upload(s) of %s at %s (%s): %s",
            len(uploads),
            attempt,
            folder.url_of(relative),
            exc,
            uploads,
        )
    return uploads


def _abort(fs: Any, upload: dict[str, str]) -> bool:
    """Abort one upload; ``True`` when it is gone (aborted now or already)."""
    try:
        fs.abort_mpu(upload["bucket"], upload["key"], upload["upload_id"])
    except FileNotFoundError:  # NoSuchUpload: aborted or completed already
        return True
    except Exception as exc:
        logger.warning(
            "aborting multipart upload %s of s3://%s/%s failed again: %s",
            upload["upload_id"],
            upload["bucket"],
            upload["key"],
            exc,
        )
        return False
    return True


def retry_open_uploads(folder: DataFolder) -> dict[str, Any]:
    """Abort every recorded upload again; returns ``uploads_aborted`` and the
    ``open_uploads`` still open (each with the call that aborts it)."""
    aborted = 0
    still_open: list[dict[str, str]] = []
    for name in folder.listdir(OPEN_UPLOADS_DIR):
        if not name.endswith(".json") or name.startswith("."):
            continue
        relative = f"{OPEN_UPLOADS_DIR}/{name}"
        try:
            uploads = json.loads(folder.read_bytes(relative))
        except ValueError:
            logger.warning("skipping unreadable open-upload record %s", folder.url_of(relative))
            continue
        left = [u for u in uploads if not _abort(folder.fs, u)]
        aborted += len(uploads) - len(left)
        if left:
            folder.write_bytes(relative, json.dumps(left, indent=1).encode())
        else:
            folder.rm(relative)
        still_open += [
            {
                **u,
                "url": f"s3://{u['bucket']}/{u['key']}",
                "fix": f"fs.abort_mpu({u['bucket']!r}, {u['key']!r}, {u['upload_id']!r})",
            }
            for u in left
        ]
    return {"uploads_aborted": aborted, "open_uploads": still_open}
