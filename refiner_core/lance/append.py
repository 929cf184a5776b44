"""A new Lance dataset that starts from another one's rows, sharing its files.

:func:`share_lance_dataset` makes a shallow clone (Lance's own
``LanceDataset.shallow_clone``): the new dataset's manifest points at the parent's
data, deletion and index files through a base path instead of copying them, and
whatever is written to the new dataset afterwards (``write_lance(new_url,
mode="append")``) lands in the new folder only. The parent is never written to.

The function returns the parent's files the new dataset needs, relative to the
parent's folder: the data files of its latest version with the blob files Lance keeps
beside them, its deletion and index files, and the asset files (packed blocks, copied media) its rows reference inside the parent's
folder. A caller that keeps versions of datasets records that list, so the parent's
other files (older versions, files of rolled back runs) may be deleted while the new
dataset stays readable.

Example:
    >>> import tempfile, refiner_core as mdr
    >>> from refiner_core.lance.append import share_lance_dataset
    >>> root = tempfile.mkdtemp()
    >>> _ = mdr.from_items([{"a": 1}, {"a": 2}]).write_lance(f"{root}/v1.lance").launch_local()
    >>> shared = share_lance_dataset(f"{root}/v1.lance", f"{root}/v2.lance")
    >>> [path.split("/")[0] for path in shared]
    ['data']
    >>> _ = mdr.from_items([{"a": 3}]).write_lance(f"{root}/v2.lance", mode="append").launch_local()
    >>> sorted(row.a for row in mdr.read_lance(f"{root}/v2.lance").materialize())
    [1, 2, 3]
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ..datatype import asset_of
from ..io.datafile import resolve
from .dataset import dataset_url, lance_storage_options, open_dataset, schema_difference


def share_lance_dataset(
    parent_url: str,
    new_url: str,
    storage_options: dict[str, Any] | None = None,
    *,
    schema: pa.Schema | None = None,
) -> list[str]:
    """Make at ``new_url`` a Lance dataset holding the rows of ``parent_url``'s latest
    version without copying its files; return the parent's files it references.

    ``new_url`` must not hold anything yet. ``schema`` (optional) is the schema of rows
    that will be appended: when given, it is checked against the parent's before
    anything is created. On any error nothing is left at ``new_url``.

    Example:
        >>> import tempfile, refiner_core as mdr
        >>> root = tempfile.mkdtemp()
        >>> _ = mdr.from_items([{"a": 1}]).write_lance(f"{root}/p.lance").launch_local()
        >>> share_lance_dataset(f"{root}/p.lance", f"{root}/c.lance")[0].startswith("data/")
        True
    """
    parent = dataset_url(parent_url, storage_options)
    new = dataset_url(new_url, storage_options)
    if parent.rstrip("/") == new.rstrip("/"):
        raise ValueError(f"share_lance_dataset: the new dataset must live elsewhere than {parent}")
    fs, new_path = resolve(new, storage_options)
    if fs.exists(new_path) and fs.find(new_path):
        raise ValueError(
            f"share_lance_dataset: {new} already holds files; the new dataset needs an empty "
            "folder (delete it or choose another URL)"
        )
    from .isolation import call_isolated  # imports Lance, which the caller may never need

    options = lance_storage_options(storage_options)
    try:
        shared = call_isolated(_share, parent, new, options, schema)
    except BaseException:
        if fs.exists(new_path):
            fs.rm(new_path, recursive=True)
        raise
    parent_fs, parent_path = resolve(parent, storage_options)
    files = set(shared["files"])
    for folder in shared["index_folders"]:
        files.update(_below(parent_fs, parent_path, folder))
    # Lance keeps a data file's large blobs beside it, in data/<data file name>/.
    stems = {path.removesuffix(".lance") + "/" for path in files if path.startswith("data/")}
    files.update(p for p in _below(parent_fs, parent_path, "data") if p.startswith(tuple(stems)))
    return sorted(files)


def _below(fs: Any, root: str, folder: str) -> list[str]:
    """Paths (relative to ``root``) of the files below ``root/folder``."""
    prefix = root.rstrip("/") + "/"
    return [found.removeprefix(prefix) for found in fs.find(f"{prefix}{folder}")]


def _share(parent: str, new: str, options: dict[str, str] | None, schema: pa.Schema | None):
    """Clone ``parent`` into ``new`` and name the parent's files it needs (in Lance's process)."""
    try:
        dataset = open_dataset(parent, options)
    except Exception as exc:
        raise ValueError(
            f"share_lance_dataset: cannot open {parent} as a Lance dataset ({exc}); pass the "
            "folder of a Lance dataset written by write_lance or Lance itself"
        ) from None
    if dataset is None:
        raise ValueError(
            f"share_lance_dataset: {parent} is not a Lance dataset (it has no Lance version "
            "manifest); pass the folder of a Lance dataset written by write_lance or Lance itself"
        )
    if schema is not None:
        difference = schema_difference(dataset.schema, schema)
        if difference:
            raise ValueError(
                f"share_lance_dataset: rows of this schema cannot be appended to {parent} "
                f"version {dataset.version}: {difference}. Make the rows match (dtypes= "
                "declares types and asset marks) or write a new dataset instead"
            )
    clone = dataset.shallow_clone(new, dataset.version, storage_options=options)
    parent_bases = {i for i, base in clone.base_paths().items() if _same(base.path, parent)}
    files: list[str] = []
    for fragment in clone.get_fragments():
        metadata = fragment.metadata
        for data in metadata.files:
            if data.base_id in parent_bases:
                files.append(f"data/{data.path}")
        deletion = metadata.deletion_file
        if deletion is not None and deletion.base_id in parent_bases:
            files.append(deletion.path(metadata.id))
    indices = [
        f"_indices/{segment.uuid}"
        for index in clone.describe_indices()
        for segment in index.segments
        if segment.base_id in parent_bases
    ]
    files += _asset_files(dataset, parent)
    return {"files": files, "index_folders": indices}


def _same(base: str, url: str) -> bool:
    return base.rstrip("/").removeprefix("file://") == url.rstrip("/").removeprefix("file://")


def _asset_files(dataset: Any, parent: str) -> list[str]:
    """The files under ``parent`` that the dataset's asset columns reference."""
    columns = [f.name for f in dataset.schema if (info := asset_of(f)) and info.form != "bytes"]
    if not columns:
        return []
    prefix = parent.rstrip("/") + "/"
    found: set[str] = set()
    for batch in dataset.to_batches(columns=columns):
        for column in batch.columns:
            paths = _paths(column)
            for path in pc.unique(paths.drop_null()).to_pylist() if len(paths) else []:
                plain = path.removeprefix("file://")
                if plain.startswith(prefix):
                    found.add(plain[len(prefix) :])
    return sorted(found)


def _paths(column: pa.Array) -> pa.Array:
    """The path strings of an asset column (paths, references or clips, lists of them)."""
    while pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
        column = column.flatten()
    if pa.types.is_struct(column.type):
        column = column.field("path")
    return column
