"""Conformance plugin: run ExecuTorch's OWN shipped backend tests against fastlower.

What it does
------------
* The anchor files in this directory (``test_reference_suite.py``,
  ``test_xnnpack_subset.py``) are collected by ``SuiteAnchor``, which, besides
  the anchor's own sanity tests, yields one ``ShippedModule`` per shipped test
  module listed in ``suites.py``.  Shipped modules are imported by their dotted
  name from site-packages (``executorch.exir.backend.test.test_utils``...), so
  nodeids look like::

      tests/conformance/test_reference_suite.py::executorch.exir.backend.test.test_utils::TestUtils::test_x

* Every binding of the reference ``to_backend`` / ``validation_disabled`` /
  ``disable_validation`` is swapped for fastlower's while those tests run: the
  names in ``executorch.exir.backend.backend_api`` itself and in every module of
  ``sys.modules`` (under any attribute name) whose attribute *is* the reference
  object -- ``executorch.exir.program._program``, ``executorch.export.stages``,
  the test harness, the test modules themselves...  Modules imported while the
  swap is active are swept before each test, and everything is restored after
  each shipped module (including late importers that picked up fastlower's
  objects from the patched ``backend_api``).

  Never swapped: ``fastlower`` / ``fastlower.*`` (so fastlower may keep a handle
  on the reference for fallbacks) and any module defining
  ``__fastlower_conformance_keep_reference__ = True``.

* ``FASTLOWER_CONFORMANCE_IMPL`` selects the implementation:
  ``fastlower`` (default) or ``reference`` (no swap: ExecuTorch's own
  ``to_backend``).

* Known environmental failures of the reference on this machine are listed in
  ``reference_failures.py``; they are marked ``xfail(strict=False)`` with the
  reason shown AND a failure signature (exception type + regex): a failure with
  a different signature is reported as a real failure.  Whole modules that
  cannot be imported for environmental reasons are skipped with the reason.
  Tests listed in ``reference_failures.SLOW`` get the ``slow`` marker.

* All shipped tests get the ``conformance`` marker.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

import pytest

HERE = Path(__file__).resolve().parent
IMPL_ENV = "FASTLOWER_CONFORMANCE_IMPL"
IMPLS = ("fastlower", "reference")
KEEP_REFERENCE_FLAG = "__fastlower_conformance_keep_reference__"
SWAPPED_NAMES = ("to_backend", "validation_disabled", "disable_validation")


def _load_local(name: str) -> ModuleType:
    """Load a data module of this directory without relying on sys.path layout."""
    modname = f"_fastlower_conformance_{name}"
    if modname in sys.modules:
        return sys.modules[modname]
    spec = importlib.util.spec_from_file_location(modname, HERE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return mod


suites = _load_local("suites")
reference_failures = _load_local("reference_failures")

# Reference objects, captured before any swap. Kept inside a dict (never as
# module attributes) so that the sys.modules sweep does not rebind them.
import executorch.exir.backend.backend_api as _backend_api  # noqa: E402

_REFERENCE: dict[str, Any] = {name: getattr(_backend_api, name) for name in SWAPPED_NAMES}

# Modules known to bind the reference objects; imported up-front so the swap
# reaches them even if no shipped test imported them yet.
_PREIMPORT = (
    "executorch.exir.backend.backend_api",
    "executorch.exir.program._program",
    "executorch.exir.program",
    "executorch.export.stages",
    "executorch.backends.test.harness.stages.partition",
)

_RAN_SHIPPED = pytest.StashKey[bool]()

ANCHORS: dict[str, str] = {
    "test_reference_suite.py": "EXIR_BACKEND_SUITE",
    "test_xnnpack_subset.py": "XNNPACK_SUBSET",
    "test_export_recipes.py": "EXPORT_RECIPES",
    "test_xnnpack_ops.py": "XNNPACK_OPS",
}


# --------------------------------------------------------------------------- #
# implementation selection
# --------------------------------------------------------------------------- #
def selected_impl_name() -> str:
    value = os.environ.get(IMPL_ENV, "fastlower").strip().lower() or "fastlower"
    if value not in IMPLS:
        raise pytest.UsageError(f"{IMPL_ENV}={value!r}: expected one of {IMPLS}")
    return value


def _resolve_impl(name: str) -> dict[str, Any]:
    """Return {swapped name: object} for the selected implementation."""
    if name == "reference":
        return dict(_REFERENCE)
    try:
        fastlower = importlib.import_module("fastlower")
    except Exception as exc:  # pragma: no cover - depends on install state
        raise RuntimeError(
            f"{IMPL_ENV}=fastlower but `import fastlower` failed: {exc!r}. "
            f"Install the project (pip install '.[test]') or run with {IMPL_ENV}=reference."
        ) from exc
    missing = [n for n in SWAPPED_NAMES if not hasattr(fastlower, n)]
    if missing:
        raise RuntimeError(
            f"{IMPL_ENV}=fastlower but fastlower does not export {missing} "
            "(fastlower loaded from "
            f"{getattr(fastlower, '__file__', None) or list(getattr(fastlower, '__path__', []))}). "
            f"Run with {IMPL_ENV}=reference to exercise the plugin against ExecuTorch itself."
        )
    impl = {n: getattr(fastlower, n) for n in SWAPPED_NAMES}
    for n, obj in impl.items():
        if obj is _REFERENCE[n]:
            raise RuntimeError(f"fastlower.{n} IS the reference object; nothing would be tested")
    return impl


# --------------------------------------------------------------------------- #
# binding swap
# --------------------------------------------------------------------------- #
def _module_excluded(modname: str, mod: ModuleType) -> bool:
    if modname == "fastlower" or modname.startswith("fastlower."):
        return True
    # Only ExecuTorch's own modules (its library and its shipped tests) are
    # swapped.  Our own test modules hold deliberate handles on both
    # implementations (tests.differential compares them): a sweep must never
    # rebind those.
    if not (modname == "executorch" or modname.startswith("executorch.")):
        return True
    if modname.startswith("_fastlower_conformance_"):
        return True
    d = getattr(mod, "__dict__", None)
    return not isinstance(d, dict) or bool(d.get(KEEP_REFERENCE_FLAG, False))


class BindingSwap:
    """Rebind every module-level reference of the reference objects to ``impl``."""

    def __init__(self, impl: dict[str, Any]):
        self.pairs = [(_REFERENCE[n], impl[n]) for n in SWAPPED_NAMES
                      if impl[n] is not _REFERENCE[n]]
        self._ref_to_new = {id(ref): (ref, new) for ref, new in self.pairs}
        self._new_to_ref = {id(new): (new, ref) for ref, new in self.pairs}
        self.patched: list[tuple[str, str]] = []  # (module, attribute)
        self._swept: set[int] = set()
        self.active = False

    @property
    def is_noop(self) -> bool:
        return not self.pairs

    def _rebind(self, table: dict[int, tuple[Any, Any]],
                only_new_modules: bool) -> list[tuple[str, str]]:
        done = []
        if not table:
            return done
        for modname, mod in list(sys.modules.items()):
            if mod is None:
                continue
            if only_new_modules and id(mod) in self._swept:
                continue
            self._swept.add(id(mod))
            if _module_excluded(modname, mod):
                continue
            d = mod.__dict__
            for attr, val in list(d.items()):
                hit = table.get(id(val))
                if hit is not None and val is hit[0]:
                    setattr(mod, attr, hit[1])
                    done.append((modname, attr))
        return done

    def install(self) -> None:
        for name in _PREIMPORT:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
        self._swept.clear()
        self.patched = self._rebind(self._ref_to_new, only_new_modules=False)
        self.active = True

    def sweep_new_modules(self) -> None:
        """Swap bindings in modules imported since the last sweep."""
        if self.active:
            self.patched += self._rebind(self._ref_to_new, only_new_modules=True)

    def uninstall(self) -> None:
        # Full sweep the other way: also restores late importers that copied
        # fastlower's objects out of the patched backend_api.
        self._swept.clear()
        self._rebind(self._new_to_ref, only_new_modules=False)
        self._swept.clear()
        self.active = False


def reference_bindings_left() -> list[str]:
    """(module.attr) of non-excluded modules still bound to a reference object."""
    ids = {id(v): v for v in _REFERENCE.values()}
    left = []
    for modname, mod in list(sys.modules.items()):
        if mod is None or _module_excluded(modname, mod):
            continue
        for attr, val in list(mod.__dict__.items()):
            if id(val) in ids and ids[id(val)] is val:
                left.append(f"{modname}.{attr}")
    return left


@pytest.fixture(scope="session")
def conformance_impl() -> dict[str, Any]:
    """{'name': 'fastlower'|'reference', 'objects': {to_backend: ..., ...}}."""
    name = selected_impl_name()
    try:
        objects = _resolve_impl(name)
    except RuntimeError as exc:
        pytest.fail(str(exc), pytrace=False)
    return {"name": name, "objects": objects}


@pytest.fixture(scope="module", autouse=True)
def _swap_to_backend(conformance_impl) -> Iterator[BindingSwap]:
    swap = BindingSwap(conformance_impl["objects"])
    swap.install()
    try:
        yield swap
    finally:
        swap.uninstall()


@pytest.fixture(autouse=True)
def _sweep_late_imports(_swap_to_backend: BindingSwap) -> Iterator[None]:
    _swap_to_backend.sweep_new_modules()
    yield


# --------------------------------------------------------------------------- #
# collection of the shipped test modules
# --------------------------------------------------------------------------- #
def _known_failure_mark(key: str) -> pytest.MarkDecorator | None:
    reason = reference_failures.REFERENCE_FAILURES.get(key)
    if reason is None:
        return None
    sig = reference_failures.SIGNATURES.get(reason)
    kwargs: dict[str, Any] = {"reason": f"[reference fails here too] {reason}", "strict": False}
    if sig is not None:
        exc_types, pattern = sig
        kwargs["raises"] = pytest.RaisesExc(exc_types, match=pattern)
    return pytest.mark.xfail(**kwargs)


class ShippedModule(pytest.Module):
    """A shipped ExecuTorch test module, imported by dotted name from site-packages."""

    def _getobj(self):
        try:
            return importlib.import_module(self.name)
        except ImportError as exc:
            reason = reference_failures.REFERENCE_FAILURES.get(self.name)
            sig = reference_failures.SIGNATURES.get(reason) if reason else None
            if reason and (sig is None or re.search(sig[1], str(exc))):
                pytest.skip(f"[reference fails here too] {reason} ({exc})", allow_module_level=True)
            raise


class SuiteAnchor(pytest.Module):
    """An anchor file: its own tests plus the shipped modules of one suite."""

    suite_attr: str = ""

    def collect(self):
        yield from super().collect()
        for modname in getattr(suites, self.suite_attr):
            spec = importlib.util.find_spec(modname)
            if spec is None or spec.origin is None:
                raise self.CollectError(f"shipped test module {modname} not found in site-packages")
            yield ShippedModule.from_parent(
                self, path=Path(spec.origin), name=modname, nodeid=f"{self.nodeid}::{modname}"
            )


def pytest_pycollect_makemodule(module_path: Path, parent):
    attr = ANCHORS.get(module_path.name)
    if attr is None or module_path.resolve().parent != HERE:
        return None
    anchor = SuiteAnchor.from_parent(parent, path=module_path)
    anchor.suite_attr = attr
    return anchor


def _suite_of(item: pytest.Item) -> str:
    node = item
    while node is not None and not isinstance(node, SuiteAnchor):
        node = node.parent
    return node.suite_attr if node is not None else ""


def shipped_key(item: pytest.Item) -> str | None:
    """'executorch.x.y.test_mod::Class::test' for shipped tests, else None."""
    node = item
    while node is not None and not isinstance(node, ShippedModule):
        node = node.parent
    if node is None:
        return None
    return str(item.nodeid)[len(str(node.nodeid)) - len(node.name):]


@pytest.hookimpl(tryfirst=True)  # before the mark plugin applies -m
def pytest_collection_modifyitems(session, config, items):
    selected, deselected = [], []
    only = getattr(suites, "ONLY", {})
    for item in items:
        key = shipped_key(item)
        if key is None:
            selected.append(item)
            continue
        modname, _, rest = key.partition("::")
        slow_suite = getattr(suites, "SLOW_SUITES", {}).get(_suite_of(item))
        wanted = None if slow_suite else only.get(modname)
        if wanted is not None and not any(rest == w or rest.startswith(w + "::") for w in wanted):
            deselected.append(item)
            continue
        item.add_marker(pytest.mark.conformance)
        mark = _known_failure_mark(key)
        if mark is not None:
            item.add_marker(mark)
        slow_reason = slow_suite or reference_failures.SLOW.get(key)
        if slow_reason:
            item.add_marker(pytest.mark.slow(reason=slow_reason))
        selected.append(item)
    config.stash[_RAN_SHIPPED] = any(shipped_key(i) is not None for i in selected)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def pytest_report_header(config):
    try:
        name = selected_impl_name()
    except pytest.UsageError as exc:
        return f"fastlower conformance: {exc}"
    return f"fastlower conformance: {IMPL_ENV}={name} (swaps {', '.join(SWAPPED_NAMES)})"


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not config.stash.get(_RAN_SHIPPED, False):
        return
    try:
        name = selected_impl_name()
    except pytest.UsageError:
        return
    origin = ""
    if name == "fastlower":
        mod = sys.modules.get("fastlower")
        core = sys.modules.get("fastlower._core")
        origin = (f" from {getattr(mod, '__file__', '?')}, "
                  f"native core {'loaded' if core else 'NOT loaded'}")
    terminalreporter.write_line(
        f"fastlower conformance: shipped ExecuTorch tests ran against {name}{origin} "
        f"({IMPL_ENV}={os.environ.get(IMPL_ENV, '')!r})"
    )
