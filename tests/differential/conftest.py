"""Fixtures for the differential suite.

``impl_under_test`` is ``fastlower.to_backend`` when ``import fastlower;
fastlower.to_backend`` works, otherwise the reference itself (the suite then
checks the harness: reference vs reference must be identical), with a
visible warning."""

import logging
import os
import warnings

import pytest

from tests.differential import harness as H

# FASTLOWER_DIFF_IMPL=reference forces the reference (harness self-check).
_FORCED_REFERENCE = os.environ.get("FASTLOWER_DIFF_IMPL") == "reference"
_FASTLOWER = None if _FORCED_REFERENCE else H.load_fastlower()


def pytest_report_header(config):
    if _FASTLOWER is None:
        why = (
            "FASTLOWER_DIFF_IMPL=reference"
            if _FORCED_REFERENCE
            else "fastlower.to_backend NOT importable"
        )
        return f"fastlower differential: {why} -> comparing the REFERENCE with itself"
    return f"fastlower differential: impl under test = {H.impl_name(_FASTLOWER)}"


@pytest.fixture(scope="session")
def impl_under_test():
    if _FASTLOWER is None and not _FORCED_REFERENCE:
        warnings.warn(
            "fastlower.to_backend is not importable: the differential suite "
            "compares the reference to_backend with ITSELF",
            UserWarning,
            stacklevel=1,
        )
    return H.REFERENCE if _FASTLOWER is None else _FASTLOWER


@pytest.fixture(scope="session", autouse=True)
def _quiet_logs():
    # XnnpackPartitioner logs a deprecation warning on every to_backend call.
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)
