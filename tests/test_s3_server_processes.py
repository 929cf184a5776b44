"""tests/s3_server.py's server processes: moto and the proxy each in a child process that
serves, stops on request, and does not outlive the process that started it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import boto3
import pytest

from tests.s3_server import (
    DUMMY_KEY,
    DUMMY_SECRET,
    REGION,
    start_local_s3,
    start_moto_process,
    start_proxy_process,
)

ROOT = Path(__file__).resolve().parents[1]


def _client(endpoint_url: str):
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=DUMMY_KEY,
        aws_secret_access_key=DUMMY_SECRET,
        region_name=REGION,
    )


def _running(pid: int) -> bool:
    """Whether ``pid`` is alive (a zombie waiting to be reaped counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not _running(pid):
            return True
        time.sleep(0.05)
    return not _running(pid)


def test_moto_and_the_proxy_serve_from_their_own_processes_and_stop():
    moto = start_moto_process()
    proxy = start_proxy_process(moto.endpoint_url, latency_s=0.1)
    pids = [moto.server.pid, proxy.pid]  # type: ignore[union-attr]
    try:
        assert os.getpid() not in pids and len(set(pids)) == 2
        assert moto.endpoint_url.startswith("http://127.0.0.1:")
        assert proxy.endpoint_url.startswith("http://127.0.0.1:")
        bucket = moto.create_bucket()
        client = _client(proxy.endpoint_url)
        started = time.monotonic()
        client.put_object(Bucket=bucket, Key="k", Body=b"hello")
        body = client.get_object(Bucket=bucket, Key="k")["Body"].read()
        assert body == b"hello"
        assert time.monotonic() - started >= 0.2  # two requests, each held 0.1 s
        assert moto.keys(bucket) == ["k"]
        moto.delete_bucket(bucket)
    finally:
        proxy.stop()
        moto.stop()
    assert all(_wait_gone(pid, 5.0) for pid in pids)


def test_start_local_s3_lays_the_servers_out_as_asked():
    with start_local_s3(0.0) as s3:
        assert s3.layout == "processes"
        bucket = s3.moto.create_bucket()
        _client(s3.endpoint_url).put_object(Bucket=bucket, Key="a", Body=b"1")
        assert s3.moto.keys(bucket) == ["a"]
        pids = [s3.moto.server.pid, s3.proxy.pid]  # type: ignore[union-attr]
    assert all(_wait_gone(pid, 5.0) for pid in pids)
    with start_local_s3(0.0, layout="in-process") as s3:
        bucket = s3.moto.create_bucket()
        _client(s3.endpoint_url).put_object(Bucket=bucket, Key="b", Body=b"2")
        assert [r.kind for r in s3.proxy.records()] == ["PutObject"]  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="layout"):
        start_local_s3(layout="elsewhere")


_ORPHANING_PARENT = """
import sys, time
sys.path.insert(0, {root!r})
from tests.s3_server import start_moto_process, start_proxy_process
moto = start_moto_process()
proxy = start_proxy_process(moto.endpoint_url)
print(moto.server.pid, proxy.pid, flush=True)
time.sleep(60)
"""


def test_the_server_processes_die_with_their_parent():
    parent = subprocess.Popen(
        [sys.executable, "-c", _ORPHANING_PARENT.format(root=str(ROOT))],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert parent.stdout is not None
        pids = [int(p) for p in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_running(pid) for pid in pids)
    finally:
        parent.kill()
        parent.wait(10)
    assert all(_wait_gone(pid, 10.0) for pid in pids)
