"""Fixtures of the shared-store tests: moto's S3 server and a clean slate per test."""

from __future__ import annotations

from typing import Iterator

import pytest

from fastlower.cache.shared import tier

from .servers import CREDENTIALS, MotoServer


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoServer]:
    """moto's standalone S3 server on loopback, for the module's tests."""
    server = MotoServer()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def s3_env(monkeypatch) -> None:
    """Credentials for moto in this process's environment (obstore reads them)."""
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)


@pytest.fixture(autouse=True)
def fresh_process_memory() -> Iterator[None]:
    """Each test starts as a new process would: no store known to be down or read-only."""
    tier.forget()
    yield
    tier.forget()
