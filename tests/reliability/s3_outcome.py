"""What a write to S3 left behind: rows lost or duplicated, orphan and partial objects.

Used by the S3 fault tests to judge one trial from what is in the bucket, never from
what the run reported about itself.
"""

from __future__ import annotations

import io
import json
import posixpath
from dataclasses import dataclass

import pyarrow.parquet as pq

import refiner_core as mdr
from tests.s3_server import MotoS3


@dataclass
class Outcome:
    """One trial's tally; every count must be zero for a trial to pass."""

    rows_lost: int
    rows_duplicated: int
    orphans: list[str]
    partial: list[str]
    open_uploads: list[str]
    bad_references: list[int]


def judge(
    moto: MotoS3, bucket: str, prefix: str, sources: dict[int, bytes], storage_options: dict
) -> Outcome:
    """Read the finalized output at ``s3://bucket/prefix`` straight from moto.

    ``sources`` maps each input row id to the media bytes its reference must read.
    Orphans are objects the summary does not account for: data files it does not list,
    asset objects no committed row points to, manifests of attempts that were not
    committed, records of uploads still to abort. Partial objects are data files that do not read as
    Parquet and blocks shorter than the references into them.
    """
    client = moto.client()
    keys = [k for k in moto.keys(bucket) if k.startswith(prefix + "/")]
    relative = {k[len(prefix) + 1 :]: k for k in keys}
    summary = json.loads(
        client.get_object(Bucket=bucket, Key=f"{prefix}/_refiner/summary.json")["Body"].read()
    )
    listed = set(summary["files"])
    partial: list[str] = []
    ids: list[int] = []
    references: dict[str, int] = {}
    bad: list[int] = []
    for name in sorted(listed):
        if name not in relative:
            partial.append(f"{name} (listed by the summary, missing)")
            continue
        body = client.get_object(Bucket=bucket, Key=relative[name])["Body"].read()
        try:
            table = pq.read_table(io.BytesIO(body))
        except Exception as exc:
            partial.append(f"{name} ({exc})")
            continue
        for row in table.to_pylist():
            ids.append(row["id"])
            ref = row["media"]
            end = ref["offset"] + ref["size"]
            references[ref["path"]] = max(references.get(ref["path"], 0), end)
            if mdr.read_blob(ref, storage_options=storage_options) != sources[row["id"]]:
                bad.append(row["id"])
    sizes = {
        k: obj["Size"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix)
        for obj in page.get("Contents", [])
        for k in [obj["Key"]]
    }
    referenced_keys = {p.removeprefix(f"s3://{bucket}/"): end for p, end in references.items()}
    for key, end in referenced_keys.items():
        if sizes.get(key, -1) < end:
            partial.append(f"{key} ({sizes.get(key)} bytes, references reach {end})")
    committed = {posixpath.splitext(f)[0] for f in listed}
    orphans = []
    for name, key in relative.items():
        if name in listed or key in referenced_keys:
            continue
        if name.startswith("_refiner/attempts/"):
            if posixpath.splitext(posixpath.basename(name))[0] in committed:
                continue  # the manifest of a committed attempt
        elif name.startswith("_refiner/") and not name.startswith("_refiner/open_uploads/"):
            continue  # the engine's bookkeeping (summary, layout, ...)
        orphans.append(name)
    counts: dict[int, int] = {}
    for i in ids:
        counts[i] = counts.get(i, 0) + 1
    return Outcome(
        rows_lost=len(set(sources) - set(counts)),
        rows_duplicated=sum(c - 1 for c in counts.values()),
        orphans=orphans,
        partial=partial,
        open_uploads=[
            f"{u['Key']} {u['UploadId']}"
            for u in moto.open_uploads(bucket)
            if posixpath.commonpath([u["Key"], prefix]) == prefix
        ],
        bad_references=bad,
    )
