"""What a partitioner changed besides tags: the edits the reference does not see.

The reference's ``is_identical_graph`` compares each node's op, target and input
nodes only. A partitioner that also rewrites a number, a list, a dtype or a
kwarg (``cat``'s ``dim``, ``add``'s ``alpha``) goes unnoticed, and the edited
graph is lowered. fastlower lowers it too, so that every partitioner that works
with the reference works the same, but it names each edit (one warning through
``logging.getLogger("fastlower")``), runs ExecuTorch's verifier on every program
that holds an edited node (so an invalid edit raises what the reference raises),
and inside :func:`fastlower.strict_partitioners` refuses any edit.

Metadata is not an edit: partitioners are meant to write ``delegation_tag``,
``no_copy`` and their own keys.

The comparison is one pass over the two node lists, which the structure check
has already found to match node for node (same op, target and input nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set

import torch
from torch.fx import GraphModule, Node


@dataclass(frozen=True)
class ArgEdit:
    """One changed argument of one node."""

    node: str
    argument: str  # the schema's argument name where known, else "args[i]" / kwarg name
    old: Any
    new: Any
    edited_node: Optional[Node] = field(default=None, compare=False, repr=False)

    def __str__(self) -> str:
        return f"node '{self.node}' argument '{self.argument}' from {self.old!r} to {self.new!r}"


class _NodeRef:
    """A node, compared by its position in its graph (both graphs have the same positions)."""

    __slots__ = ("position",)

    def __init__(self, position: int) -> None:
        self.position = position

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _NodeRef) and other.position == self.position

    def __hash__(self) -> int:
        return hash(self.position)


def _canonical(value: Any, position: Dict[Node, int]) -> Any:
    """``value`` with nodes replaced by their positions, containers by tuples of their kind."""
    if isinstance(value, Node):
        return _NodeRef(position[value])
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_canonical(v, position) for v in value)
    if isinstance(value, dict):  # kwargs: their order is not an edit
        return ("dict",) + tuple(sorted(((str(k), _canonical(v, position))
                                         for k, v in value.items()),
                                        key=lambda kv: kv[0]))
    return value


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, float) and isinstance(b, float) and a != a and b != b:  # both NaN
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))
    try:
        return bool(a == b)
    except Exception:  # a value without a usable __eq__: identity was the only test
        return False


def _argument_names(node: Node) -> Optional[List[str]]:
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return None
    return [arg.name for arg in schema.arguments]


def _plain(value: Any) -> Any:
    """A value for the message: nodes by name."""
    if isinstance(value, (list, tuple, dict, Node)):
        return torch.fx.node.map_arg(value, lambda n: n.name)
    return value


def find_arg_edits(edited: GraphModule, original: GraphModule) -> List[ArgEdit]:
    """Every non-node argument or kwarg of ``edited``'s nodes that differs from ``original``'s.

    Both graphs must have the same nodes in the same order (same op, target and
    input nodes), as ``lowering.check_unmodified`` establishes.
    """
    edited_nodes = list(edited.graph.nodes)
    original_nodes = list(original.graph.nodes)
    edited_pos = {n: i for i, n in enumerate(edited_nodes)}
    original_pos = {n: i for i, n in enumerate(original_nodes)}
    edits: List[ArgEdit] = []
    for new, old in zip(edited_nodes, original_nodes):
        if new.args is old.args and new.kwargs is old.kwargs:
            continue
        new_args, old_args = _canonical(new.args, edited_pos), _canonical(old.args, original_pos)
        if not _same(new_args, old_args):
            names = _argument_names(old)
            for i in range(max(len(new.args), len(old.args))):
                a = new.args[i] if i < len(new.args) else None
                b = old.args[i] if i < len(old.args) else None
                if not _same(_canonical(a, edited_pos), _canonical(b, original_pos)):
                    label = names[i] if names and i < len(names) else f"args[{i}]"
                    edits.append(ArgEdit(old.name, label, _plain(b), _plain(a), new))
        new_kwargs = _canonical(new.kwargs, edited_pos)
        old_kwargs = _canonical(old.kwargs, original_pos)
        if not _same(new_kwargs, old_kwargs):
            for key in list(old.kwargs) + [k for k in new.kwargs if k not in old.kwargs]:
                a, b = new.kwargs.get(key), old.kwargs.get(key)
                if key not in new.kwargs or key not in old.kwargs or not _same(
                        _canonical(a, edited_pos), _canonical(b, original_pos)):
                    edits.append(ArgEdit(old.name, key, _plain(b), _plain(a), new))
    return edits


@dataclass
class PartitionerEdits:
    """Everything a partitioner changed in one program, for deciding what to verify.

    ``args``: argument edits of nodes that are otherwise unchanged.
    ``bodies``: control-flow bodies (graph modules of the edited program) whose
    nodes changed in number, op, target or inputs; the reference does not look
    inside them. ``unknown``: the top graph's structure differs too (allowed
    only under ``validation_disabled()``), so nothing can be matched.
    """

    args: List[ArgEdit] = field(default_factory=list)
    bodies: Set[int] = field(default_factory=set)  # id() of edited control-flow graph modules
    unknown: bool = False

    def __bool__(self) -> bool:
        return bool(self.args or self.bodies or self.unknown)

    @property
    def edited_nodes(self) -> Set[Node]:
        return {e.edited_node for e in self.args if e.edited_node is not None}

    def touches(self, graph_module: GraphModule, nodes: List[Node]) -> bool:
        """Does a partition of ``graph_module`` made of ``nodes`` hold an edit?"""
        if self.unknown or id(graph_module) in self.bodies:
            return True
        edited = self.edited_nodes
        return any(n in edited for n in nodes)


def _same_structure(edited: GraphModule, original: GraphModule) -> bool:
    """The structure check ``to_backend`` makes on the top graph (op, target, input nodes)."""
    from ..core.plan import structure_difference

    return structure_difference(edited, original) < 0


def _bodies(gm: GraphModule) -> Dict[str, GraphModule]:
    return {n.target: getattr(gm, n.target) for n in gm.graph.nodes
            if n.op == "get_attr" and isinstance(getattr(gm, n.target, None), GraphModule)}


def find_edits(edited: GraphModule, original: GraphModule,
               structure_checked: bool) -> PartitionerEdits:
    """Argument edits of the top graph and of every control-flow body, recursively.

    ``structure_checked``: the caller has established that the top graphs match
    node for node; otherwise they are compared here first.
    """
    found = PartitionerEdits()
    if not structure_checked and not _same_structure(edited, original):
        found.unknown = True
        return found
    found.args.extend(find_arg_edits(edited, original))
    _nested_edits(edited, original, found)
    return found


def _nested_edits(edited: GraphModule, original: GraphModule, found: PartitionerEdits) -> None:
    originals = _bodies(original)
    for name, body in _bodies(edited).items():
        before = originals.get(name)
        if before is None or not _same_structure(body, before):
            found.bodies.add(id(body))
            continue
        found.args.extend(find_arg_edits(body, before))
        _nested_edits(body, before, found)
