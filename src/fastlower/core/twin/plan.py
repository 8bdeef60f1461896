"""Pure-Python twin of the core's coarse call ``plan_graph``: plan one graph.

Duplicate the top-level graph's shared constants (tag by tag, in the order the
caller gives), then fuse every tag in order (inserting its delegate right after
it when ``DELEGATES_WHILE_FUSING``, else the delegates the options list, after
fusing), up to the first broken rule, which is returned as plain data
(:class:`fastlower.core.schema.RuleStop`) at the point where the reference meets it;
the planned graph is returned as plain data too (:class:`PlannedGraph`).
``fastlower.core.plan`` turns a stop into the user's error.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..schema import (
    DELEGATES_WHILE_FUSING, OP_OUTPUT, OP_PLACEHOLDER, OWNABLE_ROLES, STAGE_FUSE, STAGE_INSERT,
    STAGE_PROGRAM, STOP_CYCLE, STOP_MUTATION_RETURNED, STOP_NO_OUTPUT, STOP_OWNED_UPDATE_READ,
    STOP_SHARED_CONSTANT, STOP_TAGGED_OUTPUT, STOP_TAGGED_USER_INPUT, STOP_VALIDATE, GraphArrays,
    PartitionPlan, PlannedGraph, PlanOptions, PlanResult, RuleStop,
)
from .checks import check_length, check_node_ids
from .fusion import FusionSimulator
from .grouping import group_by_tag

__all__ = ["plan_graph", "planned_graph", "contract_stops"]

# per tag id, the first broken rule met duplicating / fusing that tag: (kind, nodes)
TagStops = Dict[int, Tuple[int, List[int]]]


def plan_graph(arrays: GraphArrays, tag_names: Sequence[str], options: PlanOptions) -> PlanResult:
    """Plan one graph; see the module docstring."""
    sim = FusionSimulator(arrays, tag_names, options.is_submodule, None, options.taken_lowered)
    _check_options(len(arrays.op), len(tag_names), options)
    duplicating, fusing = contract_stops(arrays, len(tag_names), options)
    stops: List[Optional[RuleStop]] = [None, None]
    if not options.is_submodule:
        stops[0] = _duplicate_shared_constants(sim, arrays, options, duplicating)
    if stops[0] is None:
        stops = list(_fuse_all(sim, options, fusing))
    return PlanResult(planned_graph(sim), stops[0], stops[1])


def planned_graph(sim: FusionSimulator) -> PlannedGraph:
    """The simulator's state as plain data (what the core's binding returns)."""
    return PlannedGraph(
        order=sim.order(), op=list(sim.op), kind=list(sim.kind), origin=list(sim.origin),
        inputs=[list(x) for x in sim.inputs], users=[list(u) for u in sim.users],
        names=list(sim.names), tags=list(sim.tags), alive=list(sim.alive),
        getitem_index=list(sim.getitem_index), debug_handles=list(sim.debug_handle),
        copies=list(sim.copies), copy_target=dict(sim.copy_target),
        out_args=list(sim.out_args), out_kinds=list(sim.out_kinds),
        out_targets=list(sim.out_targets), out_specs=list(sim.out_specs),
        output_node=sim.output_node, partitions=list(sim.partitions),
        lowered_count=sim.lowered_count, max_debug_handle=sim.max_debug_handle())


def _check_options(n: int, n_tags: int, options: PlanOptions) -> None:
    """The options fit the graph (same checks, order and messages as the core)."""
    check_length("plan_graph", "options.no_copy", options.no_copy, n)
    if options.delegate_top_debug_handles:
        check_length("plan_graph", "options.delegate_top_debug_handles",
                     options.delegate_top_debug_handles, len(options.delegate_order))
    if options.delegate_order and options.delegate_insertion == DELEGATES_WHILE_FUSING:
        raise ValueError("plan_graph: options.delegate_order is for DELEGATES_AFTER_FUSING")
    if options.is_submodule:
        return
    order = options.duplication_order
    if len(order) != n_tags:
        raise ValueError(f"plan_graph: options.duplication_order has {len(order)} entries, "
                         f"expected {n_tags}")
    for t, candidates in enumerate(order):
        check_node_ids("plan_graph", f"options.duplication_order[{t}]", candidates, n)


def contract_stops(a: GraphArrays, n_tags: int, options: PlanOptions) -> Tuple[TagStops, TagStops]:
    """Broken partition rules, by tag, where the reference meets them: (duplicating, fusing).

    Duplicating the top-level graph's shared constants (tag by tag, before any
    fusion) the reference meets a ``no_copy`` constant used by another tag (the
    tag's ``no_copy`` scan, in graph order, comes before its duplications); a
    tagged user input used by another tag is a duplication candidate, met in the
    tag's duplication order. Collecting a tag's nodes to fuse them, it meets a
    tagged output node and any other tagged user input (e.g. a tagged placeholder
    of a control-flow body).
    """
    duplicating: TagStops = {}
    fusing: TagStops = {}
    for i, t in enumerate(a.tags):
        if not 0 <= t < n_tags:
            continue
        if a.op[i] == OP_OUTPUT:
            fusing.setdefault(t, (STOP_TAGGED_OUTPUT, [i]))
            continue
        if a.op[i] != OP_PLACEHOLDER:
            continue
        other = next((u for u in a.users[i] if a.tags[u] != t), None)
        if a.roles[i] not in OWNABLE_ROLES:
            if other is None or options.is_submodule:
                fusing.setdefault(t, (STOP_TAGGED_USER_INPUT, [i]))
        elif options.no_copy[i] and other is not None:
            duplicating.setdefault(t, (STOP_SHARED_CONSTANT, [i, other]))
    return duplicating, fusing


def _duplicate_shared_constants(sim: FusionSimulator, a: GraphArrays, options: PlanOptions,
                                duplicating: TagStops) -> Optional[RuleStop]:
    """Per tag, in tag order: each user of a shared tagged constant gets its own copy."""
    validate = options.validate_at_first_duplication
    for t, order in enumerate(options.duplication_order):
        if t in duplicating:
            kind, nodes = duplicating[t]
            return RuleStop(kind, STAGE_FUSE, 0, t, nodes)
        touched: List[int] = []
        for c in order:
            if a.roles[c] not in OWNABLE_ROLES:  # a tagged user input
                return RuleStop(STOP_TAGGED_USER_INPUT, STAGE_FUSE, 0, t, [c])
            if validate:  # the reference validates the tagged program here
                return RuleStop(STOP_VALIDATE, STAGE_FUSE, 0, t, [c])
            touched.append(c)
            touched.extend(sim.duplicate_constant(c))
        for c in touched:
            sim.retag_constant(c)
    return None


def _fuse_all(sim: FusionSimulator, options: PlanOptions,
              fusing: TagStops) -> Tuple[Optional[RuleStop], Optional[RuleStop]]:
    """Fuse every tag in order (and insert its delegate), up to the first stop; then the
    delegates ``options.delegate_order`` lists. Returns (stop, insert_stop)."""
    while_fusing = options.delegate_insertion == DELEGATES_WHILE_FUSING
    n_tags = len(sim.tag_names)
    sim.renumber()
    groups = group_by_tag(sim.tags, n_tags)
    for t in range(n_tags):
        members = [m for m in groups[t] if sim.alive[m]]
        if not members:
            continue
        members.sort(key=sim.pos.__getitem__)
        fused = len(sim.partitions)
        if t in fusing:
            kind, nodes = fusing[t]
            return RuleStop(kind, STAGE_FUSE, fused, t, nodes), None
        path = sim.find_cycle(members)
        if path is not None:
            return RuleStop(STOP_CYCLE, STAGE_FUSE, fused, t, path), None
        inside = set(members)
        if not any(u not in inside for m in members for u in sim.users[m]):
            return RuleStop(STOP_NO_OUTPUT, STAGE_FUSE, fused, t, [members[-1]]), None
        part = sim.fuse(t, members)
        returned = _owned_update_also_returned(sim, part)
        if returned is not None:  # the reference rejects it building the partition's program
            return RuleStop(STOP_MUTATION_RETURNED, STAGE_PROGRAM, fused, t, [returned]), None
        if while_fusing:
            read = _owned_update_read(sim, part)
            if read is not None:
                return RuleStop(STOP_OWNED_UPDATE_READ, STAGE_INSERT, fused, t, read), None
            top = options.top_debug_handle
            sim.insert_delegate(fused, None if top is None else top + 1)
    if while_fusing:
        return None, None
    for pid, part in enumerate(sim.partitions):
        read = _owned_update_read(sim, part)
        if read is not None:
            return None, RuleStop(STOP_OWNED_UPDATE_READ, STAGE_INSERT, pid, part.tag, read)
    # the delegates the caller inserts after fusing, in its order (none on an insert stop:
    # the reference raises before inserting)
    handles = options.delegate_top_debug_handles
    for k, pid in enumerate(options.delegate_order):
        sim.insert_delegate(pid, handles[k] + 1 if handles else None)
    return None, None


def _owned_update_also_returned(sim: FusionSimulator, part: PartitionPlan) -> Optional[int]:
    """A buffer update the delegate owns that is also returned as another output."""
    for gi in part.deleted_getitems:
        if sum(1 for node in sim.out_args if node == gi) > 1:
            return gi
    return None


def _owned_update_read(sim: FusionSimulator, part: PartitionPlan) -> Optional[List[int]]:
    """``[getitem, *readers]`` of a buffer update the delegate owns that is read outside it."""
    for gi in part.deleted_getitems:
        readers = [u for u in sim.users[gi] if u != sim.output_node]
        if readers:
            return [gi] + readers
    return None
