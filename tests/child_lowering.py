"""A lowering in a process of its own, read back: the tests that compare fastlower across
processes (a cache shared by two of them) run a helper module as
``python -m MODULE OUT.json ARGS...`` with no ``FASTLOWER_*`` variable but those given;
the module writes OUT.json (what it reports) and OUT.json.pte."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from tests import python_children

ROOT = Path(__file__).resolve().parents[1]


def lowered(module: str, out: Path, args: Sequence[str],
            env: Optional[Dict[str, str]] = None) -> Dict[str, Any]:
    """OUT.json's content with the ``.pte``'s bytes under ``"pte"``."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    environ.update(PYTHONPATH=str(ROOT), **(env or {}))
    done = python_children.run([sys.executable, "-m", module, str(out), *map(str, args)],
                               cwd=ROOT, env=environ, capture_output=True, text=True,
                               timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    found = json.loads(out.read_text())
    found["pte"] = out.with_name(out.name + ".pte").read_bytes()
    return found
