"""Structural graph identity, the linear form of the reference's recursive check."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from .checks import check_csr, check_length, check_node_ids


def first_difference(op_a: Sequence[int], target_a: Sequence[int], off_a: Sequence[int],
                     in_a: Sequence[int], op_b: Sequence[int], target_b: Sequence[int],
                     off_b: Sequence[int], in_b: Sequence[int]) -> int:
    """Index of the first node whose structure differs, -1 when the graphs are identical.

    Two nodes are the same when op and target match and their inputs are,
    recursively, the same: each node gets a structural class by hash-consing
    (op, target, classes of its inputs) in graph order, with one table shared by
    both graphs.  Returns ``len`` of the shorter graph when only the node counts differ.
    Each graph's ``off``/``in`` is CSR over its nodes; input ids are node ids of
    the same graph (a forward reference is allowed).  Malformed arrays raise
    ValueError / IndexError (``checks``), as in the C++ core.
    """
    for suffix, (op, target, off, flat) in (("a", (op_a, target_a, off_a, in_a)),
                                             ("b", (op_b, target_b, off_b, in_b))):
        where = "first_difference"
        check_length(where, f"target_{suffix}", target, len(op))
        check_csr(where, f"off_{suffix}", off, f"in_{suffix}", len(flat), len(op))
        check_node_ids(where, f"in_{suffix}", flat, len(op))
    table: Dict[Tuple, int] = {}

    def classes(op, target, off, flat) -> List[int]:
        out: List[int] = []
        for i in range(len(op)):
            ins = tuple(out[j] if j < i else -1 - j for j in flat[off[i]:off[i + 1]])
            key = (op[i], target[i], ins)
            out.append(table.setdefault(key, len(table)))
        return out

    ca = classes(op_a, target_a, off_a, in_a)
    cb = classes(op_b, target_b, off_b, in_b)
    for i, (x, y) in enumerate(zip(ca, cb)):
        if x != y:
            return i
    return -1 if len(ca) == len(cb) else min(len(ca), len(cb))
