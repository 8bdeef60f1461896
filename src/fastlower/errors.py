"""Typed errors raised by fastlower.

Every error derives from :class:`FastlowerError`. An error that stands for one the
reference raises is also an instance of the reference's class (``RuntimeError``,
``AssertionError``, ``NotImplementedError``) and its message (``str(exc)``,
``exc.args``) is exactly the reference's, so code that matches the reference's
text keeps working. fastlower's own context goes where Python keeps extra
context without changing the message:

* typed attributes: ``rule``, ``node``, ``tag`` (and per class ``path``, ``user``,
  ``readers``, ``known`` ...);
* one PEP 678 note (``exc.__notes__``, printed under the traceback) naming the
  rule, node and tag and saying what to change.

Errors with no reference counterpart (``UnknownTagError``, ``PartitionerEditError``,
``PartitionerGraphError``, ``NoPartitionOutputError``) say all of it in their message.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Protocol, Sequence, Tuple, Type


def add_note(error: BaseException, note: str) -> None:
    """PEP 678's ``error.add_note(note)``; on Python 3.10, which has no ``add_note``, the
    note is kept in ``__notes__`` alone (not printed under the traceback)."""
    if hasattr(error, "add_note"):
        error.add_note(note)
    else:
        error.__notes__ = [*getattr(error, "__notes__", ()), note]


class FastlowerError(Exception):
    """Base class of every error fastlower raises on purpose."""


class UnsupportedVersionError(FastlowerError, RuntimeError):
    """The installed torch or ExecuTorch is outside the releases fastlower is tested with
    (:mod:`fastlower.base.compat`)."""


class _NodeEdit(Protocol):
    """What an error reads of a partitioner's edit (``fastlower.lowering.edits``): its
    node's name."""

    @property
    def node(self) -> str: ...


def _rebuild(cls: Type[BaseException], args: Tuple[Any, ...],
             state: Dict[str, Any]) -> BaseException:
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def describe(error: BaseException) -> str:
    """``str(error)`` followed by its notes, on one line (for one-line error reports)."""
    notes = [str(n) for n in getattr(error, "__notes__", ())]
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return first + "".join(f" ({n})" for n in notes)


class PartitionContractError(FastlowerError, RuntimeError):
    """A partitioner's tags break one of the delegation contract rules.

    ``message`` is the reference's message for the same input (``str(exc)``);
    ``detail`` is fastlower's explanation, kept in a note with the rule, node and tag.
    """

    def __init__(self, rule: str, message: str, detail: str = "", node: Optional[str] = None,
                 tag: Optional[str] = None):
        super().__init__(message)
        self.rule = rule
        self.node = node
        self.tag = tag
        self.detail = detail
        where = []
        if node is not None:
            where.append(f"node '{node}'")
        if tag is not None:
            where.append(f"tag '{tag}'")
        if detail:  # (errors without a reference counterpart say it all in their message)
            add_note(self, f"fastlower: [{rule}] " + (", ".join(where) + ": " if where else "")
                          + detail)

    def __reduce__(self):  # subclasses take other __init__ arguments: rebuild from the state
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class TaggedOutputError(PartitionContractError):
    def __init__(self, node: str, tag: str):
        super().__init__("tagged-output", f"output node {node} should not be tagged",
                         "the outputs of a program cannot be delegated", node, tag)


class TaggedUserInputError(PartitionContractError):
    def __init__(self, node: str, tag: str):
        super().__init__("tagged-user-input", "placeholder node for non-params, non-buffer, and "
                         f"non-tensor constants should not be tagged: {node} ",
                         "only parameters, buffers and lifted constants can be owned by a "
                         "delegate; untag this user input", node, tag)


class SharedConstantError(PartitionContractError):
    def __init__(self, node: str, tag: str, user: str, user_tag: Optional[str], no_copy: bool):
        why = ("it is marked no_copy, so it cannot be duplicated per partition" if no_copy
               else "a constant owned by a delegate may only be used by nodes of that delegate")
        super().__init__("constant-used-across-tags",
                         f"constant data node ({node}) is tagged with ({tag}) but has user "
                         f"({user}) which has tag ({user_tag})",
                         f"its user {user} has tag {user_tag}; {why}", node, tag)
        self.user = user
        self.user_tag = user_tag


class MissingPartitionTagsError(PartitionContractError, AssertionError):
    def __init__(self, partitioner: str):
        super().__init__("partition-tags-missing",
                         f"Partitioner {partitioner} needs a `partition_tags` field containing a "
                         "mapping of tags to delegate spec",
                         "PartitionResult.partition_tags is None; return a dict tag -> "
                         "DelegationSpec (an empty dict when nothing is delegated)")


class UnknownTagError(PartitionContractError):
    def __init__(self, node: str, tag: str, known: Sequence[str]):
        detail = (f"node '{node}', tag '{tag}': node is tagged but partition_tags has no "
                  f"DelegationSpec for this tag (known tags: {sorted(known)[:20]})")
        super().__init__("tag-not-in-partition-tags", f"[tag-not-in-partition-tags] {detail}",
                         "", node, tag)


