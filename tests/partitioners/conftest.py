"""Shared helpers of the partitioner tests: run reference, twin and native core on one case."""

from __future__ import annotations

from typing import List, Tuple

import pytest
from executorch.exir.backend.canonical_partitioners.group_partitioner import GroupBasedPartitioner
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

from fastlower.core.loader import load_core
from fastlower.core.twin import partition_proposals as twin
from fastlower.partitioners import native, reference

from .random_graphs import NamesSupport, RandomCase

CORE = load_core()


def partitions_key(partitions) -> List[Tuple[int, List[Tuple[str, object]]]]:
    """Ids, node names in order and node-order values: everything a caller can observe."""
    return [(p.id, [(n.name, order) for n, order in p.nodes.items()]) for p in partitions]


def implementations():
    """(name, capability propose, group propose) of every implementation available here."""
    impls = [("twin", twin.propose_capability_partitions, twin.propose_group_partitions)]
    if CORE is not None:
        impls.append(("native", CORE.propose_capability_partitions, CORE.propose_group_partitions))
    return impls


def check_capability(case: RandomCase, with_reference: bool = True, **options) -> int:
    """Reference, twin and native agree; returns the number of partitions."""
    part = CapabilityBasedPartitioner(case.graph_module, NamesSupport(case.supported), **options)
    graph = native._encode(part)
    args = (graph.users_offsets, graph.users, graph.is_getitem, graph.supported,
            graph.compute_weight, part.allows_single_node_partition, part.skip_horizontal_fusion)
    results = {name: native._partitions(graph, cap(*args)) for name, cap, _ in implementations()}
    if with_reference:
        with reference():
            results["reference"] = part.propose_partitions()
    keys = {name: partitions_key(r) for name, r in results.items()}
    first = next(iter(keys.values()))
    for name, key in keys.items():
        assert key == first, f"{name} differs from {next(iter(keys))}"
    return len(first)


def check_group(case: RandomCase, with_reference: bool = True, **options) -> int:
    part = GroupBasedPartitioner(case.graph_module, NamesSupport(case.supported),
                                 node_groups=case.node_groups, **options)
    graph = native._encode(part)
    offsets, members = native._group_arrays(part, graph)
    args = (graph.users_offsets, graph.users, graph.inputs_offsets, graph.inputs, graph.is_getitem,
            graph.supported, graph.compute_weight, offsets, members,
            part.allows_single_node_partition)
    results = {name: native._partitions(graph, grp(*args)) for name, _, grp in implementations()}
    if with_reference:
        with reference():
            results["reference"] = part.propose_partitions()
    keys = {name: partitions_key(r) for name, r in results.items()}
    first = next(iter(keys.values()))
    for name, key in keys.items():
        assert key == first, f"{name} differs from {next(iter(keys))}"
    return len(first)


@pytest.fixture
def core():
    if CORE is None:
        pytest.skip("native core not built")
    return CORE
