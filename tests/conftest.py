"""Shared pytest setup: make ``src/`` and the repo root importable (so that
``fastlower.examples`` and ``tests.models`` resolve even before the package
is installed).  The ``slow`` marker is registered (and deselected by
default) in pyproject.toml."""

import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
for p in (str(_ROOT / "src"), str(_ROOT)):
    if p not in sys.path:
        sys.path.insert(0, p)
