"""Partition contract validation on the encoded graph."""

from __future__ import annotations

from typing import Sequence, Tuple

from .fusion import OP_OUTPUT, OP_PLACEHOLDER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_PARAMETER

# violation codes, shared with the C++ core
OK, TAGGED_OUTPUT, TAGGED_USER_INPUT, UNKNOWN_TAG, NO_COPY_SHARED = range(5)

_OWNABLE = (ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT)


def find_contract_violation(op: Sequence[int], tags: Sequence[int], roles: Sequence[int],
                            no_copy: Sequence[int], users_offsets: Sequence[int],
                            users_flat: Sequence[int], strict_tags: bool) -> Tuple[int, int, int]:
    """The first broken rule as (code, node, other node), or (OK, -1, -1).

    Nodes are checked in graph order.  Tags are indices (-1 untagged, -2 a tag
    that ``partition_tags`` does not name; an error only when ``strict_tags``,
    else left undelegated).  A ``no_copy`` constant shared with another tag (or
    an untagged node) is reported with the offending user.
    """
    for i, t in enumerate(tags):
        if t == -1 or (t == -2 and not strict_tags):
            continue
        if t == -2:
            return UNKNOWN_TAG, i, -1
        if op[i] == OP_OUTPUT:
            return TAGGED_OUTPUT, i, -1
        if op[i] == OP_PLACEHOLDER:
            if roles[i] not in _OWNABLE:
                return TAGGED_USER_INPUT, i, -1
            if no_copy[i]:
                for k in range(users_offsets[i], users_offsets[i + 1]):
                    u = users_flat[k]
                    if tags[u] != t:
                        return NO_COPY_SHARED, i, u
    return OK, -1, -1
