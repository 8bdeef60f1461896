"""ExecuTorch's ``export_llm`` at stories15M's size (slow mode): the reference, then
``fastlower run`` twice with one cache folder, each its own process; the three ``.pte``
files byte-identical, the second fastlower process served from the lowering cache.

Its own module so that, under ``--dist loadscope``, another worker runs it beside
``test_export_llm.py``'s slow cases.
"""

from __future__ import annotations

import pytest

from .cold_warm import reference_then_cold_then_warm
from .export_llm import STORIES15M


@pytest.mark.slow
def test_export_llm_stories15m_identical_pte_and_warm_cache(tmp_path):
    reference_then_cold_then_warm(STORIES15M, tmp_path)
