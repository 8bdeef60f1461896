"""``get_source_partitions`` inside ``accelerated()`` == torch.fx's, on random graphs with
random metadata, wanted sources and filters, also across edits between calls; the index
is reused while the graph is unchanged (and after an edit is undone)."""

from __future__ import annotations

import random

import pytest
import torch
from torch.fx.passes.utils import source_matcher_utils

import fastlower.partitioners as fp
from fastlower.partitioners import source_partitions as sp

from .source_graphs import (canonical, edit_steps_match, random_edit, random_filter,
                            random_source_graph, random_wanted)

REFERENCE = sp.reference_get_source_partitions


@pytest.fixture
def builds(monkeypatch):
    """Counts index builds."""
    count = {"n": 0}
    real = sp.build_index

    def counting(graph, wanted, metas=None):
        count["n"] += 1
        return real(graph, wanted, metas)

    monkeypatch.setattr(sp, "build_index", counting)
    return count


def _native(graph, wanted, filter_fn=None):
    # through torch.fx's own module attribute: the binding callers use
    return source_matcher_utils.get_source_partitions(graph, wanted, filter_fn)


@pytest.mark.parametrize("seed", range(60))
def test_random_graphs_match_the_reference(seed, builds):
    rng = random.Random(seed)
    gm = random_source_graph(rng, rng.randint(5, 120))
    with fp.accelerated():
        for _ in range(6):
            wanted, filter_fn = random_wanted(rng), random_filter(rng)
            expected = canonical(REFERENCE(gm.graph, wanted, filter_fn))
            assert canonical(_native(gm.graph, wanted, filter_fn)) == expected
            assert canonical(_native(gm.graph, wanted, filter_fn)) == expected  # from the index
    assert builds["n"] >= 1


@pytest.mark.parametrize("seed", range(40))
def test_edits_between_calls(seed, builds):
    """Random edits through torch.fx's API between calls: never a stale answer."""
    rng = random.Random(1000 + seed)
    gm = random_source_graph(rng, rng.randint(20, 100))
    with fp.accelerated():
        assert edit_steps_match(rng, gm, random_edit, _native, REFERENCE) > 5


def test_edit_then_undo_keeps_the_index(builds):
    """What XNNPACK's GEMM config does between two lookups: rewire args and users, restore."""
    rng = random.Random(7)
    gm = random_source_graph(rng, 80)
    wanted = [torch.nn.Linear, torch.nn.functional.linear, "linear", "relu"]
    with fp.accelerated():
        first = canonical(_native(gm.graph, wanted))
        assert builds["n"] == 1
        for node in [n for n in gm.graph.nodes if n.op == "call_function"][5:25]:
            old_args, old_users = node.args, node.users
            earlier = next(n for n in gm.graph.nodes if n.op == "placeholder")
            node.args = tuple(earlier for _ in old_args)
            node.users = earlier.users
            node.args, node.users = old_args, old_users
            assert canonical(_native(gm.graph, wanted)) == first
        assert builds["n"] == 1
        # a real edit: rebuilt, and right
        victim = next(n for n in gm.graph.nodes if n.op == "call_function" and n.args)
        victim.args = (next(iter(gm.graph.nodes)),) * len(victim.args)
        assert canonical(_native(gm.graph, wanted)) == canonical(REFERENCE(gm.graph, wanted))
        assert builds["n"] == 2


def test_meta_dict_replacement_is_an_edit(builds):
    rng = random.Random(3)
    gm = random_source_graph(rng, 60)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    with fp.accelerated():
        before = canonical(_native(gm.graph, ["relu"]))
        node.meta = {**node.meta, "source_fn_stack": [("fresh", "relu")]}
        after = _native(gm.graph, ["relu"])
        assert canonical(after) == canonical(REFERENCE(gm.graph, ["relu"]))
        assert canonical(after) != before
        assert any(node in p.nodes for parts in after.values() for p in parts)


def test_index_is_per_scope(builds):
    gm = random_source_graph(random.Random(5), 50)
    with fp.accelerated():
        _native(gm.graph, ["relu"])
        _native(gm.graph, ["relu"])
    with fp.accelerated():
        _native(gm.graph, ["relu"])
    assert builds["n"] == 2


def test_outside_accelerated_the_reference_runs(builds):
    gm = random_source_graph(random.Random(9), 40)
    _native(gm.graph, ["relu"])
    with fp.accelerated(), fp.reference():
        _native(gm.graph, ["relu"])
    assert builds["n"] == 0


@pytest.mark.parametrize("meta", [
    {"source_fn_stack": []},                              # st[-1] on an empty stack
    {"torch_fn": ("fqn", "nodot")},                       # split(".")[1]
    {"torch_fn": ("only-one",)},                          # unpacking
    {"nn_module_stack": {"k": ("fqn",)}},                 # unpacking
])
def test_bad_metadata_raises_the_references_error(meta, builds):
    gm = random_source_graph(random.Random(11), 30)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.meta = dict(meta)
    with pytest.raises(Exception) as expected:
        REFERENCE(gm.graph, ["relu"])
    with fp.accelerated(), pytest.raises(type(expected.value)) as got:
        _native(gm.graph, ["relu"])
    assert str(got.value) == str(expected.value)


def test_callers_that_imported_it_by_name_get_it():
    from executorch.backends.xnnpack.partition.config import gemm_configs
    from executorch.backends.xnnpack.quantizer import xnnpack_quantizer_utils

    with fp.accelerated():
        for module in (gemm_configs, xnnpack_quantizer_utils, source_matcher_utils):
            assert module.get_source_partitions is sp.get_source_partitions
    fp.uninstall()
    for module in (gemm_configs, xnnpack_quantizer_utils, source_matcher_utils):
        assert module.get_source_partitions is REFERENCE


def test_holder_lookup_matches_a_scan():
    rng = random.Random(21)
    gm = random_source_graph(rng, 100)
    wanted = [torch.nn.Linear, torch.nn.functional.linear, "linear", "relu", "add"]
    with fp.accelerated():
        for node in gm.graph.nodes:
            result, holder = sp.partitions_and_holder(gm.graph, wanted, node)
            scanned = None
            for parts in result.values():
                for part in parts:
                    if node in part.nodes:
                        scanned = part
            assert holder is scanned
    assert sp.partitions_and_holder(gm.graph, wanted, node) is None  # outside: not answered


def test_writes_of_other_meta_keys_keep_the_index(builds):
    """Partitioners write their own keys into node.meta between lookups: the index stays;
    a write of a key get_source_partitions reads drops it."""
    gm = random_source_graph(random.Random(13), 60)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    with fp.accelerated():
        first = canonical(_native(gm.graph, ["relu", "add"]))
        for node in nodes:
            node.meta["delegation_tag"] = "tag0"
        assert canonical(_native(gm.graph, ["relu", "add"])) == first
        assert builds["n"] == 1
        nodes[0].meta["source_fn_stack"] = [("fresh", "relu")]
        assert canonical(_native(gm.graph, ["relu", "add"])) == canonical(
            REFERENCE(gm.graph, ["relu", "add"]))
        assert builds["n"] == 2
