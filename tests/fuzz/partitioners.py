"""Random partitioners for the differential fuzz.

A :class:`PartitionerRecipe` is drawn from a ``random.Random`` and a
:class:`FuzzPartitioner` applies it to whatever program it is given.  All of
its choices come from ``random.Random(recipe.seed)`` over the nodes in graph
order, so the reference and fastlower (which hand the partitioner equivalent
copies of the same program) see identical tags.

Strategies: contiguous runs, random subsets (often not convex), torch.fx
``CapabilityBasedPartitioner`` with a random supported-op set, everything in
one tag, and "two rules" (a partition that is not convex and owns a mutated
buffer whose update is read outside it).  On top: constant tagging (with
``no_copy``), invalid tags (the output node, a user input, a tag missing from
``partition_tags``), and edits of the graph (a scalar argument or kwarg, a node
added, removed or moved).
"""

from __future__ import annotations

import operator
import random
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.graph_module import get_control_flow_submodules
from torch._export.utils import is_buffer, is_lifted_tensor_constant, is_param
from torch.export import ExportedProgram
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase

# importing a backend registers it (BackendDetails.__subclasses__)
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend  # noqa: F401
from executorch.exir.backend.test.backend_with_compiler_demo import (  # noqa: F401
    BackendWithCompilerDemo,
)

from . import backends as fuzz_backends  # noqa: F401

STRATEGIES = ("contiguous", "subset", "capability", "whole", "two_rules")
INVALID = ("tag_output", "tag_user_input", "tag_missing")
EDITS = ("scalar_arg", "kwarg", "add_node", "remove_node", "reorder")
# edits of non-node arguments, unseen by the reference's is_identical_graph
SCALAR_EDITS = ("scalar_arg", "kwarg")

_E = exir_ops.edge.aten
DEMO_OPS = {_E.sin.default, _E.mm.default, _E.add.Tensor, _E.linear.default}
XNNPACK_OPS = {_E.add.Tensor, _E.sub.Tensor, _E.mul.Tensor, _E.mm.default, _E.relu.default,
               _E.tanh.default, _E.linear.default, _E.addmm.default, _E.cat.default}


@dataclass
class PartitionerRecipe:
    """How a FuzzPartitioner tags (and possibly edits) a program."""

    seed: int
    strategy: str
    n_tags: int
    tag_constants: float  # probability that a constant feeding a tagged node is tagged
    no_copy: float  # probability that a tagged constant is also marked no_copy
    into_control_flow: bool
    backend_mix: Sequence[str]  # "echo", "demo", "xnnpack", "mutating"
    invalid: Optional[str] = None
    edit: Optional[str] = None
    tag_hop_nodes: bool = False  # cond/map call nodes are taggable too

    def describe(self) -> str:
        return (f"{self.strategy} tags<={self.n_tags} const={self.tag_constants:.2f} "
                f"no_copy={self.no_copy:.2f} cf={self.into_control_flow} "
                f"backends={list(self.backend_mix)} invalid={self.invalid} edit={self.edit} "
                f"hops={self.tag_hop_nodes}")


def draw_partitioner_recipe(rng: random.Random, *, allow_invalid: bool = True,
                            allow_edits: bool = True,
                            allow_mutating_backend: bool = True) -> PartitionerRecipe:
    """A random partitioner recipe: mostly valid, sometimes invalid or editing."""
    mix = ["echo"] * 3 + ["demo", "xnnpack", "xnnpack"]
    if allow_mutating_backend and rng.random() < 0.05:
        mix = ["mutating"]
    roll = rng.random()
    return PartitionerRecipe(
        seed=rng.randrange(2**31),
        # random subsets are mostly not convex (an error): drawn less often
        strategy=rng.choice(("contiguous", "contiguous", "capability", "capability", "whole",
                             "subset", "two_rules")),
        n_tags=rng.randint(1, 4),
        tag_constants=rng.choice([0.0, 0.0, 0.5, 1.0]),
        no_copy=rng.choice([0.0, 0.0, 0.0, 0.5]),
        into_control_flow=rng.random() < 0.5,
        backend_mix=tuple(mix),
        invalid=rng.choice(INVALID) if allow_invalid and roll < 0.12 else None,
        edit=rng.choice(EDITS) if allow_edits and 0.12 <= roll < 0.22 else None,
        tag_hop_nodes=rng.random() < 0.1,
    )


def is_constant(ep: ExportedProgram, node: torch.fx.Node) -> bool:
    return node.op == "placeholder" and (
        is_param(ep, node) or is_buffer(ep, node) or is_lifted_tensor_constant(ep, node))


