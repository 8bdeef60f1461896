"""Typed errors raised by fastlower.

Every error derives from :class:`FastlowerError`.  Contract violations are also
``RuntimeError`` (the reference raises ``RuntimeError`` for them and callers catch
that); an unknown backend is also ``NotImplementedError`` as in the reference.
Each message names the node, the tag and the rule that was broken.
"""

from __future__ import annotations

from typing import Optional, Sequence


class FastlowerError(Exception):
    """Base class of every error fastlower raises on purpose."""


class PartitionContractError(FastlowerError, RuntimeError):
    """A partitioner's tags break one of the delegation contract rules."""

    def __init__(self, rule: str, detail: str, node: Optional[str] = None, tag: Optional[str] = None):
        self.rule = rule
        self.node = node
        self.tag = tag
        where = []
        if node is not None:
            where.append(f"node '{node}'")
        if tag is not None:
            where.append(f"tag '{tag}'")
        prefix = f"[{rule}] " + (", ".join(where) + ": " if where else "")
        super().__init__(prefix + detail)


class TaggedOutputError(PartitionContractError):
    def __init__(self, node: str, tag: str):
        super().__init__("tagged-output", f"output node {node} should not be tagged (the outputs "
                         "of a program cannot be delegated)", node, tag)


class TaggedUserInputError(PartitionContractError):
    def __init__(self, node: str, tag: str):
        super().__init__("tagged-user-input", "placeholder node for non-params, non-buffer, and "
                         f"non-tensor constants should not be tagged: {node} (only parameters, "
                         "buffers and lifted constants can be owned by a delegate)", node, tag)


class SharedConstantError(PartitionContractError):
    def __init__(self, node: str, tag: str, user: str, user_tag: Optional[str], no_copy: bool):
        why = ("it is marked no_copy, so it cannot be duplicated per partition" if no_copy
               else "a constant owned by a delegate may only be used by nodes of that delegate")
        super().__init__("constant-used-across-tags",
                         f"constant data node ({node}) is tagged with ({tag}) but has user ({user}) "
                         f"which has tag ({user_tag}); {why}", node, tag)
        self.user = user
        self.user_tag = user_tag


class MissingPartitionTagsError(PartitionContractError, AssertionError):
    def __init__(self, partitioner: str):
        super().__init__("partition-tags-missing",
                         f"Partitioner {partitioner} needs a `partition_tags` field containing a "
                         "mapping of tags to delegate spec, got None")


class UnknownTagError(PartitionContractError):
    def __init__(self, node: str, tag: str, known: Sequence[str]):
        super().__init__("tag-not-in-partition-tags",
                         f"node is tagged but partition_tags has no DelegationSpec for this tag "
                         f"(known tags: {sorted(known)[:20]})", node, tag)


class GraphModifiedError(PartitionContractError, AssertionError):
    def __init__(self, partitioner: str, detail: str, node: Optional[str] = None):
        super().__init__("partitioner-modified-graph",
                         f"The partitioner {partitioner} should not modify the graph module: {detail}",
                         node)


class CyclicPartitionError(PartitionContractError, AssertionError):
    def __init__(self, tag: str, path: Sequence[str]):
        self.path = list(path)
        super().__init__("partition-not-convex",
                         "Invalid partition, found dependency cycles: fusing this tag's nodes "
                         "into one delegate would create a dependency "
                         f"cycle along the path {' -> '.join(path)} (the path leaves the partition "
                         "and re-enters it)", path[0] if path else None, tag)


class NoPartitionOutputError(PartitionContractError, AssertionError):
    def __init__(self, tag: str, node: str):
        super().__init__("partition-without-output",
                         "no node of this partition is used outside it, so the delegate would "
                         "compute nothing", node, tag)


class BufferMutationOutputError(PartitionContractError, AssertionError):
    def __init__(self, node: str, tag: str, target: str):
        super().__init__("owned-buffer-mutation-reused",
                         f"Constant {target} was tagged to be consumed by the buffer, and was found "
                         "to also contain a buffer mutation. However this buffer mutation node was "
                         "found to also be used as other types of outputs which is currently not "
                         "supported.", node, tag)


class OwnedBufferUpdateReadError(PartitionContractError):
    def __init__(self, node: str, tag: str, target: str, readers: Sequence[str]):
        self.readers = list(readers)
        # the reference fails erasing the update's getitem (torch.fx's message)
        users = "{" + ", ".join(f"{r}: None" for r in self.readers) + "}"
        super().__init__("owned-buffer-update-read-outside",
                         f"the delegate owns buffer {target} and its update, but the updated value "
                         f"is also read outside the delegate by {', '.join(self.readers)}; tag those "
                         "readers too or leave the buffer untagged (Tried to erase Node "
                         f"{node} but it still had {len(self.readers)} users in the graph: "
                         f"{users}!)", node, tag)


class MethodWithoutProgramError(FastlowerError, AssertionError):
    """A ``MethodProgramsPartitionerSpec`` names a partitioner for a method it has no program for."""

    def __init__(self, method: str, methods: Sequence[str]):
        self.rule = "partitioner-without-program"
        self.method = method
        self.node = None
        self.tag = None
        super().__init__(f"[{self.rule}] method '{method}': Partitioner for method {method} is "
                         f"not provided a program (the spec's programs are: "
                         f"{', '.join(map(repr, methods)) or 'none'})")


class PartitionerEditError(GraphModifiedError):
    """Inside ``strict_partitioners()``: the partitioner changed a node's arguments."""

    def __init__(self, partitioner: str, edits: Sequence["object"]):
        self.edits = list(edits)
        first = self.edits[0]
        listed = "; ".join(str(e) for e in self.edits[:10])
        more = f" (and {len(self.edits) - 10} more)" if len(self.edits) > 10 else ""
        super().__init__(partitioner, f"it changed {listed}{more}", first.node)


class BackendNotFoundError(FastlowerError, NotImplementedError):
    def __init__(self, backend_id: str, known: Sequence[str]):
        self.backend_id = backend_id
        self.known = sorted(known)
        super().__init__(f"Backend {backend_id} was not found. Known backends "
                         f"(BackendDetails subclasses): {', '.join(self.known) or 'none'}")


class UndelegatedTagWarning(UserWarning):
    """Nodes carry a tag that ``partition_tags`` does not name; they stay undelegated."""
