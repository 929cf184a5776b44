"""Pytest fixtures for a local moto S3; use with ``from tests.s3_fixtures import *``.

- ``s3_server``: one moto server for the session (:class:`tests.s3_server.MotoS3`).
- ``s3_bucket``: a fresh, empty bucket name per test, deleted afterwards.
- ``s3_storage_options``: s3fs keyword arguments pointing straight at moto.
- ``s3_proxy``: a recording, fault-injecting :class:`tests.s3_server.S3Proxy` per test.

The s3fs instance cache is cleared around every test that uses one of these, so no
filesystem object outlives the endpoint it was made for.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import s3fs

from tests.s3_server import MotoS3, S3Proxy, dummy_aws_env, start_moto

__all__ = ["s3_bucket", "s3_proxy", "s3_server", "s3_storage_options"]


@pytest.fixture(scope="session")
def s3_server() -> Iterator[MotoS3]:
    saved = {name: os.environ.get(name) for name in dummy_aws_env()}
    os.environ.update(dummy_aws_env())
    server = start_moto()
    try:
        yield server
    finally:
        server.stop()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def s3_bucket(s3_server: MotoS3) -> Iterator[str]:
    s3fs.S3FileSystem.clear_instance_cache()
    bucket = s3_server.create_bucket()
    try:
        yield bucket
    finally:
        s3fs.S3FileSystem.clear_instance_cache()
        s3_server.delete_bucket(bucket)


@pytest.fixture
def s3_storage_options(s3_server: MotoS3) -> Iterator[dict[str, Any]]:
    s3fs.S3FileSystem.clear_instance_cache()
    yield s3_server.storage_options()
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def s3_proxy(s3_server: MotoS3) -> Iterator[S3Proxy]:
    s3fs.S3FileSystem.clear_instance_cache()
    with S3Proxy(s3_server.endpoint_url) as proxy:
        yield proxy
    s3fs.S3FileSystem.clear_instance_cache()
