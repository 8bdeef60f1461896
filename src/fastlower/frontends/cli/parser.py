"""The ``fastlower`` argument parser: one subparser per command, each bound to the
function that runs it (``args.run``). argparse (stdlib) rather than click:
subcommands and typed options are all this needs, and it adds no dependency."""

from __future__ import annotations

import argparse
import sys

from .cache import cmd_cache
from .common import ENV_CACHE_DIR, EXIT_MISMATCH
from .inputs import BACKENDS
from .lower import cmd_lower
from .report import cmd_report
from .run import cmd_run


def _output_options(parser: argparse.ArgumentParser, defaults: bool) -> None:
    """``--debug``, ``-v``, ``-q``: on the main parser with their defaults, and on every
    subcommand without (so that they may stand anywhere on the line)."""
    def default(value: object) -> object:
        return value if defaults else argparse.SUPPRESS
    parser.add_argument("--debug", action="store_true", default=default(False),
                        help="show tracebacks and debug logs")
    parser.add_argument("-v", "--verbose", action="count", default=default(0),
                        help="say more (each step's time)")
    parser.add_argument("-q", "--quiet", action="count", default=default(0),
                        help="say less (errors only)")


def version_line() -> str:
    """fastlower's version and the torch and ExecuTorch it runs with (without importing them)."""
    from ...base.compat import installed

    def of(dist: str) -> str:
        return installed(dist) or "not installed"
    return f"fastlower {of('fastlower')} (torch {of('torch')}, executorch {of('executorch')})"


class _VersionAction(argparse.Action):
    """``--version``: the versions are looked up only when asked (not at every start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show fastlower's, torch's and ExecuTorch's versions and exit"):
        super().__init__(option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        sys.stdout.write(version_line() + "\n")  # on stdout, as argparse's own version action
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The parser of every subcommand; ``args.run`` is the chosen command's function."""
    parser = argparse.ArgumentParser(
        prog="fastlower",
        description="Lower exported PyTorch programs to ExecuTorch with fastlower.")
    parser.add_argument("--version", action=_VersionAction)
    _output_options(parser, defaults=True)
    common = argparse.ArgumentParser(add_help=False)
    _output_options(common, defaults=False)
    sub: "argparse._SubParsersAction[argparse.ArgumentParser]" = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_with_parents(common))
    _add_lower(sub)
    _add_report(sub)
    _add_run(sub)
    _add_cache(sub)
    return parser


def _preprocessing_options(p: argparse.ArgumentParser) -> None:
    """Where and how partitions are preprocessed, and the caches used."""
    p.add_argument("--workers", type=int, metavar="N",
                   help="preprocess in N processes (default: the usable cores; 1: serial)")
    cache = p.add_mutually_exclusive_group()
    cache.add_argument("--cache-dir", metavar="DIR",
                       help=f"the folder of the preprocess and lowering caches (default: "
                            f"${ENV_CACHE_DIR}, else the user's cache folder)")
    cache.add_argument("--no-cache", action="store_true",
                       help="use neither cache (preprocess nor lowering)")
    p.add_argument("--shared-cache", metavar="URL",
                   help="a shared second tier for lowering entries: file:///path or "
                        "s3://bucket/prefix (default: $FASTLOWER_SHARED_CACHE; '' for none)")


def _partitioning_options(p: argparse.ArgumentParser) -> None:
    """The model, its partitioners and the report files."""
    p.add_argument("model", metavar="MODEL.pt2", help="a program saved with torch.export.save")
    p.add_argument("--backend", default=None,
                   help=f"a partitioner preset ({', '.join(BACKENDS)}; default xnnpack; "
                        "xnnpack-llm: export_llm's dynamically quantized + plain XNNPACK "
                        "pair)")
    p.add_argument("--partitioner", action="append", default=[],
                   metavar="MODULE:CLASS[(ARGS)]",
                   help="a partitioner class, with literal arguments if any, e.g. "
                        "'pkg.mod:MyPartitioner(level=2)'; repeatable: they run in order")
    p.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                   help="import MODULE before loading (for the input/output types it "
                        "registers); repeatable")
    p.add_argument("--report-html", metavar="R.html", help="write the HTML report here")
    p.add_argument("--report-json", metavar="R.json", help="write the JSON report here")
    p.add_argument("--explorer-json", metavar="N.json",
                   help="write a Model Explorer node-data overlay (nodes colored by partition)")


