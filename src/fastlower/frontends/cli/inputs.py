"""A subcommand's inputs: the saved program (``MODEL.pt2``) and the partitioners
(``--backend`` / ``--partitioner``), checked before any heavy import where possible;
bad input raises :class:`~fastlower.frontends.cli.common.UsageError`.

A partitioner is written ``MODULE:CLASS`` or ``MODULE:CLASS(ARGS)``, where ``ARGS``
are Python literals, positional or ``key=value`` (``ast.literal_eval``: numbers,
strings, booleans, ``None``, lists, tuples, dicts); ``--partitioner`` may be given
several times, and the partitioners run in that order. ``--backend`` names a preset.
"""

from __future__ import annotations

import ast
import importlib
import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from .common import UsageError

_XNNPACK = "executorch.backends.xnnpack.partition.xnnpack_partitioner"

#: ``--backend`` presets -> their partitioners, in the order they run
BACKENDS: Dict[str, List[str]] = {
    "xnnpack": [f"{_XNNPACK}:XnnpackPartitioner"],
    # ExecuTorch's export_llm with XNNPACK: dynamically quantized linears first, then the rest
    "xnnpack-llm": [f"{_XNNPACK}:XnnpackDynamicallyQuantizedPartitioner",
                    f"{_XNNPACK}:XnnpackPartitioner"],
}


def check_model_file(path: str) -> None:
    """Fail early, before any heavy import, on a model path that is no file."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"{path}: no such file")
    if not file.is_file():
        raise UsageError(f"{path}: not a file")


def load_program(path: str, imports: Sequence[str] = ()) -> Any:
    """The program saved at ``path`` (a ``fastlower.base.loading.LoadedProgram``), its types
    rebuilt or stood in for; ``imports`` are the ``--import`` modules."""
    check_model_file(path)
    from ...base.loading import ProgramLoadError, load

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


def make_partitioners(backend: Optional[str], specs: Sequence[str]) -> List[Any]:
    """The ``--partitioner`` instances in order, else those of the ``--backend`` preset
    (default ``xnnpack``)."""
    if specs and backend is not None:
        raise UsageError("give --backend or --partitioner, not both")
    if not specs:
        name = backend or "xnnpack"
        if name not in BACKENDS:
            raise UsageError(f"unknown backend {name!r} (known: {', '.join(sorted(BACKENDS))}; "
                             "other backends: --partitioner MODULE:CLASS)")
        specs = BACKENDS[name]
    return [make_partitioner(spec) for spec in specs]


def parse_spec(spec: str) -> Tuple[str, str, Tuple[Any, ...], Dict[str, Any]]:
    """``MODULE:CLASS(ARGS)`` as ``(module, class, args, kwargs)``."""
    module_name, sep, call = spec.partition(":")
    if not sep or not module_name or not call:
        raise UsageError(f"--partitioner {spec!r}: expected MODULE:CLASS or MODULE:CLASS(ARGS)")
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except SyntaxError as exc:
        raise UsageError(f"--partitioner {spec!r}: not CLASS or CLASS(ARGS) ({exc.msg})") from exc
    if isinstance(node, ast.Name):
        return module_name, node.id, (), {}
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise UsageError(f"--partitioner {spec!r}: expected MODULE:CLASS or MODULE:CLASS(ARGS)")
    try:
        args = tuple(ast.literal_eval(a) for a in node.args)
        kwargs = {k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg}
    except ValueError as exc:
        raise UsageError(f"--partitioner {spec!r}: arguments must be Python literals "
                         "(numbers, strings, True/False/None, lists, tuples, dicts)") from exc
    if len(kwargs) != len(node.keywords):
        raise UsageError(f"--partitioner {spec!r}: **arguments are not supported")
    return module_name, node.func.id, args, kwargs


def make_partitioner(spec: str) -> Any:
    """An instance of the partitioner ``spec`` (``MODULE:CLASS`` or ``MODULE:CLASS(ARGS)``)."""
    module_name, class_name, args, kwargs = parse_spec(spec)
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
        return cls(*args, **kwargs)
    except Exception as exc:
        raise UsageError(f"partitioner {spec}: {class_name}(...) failed "
                         f"({type(exc).__name__}: {_first_line(exc)})") from exc
