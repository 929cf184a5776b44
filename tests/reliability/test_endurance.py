"""Endurance: 50 consecutive materializations of a dataset asset (blob IO manager,
finalization asset) in one process on one real Dagster instance. Open file
descriptors and resident memory stay flat: after 5 warm-up materializations, the
next 45 may add at most ``FD_GROWTH`` descriptors and ``RSS_GROWTH_MIB`` MiB."""

from __future__ import annotations

import gc

import dagster as dg
import psutil
import pytest

import refiner_core as mdr
import refiner_dagster as rd
from tests.dagster.conftest import TELEMETRY_OFF, _instance_template, dagster_home  # noqa: F401

MATERIALIZATIONS = 50
WARM_UP = 5
FD_GROWTH = 4
RSS_GROWTH_MIB = 64


def _episodes(files):
    items = [{"episode": i, "image": path} for i, path in enumerate(files)]

    @dg.asset(name="episodes", io_manager_key="refiner", metadata={"refiner/target_bytes": 256})
    def episodes() -> mdr.Pipeline:
        return mdr.from_items(items, items_per_shard=4, dtypes={"image": mdr.datatype.image_path()})

    return episodes


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_fifty_materializations_keep_descriptors_and_memory_flat(request, tmp_path):
    home = request.getfixturevalue("dagster_home")
    files = []
    for i in range(8):
        path = tmp_path / f"frame-{i}.png"
        path.write_bytes(bytes((i * 31 + j) % 256 for j in range(64 + 16 * i)))
        files.append(str(path))
    episodes = _episodes(files)
    assets = [episodes, rd.build_finalization_asset(episodes)]
    me = psutil.Process()
    samples: list[tuple[int, float]] = []
    with dg.instance_for_test(temp_dir=home, overrides=TELEMETRY_OFF) as instance:
        resources = {"refiner": rd.RefinerBlobIOManager(num_workers=2)}
        for _ in range(MATERIALIZATIONS):
            result = dg.materialize(assets, instance=instance, resources=resources)
            assert result.success
            gc.collect()
            samples.append((me.num_fds(), me.memory_info().rss / 2**20))
        storage = resources["refiner"].storage(instance)
        current = storage.current(["episodes"], None)
        rows = list(mdr.read_parquet(current.url).iter_rows())
        assert sorted(r["episode"] for r in rows) == list(range(8))
    base_fds, base_rss = samples[WARM_UP - 1]
    end_fds, end_rss = samples[-1]
    peak_fds = max(fds for fds, _ in samples[WARM_UP:])
    peak_rss = max(rss for _, rss in samples[WARM_UP:])
    print(
        f"\nendurance: fds {base_fds} -> {end_fds} (peak {peak_fds}), "
        f"RSS {base_rss:.0f} -> {end_rss:.0f} MiB (peak {peak_rss:.0f}) "
        f"over {MATERIALIZATIONS - WARM_UP} materializations after {WARM_UP} warm-up"
    )
    assert peak_fds - base_fds <= FD_GROWTH, samples
    assert peak_rss - base_rss <= RSS_GROWTH_MIB, samples
