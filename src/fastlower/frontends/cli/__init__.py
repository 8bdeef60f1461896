"""``fastlower``: lower a saved program to a ``.pte``, preview what would be delegated,
run an unchanged export script with fastlower, and look after the preprocess cache.

    fastlower lower MODEL.pt2 -o MODEL.pte [--backend xnnpack|xnnpack-llm]
                    [--partitioner MODULE:CLASS[(ARGS)] ...]
                    [--import MODULE ...] [--report-html R.html] [--report-json R.json]
                    [--workers N] [--cache-dir DIR | --no-cache] [--check]
    fastlower report MODEL.pt2 [--backend ...] [--partitioner ...] [--import MODULE ...]
                    [--report-html ...] [--report-json ...] [--explorer-json ...]
    fastlower run [--workers N] [--cache-dir DIR | --no-cache] [--report-json R.json]
                  [--report-html R.html] (-m MODULE | SCRIPT.py) [ARGS...]
    fastlower cache info|clear [--only preprocess|lowering] [--cache-dir DIR]
    fastlower --version

``MODEL.pt2`` is an ATen-dialect program saved with ``torch.export.save``,
loaded by ``fastlower.base.loading`` (any input/output types). Bad input (missing
file, not an exported program, unknown backend, partitioner that cannot be
imported) is one line on stderr and exit code 2; ``--debug`` adds the traceback.
``--debug``, ``-v`` and ``-q`` go anywhere on the line; ``--version`` says which
fastlower, torch and ExecuTorch are installed. This package only parses and reports: loading
is ``fastlower.base.loading``, running a script ``fastlower.frontends.script_runner``.
One module per concern: :mod:`.parser` (the argparse tree), :mod:`.common` (exit codes,
usage error, cache and worker settings, progress, report files), :mod:`.inputs` (model file,
partitioner), one module per subcommand (:mod:`.lower`, :mod:`.report`, :mod:`.run`,
:mod:`.cache`) and :mod:`.check` (``lower --check``). Heavy imports (torch,
ExecuTorch) happen inside the commands, so ``fastlower --help`` stays fast.

Settings reach the library through ``fastlower.preprocess.options()`` (never
the environment). What a command prints on stdout is its output
(``sys.stdout.write``); diagnostics go through ``logging.getLogger("fastlower")``
to a handler on stderr that the command adds to its own process.
"""

from __future__ import annotations

import sys
import traceback
from typing import Any, Callable, List, Optional

from ..console import command_logging, phase_lines, script_logging
from ...in_process.stack_room import with_stack_room
from .common import (
    ENV_CACHE_DIR, EXIT_FAILED, EXIT_MISMATCH, EXIT_OK, EXIT_USAGE, UsageError, cache_dir_for,
    default_cache_dir,
    preprocess_settings,
)
from .inputs import BACKENDS, load_program, make_partitioner, make_partitioners
from .parser import build_parser

__all__ = ["main", "build_parser", "UsageError", "BACKENDS", "ENV_CACHE_DIR", "EXIT_OK",
           "EXIT_FAILED", "EXIT_USAGE", "EXIT_MISMATCH", "default_cache_dir", "cache_dir_for",
           "preprocess_settings", "load_program", "make_partitioner", "make_partitioners"]


def main(argv: Optional[List[str]] = None) -> int:
    """Entry point of the ``fastlower`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    run: Callable[[Any], int] = args.run
    logging_for = script_logging if args.command == "run" else command_logging
    verbosity = args.verbose - args.quiet
    # on a terminal, what is running and for how long (with -v the log says it anyway)
    phases_shown = verbosity == 0 and not args.debug and sys.stderr.isatty()
    with logging_for(args.debug, verbosity), phase_lines(phases_shown):
        try:
            # the command, its imports and the script `fastlower run` runs, with room on
            # CPython's frame stack: from fastlower's frames, importing ExecuTorch alone
            # mapped a stack chunk per call 0.5M times (fastlower.in_process.stack_room)
            return with_stack_room(run, args)
        except UsageError as exc:
            if args.debug:
                traceback.print_exc()
            sys.stderr.write(f"fastlower {args.command}: error: {exc}\n")
            return EXIT_USAGE
        except Exception as exc:
            from ...errors import FastlowerError, describe

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
