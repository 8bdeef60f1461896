"""Partition contract validation on the encoded graph."""

from __future__ import annotations

from typing import Sequence, Tuple

from .checks import check_csr, check_length, check_node_ids, check_tag_ids
from ..schema import (
    CONTRACT_NO_COPY_SHARED, CONTRACT_OK, CONTRACT_TAGGED_OUTPUT, CONTRACT_TAGGED_USER_INPUT,
    CONTRACT_UNKNOWN_TAG, OP_OUTPUT, OP_PLACEHOLDER, OWNABLE_ROLES,
)

# the violation codes of fastlower.core.schema (CONTRACT_*), by their short names
OK, TAGGED_OUTPUT, TAGGED_USER_INPUT, UNKNOWN_TAG, NO_COPY_SHARED = (
    CONTRACT_OK, CONTRACT_TAGGED_OUTPUT, CONTRACT_TAGGED_USER_INPUT, CONTRACT_UNKNOWN_TAG,
    CONTRACT_NO_COPY_SHARED)
__all__ = ["find_contract_violation", "OWNABLE_ROLES", "OK", "TAGGED_OUTPUT",
           "TAGGED_USER_INPUT", "UNKNOWN_TAG", "NO_COPY_SHARED"]


def find_contract_violation(op: Sequence[int], tags: Sequence[int], roles: Sequence[int],
                            no_copy: Sequence[int], users_offsets: Sequence[int],
                            users_flat: Sequence[int], strict_tags: bool) -> Tuple[int, int, int]:
    """The first broken rule as (code, node, other node), or (OK, -1, -1).

    Nodes are checked in graph order.  Tags are indices (-1 untagged, -2 a tag
    that ``partition_tags`` does not name; an error only when ``strict_tags``,
    else left undelegated).  A ``no_copy`` constant shared with another tag (or
    an untagged node) is reported with the offending user.

    Malformed arrays (lengths, CSR offsets, user ids, tags below -2) raise
    ValueError / IndexError (``checks``), as in the C++ core.
    """
    where = "find_contract_violation"
    n = len(op)
    check_length(where, "tags", tags, n)
    check_length(where, "roles", roles, n)
    check_length(where, "no_copy", no_copy, n)
    check_csr(where, "users_offsets", users_offsets, "users_flat", len(users_flat), n)
    check_node_ids(where, "users_flat", users_flat, n)
    check_tag_ids(where, "tags", tags, -1)
    for i, t in enumerate(tags):
        if t == -1 or (t == -2 and not strict_tags):
            continue
        if t == -2:
            return UNKNOWN_TAG, i, -1
        if op[i] == OP_OUTPUT:
            return TAGGED_OUTPUT, i, -1
        if op[i] == OP_PLACEHOLDER:
            if roles[i] not in OWNABLE_ROLES:
                return TAGGED_USER_INPUT, i, -1
            if no_copy[i]:
                for k in range(users_offsets[i], users_offsets[i + 1]):
                    u = users_flat[k]
                    if tags[u] != t:
                        return NO_COPY_SHARED, i, u
    return OK, -1, -1
