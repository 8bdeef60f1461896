"""A node emitted into an ``ExportPass``'s new graph with outputs known beforehand: what
``_ExportPassBase._fx`` (``executorch/exir/pass_base.py``) does after running the
operator, step for step."""

from __future__ import annotations

from typing import Any, Dict, Tuple

__all__ = ["emit", "runs_export_pass_fx"]


def runs_export_pass_fx(pass_: Any) -> bool:
    """Whether ``pass_`` emits nodes through ``_ExportPassBase._fx`` (a subclass that
    overrides it gets the operator run, as it expects)."""
    from executorch.exir.pass_base import _ExportPassBase

    return type(pass_)._fx is _ExportPassBase.__dict__["_fx"]


def emit(pass_: Any, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
         meta: Any, data: Any) -> Any:
    """The node for ``target(*args, **kwargs)`` with ``data`` as its result."""
    import torch
    import torch.utils._pytree as pytree
    from executorch.exir.pass_base import ProxyValue

    args_proxy, kwargs_proxy = pytree.tree_map_only(
        ProxyValue, lambda x: x.proxy, (args, kwargs))
    name = None
    if isinstance(target, torch._ops.OpOverload):
        name = pass_.tracer.graph._target_to_str(target.overloadpacket.__name__)
    proxy = pass_.tracer.create_proxy(kind, target, args_proxy, kwargs_proxy, name=name)
    proxy.node.meta.update(meta.data)
    pass_.tracer.set_metadata(proxy.node, data)
    return ProxyValue(data, proxy)
