"""Paths in a lowering's node ``meta``, keyed relative to base directories (ccache's
``base_dir``, sccache's ``SCCACHE_BASEDIRS``).

A node's ``stack_trace`` names the export script and every model file by absolute
path, so the same checkout at two paths (two CI executors' workspaces, two
developers' homes) would never share a lowering-cache entry. The key writes every
string of a node's ``meta`` (and of a delegate's ``meta``) with each absolute path
below a **base directory** replaced by a marker naming the base (its label) and the
rest of the path: ``/builds/a/repo/export.py`` is keyed as ``<repo>/export.py``.

The bases (:func:`current`), taken when the key is computed:

* ``setting-<i>``: each directory of ``FASTLOWER_CACHE_BASE_DIR``;
* ``site-<i>``, ``user-site``: the site-packages directories of this Python;
* ``prefix``, ``base-prefix``: ``sys.prefix`` and ``sys.base_prefix``;
* ``repo``: the repository root of the running script (the nearest folder above
  ``sys.argv[0]`` holding ``.git``), else the script's folder;
* ``cwd``: the working directory.

Each is taken as given and resolved (``<label>~real``). The longest base a path lies
below wins; of bases at one path, the last in the order above (``cwd~real`` over
``repo``: a process whose script is no file has no ``repo`` base). A string holding a
NUL is keyed as it is.

A hit's programs are the writer's: :func:`localize` rewrites each such string from
the writer's bases (stored in the entry's ``info``) to this process's, which is the
string this caller's own lowering has (its key text is the writer's). An entry whose
delegate payloads, named data or ``.pte`` hold a writer's base path (a backend that
embeds source paths) is ``path_bound``: it is served only to a process with the
writer's bases, anything else is a miss.
"""

from __future__ import annotations

import functools
import os
import re
import site
import sys
import sysconfig
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import torch

from .. import settings

Bases = Tuple[Tuple[str, str], ...]  # (label, absolute directory), in the order above
_MARK = "\0"
_RAW = "\0raw\0"


@functools.lru_cache(maxsize=None)
def _repo_root(script: str) -> str:
    if not script or not os.path.isfile(script):
        return ""
    folder = Path(os.path.abspath(script)).parent
    for candidate in (folder, *folder.parents):
        if (candidate / ".git").exists():
            return str(candidate)
    return str(folder)


@functools.lru_cache(maxsize=None)
def _site_dirs() -> Tuple[str, ...]:
    found: List[str] = []
    for path in [*getattr(site, "getsitepackages", lambda: [])(),
                 sysconfig.get_paths().get("purelib", ""),
                 sysconfig.get_paths().get("platlib", "")]:
        if path and path not in found:
            found.append(path)
    return tuple(found)


def current() -> Bases:
    """This process's base directories, as the key takes them now."""
    named: List[Tuple[str, str]] = []
    named += [(f"setting-{i}", str(p)) for i, p in enumerate(settings.cache_base_dirs())]
    named += [(f"site-{i}", p) for i, p in enumerate(_site_dirs())]
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else ""
    named += [("user-site", user_site or ""), ("prefix", sys.prefix),
              ("base-prefix", sys.base_prefix),
              ("repo", _repo_root(sys.argv[0] if sys.argv else "")), ("cwd", os.getcwd())]
    bases: List[Tuple[str, str]] = []
    for label, path in named:
        if not path:
            continue
        given = os.path.normpath(os.path.abspath(path))
        for variant, value in ((label, given), (f"{label}~real", os.path.realpath(given))):
            if value != os.sep:
                bases.append((variant, value))
    return tuple(bases)


class PathMap:
    """Strings keyed relative to ``bases`` (:meth:`relative`) and back (:meth:`absolute`)."""

    def __init__(self, bases: Bases) -> None:
        self.bases = bases
        order = sorted(range(len(bases)), key=lambda i: (-len(bases[i][1]), i))
        # of equal paths, the last base's label: the working directory's (always there)
        # over the repository's (absent where the script is no file: python -c, a pytest
        # worker), so that both processes key the checkout alike
        self._marks: Dict[str, str] = {bases[i][1] + os.sep: f"{_MARK}{bases[i][0]}{_MARK}{os.sep}"
                                       for i in order}
        self._paths = {f"{_MARK}{label}{_MARK}{os.sep}": path + os.sep
                       for label, path in reversed(bases)}  # a label's first path wins
        self._below = _alternation(self._marks, r"(?<![\w.~/\\-])")
        self._memo: Dict[str, str] = {}

    def relative(self, text: str) -> str:
        """``text`` with each path below a base written as ``<mark>/rest``."""
        found = self._memo.get(text)
        if found is None:
            if _MARK in text:
                found = _RAW + text
            elif self._below is None or os.sep not in text:
                found = text
            else:
                found = self._below.sub(lambda m: self._marks[m.group(0)], text)
            self._memo[text] = found
        return found

    def absolute(self, text: str) -> Optional[str]:
        """The string :meth:`relative` made ``text`` from with these bases; None when it
        names a base these bases lack."""
        if text.startswith(_RAW):
            return text[len(_RAW):]
        if _MARK not in text:
            return text
        pattern = _alternation(self._paths, "")
        result = pattern.sub(lambda m: self._paths[m.group(0)], text) if pattern else text
        return None if _MARK in result else result


