"""A new checkpoint in a new process: every partition of a known structure derived from
the templates another process proved and left in the shared cache folder.

Process A lowers the model from seed 0's weights, process B from seed 1's (every weight
different, same structure), one cache folder, the lowering cache off. B's preprocess
cache hits only partitions without weights, and no class needs a real preprocess: all
its classes' members are derived, the two per class that A preprocessed included; its
``.pte`` is ExecuTorch's own for seed 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.edge.models import partitioners
from tests.structure.models import aten_program, lower
from tests import python_children

ROOT = Path(__file__).resolve().parents[2]


def _lower_in_process(tmp_path: Path, seed: int, cache: Path) -> dict:
    out = tmp_path / f"seed{seed}.json"
    env = {**os.environ, "FASTLOWER_CACHE_DIR": str(cache), "FASTLOWER_LOWERING_CACHE": "0",
           "FASTLOWER_PREPROCESS_CLASSES": "derive", "FASTLOWER_WORKERS": "1"}
    env.pop("FASTLOWER_CACHE_VERIFY", None)
    done = python_children.run([sys.executable, "-m", "tests.structure.lower_checkpoint", str(out),
                                str(seed)], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(out.read_text())
    found["pte"] = out.with_name(out.name + ".pte").read_bytes()
    return found


def test_second_checkpoint_derives_every_class_member(tmp_path):
    cache = tmp_path / "cache"
    first = _lower_in_process(tmp_path, 0, cache)
    second = _lower_in_process(tmp_path, 1, cache)
    assert first["classes"]["derived"] > 0 and first["classes"]["verified"] > 0, first
    # partitions without weights hit the preprocess cache; the others were derived,
    # except classes of one that A preprocessed without proving a template
    assert second["hits"] < second["partitions"] - second["classes"]["derived"], second
    classes = second["classes"]
    assert classes["verified"] == 0 and not classes["fallbacks"], classes  # nothing re-proven
    assert classes["derived"] > first["classes"]["derived"], (first, second)
    _, reference = lower(aten_program("executorch_llama", "fp32", seed=1),
                         partitioners("xnnpack"), fastlower=False)
    assert second["pte"] == reference.buffer
    assert first["pte"] != second["pte"]
