"""``get_source_partitions`` inside ``accelerated()`` when callers edit what it returned, or
edit node metadata in place, between two calls: the reference's answers (it builds every
answer anew and reads the metadata on every call), and the reference's delegates."""

from __future__ import annotations

import random

import pytest
import torch
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend
from executorch.exir import to_edge
from executorch.exir.backend.backend_api import to_backend as reference_to_backend
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from torch.fx.passes.utils import source_matcher_utils

import fastlower
import fastlower.partitioners as fp
from fastlower.core import loader as _core_loader
from fastlower.partitioners import source_partitions as sp
from tests.differential import harness as H

from .source_graphs import (CLASS_NAMES, FQNS, SOURCES, TORCH_FNS, canonical, edit_steps_match,
                            random_source_graph, random_wanted)

REFERENCE = sp.reference_get_source_partitions


def _native(graph, wanted, filter_fn=None):
    return source_matcher_utils.get_source_partitions(graph, wanted, filter_fn)


@pytest.fixture(params=["core", "twin"])
def watch_impl(request, monkeypatch):
    """The metadata watch of the C++ core, or of its Python twin."""
    if request.param == "twin":
        monkeypatch.setenv(_core_loader.FORCE_PYTHON_ENV, "1")
    elif _core_loader.load_core() is None:
        pytest.skip("fastlower._core is not available")
    return request.param


def _mutate_answer(rng: random.Random, answer) -> None:
    """What a partitioner might do to the partitions it got back."""
    for parts in answer.values():
        for part in parts:
            kind = rng.choice(["trim", "clear", "append", "replace", "none"])
            if kind == "trim":
                del part.nodes[1:]
            elif kind == "clear":
                part.input_nodes.clear()
                part.output_nodes.clear()
                part.params.clear()
            elif kind == "append" and part.nodes:
                part.nodes.append(part.nodes[0])
            elif kind == "replace":
                part.nodes = []
                part.source = "other"
        if parts and rng.random() < 0.3:
            parts.pop()


@pytest.mark.parametrize("seed", range(20))
def test_mutating_the_answer_leaves_the_next_one_alone(seed):
    rng = random.Random(seed)
    gm = random_source_graph(rng, rng.randint(20, 100))
    with fp.accelerated():
        for _ in range(5):
            wanted = random_wanted(rng)
            first = _native(gm.graph, wanted)
            assert canonical(first) == canonical(REFERENCE(gm.graph, wanted))
            _mutate_answer(rng, first)
            again = _native(gm.graph, wanted)
            assert canonical(again) == canonical(REFERENCE(gm.graph, wanted))
            fresh = [id(x) for parts in again.values() for p in parts
                     for x in (p, p.nodes, p.input_nodes, p.output_nodes, p.params)]
            old = {id(x) for parts in first.values() for p in parts
                   for x in (p, p.nodes, p.input_nodes, p.output_nodes, p.params)}
            assert not old.intersection(fresh)  # `first` is still alive: ids are not reused


def _edit_meta_in_place(rng: random.Random, gm) -> str:
    """One in-place write into a node's metadata (never a new ``meta`` dict)."""
    node = rng.choice([n for n in gm.graph.nodes if n.op in ("call_function", "get_attr")])
    meta = node.meta
    stack, modules = meta.get("source_fn_stack"), meta.get("nn_module_stack")
    kind = rng.choice(["set_stack", "append", "last", "pop_stack", "torch_fn", "pop_torch_fn",
                       "module", "pop_module"])
    if kind == "set_stack":
        meta["source_fn_stack"] = [(rng.choice(FQNS), rng.choice(SOURCES))]
    elif kind == "append" and isinstance(stack, list):
        stack.append((rng.choice(FQNS), rng.choice(SOURCES)))
    elif kind == "last" and isinstance(stack, list) and stack:
        stack[-1] = (rng.choice(FQNS), rng.choice(SOURCES))
    elif kind == "pop_stack" and stack is not None:
        del meta["source_fn_stack"]
    elif kind == "torch_fn":
        meta["torch_fn"] = (rng.choice(FQNS), rng.choice(TORCH_FNS))
    elif kind == "pop_torch_fn" and "torch_fn" in meta:
        meta.pop("torch_fn")
    elif kind == "module" and isinstance(modules, dict):
        modules[f"k{rng.randint(0, 3)}"] = (rng.choice(FQNS), rng.choice(CLASS_NAMES))
    elif kind == "pop_module" and modules:
        modules.popitem()
    else:
        return "none"
    return kind


