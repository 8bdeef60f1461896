"""``fastlower``: lower a saved program to a ``.pte``, preview what would be delegated,
run an unchanged export script with fastlower, and look after the preprocess cache.

    fastlower lower MODEL.pt2 -o MODEL.pte [--backend xnnpack] [--partitioner MODULE:CLASS]
                    [--import MODULE ...] [--report-html R.html] [--report-json R.json]
                    [--workers N] [--cache-dir DIR | --no-cache] [--check]
    fastlower report MODEL.pt2 [--backend ...] [--partitioner ...] [--import MODULE ...]
                    [--report-html ...] [--report-json ...] [--explorer-json ...]
    fastlower run [--workers N] [--cache-dir DIR | --no-cache] [--report-json R.json]
                  [--report-html R.html] (-m MODULE | SCRIPT.py) [ARGS...]
    fastlower cache info|clear [--only preprocess|lowering] [--cache-dir DIR]

``MODEL.pt2`` is an ATen-dialect program saved with ``torch.export.save``,
loaded by ``fastlower.loading`` (any input/output types). Bad input (missing
file, not an exported program, unknown backend, partitioner that cannot be
imported) is one line on stderr and exit code 2; ``--debug`` adds the
traceback. argparse (stdlib) rather than click: subcommands and typed options
are all this needs, and it adds no dependency. This module only parses and
reports: loading is ``fastlower.loading``, running a script ``fastlower.run``.

Settings reach the library through ``fastlower.preprocess.options()`` (never
the environment). What a command prints on stdout is its output
(``sys.stdout.write``); diagnostics go through ``logging.getLogger("fastlower")``
to a handler on stderr that the command adds to its own process.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence

from . import settings
from .console import command_logging, out, quiet_torch, script_logging

log = logging.getLogger("fastlower.cli")

#: ``--backend`` names -> the partitioner class that targets them
BACKENDS: Dict[str, str] = {
    "xnnpack": "executorch.backends.xnnpack.partition.xnnpack_partitioner:XnnpackPartitioner",
}

#: the cache folder's environment variable (read, never written: the default folder)
ENV_CACHE_DIR = settings.CACHE_DIR

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad input: reported as one line on stderr, exit code 2."""


# --------------------------------------------------------------------------- inputs
def check_workers(workers: Optional[int]) -> None:
    if workers is not None and workers < 1:
        raise UsageError(f"--workers must be >= 1, got {workers}")


def check_model_file(path: str) -> None:
    """Fail early, before any heavy import, on a model path that is no file."""
    file = Path(path)
    if not file.exists():
        raise UsageError(f"{path}: no such file")
    if not file.is_file():
        raise UsageError(f"{path}: not a file")


def load_program(path: str, imports: Sequence[str] = ()):
    """The program saved at ``path`` (a ``fastlower.loading.LoadedProgram``), its types
    rebuilt or stood in for; ``imports`` are the ``--import`` modules."""
    check_model_file(path)
    from .loading import ProgramLoadError, load

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

    folder = settings.cache_dir()
    return str(folder) if folder is not None else platformdirs.user_cache_dir("fastlower")


def cache_dir_for(args) -> Optional[str]:
    """The preprocess cache folder of a command: ``--cache-dir``, else the default folder;
    None with ``--no-cache``."""
    if args.no_cache:
        return None
    return args.cache_dir or default_cache_dir()


def preprocess_settings(args):
    """``--workers``/``--cache-dir``/``--no-cache`` as a ``fastlower.preprocess.options()``
    block for the lowering (an empty ``cache_dir`` is no cache, whatever
    ``FASTLOWER_CACHE_DIR`` says)."""
    from .preprocess import options

    return options(workers=args.workers, cache_dir=cache_dir_for(args) or "")


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
    check_workers(args.workers)
    output = Path(args.output)
    if not output.parent.exists():
        raise UsageError(f"{args.output}: folder {output.parent} does not exist")
    quiet_torch(args.debug)
    from executorch.exir import to_edge_transform_and_lower

    from .patch import installed
    from .report import json as report_json
    from .report import last_report

    partitioner = make_partitioner(args.backend, args.partitioner)
    program = load_program(args.model, args.imports).program
    steps = Steps(["lower", "to_executorch", "write"] + (["check"] if args.check else []))
    try:
        start = time.perf_counter()
        with steps.step("lower (to_edge_transform_and_lower)"), installed(), \
                preprocess_settings(args):
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
    program = load_program(args.model, args.imports).program
    steps = Steps(["partition"])
    try:
        with steps.step("partition (no preprocess)"):
            report = preview_export(program, partitioner)
    finally:
        steps.close()
    out(report.summary())
    _write_reports(report, args)
    return EXIT_OK


