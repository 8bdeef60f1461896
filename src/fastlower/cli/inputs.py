"""A subcommand's inputs: the saved program (``MODEL.pt2``) and the partitioner
(``--backend`` / ``--partitioner``), checked before any heavy import where possible;
bad input raises :class:`~fastlower.cli.common.UsageError`."""

from __future__ import annotations

import importlib
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, Optional, Sequence

from .common import UsageError

#: ``--backend`` names -> the partitioner class that targets them
BACKENDS: Dict[str, str] = {
    "xnnpack": "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner",
}


def check_model_file(path: str) -> None:
    """Fail early, before any heavy import, on a model path that is no file."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"{path}: no such file")
    if not file.is_file():
        raise UsageError(f"{path}: not a file")


def load_program(path: str, imports: Sequence[str] = ()) -> Any:
    """The program saved at ``path`` (a ``fastlower.loading.LoadedProgram``), its types
    rebuilt or stood in for; ``imports`` are the ``--import`` modules."""
    check_model_file(path)
    from ..loading import ProgramLoadError, load

    quiet = not logging.getLogger("fastlower").isEnabledFor(logging.DEBUG)
    try:
        # torch.export.load logs the whole traceback of a bad archive itself
        with _logger_level("torch.export", logging.CRITICAL if quiet else None):
            return load(path, imports=imports)
    except ProgramLoadError as exc:
        raise UsageError(str(exc)) from exc


@contextmanager
def _logger_level(name: str, level: Optional[int]) -> Iterator[None]:
    logger = logging.getLogger(name)
    saved = logger.level
    if level is not None:
        logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else "no message"


def make_partitioner(backend: str, spec: Optional[str]) -> Any:
    """An instance of ``--partitioner MODULE:CLASS``, else of ``--backend``'s partitioner."""
    if spec is None:
        if backend not in BACKENDS:
            raise UsageError(f"unknown backend {backend!r} (known: {', '.join(sorted(BACKENDS))}; "
                             "other backends: --partitioner MODULE:CLASS)")
        spec = BACKENDS[backend]
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise UsageError(f"--partitioner {spec!r}: expected MODULE:CLASS")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:
        raise UsageError(f"partitioner {spec}: cannot import {module_name} "
                         f"({type(exc).__name__}: {_first_line(exc)})") from exc
    cls = getattr(module, class_name, None)
    if cls is None:
        raise UsageError(f"partitioner {spec}: {module_name} has no {class_name}")
    from executorch.exir.backend.partitioner import Partitioner

    if not (isinstance(cls, type) and issubclass(cls, Partitioner)):
        raise UsageError(f"partitioner {spec}: {class_name} is not an ExecuTorch Partitioner class")
    try:
        return cls()
    except Exception as exc:
        raise UsageError(f"partitioner {spec}: {class_name}() failed "
                         f"({type(exc).__name__}: {_first_line(exc)})") from exc
