"""A hit equals the lowering it stands for (issue 18, item 3).

For every model and chain of the differential suite that has ATen programs
(``tests/models/registry.py``, the ``etl`` path; a second case of a kind with ``-m
slow``), one lowering fills the cache and a
second, of a fresh export, hits; the hit is compared with the reference's own
``to_edge_transform_and_lower`` by the differential harness (programs, delegates,
signatures, state, meta ...), by ``get_delegation_info``, and by the ``.pte``
from ``to_executorch()`` (whose own cache is filled by the miss and read by the
hit). Also: the caller's programs are untouched on a hit and on a miss, the
report of a hit, and verify mode.
"""

from __future__ import annotations

import copy
import warnings

import pytest
from executorch.devtools.backend_debug import get_delegation_info

import fastlower.cache
from fastlower.cache import LoweringCacheVerificationError
from tests.differential import harness as H
from tests.models.registry import MODEL_CASES, SECOND_CASES

from .helpers import base_args, cache_at, lower, small_aten

ETL_CASES = [c for c in MODEL_CASES.values() if "etl" in c.paths]


def _delegation(manager):
    info = get_delegation_info(manager.exported_program().graph_module)
    return (info.num_delegated_subgraphs, info.num_delegated_nodes, info.num_non_delegated_nodes,
            info.get_operator_delegation_dataframe().to_dict("records"))


def _to_executorch(manager, cached: bool):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fastlower.cache.to_executorch(manager) if cached else manager.to_executorch()


# cases of a kind another case has (registry.SECOND_CASES) hit with -m slow
@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=[pytest.mark.slow]
                                               if c.slow or c.name in SECOND_CASES else [])
                                  for c in ETL_CASES])
def test_hit_equals_the_reference(case, tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = H.lower(H.REFERENCE, case.build, "etl").epm
    with cache_at(tmp_path):
        built = case.build()
        first, miss = lower(built.aten, partitioner=built.etl_partitioner())
        built = case.build()
        before = {m: H.input_state(p) for m, p in built.aten.items()}
        hit, report = lower(built.aten, partitioner=built.etl_partitioner())
        assert (miss.lowering_cache, report.lowering_cache) == ("miss", "hit")
        for method, program in built.aten.items():
            assert H.input_state(program) == before[method], "a hit changed the caller's program"
        H.assert_same_lowering(reference, hit, header="the hit differs from the reference")
        assert _delegation(hit) == _delegation(reference)
        assert hit.compile_config == reference.compile_config
        assert hit._config_methods == reference._config_methods
        _to_executorch(first, cached=True)  # fills the to_executorch cache
        served = _to_executorch(hit, cached=True)
    fresh = _to_executorch(reference, cached=False)
    H.assert_same_executorch(fresh, served)
    assert served.executorch_program == fresh.executorch_program
    d = H.Diffs()
    for method in fresh.methods:
        H.compare_exported_programs(d, method, fresh.exported_program(method),
                                    served.exported_program(method))
    d.raise_if_any("the cached to_executorch's execution programs differ")


def test_miss_leaves_the_callers_program_unchanged(tmp_path):
    program = small_aten()
    before = H.input_state(program)
    with cache_at(tmp_path):
        _, report = lower(program, **base_args())
    assert report.lowering_cache == "miss"
    assert H.input_state(program) == before


def test_hit_report_lists_partitions_and_coverage(tmp_path):
    """The report of a hit is read off the cached programs: every delegate of every
    partitioner, coverage, processed bytes, marked as a hit; its JSON is schema-valid."""
    jsonschema = pytest.importorskip("jsonschema")
    from fastlower.report import json as report_json

    case = MODEL_CASES["chain_addmul_then_xnnpack"]
    with cache_at(tmp_path):
        built = case.build()
        lower(built.aten, partitioner=built.etl_partitioner())
        built = case.build()
        manager, report = lower(built.aten, partitioner=built.etl_partitioner())
    assert report is fastlower.last_report()
    assert report.lowering_cache == "hit" and report.lowering_cache_key.startswith("lowering:")
    info = get_delegation_info(manager.exported_program().graph_module)
    assert len(report.partition_records) == info.num_delegated_subgraphs
    assert report.partitions == {"BackendWithCompilerDemo": 1, "XnnpackBackend": 2}
    assert report.delegated_nodes == info.num_delegated_nodes
    assert all(p.cache_hit is True and p.processed_bytes > 0 for p in report.partition_records)
    assert 0 < report.coverage.node_share <= 1
    assert "lowering cache: hit" in report.summary() and "lowering cache: hit" in report.format()
    document = report_json.to_dict(report)
    jsonschema.validate(document, report_json.schema())
    assert document["lowering_cache"]["status"] == "hit"


def test_verify_mode_catches_a_planted_difference(tmp_path):
    """A stored entry whose delegate bytes were changed (consistently: a valid entry)
    passes unnoticed without verify mode and raises, naming the delegate, with it."""
    from fastlower.cache import entry, store
    from fastlower.cache.key import lowering_key

    with cache_at(tmp_path):
        manager, _ = lower(small_aten(), **base_args())
    key = lowering_key(small_aten(), generate_etrecord=False, **base_args()).key
    cache = store.LoweringStore(tmp_path, 2 ** 30)
    steps = entry.read(cache.open(key), cache.seal(key))
    info, payload = next(steps), next(steps)
    program = payload["programs"]["forward"]
    lowered = next(m for m in program.graph_module.modules()
                   if type(m).__name__ == "LoweredBackendModule")
    lowered._processed_bytes = bytes(lowered.processed_bytes) + b"planted"
    cache.put(key, entry.ChunkReader(entry.encode(info, payload, cache.seal(key))))
    cache.close()
    with cache_at(tmp_path):
        served, report = lower(small_aten(), **base_args())
        assert report.lowering_cache == "hit"  # trusted: nothing re-runs
        with cache_at(tmp_path, verify=True), pytest.raises(LoweringCacheVerificationError) as err:
            lower(small_aten(), **base_args())
    assert "lowered_module_0" in err.value.difference and "lowered:" in err.value.difference
    assert err.value.key == key and isinstance(err.value, fastlower.FastlowerError)


def test_verify_mode_passes_on_a_faithful_entry(tmp_path):
    with cache_at(tmp_path):
        lower(small_aten(), **base_args())
        with cache_at(tmp_path, verify=True):
            _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "verified"


def test_hit_replays_the_compile_config_side_effect(tmp_path):
    """The reference adds the ops it kept from decomposition to the caller's config."""
    case = MODEL_CASES["llama1_xnnpack"]
    configs = []
    with cache_at(tmp_path):
        for _ in range(2):
            built = case.build()
            config = copy.deepcopy(base_args()["compile_config"])
            lower(built.aten, partitioner=built.etl_partitioner(), compile_config=config)
            configs.append(config)
    assert sorted(map(str, configs[0]._core_aten_ops_exception_list)) == \
        sorted(map(str, configs[1]._core_aten_ops_exception_list))
    assert configs[0]._core_aten_ops_exception_list, "XNNPACK keeps linear from decomposition"