def cmd_run(args) -> int:
    """``fastlower run``: an unchanged script or module, fastlower installed (``fastlower.run``)."""
    if args.module is None and not args.script:
        raise UsageError("give a script (fastlower run SCRIPT.py ARGS...) or a module "
                         "(fastlower run -m MODULE ARGS...)")
    if args.module is not None:
        if not args.module:
            raise UsageError("-m needs a module name")
        parts = args.module + args.script  # "-mpkg a b": argparse splits after the module
        target, script_args, module = parts[0], parts[1:], True
    else:
        target, script_args, module = args.script[0], args.script[1:], False
        if not Path(target).exists():  # a file, or a folder or zip with __main__.py, as python
            raise UsageError(f"{target}: no such file")
    for option in ("report_json", "report_html"):
        pattern = getattr(args, option)
        if pattern and not Path(pattern).parent.exists():
            raise UsageError(f"{pattern}: folder {Path(pattern).parent} does not exist")
    check_workers(args.workers)
    from .run import RunSettings, run

    result = run(target, script_args, module=module, settings=RunSettings(
        workers=args.workers, cache_dir=cache_dir_for(args),
        report_json=args.report_json, report_html=args.report_html))
    # on stderr: stdout is the script's
    if args.report_json or args.report_html:
        if result.written:
            sys.stderr.write(f"fastlower run: {len(result.reports)} lowering(s), reports: "
                             + ", ".join(map(str, result.written)) + "\n")
        else:
            sys.stderr.write("fastlower run: the script made no lowering: no report written\n")
    return result.exit_code


def check_pte(program, buffer: bytes, atol: float = 1e-3, rtol: float = 1e-3) -> int:
    """Run ``buffer`` in ``executorch.runtime`` and compare it with ``program``'s own output,
    leaf by leaf (the ``.pte`` returns the program's output tree flattened)."""
    import torch
    from executorch.runtime import Runtime
    from torch.utils import _pytree as pytree

    args, kwargs = example_inputs(program)
    expected_tree = program.module()(*args, **kwargs)
    try:
        expected = pytree.tree_flatten_with_path(expected_tree)[0]
    except ValueError:  # a container registered without key paths: positions only
        expected = [((), leaf) for leaf in pytree.tree_leaves(expected_tree)]
    method = Runtime.get().load_program(buffer).load_method("forward")
    got = [t.clone() if isinstance(t, torch.Tensor) else t
           for t in method.execute(pytree.tree_leaves((args, kwargs)))]
    del method
    if len(got) != len(expected):
        out(f"check: FAILED: {len(got)} outputs, the exported program has {len(expected)}")
        return EXIT_FAILED
    worst = 0.0
    for i, ((path, e), g) in enumerate(zip(expected, got)):
        name = f"output {i}" + (f" ({pytree.keystr(path)})" if path else "")
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor) or e.shape != g.shape \
                    or not torch.allclose(g.to(e.dtype), e, atol=atol, rtol=rtol):
                same_shape = isinstance(g, torch.Tensor) and e.shape == g.shape
                diff = (g.to(e.dtype) - e).abs().max().item() if same_shape else float("nan")
                got_shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
                out(f"check: FAILED: {name} differs (max abs error {diff:.3g}, "
                    f"shape {got_shape} vs {tuple(e.shape)})")
                return EXIT_FAILED
            if e.numel() and e.is_floating_point():
                worst = max(worst, (g.to(e.dtype) - e).abs().max().item())
        elif e != g:
            out(f"check: FAILED: {name} is {g!r}, the exported program gives {e!r}")
            return EXIT_FAILED
    names = [pytree.keystr(p) for p, _ in expected if p]
    shown = f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ""
    out(f"check: ok, {len(got)} output(s){shown} match the exported program, leaf by leaf "
        f"(max abs error {worst:.2e})")
    return EXIT_OK


def example_inputs(program):
    """The program's saved example inputs, else random ones of the exported shapes, put
    in the program's input tree (its containers, stand-ins included)."""
    import torch
    from torch.utils import _pytree as pytree

    if program.example_inputs is not None:
        return program.example_inputs
    log.warning("no example inputs saved with the program: checking on random inputs")
    user_inputs = [n for n in program.graph.nodes if n.op == "placeholder"
                   and n.name in program.graph_signature.user_inputs]
    gen = torch.Generator().manual_seed(0)
    leaves = []
    for node in user_inputs:
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            leaves.append(val)
            continue
        shape = [int(d) for d in val.shape]
        if val.dtype.is_floating_point:
            leaves.append(torch.randn(shape, dtype=val.dtype, generator=gen))
        elif val.dtype == torch.bool:
            leaves.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            leaves.append(torch.randint(0, 2, shape, dtype=val.dtype, generator=gen))
    in_spec = program.call_spec.in_spec
    if in_spec is None:
        return tuple(leaves), {}
    return pytree.tree_unflatten(leaves, in_spec)


