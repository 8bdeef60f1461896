"""Module paths of earlier releases, still importable: ``fastlower.shared`` is now
``fastlower.cache.shared``, ``fastlower.preview`` is ``fastlower.frontends.preview``, and so on.

Each old path is a small stand-in in ``sys.modules`` (under fastlower's own names only;
nothing else is touched) that looks every public name up at the module's new place, so
``import fastlower.shared``, ``from fastlower.shared import options`` and
``fastlower.shared.options`` keep working, and objects pickled under an old path are
found. The first use of each old path warns once (``DeprecationWarning``). Submodules of
a moved package are imported by their new paths only. The list is the CHANGELOG's.
"""

from __future__ import annotations

import sys
import threading
import types
import warnings
from importlib import import_module
from typing import Any, Dict, List, Set

# old path -> new path, both relative to ``fastlower``
MOVED: Dict[str, str] = {
    "api": "lowering.api", "apply": "lowering.apply", "edits": "lowering.edits",
    "programs": "lowering.programs", "spec": "lowering.spec",
    "encode": "core.encode", "plan": "core.plan",
    "compat": "base.compat", "phases": "base.phases", "records": "base.records",
    "state": "base.state",
    "backends": "preprocess.backends", "structure": "preprocess.structure",
    "refit": "cache.refit", "shared": "cache.shared", "trust": "cache.trust",
    "dispatch": "in_process.dispatch", "edge": "in_process.edge",
    "fake_outputs": "in_process.fake_outputs", "heap_freeze": "in_process.heap_freeze",
    "node_history": "in_process.node_history", "scoped_patch": "in_process.scoped_patch",
    "stack_room": "in_process.stack_room", "while_lowering": "in_process.while_lowering",
    "preview": "frontends.preview",
    "cli": "frontends.cli", "console": "frontends.console", "demo": "frontends.demo",
    "examples": "frontends.examples", "loading": "base.loading",
    "script_runner": "frontends.script_runner",
}

_warned: Set[str] = set()
_lock = threading.Lock()


class MovedModule(types.ModuleType):
    """A module's old path: public names are read from the module at its new path."""

    def __init__(self, name: str, target: str) -> None:
        super().__init__(name, f"Moved to {target}; this path is deprecated.")
        self._fastlower_target = target

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # inspect, pickle and friends probe these: never import
            raise AttributeError(name)
        value = getattr(import_module(self._fastlower_target), name)
        _warn_once(self.__name__, self._fastlower_target)
        return value

    def __dir__(self) -> List[str]:
        names = dir(import_module(self._fastlower_target))
        _warn_once(self.__name__, self._fastlower_target)
        return names


def _warn_once(old: str, new: str) -> None:
    with _lock:
        if old in _warned:
            return
        _warned.add(old)
    warnings.warn(f"{old} has moved to {new}; the old path will be removed in a later "
                  "release", DeprecationWarning, stacklevel=3)


def register(package: str) -> None:
    """Put a stand-in at each old path of ``package`` not already imported."""
    for old, new in MOVED.items():
        name = f"{package}.{old}"
        if name not in sys.modules:
            sys.modules[name] = MovedModule(name, f"{package}.{new}")


def resolve(package: str, old: str) -> types.ModuleType:
    """The stand-in at ``package.old`` (``fastlower.shared`` as an attribute)."""
    name = f"{package}.{old}"
    module = sys.modules.get(name)
    if module is None:
        module = sys.modules.setdefault(name, MovedModule(name, f"{package}.{MOVED[old]}"))
    return module
