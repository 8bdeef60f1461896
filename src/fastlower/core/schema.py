"""The data model shared by the encoder, the planner, the apply step and the C++ core.

Constants are the integer codes of the flat encoding (``fastlower.core.encode``); the C++
core holds the same values in ``csrc/schema.hpp`` (``tests/test_schema.py`` fails when
one side drifts from the other). The dataclasses are what crosses the core's boundary
in its one coarse call, ``plan_graph(arrays, tag_names, options)``: :class:`GraphArrays`
and :class:`PlanOptions` go in; plain data comes out, made into a :class:`PlanResult`
(the :class:`PlannedGraph`, its :class:`PartitionPlan` list, the :class:`RuleStop` where
planning stopped) by :meth:`PlanResult.from_core`. ``csrc/fusion.hpp``'s ``GraphInput``
and ``PartitionData`` and ``csrc/plan.hpp``'s ``PlanOptionsData`` and ``RuleStopData``
mirror their fields (checked by the same test).
:class:`Simulator` is the interface of the fine-grained fusion simulator the differential
tests drive, implemented by both the core (``fastlower._core.FusionSimulator``) and its
pure-Python twin (``fastlower.core.twin.fusion.FusionSimulator``); the lowering never holds one.

This module imports nothing from fastlower: every layer may import it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Collection, Dict, List, Mapping, Optional, Protocol, Sequence, Tuple

__all__ = [
    "OP_PLACEHOLDER", "OP_GET_ATTR", "OP_CALL_FUNCTION", "OP_CALL_MODULE", "OP_CALL_METHOD",
    "OP_OUTPUT",
    "KIND_ORIGINAL", "KIND_CONSTANT_COPY", "KIND_CALL_MODULE", "KIND_GETITEM", "KIND_GET_ATTR",
    "KIND_DELEGATE",
    "ROLE_USER_INPUT", "ROLE_PARAMETER", "ROLE_BUFFER", "ROLE_CONSTANT", "ROLE_OTHER",
    "OWNABLE_ROLES",
    "OUT_USER", "OUT_BUFFER_MUTATION", "OUT_OTHER",
    "TAG_NONE", "TAG_UNKNOWN", "MAX_TAGS",
    "CONTRACT_OK", "CONTRACT_TAGGED_OUTPUT", "CONTRACT_TAGGED_USER_INPUT",
    "CONTRACT_UNKNOWN_TAG", "CONTRACT_NO_COPY_SHARED",
    "STOP_TAGGED_OUTPUT", "STOP_TAGGED_USER_INPUT", "STOP_SHARED_CONSTANT", "STOP_CYCLE",
    "STOP_NO_OUTPUT", "STOP_MUTATION_RETURNED", "STOP_OWNED_UPDATE_READ", "STOP_VALIDATE",
    "STAGE_FUSE", "STAGE_PROGRAM", "STAGE_INSERT",
    "DELEGATES_WHILE_FUSING", "DELEGATES_AFTER_FUSING",
    "GraphArrays", "PartitionPlan", "Simulator", "PlanOptions", "RuleStop", "PlannedGraph",
    "PlanResult",
]

# node.op codes
OP_PLACEHOLDER, OP_GET_ATTR, OP_CALL_FUNCTION, OP_CALL_MODULE, OP_CALL_METHOD, OP_OUTPUT = range(6)
# what created a node (the simulator's ``kind``)
(KIND_ORIGINAL, KIND_CONSTANT_COPY, KIND_CALL_MODULE, KIND_GETITEM, KIND_GET_ATTR,
 KIND_DELEGATE) = range(6)
# placeholder roles (input spec kinds the contract cares about)
ROLE_USER_INPUT, ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_OTHER = range(5)
# placeholder roles a partition may own (the reference's is_param / is_buffer /
# is_lifted_tensor_constant)
OWNABLE_ROLES = (ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT)
# output spec kinds
OUT_USER, OUT_BUFFER_MUTATION, OUT_OTHER = range(3)

# tag ids: >= 0 indexes the tag list; these two mark the rest
TAG_NONE = -1  # untagged
TAG_UNKNOWN = -2  # tagged with a tag that partition_tags does not name
# group_by_tag returns one list per tag: bound the output a caller can ask for
MAX_TAGS = 1 << 20

# find_contract_violation's codes: the first broken partition rule
(CONTRACT_OK, CONTRACT_TAGGED_OUTPUT, CONTRACT_TAGGED_USER_INPUT, CONTRACT_UNKNOWN_TAG,
 CONTRACT_NO_COPY_SHARED) = range(5)

# plan_graph's stops: the broken rule the reference meets first (RuleStop.kind)
(STOP_TAGGED_OUTPUT, STOP_TAGGED_USER_INPUT, STOP_SHARED_CONSTANT, STOP_CYCLE, STOP_NO_OUTPUT,
 STOP_MUTATION_RETURNED, STOP_OWNED_UPDATE_READ, STOP_VALIDATE) = range(1, 9)
# where, in the reference's work on one partition, a stop is met (RuleStop.stage):
# fusing its nodes; building its program; inserting its delegate
STAGE_FUSE, STAGE_PROGRAM, STAGE_INSERT = range(3)
# when plan_graph inserts each partition's delegate (PlanOptions.delegate_insertion):
# right after fusing it (single-program path), or never (multi-method path: the
# lowering inserts them after every backend's preprocess)
DELEGATES_WHILE_FUSING, DELEGATES_AFTER_FUSING = range(2)


@dataclass
class GraphArrays:
    """Flat encoding of one FX graph, in node order (see ``fastlower.core.encode``)."""

    op: List[int]
    prioritized: List[int]
    inputs: List[List[int]]  # node.all_input_nodes, in order
    users: List[List[int]]  # node.users, in dict order
    names: List[str]
    tags: List[int]  # index into the tag list, TAG_NONE / TAG_UNKNOWN otherwise
    roles: List[int]  # ROLE_* for placeholders, ROLE_OTHER elsewhere
    targets: List[int]  # interned input-spec target of placeholders, -1 elsewhere
    debug_handles: List[int]  # meta["debug_handle"] or 0
    fake_vals: List[int]  # 1 when meta["val"] is a FakeTensor
    out_args: List[int]  # output node's args[0]: node id or -1 for a non-node
    out_kinds: List[int]  # OUT_* of each output spec (top level only)
    out_targets: List[int]  # interned output-spec target, -1 when none


@dataclass
class PartitionPlan:
    """One fused partition as the simulator planned it (node ids of the simulator)."""

    tag: int
    nodes: List[int] = field(default_factory=list)  # partition nodes, fused order
    inputs: List[int] = field(default_factory=list)  # external inputs, placeholder order
    outputs: List[int] = field(default_factory=list)  # nodes with external users, output order
    output_order: List[int] = field(default_factory=list)  # arrange_graph_outputs permutation
    output_kinds: List[int] = field(default_factory=list)  # OUT_* per output (before reorder)
    output_targets: List[int] = field(default_factory=list)  # buffer target of a mutation output
    member_inputs: Dict[int, List[int]] = field(default_factory=dict)  # inputs when fused
    # never filled by either simulator; kept so that a plan's fields (and anything keyed
    # on them) stay as they were
    owned: List[int] = field(default_factory=list)
    call_module: int = -1
    getitems: List[int] = field(default_factory=list)  # one per output, or [] if used directly
    get_attr: int = -1
    delegate: int = -1
    lowered_index: int = -1
    debug_handle: int = 0
    deleted_getitems: List[int] = field(default_factory=list)  # buffer updates the delegate owns
    # the partition takes parameters, buffers or constants of the top-level program, so the
    # reference adjusts that program after inserting the delegate
    owns_state: bool = False
    single_output: bool = False  # the call's single result is read via getitem(.., 0)


@dataclass
class PlanOptions:
    """How ``plan_graph`` plans one graph (besides its arrays and tags)."""

    is_submodule: bool = False  # a control-flow body: no constant duplication
    delegate_insertion: int = DELEGATES_WHILE_FUSING
    # per tag, the candidates whose shared constant is duplicated, in the reference's
    # order (the iteration order of a Python set of their names: computed in Python)
    duplication_order: List[List[int]] = field(default_factory=list)
    no_copy: List[int] = field(default_factory=list)  # per node: meta["no_copy"]
    # indices i whose lowered_module_{i} the owning module already has
    taken_lowered: List[int] = field(default_factory=list)
    # stop (STOP_VALIDATE) where the first constant would be duplicated: the caller
    # validates the tagged program there and plans again without it
    validate_at_first_duplication: bool = False
    # a control-flow body: the top-level graph's largest live debug handle (a delegate's
    # handle is one more); None for the top-level graph, which counts its own
    top_debug_handle: Optional[int] = None
    # DELEGATES_AFTER_FUSING: partitions whose delegates are inserted after fusing, in
    # this order (the multi-method path plans again once every preprocess ran) ...
    delegate_order: List[int] = field(default_factory=list)
    # ... and, in a control-flow body, the top-level graph's largest debug handle at each
    # of those insertions (empty: this graph's own, as for the top-level graph)
    delegate_top_debug_handles: List[int] = field(default_factory=list)


@dataclass
class RuleStop:
    """Where planning stopped: a broken rule, as plain data (``STOP_*`` kind, ``STAGE_*``).

    ``pid``: the partition (for ``STAGE_FUSE``: the number of partitions fused before
    the failing tag); ``tag``: the tag id; ``nodes``: the node ids involved, by kind
    (simulator ids): tagged output / user input, validate: ``[node]``; shared
    constant: ``[constant, other user]``; cycle: the path; no output: ``[last
    member]``; update returned: ``[getitem]``; update read: ``[getitem, *readers]``.
    """

    kind: int
    stage: int
    pid: int
    tag: int
    nodes: List[int] = field(default_factory=list)


@dataclass(frozen=True)
class PlannedGraph:
    """One graph after planning, as plain data (node ids: original nodes first, then the
    nodes the plan made; per-node lists cover every id, erased nodes included).

    What applying the plan reads: ``order`` lists the surviving nodes in final graph
    order; ``kind`` says what made each node (``KIND_*``), ``origin`` the original node a
    copy or getitem derives from; ``users[i]`` is in torch.fx order.
    """

    order: List[int]
    op: List[int]
    kind: List[int]
    origin: List[int]
    inputs: List[List[int]]
    users: List[List[int]]
    names: List[str]
    tags: List[int]
    alive: List[bool]
    getitem_index: List[int]
    debug_handles: List[int]
    copies: List[int]  # constant copies, in creation order
    copy_target: Dict[int, str]  # placeholder target of each copy
    out_args: List[int]  # the surviving outputs: node id, or -1 for a non-node
    out_kinds: List[int]
    out_targets: List[int]
    out_specs: List[int]  # index of each surviving output in the original output spec
    output_node: int
    partitions: List[PartitionPlan]
    lowered_count: int
    max_debug_handle: int  # the largest debug handle of a live node (0 when none)

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> "PlannedGraph":
        """From plain fields, partitions as dicts of :class:`PartitionPlan`'s fields."""
        return cls(**{**fields, "partitions": [PartitionPlan(**p) for p in fields["partitions"]]})