def cmd_cache(args) -> int:
    """``fastlower cache info|clear [--only preprocess|lowering]`` over the cache folder
    (the preprocess cache and the lowering cache share it)."""
    from .cache import admin

    folder = args.cache_dir or default_cache_dir()
    if args.action == "info":
        out(admin.info(folder).format())
        return EXIT_OK
    if not Path(folder).exists():
        out(f"cache: {folder} is already empty")
        return EXIT_OK
    removed = admin.clear(folder, [args.only] if args.only else admin.CACHES)
    shown = ", ".join(f"{n} {name}" for name, n in removed.items())
    out(f"cache: removed {sum(removed.values())} entries from {folder} ({shown})")
    return EXIT_OK


# --------------------------------------------------------------------------- parser
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="fastlower",
        description="Lower exported PyTorch programs to ExecuTorch with fastlower.")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def preprocessing(p: argparse.ArgumentParser) -> None:
        p.add_argument("--workers", type=int, metavar="N",
                       help="preprocess in N processes (default: the usable cores; 1: serial)")
        cache = p.add_mutually_exclusive_group()
        cache.add_argument("--cache-dir", metavar="DIR",
                           help=f"the preprocess cache folder (default: ${ENV_CACHE_DIR}, else "
                                "the user's cache folder)")
        cache.add_argument("--no-cache", action="store_true",
                           help="do not use the preprocess cache")

    def partitioning(p: argparse.ArgumentParser) -> None:
        p.add_argument("model", metavar="MODEL.pt2", help="a program saved with torch.export.save")
        p.add_argument("--backend", default="xnnpack",
                       help=f"backend whose partitioner to use ({', '.join(BACKENDS)}; "
                            "default xnnpack)")
        p.add_argument("--partitioner", metavar="MODULE:CLASS",
                       help="any other partitioner class (constructed without arguments)")
        p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="import MODULE before loading (for the input/output types it "
                            "registers); repeatable")
        p.add_argument("--report-html", metavar="R.html", help="write the HTML report here")
        p.add_argument("--report-json", metavar="R.json", help="write the JSON report here")
        p.add_argument("--explorer-json", metavar="N.json",
                       help="write a Model Explorer node-data overlay (nodes colored by partition)")

    lower = sub.add_parser("lower", help="lower MODEL.pt2 to a .pte and print the report")
    partitioning(lower)
    lower.add_argument("-o", "--output", required=True, metavar="MODEL.pte")
    preprocessing(lower)
    lower.add_argument("--check", action="store_true",
                       help="run the .pte in executorch.runtime and compare with the program's "
                            "output")
    lower.set_defaults(run=cmd_lower)

    report = sub.add_parser("report", help="preview what would be delegated (partitioner only)")
    partitioning(report)
    report.set_defaults(run=cmd_report)

    run = sub.add_parser(
        "run", help="run an unchanged script (or -m MODULE) with fastlower installed",
        usage="fastlower run [options] (SCRIPT.py | -m MODULE) [ARGS...]",
        description="Run SCRIPT.py ARGS (or -m MODULE ARGS) as python would, with fastlower as "
                    "ExecuTorch's to_backend. Everything after the script or module name is the "
                    "script's. Reports: one per lowering, R.json -> R.1.json, R.2.json, ... "
                    "in order.")
    preprocessing(run)
    run.add_argument("--report-json", metavar="R.json",
                     help="write each lowering's JSON report: R.1.json, R.2.json, ...")
    run.add_argument("--report-html", metavar="R.html",
                     help="write each lowering's HTML report: R.1.html, R.2.html, ...")
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ARGS",
                     help="run a module as python -m does; the rest of the line is its arguments")
    run.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT.py ARGS",
                     help="the script and its arguments")
    run.set_defaults(run=cmd_run)

    cache = sub.add_parser("cache", help="the preprocess and lowering caches: info or clear")
    cache.add_argument("action", choices=["info", "clear"])
    cache.add_argument("--only", choices=["preprocess", "lowering"],
                       help="clear: empty only this cache (default: both)")
    cache.add_argument("--cache-dir", metavar="DIR",
                       help=f"the cache folder (default: ${ENV_CACHE_DIR}, else the user's cache "
                            "folder)")
    cache.set_defaults(run=cmd_cache)
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``fastlower`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[Any], int] = args.run
    logging_for = script_logging if args.command == "run" else command_logging
    with logging_for(args.debug):
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
