"""ExecuTorch's own LLM export (``export_llm``) with fastlower, as users run it (issue 17).

The tiny config in the default run: the reference (plain ``python``), then
``fastlower run`` twice with the same cache folder, each its own process. The three
``.pte`` files must be byte-identical, and the second fastlower process must take
every partition from the cache (the first misses them all). The stories15M-size
and unquantized configs run in slow mode; the timings are benchmarks
(``benchmarks/test_export_llm_bench.py``).
"""

from __future__ import annotations

import pytest

from .export_llm import STORIES15M, TINY, run_export


def _reference_then_cold_then_warm(config, tmp_path):
    reference = run_export("reference", config, tmp_path)
    assert reference.ok, reference.log
    cache = tmp_path / "cache"
    cold = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache)
    assert cold.ok, cold.log
    warm = run_export("fastlower", config, tmp_path, workers=2, cache_dir=cache)
    assert warm.ok, warm.log
    assert cold.pte_sha256 == reference.pte_sha256, "fastlower's .pte differs from the reference's"
    assert warm.pte_sha256 == reference.pte_sha256, "the warm run's .pte differs"
    return reference, cold, warm


@pytest.mark.parametrize("config", [
    TINY,
    pytest.param(TINY.with_qmode(None), marks=pytest.mark.slow),
    pytest.param(STORIES15M, marks=pytest.mark.slow),
], ids=lambda c: c.name)
def test_export_llm_identical_pte_and_warm_cache(config, tmp_path):
    _, cold, warm = _reference_then_cold_then_warm(config, tmp_path)
    assert cold.cache_misses > 0 and cold.cache_hits == 0
    # every partition of both lowerings (two partitioners) from the cache
    assert (warm.cache_hits, warm.cache_misses) == (cold.cache_misses, 0)
