"""Plan a lowering: run the planning core over the encoded graphs.

The planning algorithms live in the C++ core (``fastlower._core``) and, with
the same signatures, in the pure-Python twin (``fastlower._twin``); this module
picks one and sequences the calls the way the reference sequences its edits.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Sequence, Tuple

import torch

from . import errors
from ._core_loader import load_core
from ._twin import contract as twin_contract
from ._twin import grouping as twin_grouping
from ._twin import identity as twin_identity
from ._schema import CONTRACT_OK, OP_OUTPUT, OP_PLACEHOLDER, OWNABLE_ROLES, PartitionPlan, Simulator
from ._twin.fusion import FusionSimulator
from .encode import EncodedGraph, TargetKeys, structure_arrays

log = logging.getLogger(__name__)

_core = load_core()  # the one choice of core (FASTLOWER_FORCE_PYTHON: _core_loader)


def backend_module():
    """The planning implementation in use: the C++ core or the Python twin."""
    return _core


def group_by_tag(tags: Sequence[int], n_tags: int) -> List[List[int]]:
    if _core is not None and hasattr(_core, "group_by_tag"):
        return _core.group_by_tag(list(tags), n_tags)
    return twin_grouping.group_by_tag(tags, n_tags)


def find_contract_violation(*args) -> Tuple[int, int, int]:
    if _core is not None and hasattr(_core, "find_contract_violation"):
        return tuple(_core.find_contract_violation(*args))
    return twin_contract.find_contract_violation(*args)


def first_difference(*args) -> int:
    if _core is not None and hasattr(_core, "first_difference"):
        return _core.first_difference(*args)
    return twin_identity.first_difference(*args)


def structure_difference(a: torch.fx.GraphModule, b: torch.fx.GraphModule) -> int:
    """The first node index where ``a`` and ``b`` differ in op, target or input nodes
    (the reference's structural check), or -1 when they do not."""
    keys = TargetKeys()
    return first_difference(*structure_arrays(a, keys), *structure_arrays(b, keys))


if TYPE_CHECKING:  # mypy checks here that the core's stub (_core.pyi) meets the protocol
    from ._core import FusionSimulator as _CoreSimulator

    def _core_is_a_simulator(sim: _CoreSimulator) -> Simulator:
        return sim


def _new_simulator(enc: EncodedGraph, tag_names: Sequence[str], is_submodule: bool,
                   top: Optional[Simulator]) -> Simulator:
    if _core is not None and hasattr(_core, "FusionSimulator"):
        try:
            return _core.FusionSimulator(enc.arrays, list(tag_names), is_submodule, top,
                                         enc.taken_lowered)
        except _core.Unsupported:
            # a graph the core cannot represent exactly (e.g. a name suffix beyond
            # int64): the twin plans it; the two mix.  Malformed arrays are a
            # ValueError / IndexError from both and propagate.
            pass
    return FusionSimulator(enc.arrays, tag_names, is_submodule, top, enc.taken_lowered)


def _csr(lists: Sequence[Sequence[int]]) -> Tuple[List[int], List[int]]:
    offsets, flat = [0], []
    for xs in lists:
        flat.extend(xs)
        offsets.append(len(flat))
    return offsets, flat


# Where, in the reference's sequence of work on one partition, an error is raised:
# fusing its nodes; building its program; inserting its delegate (single-program
# path: right after its own preprocess; multi-method path: after every preprocess).
FUSE, PROGRAM, INSERT = "fuse", "program", "insert"


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
    stage: str
    graph: "GraphPlan"
    pid: int


@dataclass
class GraphPlan:
    """The plan of one graph module: its simulator state after all edits.

    After a :class:`PlanStop` (``stop``, on the top-level plan), the tree holds the
    graphs planned up to that point; the stop's graph is planned up to its ``pid``.
    """

    encoded: EncodedGraph
    sim: Simulator
    is_submodule: bool
    nested: List[Tuple[int, str, "GraphPlan"]] = field(default_factory=list)
    stop: Optional[PlanStop] = None  # the first error meeting the reference's order
    # multi-method path: an owned buffer update read outside its delegate, which the
    # reference meets inserting that delegate, after its backend's preprocess
    after_preprocess: Optional[PlanStop] = None

    @property
    def partitions(self) -> List[PartitionPlan]:
        return self.sim.partitions


def check_contract(enc: EncodedGraph, tag_names: Sequence[str], strict_tags: bool) -> None:
    """Raise :class:`errors.UnknownTagError` (``strict_tags`` only), else warn of unknown tags,
    in ``enc`` and nested graphs. Broken partition rules are found by :func:`_contract_stops`
    as each graph is planned, and raised where the reference meets them."""
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


@dataclass
class ContractStops:
    """Broken partition rules of one graph, by tag index, where the reference meets them."""

    duplicating: Dict[int, errors.FastlowerError] = field(default_factory=dict)
    fusing: Dict[int, errors.FastlowerError] = field(default_factory=dict)


def _contract_stops(enc: EncodedGraph, tag_names: Sequence[str],
                    is_submodule: bool) -> ContractStops:
    """Where the reference raises each broken partition rule of this graph.

    The native check answers whether any rule is broken (the common case: none);
    only then are the rules placed, per tag. Duplicating the top-level graph's
    shared constants (tag by tag, before any fusion) the reference meets a
    ``no_copy`` constant used by another tag, and a tagged user input used by
    another tag (met by :func:`_duplicate_shared_constants`, in the set order of
    the tag's candidates); collecting a tag's nodes to fuse them, a
    tagged output node and any other tagged user input (a tagged placeholder of a
    control-flow body).
    """
    a = enc.arrays
    offsets, flat = _csr(a.users)
    code, _, _ = find_contract_violation(a.op, a.tags, a.roles, enc.no_copy, offsets, flat, False)
    stops = ContractStops()
    if code == CONTRACT_OK:
        return stops
    tag_of = lambda i: tag_names[a.tags[i]] if a.tags[i] >= 0 else enc.unknown_tags.get(i)  # noqa: E731
    for i, t in enumerate(a.tags):
        if t < 0:
            continue
        if a.op[i] == OP_OUTPUT:
            stops.fusing.setdefault(t, errors.TaggedOutputError(a.names[i], tag_names[t]))
            continue
        if a.op[i] != OP_PLACEHOLDER:
            continue
        other = next((u for u in a.users[i] if a.tags[u] != t), None)
        if a.roles[i] not in OWNABLE_ROLES:
            # used by another tag in the top-level graph, it is a duplication candidate:
            # _duplicate_shared_constants meets it in the tag's set order
            if other is None or is_submodule:
                stops.fusing.setdefault(t, errors.TaggedUserInputError(a.names[i], tag_names[t]))
        elif enc.no_copy[i] and other is not None:
            # the tag's no_copy scan, in graph order, comes before its duplications
            stops.duplicating.setdefault(t, errors.SharedConstantError(
                a.names[i], tag_names[t], a.names[other], tag_of(other), True))
    return stops


def _fuse_all(plan: GraphPlan, root: GraphPlan, tag_names: Sequence[str], single: bool,
              contract: ContractStops) -> Optional[PlanStop]:
    """Fuse every tag in order (and insert its delegate if ``single``), up to the first stop."""
    sim = plan.sim
    n_tags = len(tag_names)
    targets = plan.encoded.targets.values
    sim.renumber()
    groups = group_by_tag(sim.tags, n_tags)
    for t in range(n_tags):
        members = [m for m in groups[t] if sim.alive[m]]
        if not members:
            continue
        members.sort(key=sim.pos.__getitem__)
        fused = len(sim.partitions)
        if t in contract.fusing:
            return PlanStop(contract.fusing[t], FUSE, plan, fused)
        path = sim.find_cycle(members)
        if path is not None:
            return PlanStop(errors.CyclicPartitionError(tag_names[t], [sim.names[i] for i in path]),
                            FUSE, plan, fused)
        inside = set(members)
        if not any(u not in inside for m in members for u in sim.users[m]):
            return PlanStop(errors.NoPartitionOutputError(tag_names[t], sim.names[members[-1]]),
                            FUSE, plan, fused)
        part = sim.fuse(t, members)
        error = _owned_update_also_returned(sim, part, tag_names[t], targets)
        if error is not None:  # the reference rejects it building the partition's program
            return PlanStop(error, PROGRAM, plan, fused)
        if single:  # the single-program path lowers each partition right after fusing it
            error = _owned_update_read(sim, part, tag_names[t], targets)
            if error is not None:
                return PlanStop(error, INSERT, plan, fused)
            sim.insert_delegate(fused)
    if not single and root.after_preprocess is None:
        # the multi-method path fuses every partition before it inserts any delegate,
        # where the reference meets an owned buffer update read outside: any fusing or
        # program error, and any preprocess error, is reported first
        for part in sim.partitions:
            error = _owned_update_read(sim, part, tag_names[part.tag], targets)
            if error is not None:
                root.after_preprocess = PlanStop(error, INSERT, plan, sim.partitions.index(part))
                break
    return None


def _owned_update_also_returned(sim, part, tag: str, targets) -> Optional[errors.FastlowerError]:
    """A buffer update the delegate owns may not also be returned as another output."""
    for gi in part.deleted_getitems:
        uses = [p for p, node in enumerate(sim.out_args) if node == gi]
        if len(uses) > 1:
            return errors.BufferMutationOutputError(sim.names[gi], tag,
                                                    str(targets[sim.out_targets[uses[0]]]))
    return None


def _owned_update_read(sim, part, tag: str, targets) -> Optional[errors.FastlowerError]:
    """A buffer update the delegate owns may not be read outside it (the reference fails
    erasing it: "still had users")."""
    for gi in part.deleted_getitems:
        readers = [sim.names[u] for u in sim.users[gi] if u != sim.output_node]
        if readers:
            uses = [p for p, node in enumerate(sim.out_args) if node == gi]
            return errors.OwnedBufferUpdateReadError(
                sim.names[gi], tag, str(targets[sim.out_targets[uses[0]]]), readers)
    return None


def _duplicate_shared_constants(sim, enc: EncodedGraph, tag_names: Sequence[str],
                                contract: Optional[ContractStops] = None,
                                validate_tagged: Optional[Callable[[], None]] = None,
                                ) -> Optional[BaseException]:
    """Per tag, in tag order: each user of a shared tagged constant gets its own copy.

    Within a tag the reference duplicates its candidates in the iteration order
    of a Python ``set`` of their names (string hashing, so it varies between
    processes); building the same set here, in the same process, reproduces it.
    Constants touched here are never candidates again (each is left with users
    of one tag), so every placeholder is examined once.

    Stops, before any fusion, at a tag's broken rule met here, or where the
    reference's first duplication validates the whole tagged program
    (``validate_tagged``, given when the partitioner edited it) and that fails:
    returns that error. A tagged user input among the candidates is an error
    where the set order reaches it, so with a constant in the same tag either
    error may come first, as in the reference.
    """
    a = enc.arrays
    n_tags = len(tag_names)
    by_tag: List[List[int]] = [[] for _ in range(n_tags)]
    for i, o in enumerate(a.op):
        if o == OP_PLACEHOLDER and 0 <= a.tags[i] < n_tags:
            by_tag[a.tags[i]].append(i)
    for t in range(n_tags):
        if contract is not None and t in contract.duplicating:
            return contract.duplicating[t]
        candidates = [c for c in by_tag[t] if sim.tags[c] == t
                      and any(sim.tags[u] != t for u in sim.users[c])]
        if not candidates:
            continue
        by_name = {sim.names[c]: c for c in candidates}
        names = set()  # the reference's set, filled in the same (graph) order
        for c in candidates:
            names.add(sim.names[c])
        touched = []
        for name in names:
            c = by_name[name]
            if a.roles[c] not in OWNABLE_ROLES:  # a tagged user input
                return errors.TaggedUserInputError(name, tag_names[t])
            if validate_tagged is not None:  # the reference validates after each duplication
                try:
                    validate_tagged()
                except Exception as exc:  # the verifier's own error is the error
                    return exc
                validate_tagged = None  # the program it validates is the same every time
            touched.append(c)
            touched.extend(sim.duplicate_constant(c))
        for c in touched:
            sim.retag_constant(c)
    return None


def _new_plan(enc: EncodedGraph, tag_names, is_submodule: bool, top) -> GraphPlan:
    return GraphPlan(enc, _new_simulator(enc, tag_names, is_submodule, top), is_submodule)


def _plan_graph(plan: GraphPlan, root: GraphPlan, tag_names, single: bool,
                validate_tagged: Optional[Callable[[], None]]) -> Optional[PlanStop]:
    """Plan ``plan``'s graph, then its control-flow bodies (depth first), up to a stop."""
    sim, enc = plan.sim, plan.encoded
    contract = _contract_stops(enc, tag_names, plan.is_submodule)
    if not plan.is_submodule:
        error = _duplicate_shared_constants(sim, enc, tag_names, contract, validate_tagged)
        if error is not None:  # before any fusion
            return PlanStop(error, FUSE, plan, 0)
    stop = _fuse_all(plan, root, tag_names, single, contract)
    if stop is not None:
        return stop
    for i in sim.order():
        if i < len(enc.nodes) and i in enc.nested:
            for attr, sub_enc in enc.nested[i]:
                sub = _new_plan(sub_enc, tag_names, True, sim.top)
                plan.nested.append((i, attr, sub))
                stop = _plan_graph(sub, root, tag_names, single, None)
                if stop is not None:
                    return stop
    return None


def plan_program(enc: EncodedGraph, tag_names: Sequence[str], single: bool,
                 strict_tags: bool = False,
                 validate_tagged: Optional[Callable[[], None]] = None) -> GraphPlan:
    """Duplicate shared constants, fuse every tag (and lower it if ``single``).

    A broken partition rule does not raise here: it is the returned plan's ``stop``
    (or ``after_preprocess``), raised by the lowering at the point where the
    reference meets it. ``validate_tagged`` validates the whole tagged program
    (given when the partitioner edited it); it runs where the reference's constant
    duplication validates it.
    """
    check_contract(enc, tag_names, strict_tags)
    root = _new_plan(enc, tag_names, False, None)
    root.stop = _plan_graph(root, root, tag_names, single, validate_tagged)
    return root


def iter_partitions(plan: GraphPlan):
    """(graph plan, partition id) in the order the reference lowers them (multi-method path).

    Top-level partitions in final graph order of their calls, then nested graphs'.
    """
    sim = plan.sim
    pos = {node: p for p, node in enumerate(sim.order())}
    top = sorted(range(len(sim.partitions)), key=lambda pid: pos[sim.partitions[pid].call_module])
    for pid in top:
        yield plan, pid
    for _, _, sub in plan.nested:
        yield from iter_partitions(sub)
