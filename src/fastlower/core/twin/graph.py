"""The graph edits the fusion simulator replays, on integer arrays (torch.fx semantics).

:class:`NodeGraph` holds the per-node arrays, the users lists and the doubly linked
node order of one graph, and edits them the way torch.fx edits a ``Graph``:

* re-assigning a node's args moves that node to the end of the ``users`` of every one
  of its inputs;
* a re-sort (:meth:`NodeGraph.legalize`) rebuilds all ``users`` in the new node order.

``FusionSimulator`` (``fusion.py``) sets every attribute in its ``__init__`` and builds
the reference's edits from these primitives.
"""

from __future__ import annotations

from collections import deque
from typing import Deque, Dict, List

from .namespace import Namespace


class NodeGraph:
    """Per-node arrays, users and node order of one graph; see the module docstring."""

    op: List[int]
    kind: List[int]
    origin: List[int]
    prioritized: List[int]
    inputs: List[List[int]]
    users: List[Dict[int, None]]
    names: List[str]
    tags: List[int]
    debug_handle: List[int]
    has_fake_val: List[int]
    alive: List[bool]
    getitem_index: List[int]
    partition_of: List[int]
    next: List[int]
    prev: List[int]
    pos: List[int]
    head: int
    tail: int
    ns: Namespace
    output_node: int
    out_args: List[int]

    def _new_node(self, op: int, kind: int, inputs: List[int], name: str, origin: int) -> int:
        i = len(self.op)
        self.op.append(op)
        self.kind.append(kind)
        self.origin.append(origin)
        self.prioritized.append(0)
        self.inputs.append(inputs)
        self.users.append({})
        self.names.append(name)
        self.tags.append(-1)
        self.debug_handle.append(0)
        self.has_fake_val.append(0)
        self.alive.append(True)
        self.getitem_index.append(-1)
        self.partition_of.append(-1)
        self.next.append(-1)
        self.prev.append(-1)
        self.pos.append(-1)
        for x in inputs:
            self.users[x][i] = None
        return i

    def _link_after(self, i: int, anchor: int) -> None:
        nxt = self.next[anchor]
        self.prev[i], self.next[i] = anchor, nxt
        self.next[anchor] = i
        if anchor == self.tail:
            self.tail = i
        else:
            self.prev[nxt] = i

    def _link_before(self, i: int, anchor: int) -> None:
        prv = self.prev[anchor]
        self.prev[i], self.next[i] = prv, anchor
        self.prev[anchor] = i
        if anchor == self.head:
            self.head = i
        else:
            self.next[prv] = i

    def _unlink(self, i: int) -> None:
        prv, nxt = self.prev[i], self.next[i]
        if i == self.head:
            self.head = nxt if i != self.tail else -1
        else:
            self.next[prv] = nxt
        if i == self.tail:
            self.tail = prv
        else:
            self.prev[nxt] = prv

    def order(self) -> List[int]:
        out, i = [], self.head
        while i != -1:
            out.append(i)
            i = -1 if i == self.tail else self.next[i]
        return out

    def _set_inputs(self, u: int, new_inputs: List[int]) -> None:
        """``u.args = ...``: u leaves the users of its old inputs, joins the new ones at the end."""
        for x in self.inputs[u]:
            self.users[x].pop(u, None)
        seen: Dict[int, None] = {}
        for x in new_inputs:
            seen.setdefault(x)
        self.inputs[u] = list(seen)
        for x in self.inputs[u]:
            self.users[x][u] = None

    def _replace_all_uses(self, old: int, new: int) -> None:
        # output specs follow out_args positions and are renamed at the end
        for u in list(self.users[old]):
            self._replace_input(u, old, new)

    def _replace_input(self, u: int, old: int, new: int) -> None:
        self._set_inputs(u, [new if x == old else x for x in self.inputs[u]])
        if u == self.output_node:
            self.out_args = [new if x == old else x for x in self.out_args]

    def _erase(self, i: int) -> None:
        for x in self.inputs[i]:
            self.users[x].pop(i, None)
        self.alive[i] = False
        self._unlink(i)

    def legalize(self) -> None:
        """``legalize_graph``: Kahn's algorithm, FIFO, prioritised ops jump the queue; then
        the node order, the users lists and the namespace are rebuilt in the new order."""
        new_order = self._kahn_order()
        self._relink(new_order)
        self._rebuild_users(new_order)
        self.ns = Namespace(self.names[i] for i in new_order)

    def _kahn_order(self) -> List[int]:
        order = self.order()
        indeg = {i: len(self.inputs[i]) for i in order}
        queue: Deque[int] = deque(i for i in order if indeg[i] == 0)
        new_order = []
        while queue:
            cur = queue.popleft()
            new_order.append(cur)
            for u in self.users[cur]:
                indeg[u] -= 1
                if indeg[u] == 0:
                    if self.prioritized[u]:
                        queue.appendleft(u)
                    else:
                        queue.append(u)
        if len(new_order) != len(order):
            stuck = [self.names[i] for i in order if indeg[i] != 0]
            raise RuntimeError(f"graph has a cycle through {stuck[:10]}")
        return new_order

    def _rebuild_users(self, new_order: List[int]) -> None:
        for i in new_order:
            for x in self.inputs[i]:
                self.users[x].pop(i, None)
        for i in new_order:
            for x in self.inputs[i]:
                self.users[x][i] = None

    def _relink(self, new_order: List[int]) -> None:
        for p, i in enumerate(new_order):
            self.pos[i] = p
            self.prev[i] = new_order[p - 1] if p else -1
            self.next[i] = new_order[p + 1] if p + 1 < len(new_order) else -1
        self.head = new_order[0] if new_order else -1
        self.tail = new_order[-1] if new_order else -1
