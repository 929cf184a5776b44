"""Lance datasets as refiner uses them: options, probing, history and the one commit.

Functions here call Lance in the current process; the planning process runs them
through :func:`~refiner_core.lance.isolation.call_isolated`.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import pyarrow as pa

from ..datatype import asset_of
from ..io.datafile import full_url, resolve
from .blobs import readable_schema

RUN_PROPERTY = "refiner.run_id"

# Option names Lance (object_store) understands as they are; passed through unchanged.
_LANCE_PREFIXES = ("aws_", "google_", "azure_", "allow_", "client_", "proxy_")
_LANCE_KEYS = {"timeout", "connect_timeout", "pool_idle_timeout", "user_agent", "region"}


def lance_storage_options(storage_options: dict[str, Any] | None) -> dict[str, str] | None:
    """Map s3fs-style ``storage_options`` (``key``, ``secret``, ``endpoint_url``...) to Lance's.

    Example:
        >>> lance_storage_options({"key": "k", "secret": "s", "endpoint_url": "http://127.0.0.1:9000"})
        {'aws_access_key_id': 'k', 'aws_secret_access_key': 's', 'aws_endpoint': 'http://127.0.0.1:9000', 'allow_http': 'true'}
    """
    if not storage_options:
        return None
    options = dict(storage_options)
    client = dict(options.pop("client_kwargs", None) or {})
    out: dict[str, str] = {}
    renames = {
        "key": "aws_access_key_id",
        "secret": "aws_secret_access_key",
        "token": "aws_session_token",
    }
    for name, lance_name in renames.items():
        if options.get(name) is not None:
            out[lance_name] = str(options.pop(name))
    endpoint = options.pop("endpoint_url", None) or client.pop("endpoint_url", None)
    if endpoint:
        out["aws_endpoint"] = str(endpoint)
        if str(endpoint).startswith("http://"):
            out["allow_http"] = "true"
    region = client.pop("region_name", None) or options.pop("region_name", None)
    if region:
        out["aws_region"] = str(region)
    if options.pop("anon", False):
        out["aws_skip_signature"] = "true"
    for name, value in options.items():
        if value is not None and (name.startswith(_LANCE_PREFIXES) or name in _LANCE_KEYS):
            out[name] = str(value).lower() if isinstance(value, bool) else str(value)
    return out or None


def dataset_url(uri: str, storage_options: dict[str, Any] | None = None) -> str:
    """The absolute local path or full URL of a dataset, as Lance and users see it."""
    if not isinstance(uri, str) or not uri:
        raise ValueError(f"expected a Lance dataset path or URL, got {uri!r}")
    if "://" not in uri:
        return os.path.abspath(os.path.expanduser(uri))
    fs, path = resolve(uri, storage_options)
    return full_url(fs, path.rstrip("/"))


def open_dataset(url: str, options: dict[str, str] | None, version: int | None = None) -> Any:
    """Open ``url`` (at ``version``), or return ``None`` when no dataset exists there.

    Calls Lance in this process: use it only inside :func:`call_isolated` functions
    or in worker processes.
    """
    import lance

    try:
        return lance.dataset(url, version=version, storage_options=options)
    except ValueError as exc:
        if version is None and "not found" in str(exc).lower():
            return None
        raise


def _fragment_size(fragment: Any) -> tuple[int, int]:
    """``(rows, bytes)`` of a fragment from its metadata (no data read)."""
    meta = fragment.metadata
    rows = meta.num_rows
    size = sum(f.file_size_bytes or 0 for f in meta.files)
    return rows, size


def probe(url: str, options: dict[str, str] | None, version: int | None = None) -> dict | None:
    """What planning needs to know of a dataset, or ``None`` if there is none (isolatable)."""
    try:
        dataset = open_dataset(url, options, version)
    except ValueError as exc:
        latest = open_dataset(url, options) if version is not None else None
        if latest is None:
            raise
        raise ValueError(
            f"{url} has no version {version} (its versions are "
            f"{[v['version'] for v in latest.versions()]})"
        ) from exc
    if dataset is None:
        return None
    return {
        "version": dataset.version,
        "schema": readable_schema(dataset.schema),
        "fragments": [(f.fragment_id, *_fragment_size(f)) for f in dataset.get_fragments()],
    }


# Lance calls made by the sink; each runs through call_isolated in the planning process.
def latest_version(url: str, options: dict[str, str] | None) -> int | None:
    dataset = open_dataset(url, options)
    return dataset.version if dataset is not None else None


def dataset_schema(url: str, options: dict[str, str] | None, version: int) -> pa.Schema:
    return open_dataset(url, options, version).schema


def inspect_history(url: str, options: dict[str, str] | None, since: int, run_id: str) -> dict:
    """The latest version, and the version ``run_id`` committed after ``since`` (if any)."""
    dataset = open_dataset(url, options)
    if dataset is None:
        return {"version": None, "committed": None}
    for version in range(since + 1, dataset.version + 1):
        transaction = dataset.read_transaction(version)
        properties = (transaction.transaction_properties or {}) if transaction else {}
        if properties.get(RUN_PROPERTY) == run_id:
            return {"version": dataset.version, "committed": version}
    return {"version": dataset.version, "committed": None}


def commit_fragments(
    url: str,
    options: dict[str, str] | None,
    state: dict[str, Any],
    fragments: list[dict],
    schema: pa.Schema,
) -> dict:
    """Commit every kept fragment in one Lance transaction, unless the run already did.

    Returns ``{"version": v}`` for a new commit, ``{"committed": v}`` when the history
    shows this run's commit already, or ``{"moved": v}`` when another writer committed
    after the run read the dataset (nothing is committed then).
    """
    import lance
    from lance.commit import CommitConflictError
    from lance.dataset import LanceOperation, Transaction
    from lance.fragment import FragmentMetadata

    read = state["read_version"]
    seen = inspect_history(url, options, read or 0, state["run_id"])
    if seen["committed"] is not None:
        return {"committed": seen["committed"]}
    if seen["version"] != read:
        return {"moved": seen["version"]}
    metadata = [FragmentMetadata.from_json(json.dumps(f)) for f in fragments]
    operation = (
        LanceOperation.Append(metadata)
        if state["mode"] == "append" and read is not None
        else LanceOperation.Overwrite(schema, metadata)
    )
    transaction = Transaction(
        read_version=read or 0,
        operation=operation,
        transaction_properties={RUN_PROPERTY: state["run_id"], "refiner.mode": state["mode"]},
    )
    try:
        dataset = lance.LanceDataset.commit(
            url, transaction, storage_options=options, max_retries=0
        )
    except CommitConflictError:
        return {"moved": latest_version(url, options)}
    return {"version": dataset.version}


def schema_to_text(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode()


def schema_from_text(text: str) -> pa.Schema:
    return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(text)))


def _mark(field: pa.Field) -> str:
    info = asset_of(field)
    return "plain column" if info is None else f"{info.kind}/{info.form} asset"


def schema_difference(dataset: pa.Schema, new: pa.Schema) -> str | None:
    """How ``new`` differs from ``dataset`` in columns, types or asset marks, or ``None``."""
    missing = [n for n in dataset.names if n not in new.names]
    extra = [n for n in new.names if n not in dataset.names]
    if missing or extra:
        return f"columns missing {missing}, unexpected {extra} (the dataset has {dataset.names})"
    for field in dataset:
        other = new.field(field.name)
        if not other.type.equals(field.type):
            return f"column {field.name!r} is {other.type} but the dataset stores {field.type}"
        if _mark(other) != _mark(field):
            return (
                f"column {field.name!r} is a {_mark(other)} but the dataset stores a "
                f"{_mark(field)} (asset layout differs)"
            )
    return None
