"""Every patch ``accelerated()`` needs, in one registry: installed once, removable.

A patch replaces one attribute of a class or module (``owner.name``) with fastlower's
version.  Each replacement dispatches on :func:`fastlower.partitioners.is_active` (a
context variable, so threads and asyncio tasks never see each other's switch) and runs
the original otherwise, so an installed patch is inert outside ``accelerated()``.

Two kinds of entries:

* :class:`Patch`: one attribute, known in advance (a method of torch.fx's ``Node``, the
  ``propose_partitions`` of a partitioner class...).  ``module`` names the module that
  defines the owner: the patch is installed once that module has been imported by
  someone (fastlower never imports a backend to patch it).
* :class:`Rebinding`: a function that other modules imported by name
  (``from torch.fx.passes.utils.source_matcher_utils import get_source_partitions``);
  every module global bound to the original function is rebound, including modules
  imported later (re-scanned on each outermost ``accelerated()`` entry).

``install()`` is idempotent and thread-safe; ``uninstall()`` puts every original
binding back (a binding someone else replaced in the meantime is left alone) and
bumps :data:`generation`, which callers use to drop state built while installed.
"""

from __future__ import annotations

import logging
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple

log = logging.getLogger("fastlower.partitioners")

_MISSING = object()


@dataclass
class Patch:
    """``owner_path.name = replacement`` while installed (``owner_path``: ``module:Qual.Name``)."""

    module: str
    qualname: str
    name: str
    make: Callable[[Any], Any]  # original (or None when absent) -> replacement
    purpose: str
    owner: Any = field(default=None, repr=False)
    original: Any = field(default=_MISSING, repr=False)
    replacement: Any = field(default=None, repr=False)

    @property
    def target(self) -> str:
        return f"{self.module}.{self.qualname + '.' if self.qualname else ''}{self.name}"


@dataclass
class Rebinding:
    """Every module global bound to ``original`` is rebound to ``replacement``."""

    original: Callable[..., Any]
    replacement: Callable[..., Any]
    purpose: str
    bound: List[Tuple[Any, str]] = field(default_factory=list, repr=False)
    scanned: set = field(default_factory=set, repr=False)

    @property
    def target(self) -> str:
        return f"{self.original.__module__}.{self.original.__qualname__} (every module binding)"


_lock = threading.RLock()
_patches: List[Patch] = []
_rebindings: List[Rebinding] = []
_installed = False
_modules_seen = 0
generation = 0  # bumped by every uninstall()


def register(patch: Patch) -> Patch:
    with _lock:
        _patches.append(patch)
        if _installed:
            _apply(patch)
    return patch


def register_rebinding(rebinding: Rebinding) -> Rebinding:
    with _lock:
        _rebindings.append(rebinding)
        if _installed:
            _rebind(rebinding)
    return rebinding


def _resolve_owner(patch: Patch) -> Optional[Any]:
    module = sys.modules.get(patch.module)
    if module is None:
        return None
    owner: Any = module
    for part in filter(None, patch.qualname.split(".")):
        owner = getattr(owner, part, None)
        if owner is None:
            return None
    return owner


def _apply(patch: Patch) -> None:
    if patch.owner is not None:
        return
    owner = _resolve_owner(patch)
    if owner is None:
        return  # its module is not imported (yet): retried on the next install()
    original = vars(owner).get(patch.name, _MISSING)
    patch.replacement = patch.make(None if original is _MISSING else original)
    patch.owner, patch.original = owner, original
    setattr(owner, patch.name, patch.replacement)


def _rebind(rebinding: Rebinding) -> None:
    for module_name, module in list(sys.modules.items()):
        if module_name in rebinding.scanned or module is None:
            continue
        if module_name == "fastlower" or module_name.startswith("fastlower."):
            continue  # fastlower keeps the originals it calls
        if getattr(getattr(module, "__spec__", None), "_initializing", False):
            continue  # still being imported: its bindings may not exist yet; next time
        rebinding.scanned.add(module_name)
        try:
            namespace = vars(module)
        except TypeError:
            continue
        for name, value in list(namespace.items()):
            # a module imported since the last scan may have copied the replacement
            # from a rebound module: uninstall() must put the original back there too
            if value is rebinding.original or value is rebinding.replacement:
                namespace[name] = rebinding.replacement
                rebinding.bound.append((module, name))


def install() -> None:
    """Install every registered patch whose owner's module is imported (idempotent);
    rebind the functions in modules imported since the last call."""
    global _installed, _modules_seen
    if _installed and len(sys.modules) == _modules_seen:
        return
    with _lock:
        for patch in _patches:
            _apply(patch)
        for rebinding in _rebindings:
            _rebind(rebinding)
        _modules_seen = len(sys.modules)
        _installed = True


def uninstall() -> None:
    """Restore every original binding fastlower replaced (idempotent)."""
    global _installed, generation, _modules_seen
    with _lock:
        for patch in reversed(_patches):
            if patch.owner is None:
                continue
            if vars(patch.owner).get(patch.name, _MISSING) is patch.replacement:
                if patch.original is _MISSING:
                    delattr(patch.owner, patch.name)
                else:
                    setattr(patch.owner, patch.name, patch.original)
            else:
                log.warning("%s was replaced by someone else after fastlower patched it; "
                            "leaving it as it is", patch.target)
            patch.owner, patch.original, patch.replacement = None, _MISSING, None
        for rebinding in _rebindings:
            # every module, not only those rebound: one imported since the last scan may
            # have copied the replacement from a rebound module
            for module_name, module in list(sys.modules.items()):
                if (module is None or module_name == "fastlower"
                        or module_name.startswith("fastlower.")):
                    continue
                try:
                    namespace = vars(module)
                except TypeError:
                    continue
                for name, value in list(namespace.items()):
                    if value is rebinding.replacement:
                        namespace[name] = rebinding.original
            rebinding.bound.clear()
            rebinding.scanned.clear()
        _installed = False
        _modules_seen = 0
        generation += 1


def is_installed() -> bool:
    return _installed


def installed_patches() -> List[str]:
    """What is patched now, one line per binding (for the README's list and for tests)."""
    with _lock:
        lines = [f"{p.target}: {p.purpose}" for p in _patches if p.owner is not None]
        for r in _rebindings:
            lines += [f"{module.__name__}.{name}: {r.purpose}" for module, name in r.bound]
        return lines


def registered() -> List[Dict[str, str]]:
    """Every registered entry (installed or not): target and purpose."""
    with _lock:
        return ([{"target": p.target, "purpose": p.purpose} for p in _patches]
                + [{"target": r.target, "purpose": r.purpose} for r in _rebindings])
