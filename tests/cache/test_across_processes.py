"""The lowering cache shared by separate processes (issue 18, item 2 and "Done when").

Each lowering runs in a new Python process (``tests/cache/lower_once.py``) on the same
folder, with ExecuTorch's demo add/mul partitioner then XNNPACK's (three partitions:
add/mul, ``l1``, ``l2``):

* the first process, calling the plain ``executorch.exir.to_edge_transform_and_lower``
  and ``to_executorch`` inside ``fastlower.patch.installed()``, misses and stores;
* a second process calling ``fastlower.cache.to_edge_transform_and_lower`` computes
  the same key (and so does this one) and hits, with the same ``.pte``;
* a third, patched like the first, hits both the lowering and ``to_executorch``;
* a new process whose program has one weight of ``l1`` moved misses the lowering
  cache, while the preprocess cache hits the partitions without that weight.

Every ``.pte`` is compared with ExecuTorch's own lowering of the same program.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, Dict

import pytest

from fastlower.cache.key import lowering_key

from . import lower_once
from .helpers import base_args, small_aten


@pytest.fixture(scope="module")
def first(tmp_path_factory) -> Dict[str, Any]:
    """The first process: patched ExecuTorch entry points, an empty folder."""
    work = tmp_path_factory.mktemp("first")
    result = lower_once.run(work / "first.json", ["base"], work / "cache", chain=True,
                            patched=True, real=True)
    return dict(result, folder=work / "cache")


def _copy_of(first: Dict[str, Any], tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    shutil.copytree(first["folder"], folder)
    return folder


def test_the_first_process_misses_and_stores(first):
    (step,) = first["steps"]
    assert step["lowering_cache"] == "miss" and not step["to_executorch_hit"]
    assert step["pte"] == lower_once.reference_pte("base", chain=True)
    assert first["warnings"] == []


def test_a_second_process_computes_the_same_key_and_hits(first, tmp_path):
    # two real interpreters (other hash seeds): the key must not depend on the process
    second = lower_once.run(tmp_path / "second.json", ["base"], _copy_of(first, tmp_path),
                            chain=True, real=True)
    (before,), (after,) = first["steps"], second["steps"]
    here = lowering_key(small_aten(), generate_etrecord=False,
                        **base_args(partitioner=lower_once.partitioners(chain=True))).key
    assert before["key"] == after["key"] == here
    assert after["lowering_cache"] == "hit"
    assert after["pte"] == before["pte"] == lower_once.reference_pte("base", chain=True)
    # the report of a hit is read off the stored programs: every delegate, as a hit
    assert after["cache_hits"] == {"BackendWithCompilerDemo": 1, "XnnpackBackend": 2}
    assert after["cache_misses"] == {} and second["warnings"] == []


def test_plain_executorch_calls_under_the_patch_hit_in_a_second_process(first, tmp_path):
    again = lower_once.run(tmp_path / "again.json", ["base"], _copy_of(first, tmp_path),
                           chain=True, patched=True)
    (step,) = again["steps"]
    assert step["lowering_cache"] == "hit", "the patched to_edge_transform_and_lower missed"
    assert step["to_executorch_hit"], "the patched to_executorch was not served from the cache"
    assert step["key"] == first["steps"][0]["key"]
    assert step["pte"] == lower_once.reference_pte("base", chain=True)
    assert again["warnings"] == []


def test_one_parameter_changed_misses_but_reuses_the_other_partitions(first, tmp_path):
    changed = lower_once.run(tmp_path / "changed.json", ["param"], _copy_of(first, tmp_path),
                             chain=True)
    (step,) = changed["steps"]
    assert step["key"] != first["steps"][0]["key"]
    assert step["lowering_cache"] == "miss"
    # one partition holds l1's weight: it alone is preprocessed again; l2's is reused
    assert step["cache_misses"] == {"XnnpackBackend": 1}
    assert step["cache_hits"].get("XnnpackBackend") == 1
    assert step["pte"] == lower_once.reference_pte("param", chain=True)
    assert step["pte"] != first["steps"][0]["pte"]
    assert changed["warnings"] == []