def _candidates(gm: torch.fx.GraphModule, with_hops: bool = False) -> List[torch.fx.Node]:
    """Taggable compute nodes: Edge ops; no getitem or delegate call, and higher-order ops
    (cond, map) only ``with_hops`` (their branch ``get_attr`` nodes are never tagged)."""
    out = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if isinstance(node.target, torch._ops.HigherOrderOperator) and (
                not with_hops or "executorch_call_delegate" in str(node.target)):
            continue
        out.append(node)
    return out


class _Supported(OperatorSupportBase):
    def __init__(self, targets) -> None:
        super().__init__()
        self.targets = set(targets)

    def is_node_supported(self, submodules, node: torch.fx.Node) -> bool:
        return node.op == "call_function" and node.target in self.targets


class FuzzPartitioner(Partitioner):
    """Tags (and maybe edits) a program following a :class:`PartitionerRecipe`."""

    def __init__(self, recipe: PartitionerRecipe, prefix: str = "t") -> None:
        super().__init__()
        self.recipe = recipe
        self.prefix = prefix
        self.edited: List[str] = []  # what the last partition() call edited, for the oracle

    def __repr__(self) -> str:  # stable text (the reference puts str(partitioner) in messages)
        return f"FuzzPartitioner({self.prefix})"

    # ----------------------------------------------------------------- tagging
    def _tag_graph(self, rng: random.Random, gm: torch.fx.GraphModule,
                   tags: List[str], ep: Optional[ExportedProgram]) -> None:
        nodes = _candidates(gm, self.recipe.tag_hop_nodes)
        strategy = self.recipe.strategy
        new_tag = lambda: f"{self.prefix}{len(tags)}"  # noqa: E731
        if not nodes:
            return
        if strategy == "contiguous":
            i = 0
            while i < len(nodes):
                run = rng.randint(1, 4)
                if rng.random() < 0.6 and len(tags) < self.recipe.n_tags + 4:
                    tag = new_tag()
                    tags.append(tag)
                    for n in nodes[i:i + run]:
                        n.meta["delegation_tag"] = tag
                i += run
        elif strategy in ("subset", "two_rules"):
            local = []
            for n in nodes:
                if rng.random() < 0.5:
                    k = rng.randrange(self.recipe.n_tags)
                    tag = f"{self.prefix}{len(tags)}_{k}"
                    n.meta["delegation_tag"] = tag
                    if tag not in local:
                        local.append(tag)
            tags.extend(local)
            if strategy == "two_rules" and ep is not None:
                self._two_rules(rng, gm, ep, tags)
        elif strategy == "capability":
            present = sorted({n.target for n in nodes}, key=str)
            chosen = [t for t in present if rng.random() < 0.6]
            proposer = CapabilityBasedPartitioner(
                gm, _Supported(chosen), allows_single_node_partition=rng.random() < 0.7)
            for part in proposer.propose_partitions():
                tag = new_tag()
                tags.append(tag)
                for n in part.nodes:
                    n.meta["delegation_tag"] = tag
        else:  # whole
            tag = new_tag()
            tags.append(tag)
            for n in nodes:
                n.meta["delegation_tag"] = tag

    def _two_rules(self, rng, gm, ep: ExportedProgram, tags: List[str]) -> None:
        """Tag {buffer, its update m, a node d downstream of m's untagged reader r}."""
        mutations = ep.graph_signature.buffers_to_mutate  # output name -> buffer target
        by_name = {n.name: n for n in gm.graph.nodes}
        placeholder_of = {s.target: by_name.get(s.arg.name) for s in ep.graph_signature.input_specs
                          if s.kind.name == "BUFFER"}
        for out_name, target in mutations.items():
            m = by_name.get(out_name)
            buf = placeholder_of.get(target)
            if m is None or buf is None:
                continue
            for r in m.users:
                if r.op != "call_function":
                    continue
                for d in r.users:
                    if d.op == "call_function" and "getitem" not in str(d.target):
                        tag = f"{self.prefix}{len(tags)}_two"
                        tags.append(tag)
                        for n in (buf, m, d):
                            n.meta["delegation_tag"] = tag
                        r.meta.pop("delegation_tag", None)
                        return

    def _tag_constants(self, rng: random.Random, ep: ExportedProgram) -> None:
        for node in ep.graph.nodes:
            if not is_constant(ep, node) or "delegation_tag" in node.meta:
                continue
            user_tags = []
            for user in node.users:
                if "delegation_tag" in user.meta:
                    user_tags.append(user.meta["delegation_tag"])
            if user_tags and rng.random() < self.recipe.tag_constants:
                node.meta["delegation_tag"] = user_tags[-1]  # the last user's, as the demos do
                if rng.random() < self.recipe.no_copy:
                    node.meta["no_copy"] = True

    def _backend_for(self, rng: random.Random, tag: str, gm_nodes: Sequence[torch.fx.Node]):
        ops = {n.target for n in gm_nodes if n.meta.get("delegation_tag") == tag
               and n.op == "call_function"}
        choice = rng.choice(list(self.recipe.backend_mix))
        if choice == "demo" and not ops <= DEMO_OPS and rng.random() < 0.8:
            choice = "echo"
        if choice == "xnnpack" and not ops <= XNNPACK_OPS and rng.random() < 0.8:
            choice = "echo"
        backend = {"echo": "FuzzEchoBackend", "demo": "BackendWithCompilerDemo",
                   "xnnpack": "XnnpackBackend", "mutating": "FuzzWeightMutatingBackend"}[choice]
        specs = [] if choice == "xnnpack" or rng.random() < 0.5 else [
            CompileSpec("fuzz", bytes([rng.randrange(256)]))]
        return DelegationSpec(backend, specs)

    # ----------------------------------------------------------------- invalid / edits
    def _invalidate(self, rng, ep: ExportedProgram, tags: List[str],
                    partition_tags: Dict[str, DelegationSpec]) -> None:
        kind = self.recipe.invalid
        if kind == "tag_output":
            out = next(n for n in ep.graph.nodes if n.op == "output")
            out.meta["delegation_tag"] = tags[0] if tags else "t_out"
        elif kind == "tag_user_input":
            users = [s.arg.name for s in ep.graph_signature.input_specs
                     if s.kind.name == "USER_INPUT"]
            for n in ep.graph.nodes:
                if n.name in users:
                    n.meta["delegation_tag"] = tags[0] if tags else "t_in"
                    break
        elif kind == "tag_missing" and partition_tags:
            partition_tags.pop(rng.choice(sorted(partition_tags)))

    def _edit(self, rng, gm: torch.fx.GraphModule) -> None:
        kind = self.recipe.edit
        nodes = _candidates(gm)
        if kind == "scalar_arg":
            for n in nodes:
                if n.target == _E.cat.default:
                    new = rng.choice([0, 2, -2])
                    old = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
                    n.args = (n.args[0], new)
                    self.edited.append(f"{n.name}.dim {old}->{new}")
                    return
            kind = "kwarg"
        if kind == "kwarg":
            for n in nodes:
                if n.target in (_E.add.Tensor, _E.sub.Tensor):
                    old = n.kwargs.get("alpha", 1)
                    n.kwargs = {**n.kwargs, "alpha": 5.0}
                    self.edited.append(f"{n.name}.alpha {old}->5.0")
                    return
            return
        if kind == "add_node" and nodes:
            anchor = rng.choice(nodes)
            with gm.graph.inserting_after(anchor):
                extra = gm.graph.call_function(_E.relu.default, (anchor,))
            extra.meta = dict(anchor.meta)
            self.edited.append(f"added {extra.name}")
        elif kind == "remove_node":
            for n in nodes:
                if n.target in (_E.relu.default, _E.tanh.default, _E.sin.default):
                    n.replace_all_uses_with(n.args[0])
                    gm.graph.erase_node(n)
                    self.edited.append(f"removed {n.name}")
                    return
        elif kind == "reorder":
            for n in nodes:
                prev = n.prev
                if prev.op == "call_function" and prev not in n.all_input_nodes:
                    prev.prepend(n)
                    self.edited.append(f"moved {n.name} before {prev.name}")
                    return
        if self.edited:
            gm.recompile()

    # ----------------------------------------------------------------- entry point
    def partition(self, exported_program: ExportedProgram) -> PartitionResult:
        rng = random.Random(self.recipe.seed)
        self.edited = []
        ep = exported_program
        tags: List[str] = []
        self._tag_graph(rng, ep.graph_module, tags, ep)
        if self.recipe.into_control_flow:
            for _, sub, _ in get_control_flow_submodules(ep.graph_module):
                self._tag_graph(rng, sub, tags, None)
        self._tag_constants(rng, ep)
        all_nodes = list(ep.graph.nodes)
        for _, sub, _ in get_control_flow_submodules(ep.graph_module):
            all_nodes += list(sub.graph.nodes)
        partition_tags = {t: self._backend_for(rng, t, all_nodes) for t in tags}
        if self.recipe.invalid:
            self._invalidate(rng, ep, tags, partition_tags)
        if self.recipe.edit:
            self._edit(rng, ep.graph_module)
        return PartitionResult(tagged_exported_program=ep, partition_tags=partition_tags)
