"""The preprocess cache hits across processes: two separate processes lowering the same
model with the same cache share every partition, and the ``.pte`` is the same.

Each lowering is its own ``python`` process: a key that holds anything that varies
between processes (object ids, addresses, counters, temporary paths) makes the second
process miss, which a lowering repeated in one process would never show.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from .export_llm import ROOT
from tests import python_children


def _lower(model: str, out: Path, cache: Path, *flags: str) -> dict:
    proc = python_children.run(
        [sys.executable, "-m", "tests.pipeline.lower_model", model, str(out),
         "--cache-dir", str(cache), *flags],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((out / "result.json").read_text())
    result["pte"] = (out / "model.pte").read_bytes()
    return result


@pytest.mark.parametrize("model", [
    "hf-llama",  # a Hugging Face decoder exported with strict=False, as users export them
    pytest.param("decoder", marks=pytest.mark.slow),
    pytest.param("hf-gpt2", marks=pytest.mark.slow),
])
def test_second_process_hits_every_partition(model, tmp_path):
    cache = tmp_path / "cache"
    first = _lower(model, tmp_path / "first", cache)
    second = _lower(model, tmp_path / "second", cache)
    assert first["partitions"] > 0
    assert (first["hits"], first["misses"]) == (0, first["partitions"])
    assert (second["hits"], second["misses"]) == (second["partitions"], 0)
    assert second["pte"] == first["pte"]


@pytest.mark.slow  # the default run has it on export_llm (test_export_llm) and tests/cache
def test_second_process_hits_the_lowering_cache(tmp_path):
    """The whole ``to_edge_transform_and_lower``: the first process misses and
    stores, a second one is served the programs (its report read off them: same
    partitions, no preprocess) and writes the same ``.pte`` (``to_executorch`` cached too)."""
    cache = tmp_path / "cache"
    first = _lower("hf-llama", tmp_path / "first", cache, "--lowering-cache")
    second = _lower("hf-llama", tmp_path / "second", cache, "--lowering-cache")
    assert first["lowering_cache"] == "miss" and first["misses"] == first["partitions"] > 0
    assert second["lowering_cache"] == "hit"
    assert second["partitions"] == first["partitions"]
    # the hit's report counts every partition as served from the cache
    assert (second["hits"], second["misses"]) == (second["partitions"], 0)
    assert second["pte"] == first["pte"]
