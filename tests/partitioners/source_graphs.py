"""Random fx graphs carrying random ``source_fn_stack`` / ``torch_fn`` / ``nn_module_stack``
metadata, random ``wanted_sources`` and filters, and random edits, for the
``get_source_partitions`` tests."""

from __future__ import annotations

import operator
import random
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.nn.functional as F
from torch import nn
from torch.fx import Graph, GraphModule, Node

aten = torch.ops.aten


class MyLinear(nn.Linear):
    """A subclass: ``issubclass`` matches it against ``nn.Linear`` in the module-stack path."""


SOURCES: List[Any] = [F.linear, F.relu, operator.add, nn.Linear, nn.Conv2d, MyLinear, nn.ReLU,
                      "linear", "relu", "add"]
CLASS_NAMES = ["torch.nn.modules.linear.Linear", "torch.nn.modules.conv.Conv2d",
               f"{MyLinear.__module__}.{MyLinear.__qualname__}", "torch.nn.modules.activation.ReLU"]
TORCH_FNS = ["builtin_function_or_method.linear", "function.relu", "method_descriptor.add",
             "Tensor.mul", "builtin_function_or_method.conv2d"]
FQNS = ["l0", "l1", "l2", "block.0.mlp", "block.1.mlp"]
OPS = [aten.add.Tensor, aten.mul.Tensor, aten.relu.default, aten.mm.default, aten.addmm.default,
       aten.permute.default]


def random_meta(rng: random.Random) -> Dict[str, Any]:
    meta: Dict[str, Any] = {}
    kind = rng.random()
    if kind < 0.35:
        depth = rng.randint(1, 3)
        meta["source_fn_stack"] = [(rng.choice(FQNS), rng.choice(SOURCES)) for _ in range(depth)]
    if 0.25 < kind < 0.7 or rng.random() < 0.1:
        meta["torch_fn"] = (rng.choice(FQNS), rng.choice(TORCH_FNS))
    if rng.random() < 0.6:
        stack = {}
        for depth in range(rng.randint(1, 3)):
            cls = rng.choice(CLASS_NAMES + [nn.Linear, nn.Conv2d, MyLinear, nn.ReLU, nn.Module])
            stack[f"k{depth}"] = (rng.choice(FQNS), cls)
        meta["nn_module_stack"] = stack
    return meta


def random_source_graph(rng: random.Random, n_nodes: int) -> GraphModule:
    """Placeholders, get_attr constants and compute nodes with random earlier inputs."""
    root = nn.Module()
    graph = Graph()
    values: List[Node] = [graph.placeholder(f"x{i}") for i in range(max(1, n_nodes // 15))]
    for i in range(max(1, n_nodes // 12)):
        root.register_buffer(f"c{i}", torch.zeros(1))
        node = graph.get_attr(f"c{i}")
        node.meta.update(random_meta(rng))
        values.append(node)
    while len(values) < n_nodes:
        args = tuple(rng.choice(values[-12:] if rng.random() < 0.8 else values)
                     for _ in range(rng.randint(1, 3)))
        node = graph.call_function(rng.choice(OPS), args)
        node.meta.update(random_meta(rng))
        values.append(node)
    outs = [v for v in values if not v.users and v.op == "call_function"]
    graph.output(tuple(outs[-4:]) if outs else values[-1])
    return GraphModule(root, graph)


def random_wanted(rng: random.Random) -> List[Any]:
    return rng.sample(SOURCES, rng.randint(1, 5))


def random_filter(rng: random.Random) -> Optional[Callable[[Node], bool]]:
    return rng.choice([None, lambda n: n.op == "call_function", lambda n: len(n.name) % 3 != 0,
                       lambda n: len(n.users) < 3])


def canonical(result: Dict[Any, List[Any]]) -> List[Any]:
    """Everything a caller can observe of a get_source_partitions result: keys in order
    (by value for strings, which the reference makes anew per call, else by identity) and
    each SourcePartition's fields, lists in order, nodes by identity."""
    def ident(x: Any) -> Any:
        return ("str", x) if type(x) is str else ("id", id(x))

    return [(ident(key), [(ident(p.source), [id(n) for n in p.nodes],
                           [id(n) for n in p.input_nodes], [id(n) for n in p.output_nodes],
                           [id(n) for n in p.params]) for p in parts])
            for key, parts in result.items()]


def random_edit(rng: random.Random, gm: GraphModule) -> str:
    """One random edit through torch.fx's API; returns its name."""
    graph = gm.graph
    nodes = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    compute = [n for n in nodes if n.op == "call_function"]
    kind = rng.choice(["insert", "erase", "set_args", "replace_uses", "move", "meta", "insert_arg",
                       "update_arg", "op_source"])
    if kind == "insert" and nodes:
        anchor = rng.choice(compute or nodes)
        with graph.inserting_before(anchor):
            new = graph.call_function(
                aten.relu.default,
                (rng.choice(list(graph.nodes)[:_index(anchor)] or [anchor.prev]),))
        new.meta.update(random_meta(rng))
    elif kind == "erase":
        dead = [n for n in compute if not n.users]
        if not dead:
            return "none"
        graph.erase_node(rng.choice(dead))
    elif kind in ("set_args", "update_arg", "insert_arg") and compute:
        node = rng.choice(compute)
        earlier = [m for m in graph.nodes if m.op != "output"][:_index(node)]
        if not earlier:
            return "none"
        if kind == "set_args":
            node.args = tuple(rng.choice(earlier) for _ in range(len(node.args)))
        elif kind == "update_arg":
            node.update_arg(rng.randrange(len(node.args)), rng.choice(earlier))
        else:
            node.insert_arg(0, rng.choice(earlier))
    elif kind == "replace_uses" and compute:
        node = rng.choice(compute)
        earlier = [m for m in graph.nodes if m.op != "output"][:_index(node)]
        if not earlier:
            return "none"
        node.replace_all_uses_with(rng.choice(earlier))
    elif kind == "move" and len(compute) > 2:
        node, anchor = rng.sample(compute, 2)
        anchor.prepend(node)
    elif kind == "meta" and nodes:
        node = rng.choice(nodes)
        node.meta = {**node.meta, **random_meta(rng)}
    elif kind == "op_source" and compute:
        node = rng.choice(compute)
        node.meta = {"source_fn_stack": [(rng.choice(FQNS), rng.choice(SOURCES))]}
    else:
        return "none"
    return kind


def edit_steps_match(rng: random.Random, gm: GraphModule, edit: Callable[..., str],
                     native: Callable[..., Any], reference: Callable[..., Any],
                     with_filters: bool = True, steps: int = 25) -> int:
    """``steps`` rounds of: two ``wanted_sources`` asked through ``native`` and
    ``reference`` (same answers asserted), then ``edit(rng, gm)``; returns how many edits
    were made."""
    wanted = [random_wanted(rng) for _ in range(2)]
    edits = 0
    for step in range(steps):
        for w in wanted:
            filter_fn = random_filter(rng) if with_filters else None
            assert canonical(native(gm.graph, w, filter_fn)) == canonical(
                reference(gm.graph, w, filter_fn)), f"step {step}"
        edits += edit(rng, gm) != "none"
    return edits


def _index(node: Node) -> int:
    return list(node.graph.nodes).index(node)
