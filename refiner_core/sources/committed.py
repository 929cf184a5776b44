"""Readers see only committed data: what a refiner output folder's summary lists.

A folder that holds ``_refiner/`` was written by a refiner writer. Once finalized
it holds ``_refiner/summary.json``, and it reads as exactly the data files that
summary lists: files of crashed or rejected attempts, of a later run still being
written, and foreign files dropped into the folder are not read. A refiner output
that was never finalized is an error (:class:`UncommittedOutput`) unless the reader
passes ``uncommitted=True``, which reads every data file in it. A folder without
``_refiner/`` is a plain folder and reads as every data file in it.

Example:
    >>> import os, tempfile, refiner_core as mdr
    >>> out = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"x": 1}]).write_parquet(out).launch_local()
    >>> _ = open(os.path.join(out, "foreign.parquet"), "wb").write(b"not refiner's")
    >>> [row["x"] for row in mdr.read_parquet(out).iter_rows()]
    [1]
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from ..errors import RefinerError
from ..io.inheritance import inherited_tables
from ..manifests._attempts import SUMMARY_PATH

REFINER_DIR = "_refiner"
OWNERS_NAME = "owners"  # _refiner/owners: who writes the folder, not what was written


class UncommittedOutput(RefinerError, FileNotFoundError):
    """A refiner output folder that was never finalized was read without ``uncommitted=True``."""


def holds_output(fs: Any, refiner_dir: str) -> bool:
    """Whether a ``_refiner/`` folder records written data (attempts, a layout, a
    summary), not only the ownership record of a run that has not written yet."""
    names = {posixpath.basename(p.rstrip("/")) for p in fs.ls(refiner_dir, detail=False)}
    return bool(names - {OWNERS_NAME})


def committed_files(
    fs: Any, folder: str, suffixes: tuple[str, ...], *, what: str, url: str
) -> list[str]:
    """The data files (ending in ``suffixes``) that ``folder``'s summary lists, then the
    ones it inherits from the versions before it (an appended version, see
    :mod:`refiner_core.io.inheritance`).

    ``folder`` holds ``_refiner/``; without a summary this raises
    :class:`UncommittedOutput` naming the folder and both ways on.
    """
    summary_path = posixpath.join(folder, SUMMARY_PATH)
    try:
        with fs.open(summary_path, "rb") as f:
            summary = json.load(f)
    except FileNotFoundError:
        raise UncommittedOutput(
            f"{what}: {url} is a refiner output folder that was never finalized (it has "
            f"{REFINER_DIR}/ but no {SUMMARY_PATH}): its files are attempts of a run that "
            "crashed, failed or is still writing, possibly partial or duplicated. Launch that "
            "run again with its rundir to finish and finalize it, or pass uncommitted=True to "
            "read every data file in the folder anyway"
        ) from None
    except ValueError as exc:
        raise ValueError(
            f"{what}: {url}/{SUMMARY_PATH} is not valid JSON ({exc}); finalize the output "
            "again (launch its run again) or pass uncommitted=True to read every data file"
        ) from exc
    listed = summary.get("files") if isinstance(summary, dict) else None
    if not isinstance(listed, list):
        raise ValueError(
            f"{what}: {url}/{SUMMARY_PATH} has no list of files; finalize the output again "
            "or pass uncommitted=True to read every data file"
        )
    own = sorted(posixpath.join(folder, f) for f in listed if f.endswith(suffixes))
    return own + inherited_tables(fs, folder, suffixes)
