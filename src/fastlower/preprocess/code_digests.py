"""Digests of the code a lowering runs, for the cache keys: a package's or a file's source
(:func:`directory_digest`), and the code behind the operators a program calls
(:func:`operator_sources`, in the lowering cache's, ``to_executorch``'s and each
partition's ``preprocess`` key).

The edge stage runs each operator's decomposition (its CompositeImplicitAutograd
kernel) and each operator's fake kernel (register_fake, Meta, CompositeExplicitAutograd)
to rebuild shapes; ``to_executorch`` runs the fake kernels again. A program's text names
an operator, not that code. torch's and ExecuTorch's operators are fixed by the versions
in the key; any other operator (a user's ``torch.library`` operator, torchao's) is keyed
here by the source it is registered from, so that editing a decomposition or a fake
kernel, or upgrading torchao, is a miss, not a stale hit:

* every place the dispatcher names for the operator's kernels (``registered at
  FILE:LINE``; a ``torch.library.Library``'s operators are named at the library's
  creation), and the functions of a ``torch.library.custom_op`` and of a
  ``register_fake``: a file inside a package keys that top-level package (every file;
  an ExecuTorch backend's package alone), a file outside one keys itself;
* a kernel compiled into a library (a C++ path this machine does not have) by that
  path and line, and by the content of every operator library torch loaded from outside
  torch and ExecuTorch (``torch.ops.load_library``);
* code with no file (``<stdin>``, a notebook cell) cannot be keyed
  (:class:`NoSourceFile`): the call or the partition is not cached.

Not covered: a Python kernel registered on one of torch's own operators
(``aten.*.py_impl``) or a decomposition added to torch's tables at run time.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Iterable, List, Optional, Set, Tuple

import torch
import xxhash
from torch.export import ExportedProgram


@functools.lru_cache(maxsize=None)
def directory_digest(root: Path, pattern: str = "*") -> str:
    """Digest of every file below ``root`` whose name matches ``pattern`` (or of the file
    ``root``), with paths relative to its parent; once per process
    (:func:`clear_directory_digests`)."""
    hasher = xxhash.xxh3_128()
    files = [root] if root.is_file() else sorted(
        p for p in root.rglob(pattern) if p.is_file() and "__pycache__" not in p.parts)
    for path in files:
        hasher.update(str(path.relative_to(root.parent)).encode() + b"\0")
        hasher.update(path.read_bytes())
        hasher.update(b"\0")
    return hasher.hexdigest()


def clear_directory_digests() -> None:
    """Forget the per-process digests (after editing source in place)."""
    for cached in (directory_digest, unpinned_sources, _sources):
        cached.cache_clear()


@functools.lru_cache(maxsize=None)
def unpinned_sources(packages: Tuple[str, ...] = ("torch", "executorch")) -> str:
    """A digest of the Python files of each of ``packages`` whose code its version does not
    pin: an editable install, or code imported from elsewhere than its distribution's
    folder (a checkout on ``PYTHONPATH``); '' for each installed from a wheel. A library
    compiled into such a checkout is pinned only by its version."""
    import importlib.util
    import json
    from importlib import metadata

    found = []
    for name in packages:
        spec = importlib.util.find_spec(name)
        folders = list(spec.submodule_search_locations or []) if spec is not None else []
        if not folders:
            continue
        folder = Path(folders[0]).resolve()
        try:
            dist = metadata.distribution(name)
            direct = json.loads(dist.read_text("direct_url.json") or "{}")
            editable = bool(direct.get("dir_info", {}).get("editable"))
            installed = Path(str(dist.locate_file(name))).resolve()
        except (metadata.PackageNotFoundError, ValueError):
            editable, installed = True, Path()
        if editable or installed != folder:
            found.append(f"{name}:{directory_digest(folder, '*.py')}")
    return ";".join(found)


class NoSourceFile(Exception):
    """An operator's code has no file to key (``<stdin>``, a notebook cell)."""


_REGISTERED = re.compile(r"registered at (.+?):(\d+)\b")
_TORCH_NAMESPACES = {"aten", "prim", "prims", "higher_order"}