def _alternation(literals: Iterable[str], before: str) -> Optional["re.Pattern[str]"]:
    ordered = sorted(literals, key=len, reverse=True)
    if not ordered:
        return None
    return re.compile(before + "(?:" + "|".join(map(re.escape, ordered)) + ")")


def as_info(bases: Bases) -> List[List[str]]:
    return [[label, path] for label, path in bases]


def from_info(value: Any) -> Optional[Bases]:
    """The bases an entry's ``info`` holds, or None when it holds none (or garbage)."""
    if not isinstance(value, list):
        return None
    if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, str) for x in p)
               for p in value):
        return None
    return tuple((label, path) for label, path in value)


# --- rewriting a hit's programs ---------------------------------------------------------------

class Unlocalizable(Exception):
    """A hit's string names a base of the writer's this process does not have."""


def _rewrite(value: Any, change: Callable[[str], str]) -> Any:
    """``value`` with each string reached through lists, tuples and dict values (what
    ``ProgramCanonical.meta_value`` writes through) changed by ``change``; ``value``
    itself when nothing changed."""
    if isinstance(value, str):
        return change(value)
    if isinstance(value, (list, tuple)):
        items = [_rewrite(v, change) for v in value]
        if all(a is b for a, b in zip(items, value)):
            return value
        if type(value) in (list, tuple):
            return type(value)(items)
        if hasattr(value, "_fields"):  # a named tuple
            return type(value)(*items)
        raise Unlocalizable(f"a path inside a {type(value).__name__}")
    if isinstance(value, dict):
        changed = {k: _rewrite(v, change) for k, v in value.items()}
        if all(changed[k] is v for k, v in value.items()):
            return value
        if type(value) is not dict:
            raise Unlocalizable(f"a path inside a {type(value).__name__}")
        return changed
    return value


def localize(info: Dict[str, Any], programs: Dict[str, Any]) -> Optional[str]:
    """Rewrites a hit's ``programs`` (in place) from the writer's bases (``info``) to this
    process's; why they cannot be (the entry is then a miss), else None."""
    from ..preprocess.keys import _SKIPPED_META

    writer = from_info(info.get("bases"))
    here = current()
    if writer is None:
        return "the entry does not say where it was written"
    if writer == here:
        return None
    if info.get("path_bound"):
        return "written at other paths, and its delegate payloads name them"
    theirs, ours = PathMap(writer), PathMap(here)
    memo: Dict[str, str] = {}

    def change(text: str) -> str:
        found = memo.get(text)
        if found is None:
            found = ours.absolute(theirs.relative(text))
            if found is None:
                raise Unlocalizable(f"{text[:80]!r} names a base this process lacks")
            memo[text] = found
        return found if found != text else text

    try:
        for meta in each_meta(programs.values()):
            for key in list(meta):
                if key not in _SKIPPED_META:
                    new = _rewrite(meta[key], change)
                    if new is not meta[key]:
                        meta[key] = new
    except Unlocalizable as why:
        return str(why)
    return None


def info_of(programs: Dict[str, Any]) -> Dict[str, Any]:
    """What an entry's ``info`` says about paths: the writer's bases, and whether a
    delegate payload of ``programs`` names one (``path_bound``)."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    bases = current()
    needles = {(path + os.sep).encode("utf-8", "surrogateescape") for _, path in bases}
    bound = False
    todo = [program.graph_module for program in programs.values()]
    while todo and not bound:
        for module in todo.pop().modules():
            if isinstance(module, LoweredBackendModule):
                data = bytes(module.processed_bytes)
                bound = bound or any(needle in data for needle in needles)
                todo.append(module.original_module.graph_module)
    return {"bases": as_info(bases), "path_bound": bound}


def each_meta(programs: Iterable[Any]) -> Iterable[Dict[str, Any]]:
    """Every ``meta`` dict the key writes through ``meta_value``: each node's (nested
    graphs and delegates' programs included, as the key walks them) and each delegate's."""
    from executorch.exir.lowered_backend_module import LoweredBackendModule

    todo = [program.graph_module for program in programs]
    while todo:
        gm = todo.pop()
        for node in gm.graph.nodes:
            yield node.meta
            if node.op != "get_attr":
                continue
            obj: Any = gm
            for part in str(node.target).split("."):
                obj = getattr(obj, part, None)
            if isinstance(obj, LoweredBackendModule):
                yield obj.meta
                todo.append(obj.original_module.graph_module)
            elif isinstance(obj, torch.fx.GraphModule):
                todo.append(obj)
