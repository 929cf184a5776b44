"""The README's Dagster example runs as written (with its data folder pointed at test data)."""

from __future__ import annotations

import re
from pathlib import Path

import dagster as dg
import pyarrow as pa
import pyarrow.parquet as pq

import refiner_core as mdr

README = Path(__file__).resolve().parents[2] / "README.md"


def python_block(section: str) -> str:
    text = README.read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    match = re.search(r"```python\n(.*?)```", body, flags=re.S)
    assert match, f"no python example under {section!r}"
    return match.group(1)


def test_your_own_data_example_materializes(dagster_instance, tmp_path: Path) -> None:
    videos = []
    for i in range(3):
        video = tmp_path / f"clip_{i}.mp4"
        video.write_bytes(bytes([i]) * (100 + i))
        videos.append(str(video))
    data = tmp_path / "episodes"
    data.mkdir()
    pq.write_table(pa.table({"episode": [0, 1, 2], "video": videos}), data / "part-0.parquet")

    code = python_block("Your own data in Dagster").replace("/data/episodes/", f"{data}/")
    namespace: dict = {}
    exec(compile(code, "README.md", "exec"), namespace)
    defs: dg.Definitions = namespace["defs"]
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        instance=dagster_instance,
        resources=dict(defs.resources),
    )
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks == {"missing_assets": True, "reference_integrity": True}
    finalized = dagster_instance.get_latest_materialization_event(dg.AssetKey("episodes_finalized"))
    meta = finalized.asset_materialization.metadata
    rows = mdr.read_parquet(meta["dagster/uri"].value).materialize()
    blocks = {r["video"]["path"] for r in rows}  # one block per shard at most, for 3 videos
    assert meta["assets_written"].value == 3 and meta["blocks_written"].value == len(blocks)
    assert sorted(mdr.read_blob(r["video"]) for r in rows) == sorted(
        Path(v).read_bytes() for v in videos
    )
