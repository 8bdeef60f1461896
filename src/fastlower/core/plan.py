"""Plan a lowering: run the planning core over the encoded graphs.

The planning algorithms live in the C++ core (``fastlower._core``) and, with
the same signatures, in the pure-Python twin (``fastlower.core.twin``); this module
picks one and sequences the calls the way the reference sequences its edits.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field, replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple, cast

import torch

from .. import errors
from .loader import load_core
from .twin import grouping as twin_grouping
from .twin import identity as twin_identity
from .schema import (
    DELEGATES_WHILE_FUSING, OP_PLACEHOLDER, STAGE_FUSE, STAGE_INSERT, STAGE_PROGRAM, STOP_CYCLE,
    STOP_MUTATION_RETURNED, STOP_NO_OUTPUT, STOP_OWNED_UPDATE_READ, STOP_SHARED_CONSTANT,
    STOP_TAGGED_OUTPUT, STOP_TAGGED_USER_INPUT, STOP_VALIDATE, GraphArrays, PartitionPlan,
    PlannedGraph, PlanOptions, PlanResult, RuleStop,
)
from .twin import plan as twin_plan
from .encode import EncodedGraph, Interner, TargetKeys, structure_arrays

log = logging.getLogger(__name__)

_core = load_core()  # the one choice of core (FASTLOWER_FORCE_PYTHON: _core_loader)


def backend_module():
    """The planning implementation in use: the C++ core or the Python twin."""
    return _core


def group_by_tag(tags: Sequence[int], n_tags: int) -> List[List[int]]:
    if _core is not None and hasattr(_core, "group_by_tag"):
        return _core.group_by_tag(list(tags), n_tags)
    return twin_grouping.group_by_tag(tags, n_tags)


def first_difference(*args) -> int:
    if _core is not None and hasattr(_core, "first_difference"):
        return _core.first_difference(*args)
    return twin_identity.first_difference(*args)


def structure_difference(a: torch.fx.GraphModule, b: torch.fx.GraphModule) -> int:
    """The first node index where ``a`` and ``b`` differ in op, target or input nodes
    (the reference's structural check), or -1 when they do not."""
    keys = TargetKeys()
    return first_difference(*structure_arrays(a, keys), *structure_arrays(b, keys))


# Where, in the reference's sequence of work on one partition, an error is raised:
# fusing its nodes; building its program; inserting its delegate (single-program
# path: right after its own preprocess; multi-method path: after every preprocess).
FUSE, PROGRAM, INSERT = STAGE_FUSE, STAGE_PROGRAM, STAGE_INSERT


@dataclass
class PlanStop:
    """A broken rule found while planning, and the point where the reference raises it.

    The reference works partition by partition, so what it meets first depends on
    the order of its work, not on which check fastlower can run first: the lowering
    raises ``error`` only after running, for every partition before that point, the
    steps that could fail earlier (verifying its program; on the single-program
    path, preprocessing it).

    ``graph`` is the graph being planned; ``pid`` the partition (for ``FUSE``: the
    number of partitions fused before the failing tag).
    """

    error: BaseException  # a FastlowerError, or the verifier's own
    stage: int  # FUSE, PROGRAM or INSERT
    graph: "GraphPlan"
    pid: int


@dataclass
class GraphPlan:
    """The plan of one graph module: the planned graph (plain data) after all edits.

    After a :class:`PlanStop` (``stop``, on the top-level plan), the tree holds the
    graphs planned up to that point; the stop's graph is planned up to its ``pid``.
    """

    encoded: EncodedGraph
    graph: PlannedGraph
    options: PlanOptions
    tag_names: Sequence[str]
    nested: List[Tuple[int, str, "GraphPlan"]] = field(default_factory=list)
    stop: Optional[PlanStop] = None  # the first error meeting the reference's order
    # multi-method path: an owned buffer update read outside its delegate, which the
    # reference meets inserting that delegate, after its backend's preprocess
    after_preprocess: Optional[PlanStop] = None

    @property
    def partitions(self) -> List[PartitionPlan]:
        return self.graph.partitions

    @property
    def is_submodule(self) -> bool:
        return self.options.is_submodule

    @property
    def delegates_while_fusing(self) -> bool:
        """Each delegate was inserted right after its partition was fused (single-program
        path); else the lowering inserts them after preprocess (multi-method path)."""
        return self.options.delegate_insertion == DELEGATES_WHILE_FUSING


def check_contract(enc: EncodedGraph, tag_names: Sequence[str], strict_tags: bool) -> None:
    """Raise :class:`errors.UnknownTagError` (``strict_tags`` only), else warn of unknown tags,
    in ``enc`` and nested graphs. Broken partition rules are found as each graph is
    planned (``plan_graph``), and raised where the reference meets them."""
    a = enc.arrays
    if strict_tags and enc.unknown_tags:
        node = next(iter(enc.unknown_tags))
        raise errors.UnknownTagError(a.names[node], str(enc.unknown_tags[node]), tag_names)
    if enc.unknown_tags:
        warnings.warn(errors.UndelegatedTagWarning(
            "nodes tagged with tags missing from partition_tags stay undelegated: "
            + ", ".join(f"{a.names[i]} ({t})" for i, t in list(enc.unknown_tags.items())[:10])),
            stacklevel=2)
    for subs in enc.nested.values():
        for _, sub in subs:
            check_contract(sub, tag_names, strict_tags)


def duplication_order(a: GraphArrays, n_tags: int) -> List[List[int]]:
    """Per tag, the shared constants the reference duplicates, in its order.

    Candidates of tag ``t`` are placeholders tagged ``t`` with a user of another
    tag; each is examined once (duplicating one leaves it with users of one tag
    and changes no other placeholder's users), so the initial arrays name them
    all. The reference visits them in the iteration order of a Python ``set`` of
    their names (string hashing, so it varies between processes): building the
    same set here, in the same process, reproduces it. The core is given the
    order; it never imitates Python hashing.
    """
    by_tag: List[List[int]] = [[] for _ in range(n_tags)]
    for i, o in enumerate(a.op):
        t = a.tags[i]
        if o == OP_PLACEHOLDER and 0 <= t < n_tags and any(a.tags[u] != t for u in a.users[i]):
            by_tag[t].append(i)
    order = []
    for candidates in by_tag:
        by_name = {a.names[c]: c for c in candidates}
        names = set()  # the reference's set, filled in the same (graph) order
        for c in candidates:
            names.add(a.names[c])
        order.append([by_name[name] for name in names])
    return order


def plan_graph(arrays: GraphArrays, tag_names: Sequence[str], options: PlanOptions) -> PlanResult:
    """The one call into the planning core for one graph (the twin's without a core)."""
    if _core is not None and hasattr(_core, "plan_graph"):
        try:
            return PlanResult.from_core(_core.plan_graph(arrays, list(tag_names), options))
        except _core.Unsupported:
            # a graph the core cannot represent exactly (e.g. a name suffix beyond
            # int64): the twin plans it; the two mix.  Malformed arrays are a
            # ValueError / IndexError from both and propagate.
            pass
    return twin_plan.plan_graph(arrays, tag_names, options)


def stop_error(stop: RuleStop, enc: EncodedGraph, graph: PlannedGraph,
               tag_names: Sequence[str]) -> errors.FastlowerError:
    """The user's error for a broken rule the core reports as plain data.

    ``graph`` is as planning left it: as it was when the rule was met.
    """
    a, names, tag = enc.arrays, graph.names, tag_names[stop.tag]
    nodes, kind = stop.nodes, stop.kind
    if kind == STOP_TAGGED_OUTPUT:
        return errors.TaggedOutputError(names[nodes[0]], tag)
    if kind == STOP_TAGGED_USER_INPUT:
        return errors.TaggedUserInputError(names[nodes[0]], tag)
    if kind == STOP_SHARED_CONSTANT:
        other = nodes[1]
        # untagged (None) or a tag partition_tags does not name, as the partitioner wrote it
        other_tag = cast(Optional[str], tag_names[a.tags[other]] if a.tags[other] >= 0
                         else enc.unknown_tags.get(other))
        return errors.SharedConstantError(names[nodes[0]], tag, names[other], other_tag, True)
    if kind == STOP_CYCLE:
        return errors.CyclicPartitionError(tag, [names[i] for i in nodes])
    if kind == STOP_NO_OUTPUT:
        return errors.NoPartitionOutputError(tag, names[nodes[0]])
    if kind in (STOP_MUTATION_RETURNED, STOP_OWNED_UPDATE_READ):
        gi = nodes[0]
        targets = cast(Interner, enc.targets)  # encode_graph interns every target
        target = str(targets.values[graph.out_targets[graph.out_args.index(gi)]])
        if kind == STOP_MUTATION_RETURNED:
            return errors.BufferMutationOutputError(names[gi], tag, target)
        return errors.OwnedBufferUpdateReadError(names[gi], tag, target,
                                                 [names[u] for u in nodes[1:]])
    raise ValueError(f"plan_graph: unknown stop kind {kind}")


def _plan_one(enc: EncodedGraph, tag_names: Sequence[str], options: PlanOptions,
              validate_tagged: Optional[Callable[[], None]],
              ) -> Tuple[GraphPlan, Optional[PlanStop], Optional[PlanStop]]:
    """Plan one graph: its plan, its stop and its deferred insertion stop.

    One core call; a second one only after validating the tagged program where
    the first duplication would be (``STOP_VALIDATE``).
    """
    options.validate_at_first_duplication = validate_tagged is not None
    result = plan_graph(enc.arrays, tag_names, options)
    plan = GraphPlan(enc, result.graph, options, tag_names)
    if validate_tagged is not None and result.stop is not None \
            and result.stop.kind == STOP_VALIDATE:
        # the reference validates the whole tagged program at its first duplication
        try:
            validate_tagged()
        except Exception as exc:  # the verifier's own error is the error
            return plan, PlanStop(exc, FUSE, plan, 0), None
        options.validate_at_first_duplication = False  # the same program every time
        result = plan_graph(enc.arrays, tag_names, options)
        plan.graph = result.graph
    stops = [None if s is None else PlanStop(stop_error(s, enc, result.graph, tag_names),
                                             s.stage, plan, s.pid)
             for s in (result.stop, result.insert_stop)]
    return plan, stops[0], stops[1]


def _plan_tree(enc: EncodedGraph, tag_names: Sequence[str], options: PlanOptions,
               root: Optional[GraphPlan], validate_tagged: Optional[Callable[[], None]],
               ) -> GraphPlan:
    """Plan ``enc``'s graph, then its control-flow bodies (depth first), up to a stop,
    which is recorded on ``root`` (with the first deferred insertion stop)."""
    plan, stop, insert = _plan_one(enc, tag_names, options, validate_tagged)
    root = plan if root is None else root
    if root.after_preprocess is None:
        root.after_preprocess = insert
    if stop is not None:
        root.stop = stop
        return plan
    for i in plan.graph.order:
        if i < len(enc.nodes) and i in enc.nested:
            for attr, sub_enc in enc.nested[i]:
                # a body's delegates follow the top-level graph's debug handles
                sub_options = PlanOptions(is_submodule=True,
                                          delegate_insertion=options.delegate_insertion,
                                          no_copy=list(sub_enc.no_copy),
                                          taken_lowered=list(sub_enc.taken_lowered),
                                          top_debug_handle=root.graph.max_debug_handle)
                plan.nested.append((i, attr, _plan_tree(sub_enc, tag_names, sub_options, root,
                                                        None)))
                if root.stop is not None:
                    return plan
    return plan


def plan_program(enc: EncodedGraph, tag_names: Sequence[str], delegate_insertion: int,
                 strict_tags: bool = False,
                 validate_tagged: Optional[Callable[[], None]] = None) -> GraphPlan:
    """Duplicate shared constants and fuse every tag of every graph, inserting each
    delegate while fusing or not (``delegate_insertion``: ``DELEGATES_*``).

    A broken partition rule does not raise here: it is the returned plan's ``stop``
    (or ``after_preprocess``), raised by the lowering at the point where the
    reference meets it. ``validate_tagged`` validates the whole tagged program
    (given when the partitioner edited it); it runs where the reference's constant
    duplication validates it.
    """
    check_contract(enc, tag_names, strict_tags)
    options = PlanOptions(is_submodule=False, delegate_insertion=delegate_insertion,
                          duplication_order=duplication_order(enc.arrays, len(tag_names)),
                          no_copy=list(enc.no_copy), taken_lowered=list(enc.taken_lowered))
    return _plan_tree(enc, tag_names, options, None, validate_tagged)


def iter_partitions(plan: GraphPlan):
    """(graph plan, partition id) in the order the reference lowers them (multi-method path).

    Top-level partitions in final graph order of their calls, then nested graphs'.
    """
    graph = plan.graph
    pos = {node: p for p, node in enumerate(graph.order)}
    top = sorted(range(len(graph.partitions)),
                 key=lambda pid: pos[graph.partitions[pid].call_module])
    for pid in top:
        yield plan, pid
    for _, _, sub in plan.nested:
        yield from iter_partitions(sub)


def insert_delegates(root: GraphPlan, schedule: Sequence[Tuple[GraphPlan, int]]) -> None:
    """Insert the delegates of ``root``'s tree (planned ``DELEGATES_AFTER_FUSING``) in the
    order of ``schedule``, (graph plan, partition id) pairs: each graph is planned again,
    inserting its delegates in that order after fusing, and its plan takes the result.

    A delegate's debug handle is one more than the top-level graph's largest at that
    moment, so a body's delegates depend on how many top-level ones came before: the
    top-level graph is planned first, and each of its delegates' handles is then its
    largest.
    """
    by_graph: Dict[int, Tuple[GraphPlan, List[int]]] = {}
    for graph, pid in schedule:
        by_graph.setdefault(id(graph), (graph, []))[1].append(pid)
    top_handle = root.graph.max_debug_handle  # before any of its delegates
    if id(root) in by_graph:
        _plan_again(root, by_graph.pop(id(root))[1], [])
    top_handles: Dict[int, List[int]] = {}
    for graph, pid in schedule:
        if graph is root:
            top_handle = root.graph.partitions[pid].debug_handle
        else:
            top_handles.setdefault(id(graph), []).append(top_handle)
    for key, (graph, pids) in by_graph.items():
        _plan_again(graph, pids, top_handles[key])


def _plan_again(plan: GraphPlan, order: List[int], top_handles: List[int]) -> None:
    """Plan ``plan``'s graph again with the delegates of ``order`` inserted after fusing."""
    options = replace(plan.options, validate_at_first_duplication=False, delegate_order=order,
                      delegate_top_debug_handles=top_handles)
    result = plan_graph(plan.encoded.arrays, plan.tag_names, options)
    if result.stop is not None or result.insert_stop is not None:  # pragma: no cover
        raise RuntimeError("planning again with the delegates met a rule the first plan did not")
    plan.graph = result.graph
