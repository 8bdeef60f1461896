"""Load any ``.pt2`` saved with ``torch.export.save``, whatever types its trees name.

``torch.export.load`` must rebuild a program's input and output trees, and
fails in a new process when they name a type it cannot find: a Hugging Face
``ModelOutput`` whose module is not imported yet, a dataclass or namedtuple
defined in the exporting script, a custom container. A lowering does not need
those types: ExecuTorch flattens them, and the ``.pte`` takes and returns the
leaves in order.

:func:`load_program` (and :func:`load`, which also says what it did):

1. imports the modules the caller names (``imports=``; the CLI's ``--import``),
   for types they register;
2. reads the archive's trees without rebuilding them (``archive``) and, for each
   type name no pytree registration knows, imports the type's module and uses
   the real type when that can be done faithfully (``resolve``);
3. stands in a generic container for every other type, keeping the saved
   structure (keys or fields, their order, the dumped context) so the program
   given to the backends, and the ``.pte``, are the same as with the real type
   (``standins``); logs one warning per replaced type;
4. loads the program with ``torch.export.load``; example inputs that name
   classes not found here are unpickled with the stand-ins (``inputs``), or
   dropped (``example_inputs`` None) when even that fails.
"""

from __future__ import annotations

import importlib
import logging
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Sequence, Tuple, Union

from . import archive, standins
from .notes import describe_replacements, replaced_types
from .resolve import Resolution, find_class, resolve

if TYPE_CHECKING:  # pragma: no cover
    from torch.export import ExportedProgram

log = logging.getLogger("fastlower.base.loading")

__all__ = ["load_program", "load", "LoadedProgram", "Replacement", "ProgramLoadError",
           "replaced_types", "describe_replacements"]

#: what the user can do when a program still cannot be loaded
ADVICE = ("import the module that defines and registers its types first (`--import MODULE` on "
          "the command line, `imports=[...]` in fastlower.load_program), or export a wrapper "
          "that returns tensors")


class ProgramLoadError(ValueError):
    """A file that is not a loadable exported program; the message says what to do."""


@dataclass
class Replacement:
    """A saved type this process could not rebuild, and the stand-in used for it."""

    type_name: str
    reason: str
    standin: type
    where: List[str]  # "input", "output", "tree"
    keys: List[Any]  # the fields or keys the saved tree names, in order (empty: positions)

    def message(self, source: str) -> str:
        where = " and ".join(self.where) or "tree"
        if self.keys:
            kept = f"that keeps its keys ({', '.join(map(str, self.keys))}) in order"
        elif getattr(self.standin, "_fields", None) is not None:
            kept = (f"that keeps its {len(self.standin._fields)} fields in order (a saved "  # type: ignore[attr-defined]
                    "namedtuple keeps no field names)")
        else:
            kept = "that keeps its leaves in order"
        return (f"{source}: {where} type {self.type_name} is not available here "
                f"({self.reason}); lowering with a generic container in its place {kept}. "
                "The .pte is the same as with the real type: it returns the flattened leaves "
                "in the same order")


@dataclass
class LoadedProgram:
    """A loaded program and what loading it took."""

    program: "ExportedProgram"
    path: str
    imported: List[str] = field(default_factory=list)  # modules imported (imports=)
    rebuilt: List[Resolution] = field(default_factory=list)  # real types found or registered
    replaced: List[Replacement] = field(default_factory=list)  # stand-ins
    example_inputs_note: str = ""  # why the saved example inputs were rebuilt or dropped

    @property
    def notes(self) -> List[str]:
        """One line per replaced type (and per dropped example inputs), for a report."""
        source = Path(self.path).name
        lines = [r.message(source) for r in self.replaced]
        if self.example_inputs_note:
            lines.append(f"{source}: {self.example_inputs_note}")
        return lines


def load_program(path: Union[str, os.PathLike], *,
                 imports: Sequence[str] = ()) -> "ExportedProgram":
    """The ``ExportedProgram`` saved at ``path`` by ``torch.export.save``, even when its
    input or output trees name types this process cannot rebuild (see the module doc).

    ``imports`` are modules to import first (for types they register). Raises
    :class:`ProgramLoadError` when the file cannot be loaded, saying what to do.
    """
    return load(path, imports=imports).program


def load(path: Union[str, os.PathLike], *, imports: Sequence[str] = ()) -> LoadedProgram:
    """:func:`load_program`, with what it imported, registered and replaced."""
    file = Path(path)
    if not file.exists():
        raise ProgramLoadError(f"{path}: no such file")
    if not file.is_file():
        raise ProgramLoadError(f"{path}: not a file")
    imported = [_import(name) for name in imports]
    if not archive.is_zip(file):
        raise ProgramLoadError(f"{path}: not a program saved with torch.export.save (not a zip "
                               "archive)")
    try:
        contents = archive.read(file)
    except Exception as exc:  # a damaged archive: torch's own error says more
        log.debug("could not read %s's trees: %s", path, exc)
        contents = archive.ArchiveContents()
    rebuilt, replaced = _rebuild_types(contents)
    for replacement in replaced:
        log.warning("%s", replacement.message(file.name))
    unpicklable = _unpicklable_globals(contents)
    note = ""
    if unpicklable:
        program, note = _load_with_own_inputs(file, contents, unpicklable)
    else:
        program = _torch_load(file, str(path))
    return LoadedProgram(program=program, path=str(path), imported=imported, rebuilt=rebuilt,
                         replaced=replaced, example_inputs_note=note)


