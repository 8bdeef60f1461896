"""The program output of fastlower's commands (``fastlower``, ``fastlower-demo``).

The library logs through ``logging.getLogger("fastlower")`` and never prints;
a command's result for its user is written here, to stdout, on purpose.
"""

from __future__ import annotations

import sys


def out(text: str = "") -> None:
    """Write one line of the command's output to stdout."""
    sys.stdout.write(text + "\n")
    sys.stdout.flush()
