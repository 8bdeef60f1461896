"""``ls src/fastlower`` reads as the architecture: a dozen layers, each package saying its
job in its docstring's first sentence (docs/architecture.md draws the same map)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import fastlower

_IN_TREE = Path(__file__).resolve().parents[1] / "src" / "fastlower"
ROOT = _IN_TREE if _IN_TREE.is_dir() else Path(fastlower.__file__).parent
# not layers: the package's own files, the native core's stub and the built extension
NOT_LAYERS = {"__init__.py", "__main__.py", "py.typed", "_core.pyi", "__pycache__"}
TOP_LIMIT = 12


def _top_level():
    return sorted(p.name for p in ROOT.iterdir()
                  if p.name not in NOT_LAYERS and not p.name.startswith("_core.")
                  and (p.suffix == ".py" or (p / "__init__.py").is_file()))


def test_a_dozen_layers_at_the_top():
    top = _top_level()
    assert "lowering" in top and "cache" in top, top
    assert len(top) <= TOP_LIMIT, f"{len(top)} modules and packages under src/fastlower: {top}"


def test_the_top_level_is_the_documented_map():
    """Every top-level module and package is named in docs/architecture.md's map."""
    doc = (Path(__file__).resolve().parents[1] / "docs" / "architecture.md").read_text()
    missing = [name for name in _top_level()
               if f"`{name.removesuffix('.py')}/`" not in doc and f"`{name}`" not in doc]
    assert not missing, f"not in docs/architecture.md's map: {missing}"


def test_every_package_says_its_job():
    silent = []
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        if not doc or len(re.split(r"\.\s", doc)[0].split()) < 4:
            silent.append(str(init.parent.relative_to(ROOT)) or ".")
    assert not silent, f"packages without a docstring saying their job: {silent}"