@dataclass
class PlanResult:
    """One graph planned by ``plan_graph``: the planned graph, and its stops."""

    graph: PlannedGraph
    stop: Optional[RuleStop] = None  # the first broken rule; planning ended there
    # DELEGATES_AFTER_FUSING: the first partition whose owned buffer update is read
    # outside it, met when the lowering inserts that delegate
    insert_stop: Optional[RuleStop] = None

    @property
    def partitions(self) -> List[PartitionPlan]:
        return self.graph.partitions

    @classmethod
    def from_core(cls, raw: Tuple[Mapping[str, Any], Optional[Mapping[str, Any]],
                                  Optional[Mapping[str, Any]]]) -> "PlanResult":
        """The result of the core's ``plan_graph``: (graph, stop, insert_stop) as dicts."""
        graph, stop, insert_stop = raw
        return cls(PlannedGraph.from_fields(graph),
                   None if stop is None else RuleStop(**stop),
                   None if insert_stop is None else RuleStop(**insert_stop))


class Simulator(Protocol):
    """A fine-grained fusion simulator: the core's ``FusionSimulator`` or the twin's (the
    differential tests drive it step by step; ``plan_graph`` keeps its own inside).

    Per-node attributes index by simulator node id (original nodes first, then the
    nodes the simulator made); the core exposes them as live read-only sequences,
    the twin as lists. ``users[i]`` iterates node ``i``'s users in torch.fx order.
    """

    @property
    def g(self) -> GraphArrays: ...
    @property
    def tag_names(self) -> List[str]: ...
    @property
    def is_submodule(self) -> bool: ...
    @property
    def partitions(self) -> List[PartitionPlan]: ...
    @property
    def lowered_count(self) -> int: ...
    @property
    def copies(self) -> List[int]: ...
    @property
    def copy_target(self) -> Dict[int, str]: ...
    @property
    def out_args(self) -> List[int]: ...
    @property
    def out_kinds(self) -> List[int]: ...
    @property
    def out_specs(self) -> List[int]: ...
    @property
    def out_targets(self) -> List[int]: ...
    @property
    def output_node(self) -> int: ...
    @property
    def top(self) -> "Simulator": ...
    @property
    def op(self) -> Sequence[int]: ...
    @property
    def kind(self) -> Sequence[int]: ...
    @property
    def origin(self) -> Sequence[int]: ...
    @property
    def inputs(self) -> Sequence[Sequence[int]]: ...
    @property
    def users(self) -> Sequence[Collection[int]]: ...
    @property
    def names(self) -> Sequence[str]: ...
    @property
    def tags(self) -> Sequence[int]: ...
    @property
    def alive(self) -> Sequence[bool]: ...
    @property
    def pos(self) -> Sequence[int]: ...
    @property
    def getitem_index(self) -> Sequence[int]: ...
    @property
    def partition_of(self) -> Sequence[int]: ...
    @property
    def debug_handle(self) -> Sequence[int]: ...
    @property
    def has_fake_val(self) -> Sequence[int]: ...
    @property
    def prioritized(self) -> Sequence[int]: ...

    def order(self) -> List[int]: ...
    def duplicate_constant(self, c: int) -> List[int]: ...
    def retag_constant(self, c: int) -> None: ...
    def renumber(self) -> None: ...
    def members(self, tag: int) -> List[int]: ...
    def find_cycle(self, members: List[int]) -> Optional[List[int]]: ...
    def fuse(self, tag: int, members: List[int]) -> PartitionPlan: ...
    def legalize(self) -> None: ...
    def insert_delegate(self, pid: int) -> None: ...
    def max_debug_handle(self) -> int: ...
