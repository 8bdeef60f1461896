"""A call's fake outputs described so that a later call can remake them exactly,
including which symbolic sizes are the very objects of the call's inputs.

A retrace's tracer (``ProxyTorchDispatchMode``) maps each ``SymNode`` object to the
graph value that computes it: an output size that is an input's ``SymNode`` object
reads the input's value, a new ``SymNode`` (same expression or not) gets a
``sym_size`` of the new output. So a remade output has, per size, stride and storage
offset, the same kind as the real call's: a plain int, the ``SymNode`` at the same
place of this call's inputs, or a new ``SymNode`` of the same expression and hint.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

__all__ = ["Template", "input_nodes", "remake", "template"]

Place = Tuple[int, str, int]  # (input leaf, "size"/"stride"/"offset"/"int", dim)


def _symints(leaf: Any) -> List[Tuple[str, int, Any]]:
    import torch

    if isinstance(leaf, torch.Tensor):
        found = [("size", i, s) for i, s in enumerate(leaf.shape)]
        found += [("stride", i, s) for i, s in enumerate(leaf.stride())]
        return found + [("offset", 0, leaf.storage_offset())]
    if isinstance(leaf, torch.SymInt):
        return [("int", 0, leaf)]
    return []


def input_nodes(leaves: List[Any]) -> Dict[int, Place]:
    """Each input ``SymNode`` object (by id) and its first place among the inputs."""
    import torch

    places: Dict[int, Place] = {}
    for index, leaf in enumerate(leaves):
        for kind, dim, value in _symints(leaf):
            if isinstance(value, torch.SymInt):
                places.setdefault(id(value.node), (index, kind, dim))
    return places


def _describe(value: Any, places: Dict[int, Place]) -> Optional[Tuple[Any, ...]]:
    import torch

    if not isinstance(value, torch.SymInt):
        return ("int", int(value))
    node = value.node
    if id(node) in places:
        return ("input", places[id(node)])
    if node.constant is not None or node.fx_node or node.pytype is not int:
        return None
    return ("new", node.expr, node.hint)  # fx_node: translation validation only


class Template:
    """Per output tensor: sizes, strides, offset (described; the offset 0), its number
    of dimensions, dtype, device, ``requires_grad``; and the outputs' structure."""

    def __init__(self, tensors: List[Tuple[Any, ...]], spec: Any) -> None:
        self.tensors = tensors
        self.spec = spec


def template(outputs: Any, input_leaves: List[Any]) -> Optional[Template]:
    """The outputs' description, or None when a remade copy could differ (an output
    that is not a fresh fake tensor of its own storage, a data-dependent size, a
    constant's fake tensor in or out)."""
    import torch
    import torch.utils._pytree as pytree
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    from torch.multiprocessing.reductions import StorageWeakRef

    leaves, spec = pytree.tree_flatten(outputs)
    if not leaves or not all(type(leaf) is FakeTensor and leaf.constant is None
                             for leaf in leaves):
        return None  # a constant's fake tensor carries its value: not remade
    if any(isinstance(leaf, FakeTensor) and leaf.constant is not None
           for leaf in input_leaves):
        return None
    places = input_nodes(input_leaves)
    taken = {StorageWeakRef(leaf.untyped_storage())
             for leaf in input_leaves if isinstance(leaf, torch.Tensor)}
    tensors = []
    for leaf in leaves:
        storage = StorageWeakRef(leaf.untyped_storage())
        if (free_unbacked_symbols(leaf) or storage in taken or leaf._base is not None
                or leaf.layout != torch.strided or leaf.is_sparse):
            return None
        taken.add(storage)
        described = [_describe(v, places) for v in (*leaf.shape, *leaf.stride(),
                                                    leaf.storage_offset())]
        if any(d is None for d in described) or described[-1] != ("int", 0):
            return None  # a size made otherwise, or an offset into its storage
        tensors.append((tuple(described), leaf.dim(), leaf.dtype, leaf.device,
                        leaf.requires_grad))
    return Template(tensors, spec)


def _value(described: Tuple[Any, ...], input_leaves: List[Any], env: Any) -> Any:
    import torch
    from torch.fx.experimental.sym_node import SymNode

    if described[0] == "int":
        return described[1]
    if described[0] == "input":
        index, kind, dim = described[1]
        leaf = input_leaves[index]
        if kind == "int":
            return leaf
        if kind == "offset":
            return leaf.storage_offset()
        return (leaf.shape if kind == "size" else leaf.stride())[dim]
    return torch.SymInt(SymNode(described[1], env, int, described[2]))


def remake(found: Template, mode: Any, input_leaves: List[Any]) -> Any:
    """New fake tensors as the template describes, in ``mode``."""
    import torch
    import torch.utils._pytree as pytree

    made = []
    with mode:
        for described, dim, dtype, device, requires_grad in found.tensors:
            values = [_value(d, input_leaves, mode.shape_env) for d in described]
            tensor = torch.empty_strided(values[:dim], values[dim:2 * dim], dtype=dtype,
                                         device=device)
            if requires_grad:
                tensor.requires_grad_(True)
            made.append(tensor)
    return pytree.tree_unflatten(made, found.spec)
