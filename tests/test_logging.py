"""The library logs through ``logging.getLogger("fastlower")`` (children via
``__name__``) and never calls ``print``; commands write their output through
``fastlower.frontends.console.out``."""

import ast
import pathlib

import fastlower

SRC = pathlib.Path(fastlower.__file__).parent


def _calls(tree, name):
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Name) and n.func.id == name]


def test_no_print_in_the_library():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for call in _calls(ast.parse(path.read_text()), "print"):
            found.append(f"{path.relative_to(SRC)}:{call.lineno}")
    assert found == []


def test_module_loggers_are_in_the_fastlower_hierarchy():
    names = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and \
                    ast.unparse(node.value.func) == "logging.getLogger" and \
                    [ast.unparse(t) for t in node.targets] == ["log"]:
                names.append(ast.unparse(node.value.args[0]))
    assert names and all(n == "__name__" or n.startswith("'fastlower") for n in names), names
