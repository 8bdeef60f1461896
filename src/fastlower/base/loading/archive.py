"""What a ``.pt2`` archive names before torch rebuilds it: its pytree specs and pickled globals.

``torch.export.save`` writes a zip. Two of its parts name Python types that a
new process must rebuild:

* the program's input and output trees (``module_call_graph[*].signature.in_spec``
  and ``out_spec``, and any other serialized ``TreeSpec``): JSON strings whose
  nodes name a *serialized type name* (``"transformers.modeling_outputs.
  CausalLMOutputWithCrossAttentions"``, ``"collections.namedtuple"`` with the
  namedtuple's own name as context, ...);
* the example inputs (``data/sample_inputs/<model>.pt``), a ``torch.save`` blob
  whose pickle names the classes of the inputs (``__main__.Pair``).

This module reads both without rebuilding anything, and writes a copy of an
archive without its example inputs for when they cannot be unpickled here.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

#: the pytree node type under which torch serializes every namedtuple
NAMEDTUPLE = "collections.namedtuple"
#: node types torch's pytree always knows (its built-in containers)
BUILTIN_NODE_TYPES = frozenset({"builtins.tuple", "builtins.list", "builtins.dict",
                                "collections.OrderedDict", "collections.defaultdict",
                                "collections.deque", NAMEDTUPLE})


@dataclass
class TypeUse:
    """One serialized type name as the archive's trees use it."""

    name: str
    namedtuple: bool  # True: a namedtuple's name (the context of a collections.namedtuple node)
    contexts: List[Optional[str]] = field(default_factory=list)  # each node's dumped context
    children: List[int] = field(default_factory=list)  # each node's number of children
    where: List[str] = field(default_factory=list)  # "input" / "output" / "tree"


@dataclass
class ArchiveContents:
    """The type names an archive's trees and example inputs need."""

    # in order of first use, keyed by the type name ("namedtuple:NAME" for a namedtuple's)
    types: Dict[str, TypeUse] = field(default_factory=dict)
    sample_inputs: Dict[str, bytes] = field(default_factory=dict)  # zip entry -> blob


def is_zip(path: Union[str, os.PathLike]) -> bool:
    return zipfile.is_zipfile(path)


def read(path: Union[str, os.PathLike]) -> ArchiveContents:
    """The serialized type names of every tree in the archive, and its example-input blobs."""
    contents = ArchiveContents()
    with zipfile.ZipFile(path) as archive:
        for info in archive.infolist():
            name = info.filename
            if name.endswith(".json"):
                try:
                    document = json.loads(archive.read(info))
                except (ValueError, UnicodeDecodeError):
                    continue
                for spec, where in _spec_strings(document):
                    _collect(spec, where, contents.types)
            elif _is_sample_inputs(name):
                contents.sample_inputs[name] = archive.read(info)
    return contents


def _is_sample_inputs(entry: str) -> bool:
    parts = entry.split("/")
    return len(parts) >= 3 and parts[-3:-1] == ["data", "sample_inputs"] and entry.endswith(".pt")


def _spec_strings(document: Any, where: str = "tree") -> Iterator[Tuple[str, str]]:
    """Every serialized ``TreeSpec`` string in a JSON document (``[1, {"type": ...}]``)."""
    if isinstance(document, dict):
        for key, value in document.items():
            role = {"in_spec": "input", "out_spec": "output"}.get(key, where)
            if isinstance(value, str):
                if _looks_like_spec(value):
                    yield value, role
            else:
                yield from _spec_strings(value, role)
    elif isinstance(document, list):
        for value in document:
            if isinstance(value, str):
                if _looks_like_spec(value):
                    yield value, where
            else:
                yield from _spec_strings(value, where)


def _looks_like_spec(text: str) -> bool:
    return text.startswith("[") and '"children_spec"' in text


def _collect(spec: str, where: str, types: Dict[str, TypeUse]) -> None:
    try:
        _protocol, schema = json.loads(spec)
    except (ValueError, TypeError):
        return
    stack = [schema]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict):
            continue
        children = node.get("children_spec") or []
        stack.extend(children)
        type_name, context = node.get("type"), node.get("context")
        if type_name is None:
            continue
        if type_name == NAMEDTUPLE and isinstance(context, str):
            use = types.setdefault(f"namedtuple:{context}", TypeUse(context, namedtuple=True))
        elif type_name in BUILTIN_NODE_TYPES:
            continue
        else:
            use = types.setdefault(type_name, TypeUse(type_name, namedtuple=False))
            use.contexts.append(context)
        use.children.append(len(children))
        if where not in use.where:
            use.where.append(where)


def pickled_globals(blob: bytes) -> List[str]:
    """The globals (``module.qualname``) a ``torch.save`` blob needs beyond torch's own."""
    import torch

    if not blob:
        return []
    return list(torch.serialization.get_unsafe_globals_in_checkpoint(io.BytesIO(blob)))


def copy_without_sample_inputs(path: Union[str, os.PathLike],
                               folder: Union[str, os.PathLike]) -> Path:
    """A copy of the archive in ``folder`` whose example-input entries are empty (torch
    then loads the program with ``example_inputs=None``)."""
    target = Path(folder) / Path(path).name
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(target, "w", zipfile.ZIP_STORED) as copy:
        for info in source.infolist():
            data = b"" if _is_sample_inputs(info.filename) else source.read(info)
            copy.writestr(info, data, compress_type=zipfile.ZIP_STORED)
    return target