def operator_sources(programs: Iterable[ExportedProgram]) -> str:
    """``namespace::name=source;...`` for every operator outside torch's namespaces that the
    programs' graphs (control-flow branches included) call, sorted."""
    names: Set[str] = set()
    for program in programs:
        for module in program.graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                names.update(filter(None, map(_qualname, module.graph.nodes)))
    compiled = False
    parts = []
    for name in sorted(names):
        places, is_compiled = _sources(name)
        compiled |= is_compiled
        parts.append(f"{name}={','.join(places)}")
    if compiled:
        parts.append("libraries=" + ",".join(_loaded_libraries()))
    return ";".join(parts)


def _qualname(node: torch.fx.Node) -> Optional[str]:
    if node.op != "call_function":
        return None
    target: Any = node.target
    if not isinstance(target, torch._ops.OpOverload):
        target = getattr(target, "_op", None)  # an Edge operator: the ATen one it wraps
        if not isinstance(target, torch._ops.OpOverload):
            return None
    namespace = target.namespace
    return None if namespace in _TORCH_NAMESPACES else target._schema.name


@functools.lru_cache(maxsize=None)
def _sources(name: str) -> Tuple[Tuple[str, ...], bool]:
    """The keyed source of each place ``name``'s code is registered from, and whether one
    is compiled code; once per process, as the digests (a preprocess key asks it for every
    partition)."""
    places: Set[str] = set()
    compiled = False
    try:
        dump = torch._C._dispatch_dump(name)
    except RuntimeError:
        dump = ""
    found = _REGISTERED.findall(dump) + [(f, "0") for f in _python_files(name)]
    for path, line in found:
        if path.startswith("<"):
            raise NoSourceFile(f"operator {name} is registered by code with no source file "
                              f"({path}:{line}); its decomposition and shapes cannot be keyed")
        file = Path(path)
        if file.is_file():
            places.add(_file_source(file.resolve()))
        else:
            places.add(f"compiled:{path}:{line}")
            compiled = True
    return tuple(sorted(p for p in places if p)), compiled


def _python_files(name: str) -> List[str]:
    """Files of a ``custom_op``'s functions and of a ``register_fake`` kernel."""
    from torch._library import custom_ops, simple_registry

    functions: List[Any] = []
    definition = custom_ops.OPDEFS.get(name)
    if definition is not None:
        functions += [definition._init_fn, definition._abstract_fn,
                      *definition._backend_fns.values()]
    entry = simple_registry.singleton.get(name)  # get: find() would add an entry
    for kernel in getattr(getattr(entry, "fake_impl", None), "kernels", ()):
        functions.append(getattr(kernel, "func", None))
        source = str(getattr(kernel, "source", ""))
        if source:
            functions.append(source.rsplit(":", 1)[0])
    files = []
    for function in functions:
        if isinstance(function, str):
            files.append(function)
            continue
        code = getattr(function, "__code__", None)
        if code is not None:
            files.append(code.co_filename)
    return files


def _file_source(file: Path) -> str:
    """'' for torch's, ExecuTorch's (outside its backends) and the standard library's files;
    else the digest of the file's top-level package (an ExecuTorch backend's own package),
    or of the file alone."""
    if any(_inside(file, root) for root in _versioned_roots()):
        backends = _executorch_backends()
        if backends is None or not _inside(file, backends):
            return ""
        package = _package_under(file, backends)
        return f"{package.name}:{directory_digest(package)}"
    top = file
    while (top.parent / "__init__.py").is_file():
        top = top.parent
    return f"{top.name}:{directory_digest(top)}"


def _inside(file: Path, root: Path) -> bool:
    return root == file or root in file.parents


def _package_under(file: Path, root: Path) -> Path:
    return root / file.relative_to(root).parts[0]


@functools.lru_cache(maxsize=None)
def _versioned_roots() -> List[Path]:
    import executorch.exir

    roots = [Path(torch.__file__).resolve().parent,
             Path(executorch.exir.__file__).resolve().parent.parent]
    stdlib = Path(functools.__file__).resolve().parent
    return roots + [stdlib]


def _executorch_backends() -> Optional[Path]:
    backends = _versioned_roots()[1] / "backends"
    return backends if backends.is_dir() else None


def _loaded_libraries() -> List[str]:
    """The content digest of each operator library torch loaded from outside torch and
    ExecuTorch."""
    found = []
    for path in sorted(getattr(torch.ops, "loaded_libraries", ())):
        file = Path(path).resolve()
        if file.is_file() and not any(_inside(file, r) for r in _versioned_roots()[:2]):
            found.append(f"{file.name}:{directory_digest(file)}")
    return found

