"""The C++ core never imports a Python module.

An import from C++ ties the core to the package layout and, on first use from several
threads, can deadlock on a static's guard held across the GIL release of the import.
What the core needs from Python is handed to it at load time instead
(``fastlower.core.loader.hand_over_rules``). The sources are read as text, comments
stripped; the test fails on any ``module_::import`` / ``module::import`` or ``PyImport_*``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

CSRC = Path(__file__).resolve().parents[1] / "csrc"

# Files allowed to import (none: Python hands the core what it needs, see
# fastlower.core.loader.hand_over_rules); the test fails as soon as a listed one no
# longer imports, so the list cannot go stale.
KNOWN_IMPORTERS: set = set()

_IMPORT = re.compile(r"\bmodule_?\s*::\s*import\b|\bPyImport_\w+")
_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)


def importers() -> dict:
    """csrc file name -> the import calls in its code (comments excluded)."""
    found = {}
    for path in sorted(CSRC.glob("*.[ch]pp")):
        calls = _IMPORT.findall(_COMMENT.sub("", path.read_text()))
        if calls:
            found[path.name] = calls
    return found


def test_no_python_import_in_the_core():
    if not CSRC.is_dir():
        pytest.skip(f"no C++ sources at {CSRC} (not a source checkout)")
    assert len(list(CSRC.glob("*.cpp"))) > 10, f"expected the core's sources in {CSRC}"
    found = importers()
    unexpected = {name: calls for name, calls in found.items() if name not in KNOWN_IMPORTERS}
    assert not unexpected, f"C++ must not import Python modules: {unexpected}"
    cleaned = KNOWN_IMPORTERS - set(found)
    assert not cleaned, f"no longer import (strike them from KNOWN_IMPORTERS): {sorted(cleaned)}"


def test_the_check_sees_an_import():
    """The pattern catches the spellings in use and ignores comments."""
    code = ('// py::module_::import("in a comment")\n'
            '/* PyImport_ImportModule("also") */\n')
    assert not _IMPORT.findall(_COMMENT.sub("", code))
    for call in ('py::module_::import("fastlower.core.schema")', "pybind11::module::import(name)",
                 'PyImport_ImportModule("x")', "py::module_ :: import(x)"):
        assert _IMPORT.findall(_COMMENT.sub("", code + call)), call
