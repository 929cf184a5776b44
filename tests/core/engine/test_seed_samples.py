"""The code samples of the async and batch transforms guide, run as written.

Each test defines what a sample assumes (a starting ``pipeline``, ``create_client``,
``load_model``, ``create_async_batch_model``) and then runs the sample text unchanged.
"""

from __future__ import annotations

import asyncio

import refiner_core as mdr

from .helpers import read_output_rows

EPISODES = [
    {"episode": i, "num_frames": 100 * i, "text": "pick cube" if i % 2 else "open drawer"}
    for i in range(7)
]


def starting_pipeline() -> mdr.Pipeline:
    return mdr.from_items(EPISODES, items_per_shard=3)


class FakeClient:
    def __init__(self) -> None:
        self.calls = 0

    async def classify(self, text: str) -> str:
        self.calls += 1
        await asyncio.sleep(0.001)
        return "grasp" if text.startswith("pick") else "articulate"


class FakeModel:
    def __init__(self, path: str) -> None:
        self.path = path

    def predict(self, rows):
        return [row.update({"score": row.num_frames / 1000, "model": self.path}) for row in rows]


def test_map_async_callback_sample():
    pipeline = starting_pipeline()

    async def classify_episode(row):
        label = "long" if row.num_frames > 300 else "short"
        return row.update({"label": label})

    pipeline = pipeline.map_async(
        classify_episode,
        max_in_flight=32,
        preserve_order=True,
    )

    rows = pipeline.materialize()
    assert [r.episode for r in rows] == list(range(7))
    assert [r.label for r in rows] == ["short"] * 4 + ["long"] * 3
    assert rows[5].to_dict() == {**EPISODES[5], "label": "long"}


def test_map_async_factory_sample():
    pipeline = starting_pipeline()
    clients = []

    def create_client():
        client = FakeClient()
        clients.append(client)
        return client

    class Classifier:
        def __init__(self):
            self.client = create_client()

        async def __call__(self, row):
            label = await self.client.classify(row["text"])
            return {"label": label}

    def create_classifier():
        return Classifier()

    pipeline = pipeline.map_async(
        factory=create_classifier,
        max_in_flight=32,
    )

    rows = pipeline.materialize()
    assert [r.label for r in rows] == ["articulate", "grasp"] * 3 + ["articulate"]
    assert all(
        r.text == e["text"] and r.num_frames == e["num_frames"]
        for r, e in zip(rows, EPISODES, strict=True)
    )
    # one factory call for the whole in-process run, across all three shards
    assert len(clients) == 1 and clients[0].calls == 7


def test_max_block_rows_sample(tmp_path):
    pipeline = mdr.from_items(
        [{"i": i, "image": bytes([i % 256]) * 100} for i in range(50)], items_per_shard=50
    )

    pipeline = pipeline.with_max_block_rows(16)

    assert pipeline.max_block_rows == 16
    pipeline.write_parquet(str(tmp_path / "out")).launch_local()
    rows = read_output_rows(tmp_path / "out")
    assert [r["i"] for r in rows] == list(range(50))
    assert rows[3]["image"] == b"\x03" * 100


def test_batch_map_sample():
    pipeline = starting_pipeline()

    def add_batch_rank(rows):
        for index, row in enumerate(rows):
            yield row.update({"batch_rank": index})

    pipeline = pipeline.batch_map(add_batch_rank, batch_size=32)

    rows = pipeline.materialize()
    # shards hold 3, 3 and 1 rows, so every shard is one short batch
    assert [r.batch_rank for r in rows] == [0, 1, 2, 0, 1, 2, 0]
    assert [r.episode for r in rows] == list(range(7))


def test_batch_map_factory_sample():
    pipeline = starting_pipeline()
    loaded = []

    def load_model(path):
        loaded.append(path)
        return FakeModel(path)

    def create_batch_model():
        model = load_model("model.pt")

        def infer(rows):
            return model.predict(rows)

        return infer

    pipeline = pipeline.batch_map(
        factory=create_batch_model,
        batch_size=32,
    )

    rows = pipeline.materialize()
    assert loaded == ["model.pt"]
    assert [r.score for r in rows] == [i / 10 for i in range(7)]
    assert {r.model for r in rows} == {"model.pt"}


def test_batch_map_async_sample():
    pipeline = mdr.from_items(
        [{"episode": i, "num_frames": i} for i in range(150)], items_per_shard=150
    )
    batch_sizes = []

    def create_async_batch_model():
        async def infer(rows):
            batch_sizes.append(len(rows))
            # later batches finish first: order must still be kept
            await asyncio.sleep(0.02 if rows[0].episode == 0 else 0.001)
            return [{"episode": r.episode, "double": 2 * r.num_frames} for r in rows]

        return infer

    pipeline = pipeline.batch_map_async(
        factory=create_async_batch_model,
        batch_size=64,
        max_in_flight=2,
        preserve_order=True,
    )

    rows = pipeline.materialize()
    assert batch_sizes == [64, 64, 22]
    assert [r.episode for r in rows] == list(range(150))
    assert [r.double for r in rows] == [2 * i for i in range(150)]
    # dicts returned by a batch callback are rows of their own (num_frames is gone)
    assert "num_frames" not in rows[0]


def test_samples_chained_under_launch_local(tmp_path):
    """All the samples in one pipeline, written to Parquet by two worker processes."""
    pipeline = starting_pipeline()

    def create_client():
        return FakeClient()

    def load_model(path):
        return FakeModel(path)

    def create_async_batch_model():
        async def infer(rows):
            await asyncio.sleep(0.001)
            return (row.update({"n_in_batch": len(rows)}) for row in rows)

        return infer

    async def classify_episode(row):
        label = "long" if row.num_frames > 300 else "short"
        return row.update({"label": label})

    pipeline = pipeline.map_async(
        classify_episode,
        max_in_flight=32,
        preserve_order=True,
    )

    class Classifier:
        def __init__(self):
            self.client = create_client()

        async def __call__(self, row):
            label = await self.client.classify(row["text"])
            return {"label": label}

    def create_classifier():
        return Classifier()

    pipeline = pipeline.map_async(
        factory=create_classifier,
        max_in_flight=32,
    )

    pipeline = pipeline.with_max_block_rows(16)

    def add_batch_rank(rows):
        for index, row in enumerate(rows):
            yield row.update({"batch_rank": index})

    pipeline = pipeline.batch_map(add_batch_rank, batch_size=32)

    def create_batch_model():
        model = load_model("model.pt")

        def infer(rows):
            return model.predict(rows)

        return infer

    pipeline = pipeline.batch_map(
        factory=create_batch_model,
        batch_size=32,
    )

    pipeline = pipeline.batch_map_async(
        factory=create_async_batch_model,
        batch_size=64,
        max_in_flight=2,
        preserve_order=True,
    )

    out = tmp_path / "out"
    stats = pipeline.write_parquet(str(out)).launch_local(num_workers=2)
    assert stats.summary.counters["rows_written"] == 7
    rows = sorted(read_output_rows(out), key=lambda r: r["episode"])
    assert [r["label"] for r in rows] == ["articulate", "grasp"] * 3 + ["articulate"]
    assert [r["batch_rank"] for r in rows] == [0, 1, 2, 0, 1, 2, 0]
    assert [r["n_in_batch"] for r in rows] == [3, 3, 3, 3, 3, 3, 1]
    assert [r["score"] for r in rows] == [i / 10 for i in range(7)]
