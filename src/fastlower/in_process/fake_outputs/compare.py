"""Fake values compared by their metadata: what a node's ``meta["val"]`` records, as
ExecuTorch's passes would see it (shapes and strides as symbolic expressions, storage
offset, dtype, device, layout, ``requires_grad``, whether it is a view, fake mode)."""

from __future__ import annotations

import functools
from typing import Any, FrozenSet, Iterable, Optional, Tuple

__all__ = ["FakeOutputsVerificationError", "carried_state", "carried_state_in", "difference",
           "int_key", "is_value", "outputs_difference"]


class FakeOutputsVerificationError(AssertionError):
    """``FASTLOWER_FAKE_OUTPUTS=verify``: outputs fastlower knew without running an
    operator differ from the ones running it gives."""

    def __init__(self, node: str, difference: str) -> None:
        super().__init__(
            f"node {node!r}: the outputs known without running it differ from its run's: "
            f"{difference}; set FASTLOWER_FAKE_OUTPUTS=run and please report it")
        self.node = node
        self.difference = difference


def is_value(value: Any) -> bool:
    """A fake tensor, a symbolic int or a plain int."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(value, (FakeTensor, torch.SymInt)) or type(value) is int


def int_key(value: Any) -> Any:
    """A size's comparable form: a symbolic int's expression, a plain int's value."""
    import torch

    if isinstance(value, torch.SymInt):
        return ("sym", value.node.expr)
    return ("int", value)


def difference(recorded: Any, given: Any) -> Optional[str]:
    """How two values' metadata differ (None: not at all)."""
    from torch._subclasses.fake_tensor import FakeTensor

    if isinstance(recorded, FakeTensor) != isinstance(given, FakeTensor):
        return f"{type(recorded).__name__} against {type(given).__name__}"
    if not isinstance(recorded, FakeTensor):
        return None if int_key(recorded) == int_key(given) else f"{recorded} against {given}"
    if recorded.fake_mode is not given.fake_mode:
        return "another fake mode"
    fields = (("shape", lambda t: [int_key(s) for s in t.shape]),
              ("stride", lambda t: [int_key(s) for s in t.stride()]),
              ("storage offset", lambda t: int_key(t.storage_offset())),
              ("dtype", lambda t: t.dtype), ("device", lambda t: t.device),
              ("layout", lambda t: t.layout), ("requires_grad", lambda t: t.requires_grad),
              ("view", lambda t: t._base is not None))
    for name, read in fields:
        if read(recorded) != read(given):
            return f"{name} {read(recorded)} against {read(given)}"
    return None


@functools.lru_cache(maxsize=None)
def _fresh_state() -> Tuple[Tuple[str, ...], FrozenSet[str]]:
    """torch's per-tensor memos of data-dependent answers (``item_memo``,
    ``nonzero_memo``... as their raw attributes) and the attributes a new fake tensor has."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode, SymNumberMemoDescriptor
    from torch.utils._python_dispatch import _disable_current_modes

    memos = tuple(f"_{name}" for name, value in vars(FakeTensor).items()
                  if isinstance(value, SymNumberMemoDescriptor))
    with _disable_current_modes(), FakeTensorMode():
        fresh = torch.empty(0)
    return memos, frozenset(fresh.__dict__)


def carried_state(value: Any) -> Optional[str]:
    """What a fake tensor carries that a new run's output would not (None: nothing):
    torch's memo of a data-dependent answer (``item()``, ``nonzero``, ``unique``... give the
    memo's symbol again for the same object, a new symbol for a new one), a constant or
    real tensor, or an attribute a new fake tensor does not have."""
    from torch._subclasses.fake_tensor import FakeTensor

    if not isinstance(value, FakeTensor):
        return None
    memos, fresh = _fresh_state()
    state = value.__dict__
    for name in memos:
        if state.get(name) is not None:
            return f"torch's {name.lstrip('_')} {state[name]!r}"
    for name in ("constant", "real_tensor"):
        if state.get(name) is not None:
            return f"a {name.replace('_', ' ')}"
    if fresh.issuperset(state):  # no allocation on this path: it runs at every reuse
        return None
    return f"attributes {sorted(set(state) - fresh)}"


def carried_state_in(leaves: Iterable[Any]) -> Optional[str]:
    """:func:`carried_state` of the first of ``leaves`` (flat values) that carries any."""
    for leaf in leaves:
        found = carried_state(leaf)
        if found is not None:
            return found
    return None


def outputs_difference(known: Any, ran: Any) -> Optional[str]:
    """How two output structures differ (None: same structure, each leaf the same)."""
    import torch.utils._pytree as pytree

    known_leaves, known_spec = pytree.tree_flatten(known)
    ran_leaves, ran_spec = pytree.tree_flatten(ran)
    if known_spec != ran_spec:
        return f"structure {known_spec} against {ran_spec}"
    for index, (a, b) in enumerate(zip(known_leaves, ran_leaves)):
        found = difference(a, b)
        if found is not None:
            return f"output {index}: {found}"
    return None
