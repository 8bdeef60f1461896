"""Pure-Python twin of the fusion planner.

It replays, on integer arrays only, the sequence of graph edits the reference
lowering performs on one FX graph: fuse the nodes of a tag into a call, add the
getitems, erase the nodes, re-sort the whole graph (Kahn, FIFO, some ops
prioritised), then swap the call for a delegate call.  It records what the
apply step needs to rebuild the final graph in one pass: each partition's
ordered nodes, inputs and outputs, the names the reference would allocate and
the final node order.  Nothing here touches torch.fx objects.

Node and user order semantics mirror torch.fx exactly:
* re-assigning a node's args moves that node to the end of the ``users`` of
  every one of its inputs;
* a re-sort rebuilds all ``users`` in the new node order.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List, Optional, Sequence

# The shared data model lives in fastlower.core.schema; re-exported here, where the twin's
# callers (tests, fuzz harness, benchmarks) import it from.
from ..schema import (  # noqa: F401
    KIND_CALL_MODULE, KIND_CONSTANT_COPY, KIND_DELEGATE, KIND_GET_ATTR, KIND_GETITEM,
    KIND_ORIGINAL, OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_MODULE, OP_GET_ATTR, OP_OUTPUT,
    OP_PLACEHOLDER, OUT_BUFFER_MUTATION, OUT_OTHER, OUT_USER, ROLE_BUFFER, ROLE_CONSTANT,
    ROLE_OTHER, ROLE_PARAMETER, ROLE_USER_INPUT, GraphArrays, PartitionPlan, Simulator,
)
from .checks import check_graph_arrays, check_node_id, check_node_ids
from .graph import NodeGraph
from .namespace import Namespace, snake_case


_FUSIBLE = (KIND_ORIGINAL, KIND_CONSTANT_COPY)


class FusionSimulator(NodeGraph):
    """Replays the reference's edits on one graph; see the module docstring."""

    def __init__(self, g: GraphArrays, tag_names: Sequence[str], is_submodule: bool,
                 top: Optional[Simulator] = None,
                 taken_lowered: Sequence[int] = ()) -> None:
        check_graph_arrays(g)
        n = len(g.op)
        self.g = g
        self.tag_names = list(tag_names)
        self.is_submodule = is_submodule
        # the top-level simulator (this one at the top level), the core's or the twin's
        self.top: Simulator = top if top is not None else self
        self.op = list(g.op)
        self.kind = [KIND_ORIGINAL] * n
        self.origin = list(range(n))  # original node a copy/getitem derives from
        self.prioritized = list(g.prioritized)
        self.inputs: List[List[int]] = [list(x) for x in g.inputs]
        self.users: List[Dict[int, None]] = [dict.fromkeys(u) for u in g.users]
        self.names = list(g.names)
        self.tags = list(g.tags)
        self.debug_handle = list(g.debug_handles)
        self.has_fake_val = list(g.fake_vals)
        self.alive = [True] * n
        self.getitem_index: List[int] = [-1] * n
        self.partition_of: List[int] = [-1] * n  # partition a call/getitem/delegate belongs to
        self.out_args = list(g.out_args)
        self.out_kinds = list(g.out_kinds)
        self.out_targets = list(g.out_targets)
        self.out_specs = list(range(len(g.out_args)))  # surviving output specs, by index
        self.output_node = n - 1 if n and g.op[n - 1] == OP_OUTPUT else -1
        # doubly linked node order
        self.next = list(range(1, n + 1))
        self.prev = list(range(-1, n - 1))
        self.head = 0 if n else -1
        self.tail = n - 1
        self.pos = list(range(n))
        self.ns = Namespace(self.names)
        self.partitions: List[PartitionPlan] = []
        self.lowered_count = 0
        # indices i whose lowered_module_{i} the owning module already has (an earlier
        # lowering's delegates): the reference's get_lowered_module_name skips them
        self.taken_lowered = set(taken_lowered)
        if any(k < 0 for k in self.taken_lowered):
            raise ValueError("taken_lowered: lowered module indices are >= 0")
        self.copies: List[int] = []  # constant copies, creation order
        self.copy_target: Dict[int, str] = {}  # placeholder target of each copy

    # -- constant duplication (top level, before any fusion) -----------------
    def duplicate_constant(self, c: int) -> List[int]:
        """Give every user of placeholder ``c`` but the first its own copy of it."""
        check_node_id("duplicate_constant", "c", c, len(self.op))
        if not self.alive[c] or self.op[c] != OP_PLACEHOLDER:
            raise ValueError(f"duplicate_constant: node {c} is not a live placeholder")
        users = list(self.users[c])
        made = []
        for ith in range(1, len(users)):
            fqn = self.names[c] + f"_copy_{ith - 1}"
            k = self._new_node(OP_PLACEHOLDER, KIND_CONSTANT_COPY, [],
                               self.ns.create(snake_case(fqn)), c)
            self.copy_target[k] = fqn
            self.debug_handle[k] = self.debug_handle[c]
            self.has_fake_val[k] = self.has_fake_val[c]
            self.tags[k] = self.tags[c]
            self._link_before(k, c)
            # fastlower rewrites every occurrence, including inside list arguments
            # (the reference only rewrites direct args: pytorch/executorch#22798).
            u = users[ith]
            self._replace_input(u, c, k)
            made.append(k)
        self.copies.extend(made)
        return made

    def retag_constant(self, c: int) -> None:
        check_node_id("retag_constant", "c", c, len(self.op))
        tags = {self.tags[u] for u in self.users[c]}
        if len(tags) == 1:
            self.tags[c] = tags.pop()

    # -- fusion ---------------------------------------------------------------
    def renumber(self) -> None:
        for p, i in enumerate(self.order()):
            self.pos[i] = p

    def members(self, tag: int) -> List[int]:
        return sorted((i for i in range(len(self.op)) if self.alive[i] and self.tags[i] == tag
                       and self.kind[i] in (KIND_ORIGINAL, KIND_CONSTANT_COPY)),
                      key=self.pos.__getitem__)

    def find_cycle(self, members: List[int]) -> Optional[List[int]]:
        """A path that leaves the partition and comes back into it, or None."""
        check_node_ids("find_cycle", "members", members, len(self.op))
        if not members:
            raise ValueError("find_cycle: members is empty")
        inside = set(members)
        limit = max(self.pos[m] for m in members)
        parent: Dict[int, int] = {}
        queue: Deque[int] = deque()
        for m in members:
            for u in self.users[m]:
                if u not in inside and u not in parent and self.pos[u] <= limit:
                    parent[u] = m
                    queue.append(u)
        while queue:
            cur = queue.popleft()
            for u in self.users[cur]:
                if u in parent or self.pos[u] > limit:
                    continue
                parent[u] = cur
                if u in inside:
                    path = [u]
                    while path[-1] not in inside or len(path) == 1:
                        path.append(parent[path[-1]])
                    return list(reversed(path))
                queue.append(u)
        return None

    def _check_fusible(self, tag: int, members: List[int]) -> None:
        """What ``fuse`` relies on: a tag id and distinct, live, original members with an output."""
        if not 0 <= tag < len(self.tag_names):
            raise IndexError(f"fuse: tag is not a tag id in [0, {len(self.tag_names)})")
        check_node_ids("fuse", "members", members, len(self.op))
        if not members:
            raise ValueError("fuse: members is empty")
        inside = set()
        for k, m in enumerate(members):
            if m in inside:
                raise ValueError(f"fuse: members[{k}] repeats a node")
            inside.add(m)
            if not self.alive[m] or self.kind[m] not in _FUSIBLE or self.op[m] == OP_OUTPUT:
                raise ValueError(f"fuse: node {m} is dead, made by the planner or the output node")
        if not any(u not in inside for m in members for u in self.users[m]):
            raise ValueError("fuse: no member has a user outside the partition")

    def fuse(self, tag: int, members: List[int]) -> PartitionPlan:
        self._check_fusible(tag, members)
        plan = PartitionPlan(tag=tag, nodes=members)
        plan.member_inputs = {m: list(self.inputs[m]) for m in members}
        inside = set(members)
        seen: Dict[int, None] = {}
        for m in members:
            for x in self.inputs[m]:
                if x not in inside:
                    seen.setdefault(x)
        plan.inputs = list(seen)
        plan.outputs = [m for m in members if any(u not in inside for u in self.users[m])]
        anchor = max(plan.outputs, key=self.pos.__getitem__)
        pid = len(self.partitions)
        cm = self._new_node(OP_CALL_MODULE, KIND_CALL_MODULE, plan.inputs,
                            self.ns.create(snake_case("fused_" + self.tag_names[tag])), -1)
        self.partition_of[cm] = pid
        self._link_after(cm, anchor)
        plan.call_module = cm
        if len(plan.outputs) == 1:
            out = plan.outputs[0]
            self.origin[cm] = out
            self.debug_handle[cm] = self.debug_handle[out]
            self._replace_all_uses(out, cm)
            if self.has_fake_val[out]:
                plan.single_output = True
                gi = self._new_node(OP_CALL_FUNCTION, KIND_GETITEM, [cm],
                                    self.ns.create("getitem"), out)
                self.getitem_index[gi] = 0
                self.partition_of[gi] = pid
                self.debug_handle[gi] = self.debug_handle[out]
                self.has_fake_val[gi] = 1
                self._link_after(gi, cm)
                for u in list(self.users[cm]):
                    if u != gi:
                        self._replace_input(u, cm, gi)
                plan.getitems = [gi]
        else:
            anchor_next = self.next[cm] if cm != self.tail else -1
            last = cm
            for i, out in enumerate(plan.outputs):
                gi = self._new_node(OP_CALL_FUNCTION, KIND_GETITEM, [cm],
                                    self.ns.create("getitem"), out)
                self.getitem_index[gi] = i
                self.partition_of[gi] = pid
                self.debug_handle[gi] = self.debug_handle[out]
                self.has_fake_val[gi] = self.has_fake_val[out]
                if anchor_next == -1:
                    self._link_after(gi, last)
                else:
                    self._link_before(gi, anchor_next)
                last = gi
                self._replace_all_uses(out, gi)
                plan.getitems.append(gi)
        for m in reversed(members):
            self._erase(m)
        self.legalize()
        self.partitions.append(plan)
        self._classify_outputs(plan)
        return plan

    def _classify_outputs(self, plan: PartitionPlan) -> None:
        """Output kinds and the buffer-mutation-first permutation of the delegate."""
        owned_targets = set()
        if not self.is_submodule:
            for m in plan.nodes:
                if self.op[m] == OP_PLACEHOLDER and self.g.roles[self.origin[m]] in (
                        ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT):
                    owned_targets.add(self.g.targets[self.origin[m]])
        kinds = [OUT_USER] * len(plan.outputs)
        plan.output_targets = [-1] * len(plan.outputs)
        deleted: List[int] = []
        if not self.is_submodule and plan.getitems:
            for p, node in enumerate(self.out_args):
                if (node < 0 or self.kind[node] != KIND_GETITEM
                        or self.partition_of[node] != len(self.partitions) - 1):
                    continue
                if (self.out_kinds[p] == OUT_BUFFER_MUTATION
                        and self.out_targets[p] in owned_targets):
                    kinds[self.getitem_index[node]] = OUT_BUFFER_MUTATION
                    plan.output_targets[self.getitem_index[node]] = self.out_targets[p]
                    if node not in deleted:
                        deleted.append(node)
        plan.output_kinds = kinds
        mutations = [i for i, k in enumerate(kinds) if k == OUT_BUFFER_MUTATION]
        plan.output_order = mutations + [i for i, k in enumerate(kinds) if k != OUT_BUFFER_MUTATION]
        plan.deleted_getitems = deleted
        plan.owns_state = bool(owned_targets)
        if plan.output_order != list(range(len(kinds))):
            new_index = {old: new for new, old in enumerate(plan.output_order)}
            for gi in list(self.users[plan.call_module]):
                if self.kind[gi] == KIND_GETITEM and self.getitem_index[gi] in new_index:
                    self.getitem_index[gi] = new_index[self.getitem_index[gi]]
                    self._set_inputs(gi, self.inputs[gi])

    # -- delegate insertion -----------------------------------------------------
    def insert_delegate(self, pid: int, debug_handle: Optional[int] = None) -> None:
        """Swap partition ``pid``'s call for its delegate's; the delegate's debug handle is
        ``debug_handle``, else one more than the top-level graph's largest."""
        if not 0 <= pid < len(self.partitions):
            raise IndexError(
                f"insert_delegate: pid is not a partition id in [0, {len(self.partitions)})")
        plan = self.partitions[pid]
        if plan.delegate != -1:
            raise ValueError(f"insert_delegate: partition {pid} is already delegated")
        cm = plan.call_module
        while self.lowered_count in self.taken_lowered:
            self.lowered_count += 1
        plan.lowered_index = self.lowered_count
        self.lowered_count += 1
        ga = self._new_node(OP_GET_ATTR, KIND_GET_ATTR, [],
                            self.ns.create(f"lowered_module_{plan.lowered_index}"), -1)
        self._link_before(ga, cm)
        cd = self._new_node(OP_CALL_FUNCTION, KIND_DELEGATE, [ga] + self.inputs[cm],
                            self.ns.create("executorch_call_delegate"), -1)
        self._link_before(cd, cm)
        self.partition_of[ga] = self.partition_of[cd] = pid
        self.pos[ga] = self.pos[cd] = self.pos[cm]
        plan.get_attr, plan.delegate = ga, cd
        plan.debug_handle = (self.top.max_debug_handle() + 1 if debug_handle is None
                             else debug_handle)
        self.debug_handle[cd] = plan.debug_handle
        for u in list(self.users[cm]):
            self._replace_input(u, cm, cd)
        self._erase(cm)
        if plan.owns_state:
            self._adjust_owning_program(plan)

    def _adjust_owning_program(self, plan: PartitionPlan) -> None:
        """``_unsafe_adjust_original_program``: drop the buffer updates the delegate owns.

        It re-assigns the output node's args even when nothing is dropped, which moves
        the output node to the end of its inputs' ``users``.
        """
        dropped = set(plan.deleted_getitems)
        keep = [p for p, node in enumerate(self.out_args) if node not in dropped]
        self.out_args = [self.out_args[p] for p in keep]
        self.out_kinds = [self.out_kinds[p] for p in keep]
        self.out_targets = [self.out_targets[p] for p in keep]
        self.out_specs = [self.out_specs[p] for p in keep]
        if self.output_node >= 0:  # arrays without an output node
            self._set_inputs(self.output_node, [x for x in self.out_args if x >= 0])
        gone = []
        for u in list(self.users[plan.delegate]):
            if u in dropped:
                gone.append(self.getitem_index[u])
                self._erase(u)
        gone.sort(reverse=True)
        for u in list(self.users[plan.delegate]):
            idx = self.getitem_index[u]
            for i, g in enumerate(gone):
                if idx > g:
                    self.getitem_index[u] = idx - (len(gone) - i)
                    self._set_inputs(u, self.inputs[u])
                    break

    def max_debug_handle(self) -> int:
        return max((self.debug_handle[i] for i in range(len(self.op)) if self.alive[i]), default=0)
