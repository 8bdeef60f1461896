"""The program output and log handlers of fastlower's commands (``fastlower``,
``fastlower-demo``).

The library logs through ``logging.getLogger("fastlower")`` and never prints,
never configures logging, warnings or the environment. A command owns its
process: its result for the user is written here, to stdout, on purpose, and
its diagnostics go to stderr through handlers it adds for the time it runs
(``command_logging``), removed afterwards so ``main()`` can run in-process.
"""

from __future__ import annotations

import logging
import sys
import warnings
from contextlib import contextmanager
from typing import Iterator


def out(text: str = "") -> None:
    """Write one line of the command's output to stdout."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def stderr_handler(level: int) -> logging.Handler:
    handler = logging.StreamHandler(sys.stderr)
    handler.setLevel(level)
    handler.setFormatter(logging.Formatter("fastlower: %(levelname)s: %(message)s"))
    return handler


_LEVELS = {-1: logging.ERROR, 0: logging.WARNING, 1: logging.INFO}


@contextmanager
def command_logging(debug: bool, verbosity: int = 0) -> Iterator[None]:
    """The command's own handlers: fastlower's log to stderr (warnings; ``verbosity`` 1:
    info, -1: errors only; ``debug``: everything); without ``--debug`` the other
    libraries' chatty warnings (ExecuTorch's through the root logger, torch's own
    handler, ``warnings``) are not shown. Everything is removed or restored
    afterwards, so ``main()`` can be called in-process (tests)."""
    logger, root, torch_log = (logging.getLogger("fastlower"), logging.getLogger(),
                               logging.getLogger("torch"))
    saved = (logger.level, torch_log.level)
    level = logging.DEBUG if debug else _LEVELS[max(-1, min(1, verbosity))]
    ours = stderr_handler(level)
    logger.addHandler(ours)
    logger.setLevel(level)
    # with a handler of its own the root logger no longer falls back to printing
    # every warning (logging.lastResort): this one shows the others' errors only
    # (warnings too with --debug); fastlower's records are ours to show
    others = stderr_handler(logging.WARNING if debug else logging.ERROR)
    others.addFilter(lambda record: not record.name.startswith("fastlower"))
    root.addHandler(others)
    try:
        with warnings.catch_warnings():
            if not debug:
                warnings.simplefilter("ignore")
            yield
    finally:
        logger.removeHandler(ours)
        root.removeHandler(others)
        logger.setLevel(saved[0])
        torch_log.setLevel(saved[1])


@contextmanager
def script_logging(debug: bool, verbosity: int = 0) -> Iterator[None]:
    """``fastlower run``: the script's logging, warnings and torch's are left as they are
    (it sees what it would see without fastlower); ``--debug`` adds fastlower's own
    debug log on stderr, ``-v`` its info lines."""
    if not debug and verbosity < 1:
        yield
        return
    logger = logging.getLogger("fastlower")
    saved = logger.level
    level = logging.DEBUG if debug else logging.INFO
    handler = stderr_handler(level)
    logger.addHandler(handler)
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)


def quiet_torch(debug: bool) -> None:
    """Without ``--debug``, torch's own log handler shows errors only (importing
    ExecuTorch makes it warn about things that are not the user's business). The
    level is the command's, restored when it ends (``command_logging``)."""
    import torch  # noqa: F401

    if not debug:
        logging.getLogger("torch").setLevel(logging.ERROR)


@contextmanager
def phase_lines(show: bool) -> Iterator[None]:
    """While the block runs, the lowering's phases (``fastlower.base.phases``: what is running,
    then its elapsed time) as lines on stderr, when ``show``; removed afterwards."""
    if not show:
        yield
        return
    logger = logging.getLogger("fastlower.base.phases")
    saved = logger.level
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("fastlower: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved)
