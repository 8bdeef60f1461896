"""``fastlower``: lower a saved program to a ``.pte``, preview what would be delegated,
and look after the preprocess cache.

    fastlower lower MODEL.pt2 -o MODEL.pte [--backend xnnpack] [--partitioner MODULE:CLASS]
                    [--report-html R.html] [--report-json R.json] [--workers N]
                    [--no-cache] [--check]
    fastlower report MODEL.pt2 [--backend ...] [--partitioner ...] [--report-html ...]
                    [--report-json ...] [--explorer-json ...]
    fastlower cache info|clear

``MODEL.pt2`` is an ATen-dialect program saved with ``torch.export.save``.
Bad input (missing file, not an exported program, unknown backend, partitioner
that cannot be imported) is one line on stderr and exit code 2; ``--debug``
adds the traceback. argparse (stdlib) rather than click: subcommands and
typed options are all this needs, and it adds no dependency.

What the command prints on stdout is its output (``sys.stdout.write``);
diagnostics go through ``logging.getLogger("fastlower")`` to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys
import time
import traceback
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from .console import out

log = logging.getLogger("fastlower.cli")

#: ``--backend`` names -> the partitioner class that targets them
BACKENDS: Dict[str, str] = {
    "xnnpack": "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner",
}

#: read by fastlower's parallel preprocess and its cache (set from --workers / --no-cache)
ENV_WORKERS = "FASTLOWER_WORKERS"
ENV_CACHE_DIR = "FASTLOWER_CACHE_DIR"
ENV_NO_CACHE = "FASTLOWER_NO_CACHE"

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


# --------------------------------------------------------------------------- inputs
def check_model_file(path: str) -> None:
    """Fail early, before any heavy import, on a model path that is no file."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"{path}: no such file")
    if not file.is_file():
        raise UsageError(f"{path}: not a file")


def quiet_torch(debug: bool) -> None:
    """Without ``--debug``, torch's own log handler shows errors only (importing
    ExecuTorch makes it warn about things that are not the user's business)."""
    if not debug and "torch" not in sys.modules:
        # torch's logging reads TORCH_LOGS once, on import; "-all": errors only
        os.environ.setdefault("TORCH_LOGS", "-all")
    import torch  # noqa: F401

    if not debug:
        logging.getLogger("torch").setLevel(logging.ERROR)


def load_program(path: str):
    """The ``ExportedProgram`` saved at ``path`` with ``torch.export.save``."""
    check_model_file(path)
    file = Path(path)
    import torch
    from torch.export import ExportedProgram

    quiet = not logging.getLogger("fastlower").isEnabledFor(logging.DEBUG)
    try:
        # torch.export.load logs the whole traceback of a bad archive itself
        with _logger_level("torch.export", logging.CRITICAL if quiet else None):
            program = torch.export.load(str(file))
    except Exception as exc:
        raise UsageError(f"{path}: not a program saved with torch.export.save "
                         f"({type(exc).__name__}: {_first_line(exc)})") from exc
    if not isinstance(program, ExportedProgram):
        raise UsageError(f"{path}: holds a {type(program).__name__}, not an ExportedProgram")
    return program


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


def make_partitioner(backend: str, spec: Optional[str]):
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


# --------------------------------------------------------------------------- progress
class Steps:
    """A tqdm bar over the command's steps, shown only when stderr is a terminal."""

    def __init__(self, names: Sequence[str]) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(names), disable=not sys.stderr.isatty(), leave=False,
                        bar_format="{desc} [{n}/{total}] {elapsed}", file=sys.stderr)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.bar.set_description_str(name)
        start = time.perf_counter()
        yield
        log.info("%s: %.2fs", name, time.perf_counter() - start)
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


# --------------------------------------------------------------------------- cache settings
def default_cache_dir() -> str:
    """``$FASTLOWER_CACHE_DIR``, else the user's cache folder for fastlower."""
    import platformdirs

    return os.environ.get(ENV_CACHE_DIR) or platformdirs.user_cache_dir("fastlower")


def configure_preprocess(workers: Optional[int], use_cache: bool) -> None:
    """Hand ``--workers``/``--no-cache`` to the parallel preprocess and its cache.

    They read ``FASTLOWER_WORKERS`` and ``FASTLOWER_CACHE_DIR`` (a lowering without
    them is serial and uncached); the CLI turns the cache on in the user's cache
    folder unless ``--no-cache``.
    """
    if workers is not None:
        os.environ[ENV_WORKERS] = str(workers)
    if use_cache:
        os.environ[ENV_CACHE_DIR] = default_cache_dir()
        os.environ.pop(ENV_NO_CACHE, None)
    else:
        os.environ.pop(ENV_CACHE_DIR, None)
        os.environ[ENV_NO_CACHE] = "1"