def _import(name: str) -> str:
    try:
        importlib.import_module(name)
    except Exception as exc:
        raise ProgramLoadError(f"cannot import {name} ({type(exc).__name__}: "
                               f"{_first_line(exc)})") from exc
    return name


def _rebuild_types(contents: archive.ArchiveContents):
    rebuilt: List[Resolution] = []
    replaced: List[Replacement] = []
    for use in contents.types.values():
        resolution = resolve(use)
        if resolution.cls is not None:
            if resolution.how != "registered":
                rebuilt.append(resolution)
            continue
        if use.namedtuple:
            counts = set(use.children)
            if len(counts) != 1:
                raise ProgramLoadError(f"namedtuple {use.name} has {sorted(counts)} fields in "
                                       f"different trees; {ADVICE}")
            cls = standins.namedtuple(use.name, resolution.reason, counts.pop())
            keys: List[Any] = []
        else:
            cls = standins.container(use.name, resolution.reason, use.contexts)
            _kind, keys, _none = standins._keys_of(use.contexts[0] if use.contexts else None)
        replaced.append(Replacement(use.name, resolution.reason, cls, list(use.where), keys))
    return rebuilt, replaced


def _unpicklable_globals(contents: archive.ArchiveContents) -> List[str]:
    """The globals the example inputs need that cannot be imported here."""
    missing: List[str] = []
    for entry, blob in contents.sample_inputs.items():
        try:
            names = archive.pickled_globals(blob)
        except Exception as exc:
            log.debug("could not list the globals of %s: %s", entry, exc)
            continue
        for name in names:
            if standins.by_name(name) is not None or find_class(name)[0] is None:
                if name not in missing:
                    missing.append(name)
    return missing


def _torch_load(file: Path, shown: str) -> "ExportedProgram":
    import torch
    from torch.export import ExportedProgram

    try:
        program = torch.export.load(str(file))
    except Exception as exc:
        raise ProgramLoadError(_load_failure(shown, file, exc)) from exc
    if not isinstance(program, ExportedProgram):
        raise ProgramLoadError(f"{shown}: holds a {type(program).__name__}, not an "
                               "ExportedProgram")
    return program


def _load_failure(shown: str, file: Path, exc: BaseException) -> str:
    """The message for a failed ``torch.export.load``: its real cause, and what to do when
    the cause is a type this process does not know."""
    cause = _real_cause(file, exc)
    text = f"{type(cause).__name__}: {_first_line(cause)}"
    lowered = text.lower()
    if any(word in lowered for word in ("pytree", "registered", "can't get attribute",
                                        "no module named", "serializ")):
        return f"{shown}: cannot be loaded here ({text}); {ADVICE}"
    return f"{shown}: not a program saved with torch.export.save ({text})"


def _real_cause(file: Path, exc: BaseException) -> BaseException:
    """torch.export.load logs its archive reader's error and raises a generic one; the
    reader's own error, when it has one, says what went wrong."""
    if "We ran into an error when deserializing" not in str(exc):
        return exc
    try:
        from torch.export.pt2_archive._package import load_pt2
    except ImportError:
        return exc
    try:
        load_pt2(str(file))
    except Exception as inner:
        return inner
    return exc


def _load_with_own_inputs(file: Path, contents: archive.ArchiveContents,
                          names: List[str]) -> Tuple["ExportedProgram", str]:
    """Load from a copy without the example inputs, then unpickle them with stand-ins;
    the note says why they were dropped, when they were."""
    from . import inputs

    log.info("%s: example inputs name %s, not importable here: unpickling them with "
             "stand-ins", file.name, ", ".join(names))
    with tempfile.TemporaryDirectory(prefix="fastlower-load-") as folder:
        copy = archive.copy_without_sample_inputs(file, folder)
        program = _torch_load(copy, str(file))
    blobs = list(contents.sample_inputs.values())
    try:
        if len(blobs) != 1:
            raise ValueError(f"{len(blobs)} example-input entries")
        program.example_inputs = inputs.unpickle(blobs[0])  # checked against the input tree
    except Exception as exc:
        note = (f"its example inputs name {', '.join(names)} and could not be rebuilt "
                f"({type(exc).__name__}: {_first_line(exc)}); the program has no example inputs")
        log.warning("%s: %s", file.name, note)
        program.example_inputs = None
        return program, note
    return program, ""


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else "no message"
