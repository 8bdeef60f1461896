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


@contextmanager
def command_logging(debug: bool) -> Iterator[None]:
    """The command's own handlers: fastlower's log to stderr; without ``--debug`` the
    other libraries' chatty warnings (ExecuTorch's through the root logger, torch's
    own handler, ``warnings``) are not shown. Everything is removed or restored
    afterwards, so ``main()`` can be called in-process (tests)."""
    logger, root, torch_log = (logging.getLogger("fastlower"), logging.getLogger(),
                               logging.getLogger("torch"))
    saved = (logger.level, torch_log.level)
    ours = stderr_handler(logging.DEBUG if debug else logging.WARNING)
    logger.addHandler(ours)
    logger.setLevel(logging.DEBUG if debug else logging.WARNING)
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
def script_logging(debug: bool) -> Iterator[None]:
    """``fastlower run``: the script's logging, warnings and torch's are left as they are
    (it sees what it would see without fastlower); ``--debug`` adds fastlower's own
    debug log on stderr."""
    if not debug:
        yield
        return
    logger = logging.getLogger("fastlower")
    saved = logger.level
    handler = stderr_handler(logging.DEBUG)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
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
