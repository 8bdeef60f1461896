"""Input checks of the planning entry points, shared by the twin and the C++ core.

Every entry point of ``fastlower._core`` checks the arrays it is handed before it
touches them (lengths, node-id ranges, CSR offsets, users consistent with inputs,
the state a simulator method needs); ``csrc/checks.hpp`` holds the same checks,
run in the same order with the same messages, so both implementations reject the
same malformed input with the same exception.  Each check is one O(n) pass.

Exceptions: a wrong length, a broken CSR layout or an inconsistent structure is a
``ValueError``; a value outside its index range is an ``IndexError``.  Messages
name the entry point, the array and the position, never the offending value (the
core clamps values beyond int64, so it could not print them the same way).
"""

from __future__ import annotations

from typing import Sequence

from ..schema import MAX_TAGS, OP_OUTPUT, OP_PLACEHOLDER, GraphArrays

__all__ = ["MAX_TAGS", "check_length", "check_node_ids", "check_node_id", "check_csr",
           "check_tag_ids", "check_graph_arrays"]


def check_length(where: str, name: str, seq: Sequence, n: int) -> None:
    """``len(seq) == n`` or ValueError."""
    if len(seq) != n:
        raise ValueError(f"{where}: {name} has {len(seq)} entries, expected {n}")


def check_node_ids(where: str, name: str, ids: Sequence[int], n: int) -> None:
    """Every entry a node id in ``[0, n)`` or IndexError naming the first bad position."""
    for k, x in enumerate(ids):
        if not 0 <= x < n:
            raise IndexError(f"{where}: {name}[{k}] is not a node id in [0, {n})")


def check_node_id(where: str, name: str, x: int, n: int) -> None:
    """One node id in ``[0, n)`` or IndexError."""
    if not 0 <= x < n:
        raise IndexError(f"{where}: {name} is not a node id in [0, {n})")


def check_csr(where: str, offsets_name: str, offsets: Sequence[int], flat_name: str,
              flat_len: int, n: int) -> None:
    """CSR offsets of ``n`` rows: ``n + 1`` entries, start at 0, never decrease, end at
    ``flat_len``."""
    check_length(where, offsets_name, offsets, n + 1)
    if offsets[0] != 0:
        raise ValueError(f"{where}: {offsets_name}[0] is not 0")
    for k in range(1, n + 1):
        if offsets[k] < offsets[k - 1]:
            raise ValueError(f"{where}: {offsets_name} decreases at {k}")
    if offsets[n] != flat_len:
        raise ValueError(f"{where}: {offsets_name}[{n}] is not len({flat_name}) = {flat_len}")


def check_tag_ids(where: str, name: str, tags: Sequence[int], n_tags: int) -> None:
    """Every tag -2 (unknown), -1 (untagged) or in ``[0, n_tags)``; ``n_tags < 0`` means
    unbounded."""
    for k, t in enumerate(tags):
        if t < -2 or (n_tags >= 0 and t >= n_tags):
            bound = f"in [0, {n_tags})" if n_tags >= 0 else ">= 0"
            raise IndexError(f"{where}: {name}[{k}] is not -2, -1 or a tag id {bound}")


def check_graph_arrays(g: GraphArrays) -> None:
    """The checks of ``FusionSimulator(g, ...)`` on a ``GraphArrays``, in the core's order."""
    where = "FusionSimulator"
    n = len(g.op)
    for name in ("prioritized", "inputs", "users", "names", "tags", "roles", "targets",
                 "debug_handles", "fake_vals"):
        check_length(where, f"g.{name}", getattr(g, name), n)
    m = len(g.out_args)
    check_length(where, "g.out_kinds", g.out_kinds, m)
    check_length(where, "g.out_targets", g.out_targets, m)
    for i, o in enumerate(g.op):
        if not OP_PLACEHOLDER <= o <= OP_OUTPUT:
            raise ValueError(f"{where}: g.op[{i}] is not an op code in [0, 5]")
    for adjacency in ("inputs", "users"):
        for i, xs in enumerate(getattr(g, adjacency)):
            check_node_ids(where, f"g.{adjacency}[{i}]", xs, n)
    for i, xs in enumerate(g.inputs):
        if len(set(xs)) != len(xs):
            raise ValueError(f"{where}: g.inputs[{i}] lists a node twice")
    expected = {(x, u) for u, xs in enumerate(g.inputs) for x in xs}
    seen = set()
    for x, us in enumerate(g.users):
        for u in us:
            if (x, u) not in expected or (x, u) in seen:
                raise ValueError(f"{where}: g.users[{x}] does not match g.inputs (user {u})")
            seen.add((x, u))
    if len(seen) != len(expected):
        for u, xs in enumerate(g.inputs):
            for x in xs:
                if (x, u) not in seen:
                    raise ValueError(
                        f"{where}: g.users[{x}] lacks node {u}, which takes it as an input")
    for p, x in enumerate(g.out_args):
        if x != -1 and not 0 <= x < n:
            raise IndexError(f"{where}: g.out_args[{p}] is neither -1 nor a node id in [0, {n})")
    if m and not (n and g.op[n - 1] == OP_OUTPUT):
        raise ValueError(
            f"{where}: g.out_args is not empty but the last node is not an output node")
    if m:
        out_inputs = set(g.inputs[n - 1])
        for p, x in enumerate(g.out_args):
            if x != -1 and x not in out_inputs:
                raise ValueError(f"{where}: g.out_args[{p}] is not an input of the output node")
