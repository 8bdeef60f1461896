"""Every Python module of fastlower stays readable in one sitting: at most ~400 lines.

A module that outgrows this is split along its seams, not grown further.
"""

from __future__ import annotations

from pathlib import Path

import fastlower

LIMIT = 400
_IN_TREE = Path(__file__).resolve().parents[1] / "src" / "fastlower"
ROOT = _IN_TREE if _IN_TREE.is_dir() else Path(fastlower.__file__).parent


def test_no_module_over_the_limit():
    sizes = {str(p.relative_to(ROOT)): len(p.read_text().splitlines())
             for p in ROOT.rglob("*.py")}
    assert len(sizes) > 50, f"found only {len(sizes)} modules under {ROOT}"
    over = {name: n for name, n in sizes.items() if n > LIMIT}
    assert not over, f"modules over {LIMIT} lines (split them along their seams): {over}"


FUNCTION_LIMIT = 80


def test_no_function_over_the_limit():
    """A function a reviewer can hold in mind: at most 80 lines, decorators and docstring
    included (nested functions counted in their own right and in their parent's)."""
    import ast

    over = {}
    for path in ROOT.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                length = node.end_lineno - first + 1
                if length > FUNCTION_LIMIT:
                    over[f"{path.relative_to(ROOT)}:{node.name}"] = length
    assert not over, f"functions over {FUNCTION_LIMIT} lines (split along their steps): {over}"
