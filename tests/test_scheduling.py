"""The suite's own scheduling (tests/conftest.py): the long modules handed out first are
real files, and pytest-xdist keeps that order instead of its own by test count."""

from pathlib import Path

import pytest

from .conftest import LONG_MODULES

ROOT = Path(__file__).resolve().parent.parent


def test_every_long_module_exists():
    missing = [m for m in LONG_MODULES if not (ROOT / m).is_file()]
    assert not missing, f"renamed or removed: update LONG_MODULES in tests/conftest.py: {missing}"


def test_xdist_keeps_the_measured_order(pytestconfig):
    if not hasattr(pytestconfig.option, "loadscopereorder"):
        pytest.skip("pytest-xdist is not loaded")
    assert pytestconfig.option.loadscopereorder is False