# --------------------------------------------------------------------------- commands
def _write_reports(report, args) -> None:
    from .report import explorer, html, json as report_json

    if args.report_json:
        report_json.write(report, args.report_json)
        out(f"report (JSON): {args.report_json}")
    if args.report_html:
        html.write(report, args.report_html, title=Path(args.model).name)
        out(f"report (HTML): {args.report_html}")
    if getattr(args, "explorer_json", None):
        explorer.write(report, args.explorer_json)
        out(f"Model Explorer overlay: {args.explorer_json}")


def cmd_lower(args) -> int:
    """``fastlower lower``: ``.pt2`` in, ``.pte`` out, report printed."""
    check_model_file(args.model)
    output = Path(args.output)
    if not output.parent.exists():
        raise UsageError(f"{args.output}: folder {output.parent} does not exist")
    quiet_torch(args.debug)
    from executorch.exir import to_edge_transform_and_lower

    from .patch import installed
    from .report import json as report_json
    from .report import last_report

    partitioner = make_partitioner(args.backend, args.partitioner)
    program = load_program(args.model)
    configure_preprocess(args.workers, not args.no_cache)
    steps = Steps(["lower", "to_executorch", "write"] + (["check"] if args.check else []))
    try:
        start = time.perf_counter()
        with steps.step("lower (to_edge_transform_and_lower)"), installed():
            edge = to_edge_transform_and_lower(program, partitioner=[partitioner])
        report = last_report()
        with steps.step("to_executorch"):
            buffer = edge.to_executorch().buffer
        with steps.step("write"):
            report_json.write_atomic(output, bytes(buffer))
        total = time.perf_counter() - start
        out(f"wrote {output} ({len(buffer):,} bytes) in {total:.2f}s")
        if report is not None:
            out(report.summary())
            _write_reports(report, args)
        status = EXIT_OK
        if args.check:
            with steps.step("check in executorch.runtime"):
                status = check_pte(program, bytes(buffer))
    finally:
        steps.close()
    return status


def cmd_report(args) -> int:
    """``fastlower report``: the partitioner only, no backend preprocess."""
    check_model_file(args.model)
    quiet_torch(args.debug)
    from .report import preview_export

    partitioner = make_partitioner(args.backend, args.partitioner)
    program = load_program(args.model)
    steps = Steps(["partition"])
    try:
        with steps.step("partition (no preprocess)"):
            report = preview_export(program, partitioner)
    finally:
        steps.close()
    out(report.summary())
    _write_reports(report, args)
    return EXIT_OK


def check_pte(program, buffer: bytes, atol: float = 1e-3, rtol: float = 1e-3) -> int:
    """Run ``buffer`` in ``executorch.runtime`` and compare with ``program``'s own output."""
    import torch
    from executorch.runtime import Runtime
    from torch.utils import _pytree as pytree

    args, kwargs = example_inputs(program)
    expected = pytree.tree_leaves(program.module()(*args, **kwargs))
    method = Runtime.get().load_program(buffer).load_method("forward")
    got = [t.clone() if isinstance(t, torch.Tensor) else t
           for t in method.execute(pytree.tree_leaves((args, kwargs)))]
    del method
    if len(got) != len(expected):
        out(f"check: FAILED: {len(got)} outputs, the exported program has {len(expected)}")
        return EXIT_FAILED
    worst = 0.0
    for i, (e, g) in enumerate(zip(expected, got)):
        if isinstance(e, torch.Tensor):
            if e.shape != g.shape or not torch.allclose(g.to(e.dtype), e, atol=atol, rtol=rtol):
                diff = (g.to(e.dtype) - e).abs().max().item() if e.shape == g.shape else float("nan")
                out(f"check: FAILED: output {i} differs (max abs error {diff:.3g}, "
                    f"shape {tuple(g.shape)} vs {tuple(e.shape)})")
                return EXIT_FAILED
            if e.numel() and e.is_floating_point():
                worst = max(worst, (g.to(e.dtype) - e).abs().max().item())
    out(f"check: ok, {len(got)} output(s) match the exported program (max abs error {worst:.2e})")
    return EXIT_OK


