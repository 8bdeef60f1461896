"""Every import path docs/public-api.md lists works: each public name is there, and each
path of an earlier release imports the module at its new place, with a warning."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

from fastlower.base import moved

DOC = Path(__file__).resolve().parents[1] / "docs" / "public-api.md"
_ROW = re.compile(r"^\| `([\w.]+)` \| (.+) \|$")


def _rows(section: str) -> List[Tuple[str, str]]:
    """The table rows of the section whose heading starts with ``section``."""
    text = DOC.read_text()
    start = text.index(f"## {section}")
    end = text.find("\n## ", start + 1)
    body = text[start:end if end >= 0 else None]
    return [(m.group(1), m.group(2)) for m in map(_ROW.match, body.splitlines()) if m]


PUBLIC = [(path, re.findall(r"`(\w+)`", names))
          for section in ("The package", "Modules") for path, names in _rows(section)]
OLD: Dict[str, str] = {old: new.strip("`") for old, new in _rows("Paths of earlier releases")}


def test_the_document_lists_the_surface():
    assert len(PUBLIC) > 15 and all(names for _, names in PUBLIC)
    assert ("fastlower.patch", ["install", "uninstall", "installed", "is_installed",
                                "reference", "reference_of", "routed"]) in PUBLIC


@pytest.mark.parametrize("path, names", PUBLIC, ids=[p for p, _ in PUBLIC])
def test_public_names_import(path, names):
    module = importlib.import_module(path)
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{path} lacks {missing}"


def test_every_moved_path_is_documented():
    documented = {old.removeprefix("fastlower.") for old in OLD}
    assert documented == set(moved.MOVED) | {"preprocess.xnnpack_patterns"}
    for old, new in moved.MOVED.items():
        assert OLD[f"fastlower.{old}"] == f"fastlower.{new}"


# the old paths in a fresh interpreter: the import statement, the from-import and the
# attribute all give the new module's objects, and the first use of a stand-in warns
_PROBE = """
import importlib, json, sys, warnings
for old, new in json.loads(sys.argv[1]).items():
    target = importlib.import_module(new)
    names = [n for n in getattr(target, "__all__", dir(target)) if not n.startswith("_")]
    name = names[0] if names else "__name__"  # a package that only documents its modules
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
        value = getattr(module, name) if names else target.__name__
        again = value
        if names:
            exec(f"from {old} import {name} as again")
        else:  # nothing to look up: the import statement works and the warning is given
            importlib.import_module(old).__dir__()
    assert value == getattr(target, name) and again is value, (old, name)
    parent, _, leaf = old.rpartition(".")
    assert getattr(importlib.import_module(parent), leaf) is not None, old
    if old.count(".") == 1:  # a stand-in: warns
        assert [w for w in caught if issubclass(w.category, DeprecationWarning)
                and new in str(w.message)], (old, [str(w.message) for w in caught])
    print("ok", old, name)
"""


def test_old_paths_import_the_moved_modules():
    run = subprocess.run([sys.executable, "-c", _PROBE, json.dumps(OLD)], capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert sorted(line.split()[1] for line in run.stdout.splitlines()
                  if line.startswith("ok ")) == sorted(OLD)


def test_a_stand_in_does_not_import_on_inspection():
    """``inspect.getmodule`` and pickle walk ``sys.modules`` and probe dunder names: a
    stand-in answers those without importing its target (which would import torch)."""
    code = ("import sys, inspect, fastlower\n"
            "stand_in = sys.modules['fastlower.cache.shared'.replace('cache.', '')]\n"
            "assert not hasattr(stand_in, '__file__')\n"
            "inspect.getmodule(len)\n"
            "assert 'torch' not in sys.modules, 'torch imported'\n"
            "assert 'fastlower.cache.shared' not in sys.modules\n"
            "print('ok')\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