@pytest.mark.parametrize("seed", range(25))
def test_in_place_metadata_edits_between_calls(seed, watch_impl):
    rng = random.Random(500 + seed)
    gm = random_source_graph(rng, rng.randint(20, 100))
    with fp.accelerated():
        assert edit_steps_match(rng, gm, _edit_meta_in_place, _native, REFERENCE,
                                with_filters=False) > 10


def test_unfollowable_metadata_is_answered_but_not_kept(watch_impl):
    """A ``source_fn_stack`` the watch cannot follow (a list as its last entry): every
    call builds its answer anew, so an in-place edit of that entry is still seen."""
    gm = random_source_graph(random.Random(4), 40)
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    entry = ["fqn", "relu"]
    node.meta = {"source_fn_stack": [entry]}
    with fp.accelerated():
        assert canonical(_native(gm.graph, ["relu", "add"])) == canonical(
            REFERENCE(gm.graph, ["relu", "add"]))
        entry[1] = "add"
        got = _native(gm.graph, ["relu", "add"])
        assert canonical(got) == canonical(REFERENCE(gm.graph, ["relu", "add"]))
        assert any(node in p.nodes for p in got.get("add", []))


# --------------------------------------------------------------------------- delegates


class _TrimmingPartitioner(Partitioner):
    """Asks for the linear source partitions, keeps the first node of each (a filtering
    idiom that edits the returned objects), asks again and delegates what it got then."""

    def __init__(self) -> None:
        super().__init__()
        self.delegation_spec = DelegationSpec(XnnpackBackend.__name__, [])
        self.sizes = []

    def partition(self, exported_program) -> PartitionResult:
        graph = exported_program.graph
        for part in _native(graph, [torch.nn.Linear]).get(torch.nn.Linear, []):
            del part.nodes[1:]
        tags = {}
        for k, part in enumerate(_native(graph, [torch.nn.Linear]).get(torch.nn.Linear, [])):
            self.sizes.append(len(part.nodes))
            for node in part.nodes:
                node.meta["delegation_tag"] = f"linear_{k}"
            tags[f"linear_{k}"] = self.delegation_spec
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


def _edge_program():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    aten = torch.export.export(model.eval(), (torch.randn(2, 8),), strict=False)
    return to_edge(aten).exported_program()  # linear decomposed: permute + addmm per layer


def test_trimming_partitioner_gets_the_references_delegates():
    ref_partitioner, got_partitioner = _TrimmingPartitioner(), _TrimmingPartitioner()
    ref = reference_to_backend(_edge_program(), ref_partitioner)
    got = fastlower.to_backend(_edge_program(), got_partitioner)
    assert got_partitioner.sizes == ref_partitioner.sizes and min(ref_partitioner.sizes) > 1
    H.assert_same_lowering(ref, got)


@pytest.mark.parametrize("seed", range(10))
def test_core_watch_against_its_twin(seed):
    """The core's watch reports a change whenever the twin's does (it compares dict
    version tags, so it may report more), and neither reports one without a write."""
    core = _core_loader.load_core()
    if core is None:
        pytest.skip("fastlower._core is not available")
    from fastlower.core.twin.meta_watch import MetaWatch as TwinWatch

    rng = random.Random(900 + seed)
    gm = random_source_graph(rng, 60)
    for _ in range(20):
        metas = [n.meta for n in gm.graph.nodes]
        native, twin = core.MetaWatch(metas), TwinWatch(metas)
        assert native.unchanged() and twin.unchanged() and len(native) == len(twin)
        if _edit_meta_in_place(rng, gm) == "none":
            continue
        assert twin.unchanged() or not native.unchanged()


@pytest.mark.parametrize("meta", [
    {"source_fn_stack": "x"}, {"source_fn_stack": [["f", "relu"]]}, {"torch_fn": ["f", "a.b"]},
    {"nn_module_stack": {"k": ["f", "c"]}}, {"nn_module_stack": [("f", "c")]}])
def test_both_watches_decline_what_they_cannot_follow(meta):
    from fastlower.core.twin.meta_watch import MetaWatch as TwinWatch

    with pytest.raises(ValueError):
        TwinWatch([{}, meta])
    core = _core_loader.load_core()
    if core is not None:
        with pytest.raises(core.Unsupported):
            core.MetaWatch([{}, meta])