def example_inputs(program):
    """The program's saved example inputs, else random ones of the exported shapes."""
    import torch

    if program.example_inputs is not None:
        return program.example_inputs
    log.info("no example inputs saved with the program: using random inputs")
    user_inputs = [n for n in program.graph.nodes if n.op == "placeholder"
                   and n.name in program.graph_signature.user_inputs]
    gen = torch.Generator().manual_seed(0)
    args = []
    for node in user_inputs:
        val = node.meta["val"]
        shape = [int(d) for d in val.shape]
        if val.dtype.is_floating_point:
            args.append(torch.randn(shape, dtype=val.dtype, generator=gen))
        elif val.dtype == torch.bool:
            args.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            args.append(torch.randint(0, 2, shape, dtype=val.dtype, generator=gen))
    return tuple(args), {}


def cmd_cache(args) -> int:
    """``fastlower cache info|clear`` over the preprocess cache folder."""
    import diskcache

    folder = default_cache_dir()
    if args.action == "info":
        if not Path(folder).exists():
            out(f"cache: {folder} (empty: the folder does not exist yet)")
            return EXIT_OK
        with diskcache.Cache(folder) as cache:
            out(f"cache: {folder}\nentries: {len(cache)}\nsize: {cache.volume():,} bytes")
        return EXIT_OK
    if not Path(folder).exists():
        out(f"cache: {folder} is already empty")
        return EXIT_OK
    with diskcache.Cache(folder) as cache:
        removed = cache.clear()
    out(f"cache: removed {removed} entries from {folder}")
    return EXIT_OK


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastlower", description="Lower exported PyTorch programs to ExecuTorch with fastlower.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def partitioning(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", metavar="MODEL.pt2", help="a program saved with torch.export.save")
        p.add_argument("--backend", default="xnnpack",
                       help=f"backend whose partitioner to use ({', '.join(BACKENDS)}; default xnnpack)")
        p.add_argument("--partitioner", metavar="MODULE:CLASS",
                       help="any other partitioner class (constructed without arguments)")
        p.add_argument("--report-html", metavar="R.html", help="write the HTML report here")
        p.add_argument("--report-json", metavar="R.json", help="write the JSON report here")
        p.add_argument("--explorer-json", metavar="N.json",
                       help="write a Model Explorer node-data overlay (nodes colored by partition)")

    lower = sub.add_parser("lower", help="lower MODEL.pt2 to a .pte and print the report")
    partitioning(lower)
    lower.add_argument("-o", "--output", required=True, metavar="MODEL.pte")
    lower.add_argument("--workers", type=int, metavar="N", help=f"parallel preprocess ({ENV_WORKERS})")
    lower.add_argument("--no-cache", action="store_true", help="do not use the preprocess cache")
    lower.add_argument("--check", action="store_true",
                       help="run the .pte in executorch.runtime and compare with the program's output")
    lower.set_defaults(run=cmd_lower)

    report = sub.add_parser("report", help="preview what would be delegated (partitioner only)")
    partitioning(report)
    report.set_defaults(run=cmd_report)

    cache = sub.add_parser("cache", help="the preprocess cache: info or clear")
    cache.add_argument("action", choices=["info", "clear"])
    cache.set_defaults(run=cmd_cache)
    return parser


@contextmanager
def _logging_for_the_command(debug: bool) -> Iterator[None]:
    """fastlower's log to stderr; without ``--debug`` ExecuTorch's and torch's chatty
    warnings (root logger, ``warnings``) are silenced. Restored afterwards, so
    ``main()`` can be called in-process (tests)."""
    logger, root, torch_log = (logging.getLogger("fastlower"), logging.getLogger(),
                               logging.getLogger("torch"))
    saved = (logger.level, root.level, torch_log.level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fastlower: %(levelname)s: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
    if not debug:
        root.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.simplefilter("ignore")
            yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        root.setLevel(saved[1])
        torch_log.setLevel(saved[2])


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``fastlower`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[Any], int] = args.run
    with _logging_for_the_command(args.debug):
        try:
            return run(args)
        except UsageError as exc:
            if args.debug:
                traceback.print_exc()
            sys.stderr.write(f"fastlower {args.command}: error: {exc}\n")
            return EXIT_USAGE
        except Exception as exc:
            from .errors import FastlowerError, describe

            if not isinstance(exc, FastlowerError):
                raise  # a bug, not bad input: the traceback helps
            if args.debug:
                traceback.print_exc()
            # the reference's message, then fastlower's notes (rule, node, tag)
            sys.stderr.write(f"fastlower {args.command}: lowering failed: "
                             f"{type(exc).__name__}: {describe(exc)}\n")
            return EXIT_FAILED
        except KeyboardInterrupt:
            sys.stderr.write("fastlower: interrupted\n")
            return 130


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
