"""Cost of seeing a partitioner's edits: the structure check the reference
also makes plus the argument comparison it does not, against the whole machinery.

``edit-check-L<n>``: ``check_unmodified`` + ``find_edits`` on a tagged copy of the
``<n>``-layer decoder (XNNPACK's tags), i.e. what ``to_backend`` adds per lowering.
``machinery-L<n>``: ``fastlower.to_backend`` with those tags pre-applied and the
no-op backend, i.e. benchmark (b) of ``test_lowering_bench.py``. The share of the
first in the second is written to ``extra_info["edit_check_share"]``.

Run: ``.venv/bin/python -m pytest benchmarks/test_edit_check_bench.py --bench-layers 8,32``
"""

from __future__ import annotations

import copy


import benchlib


def _layers(config):
    return sorted({int(x) for x in config.getoption("--bench-layers").split(",") if x.strip()})


def pytest_generate_tests(metafunc):
    if "edit_layers" in metafunc.fixturenames:
        layers = _layers(metafunc.config)
        metafunc.parametrize("edit_layers", layers, ids=[f"L{n}" for n in layers])


_MACHINERY = {}


def test_machinery(benchmark, programs, warmed_up, edit_layers):
    import fastlower

    tags = programs.tags(edit_layers, "xnnpack")

    def setup():
        return (programs.fresh(edit_layers), benchlib.PretaggedPartitioner(tags)), {}

    benchmark.pedantic(fastlower.to_backend, setup=setup, rounds=3)
    _MACHINERY[edit_layers] = benchmark.stats.stats.min


def test_edit_check(benchmark, programs, warmed_up, edit_layers):
    from fastlower.lowering.edits import find_edits
    from fastlower.lowering import check_unmodified

    original = programs.pristine(edit_layers)
    tagged = benchlib.PretaggedPartitioner(programs.tags(edit_layers, "xnnpack"))(
        copy.deepcopy(original)).tagged_exported_program

    def check():
        check_unmodified(tagged, original, "bench")
        return find_edits(tagged.graph_module, original.graph_module, structure_checked=True)

    edits = benchmark.pedantic(check, rounds=10)
    assert not edits  # tags only: nothing to report
    if edit_layers in _MACHINERY:
        share = benchmark.stats.stats.min / _MACHINERY[edit_layers]
        benchmark.extra_info["edit_check_share"] = share
        benchmark.extra_info["machinery_seconds"] = _MACHINERY[edit_layers]
