"""A custom pytree container registered, on import, under a name that is no module path
(``my_boxes.Box``): a new process rebuilds it only with ``--import tests.cli.box_types``."""

from __future__ import annotations

import json

import torch
from torch.utils import _pytree as pytree


class Box:
    """Holds named tensors; its pytree context is a JSON object, not a list of keys."""

    def __init__(self, **items: torch.Tensor) -> None:
        self.items = dict(items)


def _flatten(box: Box):
    return list(box.items.values()), {"names": list(box.items), "kind": "box"}


def _unflatten(values, context) -> Box:
    return Box(**dict(zip(context["names"], values)))


pytree.register_pytree_node(
    Box, _flatten, _unflatten, serialized_type_name="my_boxes.Box",
    to_dumpable_context=json.dumps, from_dumpable_context=json.loads)


class BoxOutput(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.proj(x)
        return Box(first=y, second=torch.tanh(y))
