"""Fixtures: a loopback fake provider per test and a clean provider environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .provider_server import ProviderServer
from .support import ANTHROPIC_KEY, OPENAI_KEY


@pytest.fixture(autouse=True)
def provider_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keys set, base URLs and proxies unset: every test states where it sends."""
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    for name in (
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")


@pytest.fixture
def openai_server() -> Iterator[ProviderServer]:
    """Fake OpenAI-style server expecting ``Bearer OPENAI_KEY``."""
    with ProviderServer(api_key=OPENAI_KEY) as server:
        yield server


@pytest.fixture
def anthropic_server() -> Iterator[ProviderServer]:
    """Fake Anthropic server expecting ``x-api-key: ANTHROPIC_KEY``."""
    with ProviderServer(api_key=ANTHROPIC_KEY) as server:
        yield server


@pytest.fixture
def open_server() -> Iterator[ProviderServer]:
    """Fake server that needs no key (a local vLLM-style server)."""
    with ProviderServer(api_key=None) as server:
        yield server
