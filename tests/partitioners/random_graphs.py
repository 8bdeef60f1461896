"""Random fx graphs, support sets and node groups for the partitioner tests."""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import List, Optional, Set

import torch
from torch.fx import Graph, GraphModule, Node
from torch.fx.passes.operator_support import OperatorSupportBase

aten = torch.ops.aten
COMPUTE_OPS = [aten.add.Tensor, aten.mul.Tensor, aten.relu.default, aten.mm.default,
               aten.cat.default, aten.view.default, aten.sigmoid.default]
TUPLE_OPS = [aten.split.Tensor, aten.max.dim]


@dataclass
class RandomCase:
    graph_module: GraphModule
    supported: Set[str]
    node_groups: Optional[List[List[Node]]]


class NamesSupport(OperatorSupportBase):
    """Supports exactly the nodes whose names are in ``names``."""

    def __init__(self, names: Set[str]):
        self.names = names

    def is_node_supported(self, submodules, node: Node) -> bool:
        return node.name in self.names


def random_graph(rng: random.Random, n_nodes: int, max_fan_in: int = 3,
                 locality: Optional[int] = None) -> GraphModule:
    """A DAG of about ``n_nodes`` nodes: placeholders, compute ops with random earlier
    inputs (within ``locality`` positions when given), tuple producers read by getitems."""
    graph = Graph()
    values: List[Node] = [graph.placeholder(f"x{i}") for i in range(max(1, n_nodes // 20))]
    while len(values) < n_nodes:
        window = values if locality is None else values[-locality:]
        kind = rng.random()
        if kind < 0.12:
            src = rng.choice(window)
            producer = graph.call_function(rng.choice(TUPLE_OPS), (src, 1))
            for k in range(rng.randint(1, 3)):
                values.append(graph.call_function(operator.getitem, (producer, k)))
            if rng.random() < 0.2:  # a tuple producer with a non-getitem user too
                values.append(graph.call_function(aten.relu.default, (producer,)))
            else:
                values.append(producer) if rng.random() < 0.1 else None
        else:
            k = rng.randint(1, max_fan_in)
            args = tuple(rng.choice(window) for _ in range(k))
            op = rng.choice(COMPUTE_OPS)
            values.append(graph.call_function(op, args))
    outs = [v for v in values if not v.users and v.op != "placeholder"]
    graph.output(tuple(outs[-5:]) if outs else values[-1])
    return GraphModule(torch.nn.Module(), graph)


def random_case(seed: int, n_nodes: int, support_ratio: float, group_ratio: float,
                locality: Optional[int] = None) -> RandomCase:
    rng = random.Random(seed)
    gm = random_graph(rng, n_nodes, locality=locality)
    nodes = list(gm.graph.nodes)
    supported = {n.name for n in nodes if rng.random() < support_ratio}
    groups = None
    if group_ratio > 0:
        pool = [n for n in nodes if rng.random() < group_ratio]
        rng.shuffle(pool)
        groups = []
        while pool:
            size = rng.randint(1, 4)
            if rng.random() < 0.5:  # a group of neighbours, like a quantized op's pattern
                seed_node = pool.pop()
                group = [seed_node] + [m for m in list(seed_node.all_input_nodes)[:size - 1]
                                       if all(m not in g for g in groups)]
                pool = [m for m in pool if m not in group]
            else:
                group, pool = pool[:size], pool[size:]
            groups.append(group)
    return RandomCase(gm, supported, groups)
