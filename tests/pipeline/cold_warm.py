"""The check both ``export_llm`` test modules make: reference, cold, warm. (Not a test
module, so pytest does not rewrite its asserts: each says what it compared.)"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from .export_llm import ExportRun, LlmConfig, run_export


def reference_then_cold_then_warm(config: LlmConfig, tmp_path: Path,
                                  reference: Optional[ExportRun] = None) -> None:
    """``export_llm`` of ``config``: the reference (unless given), then fastlower twice with
    one cache folder, each its own process. The three ``.pte`` files are byte-identical;
    the first fastlower run misses and stores, the second is the lowering cache's hit."""
    if reference is None:
        reference = run_export("reference", config, tmp_path)
    assert reference.ok, reference.log
    cache = tmp_path / "cache"
    cold = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache)
    assert cold.ok, cold.log
    warm = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache)
    assert warm.ok, warm.log
    assert cold.pte_sha256 == reference.pte_sha256, "fastlower's .pte differs from the reference's"
    assert warm.pte_sha256 == reference.pte_sha256, "the warm run's .pte differs"
    for run in (reference, cold, warm):  # the harness's page-fault counts, one pair per call
        assert len(run.calls_minor_faults) == len(run.calls) > 0, run
        assert all(0 < start <= end for start, end in run.calls_minor_faults), run
    assert cold.lowering_cache == ["miss"], cold.lowering_cache
    # the export block and the lowering's steps reached torch's symbolic arithmetic (a
    # program with symbolic sizes: export_llm's dynamic sequence length)
    assert reference.sym_arith == {} and cold.sym_arith.get("answered", 0) > 0, cold.sym_arith
    # and compiled a graph module's source once per text (in_process.graph_code: a torch
    # whose function it does not know is left alone, and this fails)
    assert reference.graph_code == {} and cold.graph_code.get("remembered", 0) > 0, \
        cold.graph_code
    # ExecuTorch's passes in the edge stage took earlier passes' fake outputs
    # (in_process.fake_outputs.repeated): [name, ..., repeated calls reused, run]
    edge = [counts for counts in cold.fake_outputs if counts[0] == "to_edge_transform_and_lower"]
    assert edge and edge[0][5] > 0, cold.fake_outputs
    assert cold.cache_misses > 0 and cold.cache_hits == 0, (cold.cache_hits, cold.cache_misses)
    # the whole call from the lowering cache: to_backend never ran
    # a miss here once (one run of the whole slow set, not reproduced alone or under load):
    # the cold run's log says whether it stored (a store refused is a CacheWarning), the
    # warm run's why it missed (a damaged entry)
    assert warm.lowering_cache == ["hit"], (warm.lowering_cache, cold.log[-3000:],
                                            warm.log[-3000:])
    assert (warm.cache_hits, warm.cache_misses) == (0, 0), (warm.cache_hits, warm.cache_misses)
