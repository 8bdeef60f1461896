"""Fixtures for the differential suite.

``impl_under_test`` is ``fastlower.to_backend``. When ``import fastlower`` fails the
suite errors out (collection stops with the reason); it compares the reference with
itself (a check of the harness) only when ``FASTLOWER_CONFORMANCE_IMPL=reference``
asks for it.
"""

import logging

import pytest

from tests.differential import harness as H

_FORCED_REFERENCE = H.reference_requested()


def _implementation():
    if _FORCED_REFERENCE:
        return H.REFERENCE
    try:
        return H.load_fastlower()
    except RuntimeError as exc:
        raise pytest.UsageError(f"fastlower differential suite: {exc}") from exc


_IMPL = _implementation()


def pytest_report_header(config):
    if _FORCED_REFERENCE:
        return (f"fastlower differential: {H.IMPL_ENV}=reference -> comparing the REFERENCE "
                "with itself")
    return f"fastlower differential: impl under test = {H.impl_name(_IMPL)}"


@pytest.fixture(scope="session")
def impl_under_test():
    return _IMPL


@pytest.fixture(scope="package", autouse=True)
def _quiet_logs():
    # package scope: ended before another package's tests run (under pytest-xdist too,
    # where packages interleave), so their logging is left as it was
    # XnnpackPartitioner logs a deprecation warning on every to_backend call.
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