class GraphModifiedError(PartitionContractError, AssertionError):
    def __init__(self, partitioner: str, detail: str, node: Optional[str] = None,
                 message: Optional[str] = None):
        super().__init__("partitioner-modified-graph",
                         message or f"The partitioner {partitioner} should not modify the graph "
                         "module",
                         "" if message else f"the partitioner may only tag nodes; {detail}", node)


class CyclicPartitionError(PartitionContractError, AssertionError):
    def __init__(self, tag: str, path: Sequence[str]):
        self.path = list(path)
        super().__init__("partition-not-convex", "Invalid partition, found dependency cycles",
                         "fusing this tag's nodes into one delegate would create a dependency "
                         f"cycle along the path {' -> '.join(path)} (the path leaves the partition "
                         "and re-enters it)", path[0] if path else None, tag)


class NoPartitionOutputError(PartitionContractError, AssertionError):
    def __init__(self, tag: str, node: str):
        detail = ("no node of this partition is used outside it, so the delegate would "
                  "compute nothing")
        super().__init__("partition-without-output",
                         f"[partition-without-output] node '{node}', tag '{tag}': {detail}",
                         "", node, tag)


class BufferMutationOutputError(PartitionContractError, AssertionError):
    def __init__(self, node: str, tag: str, target: str):
        # the reference's message continues with a dump of the program being lowered
        # ("The toplevel program: ..."), which fastlower does not build
        super().__init__("owned-buffer-mutation-reused",
                         f"Constant {target} was tagged to be consumed by the buffer, and was "
                         "found to also contain a buffer mutation. However this buffer mutation "
                         "node was found to also be used as other types of outputs which is "
                         "currently not supported. Please file an issue on Github. ",
                         f"the delegate owns buffer {target} and its update, which the program "
                         "also returns as another output; untag the buffer or return the update "
                         "once",
                         node, tag)


class OwnedBufferUpdateReadError(PartitionContractError):
    def __init__(self, node: str, tag: str, target: str, readers: Sequence[str]):
        self.readers = list(readers)
        # the reference fails erasing the update's getitem (torch.fx's message)
        users = "{" + ", ".join(f"{r}: None" for r in self.readers) + "}"
        super().__init__("owned-buffer-update-read-outside",
                         f"Tried to erase Node {node} but it still had {len(self.readers)} users "
                         f"in the graph: {users}!",
                         f"the delegate owns buffer {target} and its update, but the updated value "
                         f"is also read outside the delegate by {', '.join(self.readers)}; tag "
                         "those readers too or leave the buffer untagged", node, tag)


class MethodWithoutProgramError(FastlowerError, AssertionError):
    """A ``MethodProgramsPartitionerSpec`` names a partitioner for a method it has no program
    for."""

    def __init__(self, method: str, methods: Sequence[str]):
        super().__init__(f"Partitioner for method {method} is not provided")
        self.rule = "partitioner-without-program"
        self.method = method
        self.methods = list(methods)
        self.node = None
        self.tag = None
        add_note(self, f"fastlower: [{self.rule}] method '{method}' has a partitioner but no "
                      f"program (the spec's programs are: "
                      f"{', '.join(map(repr, methods)) or 'none'})")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class PartitionerEditError(GraphModifiedError):
    """Inside ``strict_partitioners()``: the partitioner changed a node's arguments."""

    def __init__(self, partitioner: str, edits: Sequence[_NodeEdit]):
        self.edits = list(edits)
        first = self.edits[0]
        listed = "; ".join(str(e) for e in self.edits[:10])
        more = f" (and {len(self.edits) - 10} more)" if len(self.edits) > 10 else ""
        detail = f"it changed {listed}{more}"
        # no reference counterpart (the reference does not see argument edits): the
        # whole explanation is the message
        super().__init__(partitioner, detail, first.node,
                         message=f"[partitioner-modified-graph] The partitioner {partitioner} "
                         f"should not modify the graph module: {detail}")


class BackendNotFoundError(FastlowerError, NotImplementedError):
    def __init__(self, backend_id: str, known: Sequence[str]):
        super().__init__(f"Backend {backend_id} was not found.")
        self.backend_id = backend_id
        self.known = sorted(known)
        add_note(self, f"fastlower: known backends (BackendDetails subclasses): "
                      f"{', '.join(self.known) or 'none'}")

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))


class UndelegatedTagWarning(UserWarning):
    """Nodes carry a tag that ``partition_tags`` does not name; they stay undelegated."""


class PartitionerGraphError(FastlowerError, ValueError):
    """A canonical partitioner cannot partition this graph (native partitioners)."""

    def __init__(self, detail: str, node: Optional[str] = None):
        super().__init__(f"node '{node}': {detail}" if node is not None else detail)
        self.node = node

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))
