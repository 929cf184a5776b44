"""read_clip and read_frames on real H.264 files: remux, keyframe rule, re-encode, ranged S3 reads."""

from __future__ import annotations

import io
import os

import av
import pytest
import s3fs

import refiner_core as mdr
from tests.core.lerobot.layout import pixel, write_dataset
from tests.s3_fixtures import *  # noqa: F403

CAM = "observation.images.front"


@pytest.fixture
def video(tmp_path) -> str:
    root = write_dataset(str(tmp_path / "ds"), [10, 10, 10], cameras=(CAM,))
    return f"{root}/videos/{CAM}/chunk-000/file-000.mp4"


def _decoded(data: bytes) -> list[tuple[float, int]]:
    with av.open(io.BytesIO(data)) as container:
        stream = container.streams.video[0]
        return [
            (float(f.pts * stream.time_base), int(f.to_ndarray(format="rgb24")[0, 0, 0]))
            for f in container.decode(stream)
        ]


def _close(found: list[tuple[float, int]], frames: range, start: float = 0.0) -> None:
    assert [t for t, _ in found] == pytest.approx([start + k / 10 for k in range(len(frames))])
    assert all(abs(value - pixel(i, 0)) <= 3 for (_, value), i in zip(found, frames, strict=True))


def test_read_clip_remuxes_an_episode_into_a_standalone_mp4_from_zero(video):
    data = mdr.read_clip({"path": video, "from_timestamp": 1.0, "to_timestamp": 2.0})
    assert data[4:8] == b"ftyp"
    _close(_decoded(data), range(10, 20))
    with av.open(io.BytesIO(data)) as container:  # packets copied: the same codec, no re-encode
        assert container.streams.video[0].codec_context.name == "h264"


def test_read_clip_off_a_keyframe_says_why_and_how(video):
    with pytest.raises(
        mdr.ClipNotOnKeyframe, match=r"starts at 1\.3s, which is not a keyframe.*reencode=True"
    ):
        mdr.read_clip({"path": video, "from_timestamp": 1.3, "to_timestamp": 2.0})


def test_read_clip_reencode_cuts_anywhere(video):
    data = mdr.read_clip({"path": video, "from_timestamp": 1.3, "to_timestamp": 1.8}, reencode=True)
    _close(_decoded(data), range(13, 18))


def test_read_frames_yields_file_times_and_rgb_arrays(video):
    frames = list(mdr.read_frames({"path": video, "from_timestamp": 2.5, "to_timestamp": 2.8}))
    assert [t for t, _ in frames] == pytest.approx([2.5, 2.6, 2.7])
    assert all(f.shape == (24, 32, 3) and f.dtype.name == "uint8" for _, f in frames)
    assert all(
        abs(int(f[5, 5, 1]) - pixel(i, 0)) <= 3
        for (_, f), i in zip(frames, (25, 26, 27), strict=True)
    )


@pytest.mark.parametrize(
    "ref, message",
    [
        ({"from_timestamp": 0, "to_timestamp": 1}, "has no path"),
        (
            {"path": "x.mp4", "from_timestamp": 2, "to_timestamp": 1},
            "0 <= from_timestamp < to_timestamp",
        ),
        ({"path": "x.mp4", "from_timestamp": "0", "to_timestamp": 1}, "from_timestamp='0'"),
    ],
)
def test_bad_clip_references_are_named(ref, message):
    with pytest.raises(ValueError, match=message):
        mdr.read_clip(ref)


def test_a_missing_video_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.mp4 does not exist"):
        mdr.read_clip({"path": str(tmp_path / "nope.mp4"), "from_timestamp": 0, "to_timestamp": 1})


def _packet_bytes(path: str, start: float, stop: float) -> int:
    """The bytes of the packets whose frames lie in ``[start, stop)``."""
    with av.open(path) as container:
        stream = container.streams.video[0]
        return sum(
            p.size
            for p in container.demux(stream)
            if p.pts is not None and start - 1e-4 <= float(p.pts * stream.time_base) < stop - 1e-4
        )


def test_read_clip_from_s3_transfers_at_most_twice_the_clips_packets(tmp_path, s3_bucket, s3_proxy):
    # 20 episodes of noisy 320x240 frames: a file of some MB, of which one episode is a small part
    root = write_dataset(
        str(tmp_path / "ds"), [10] * 20, cameras=(CAM,), noise=True, size=(320, 240)
    )
    local = f"{root}/videos/{CAM}/chunk-000/file-000.mp4"
    size = os.path.getsize(local)
    fs = s3fs.S3FileSystem(**s3_proxy.storage_options())
    fs.put(local, f"{s3_bucket}/v.mp4")
    url = f"s3://{s3_bucket}/v.mp4"
    for start, stop in [(1.0, 2.0), (0.0, 1.0), (19.0, 20.0), (5.0, 10.0)]:
        s3_proxy.clear()
        data = mdr.read_clip(
            {"path": url, "from_timestamp": start, "to_timestamp": stop},
            s3_proxy.storage_options(),
        )
        gets = s3_proxy.records("GetObject")
        served = sum(r.response_bytes for r in gets)
        packets = _packet_bytes(local, start, stop)
        assert len(_decoded(data)) == round((stop - start) * 10)
        print(f"[{start}, {stop}): {served} bytes served for {packets} bytes of packets")
        assert size > 2_000_000 and served <= 2 * packets, (start, stop, served, packets, size)
        # the clip's packets come in one request, not block by block; the file's head, the
        # index box's header and the rest of the index in one request each
        assert max(r.response_bytes for r in gets) >= packets
        assert len(gets) <= 4, [r.response_bytes for r in gets]