def _add_lower(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    lower = sub.add_parser("lower", help="lower MODEL.pt2 to a .pte and print the report")
    _partitioning_options(lower)
    lower.add_argument("-o", "--output", required=True, metavar="MODEL.pte")
    _preprocessing_options(lower)
    lower.add_argument("--check", action="store_true",
                       help="run the .pte in executorch.runtime and compare with the program's "
                            f"output (a mismatch exits with {EXIT_MISMATCH})")
    lower.add_argument("--atol", type=float, default=1e-3, metavar="A",
                       help="--check: absolute tolerance (default 1e-3)")
    lower.add_argument("--rtol", type=float, default=1e-3, metavar="R",
                       help="--check: relative tolerance (default 1e-3)")
    lower.set_defaults(run=cmd_lower)


def _add_report(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    report = sub.add_parser("report", help="preview what would be delegated (partitioner only)")
    _partitioning_options(report)
    report.set_defaults(run=cmd_report)


def _add_run(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    run = sub.add_parser(
        "run", help="run an unchanged script (or -m MODULE) with fastlower installed",
        usage="fastlower run [options] (SCRIPT.py | -m MODULE) [ARGS...]",
        description="Run SCRIPT.py ARGS (or -m MODULE ARGS) as python would, with fastlower as "
                    "ExecuTorch's to_backend. Everything after the script or module name is the "
                    "script's. Reports: one per lowering, R.json -> R.1.json, R.2.json, ... "
                    "in order.")
    _preprocessing_options(run)
    run.add_argument("--report-json", metavar="R.json",
                     help="write each lowering's JSON report: R.1.json, R.2.json, ...")
    run.add_argument("--report-html", metavar="R.html",
                     help="write each lowering's HTML report: R.1.html, R.2.html, ...")
    run.add_argument("-m", dest="module", nargs=argparse.REMAINDER, metavar="MODULE ARGS",
                     help="run a module as python -m does; the rest of the line is its arguments")
    run.add_argument("script", nargs=argparse.REMAINDER, metavar="SCRIPT.py ARGS",
                     help="the script and its arguments")
    run.set_defaults(run=cmd_run)


def _add_cache(sub: "argparse._SubParsersAction[argparse.ArgumentParser]") -> None:
    cache = sub.add_parser(
        "cache", help="the preprocess and lowering caches: info, clear, push or pull",
        description="info: entries and sizes of each cache in the folder (and of the shared "
                    "store, if any); clear: empty them; push / pull: copy lowering entries "
                    "from the folder to the shared store / from the store to the folder.")
    cache.add_argument("action", choices=["info", "clear", "push", "pull"],
                       help="info: what each cache holds; clear: remove its entries; push, "
                            "pull: copy lowering entries to / from the shared store")
    cache.add_argument("--shared-cache", metavar="URL",
                       help="the shared store (default: $FASTLOWER_SHARED_CACHE)")
    cache.add_argument("--only", choices=["preprocess", "lowering"],
                       help="only this cache (default: both)")
    cache.add_argument("--cache-dir", metavar="DIR",
                       help=f"the cache folder (default: ${ENV_CACHE_DIR}, else the user's cache "
                            "folder)")
    cache.set_defaults(run=cmd_cache)


def _with_parents(common: argparse.ArgumentParser) -> type:
    """An ``ArgumentParser`` class whose instances (the subcommands) take ``common``'s
    options too."""
    class Subcommand(argparse.ArgumentParser):
        def __init__(self, *args, **kwargs) -> None:
            kwargs.setdefault("parents", [common])
            super().__init__(*args, **kwargs)
    return Subcommand
