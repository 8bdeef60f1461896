"""A node emitted into a pass's new graph with outputs known beforehand: what the pass
base's ``_fx`` does after running the operator, step for step. Two bases: ExecuTorch's
``_ExportPassBase`` (``executorch/exir/pass_base.py``) and torch's
``_ExportPassBaseDeprecatedDoNotUse`` (``torch/_export/pass_base.py``, under ExecuTorch's
``ReplaceViewOpsWithViewCopyOpsPass``), which also records the outputs' unbacked bindings
and has its own ``ProxyValue`` class."""

from __future__ import annotations

import functools
from typing import Any, Dict, Tuple

__all__ = ["emit", "proxy_value_class", "runs_export_pass_fx"]


def runs_export_pass_fx(pass_: Any) -> bool:
    """Whether ``pass_`` emits nodes through ``_ExportPassBase._fx`` (a subclass that
    overrides it gets the operator run, as it expects)."""
    from executorch.exir.pass_base import _ExportPassBase

    return type(pass_)._fx is _ExportPassBase.__dict__["_fx"]


@functools.lru_cache(maxsize=64)
def _base(cls: type) -> Tuple[type, bool]:
    """The ``ProxyValue`` class of pass class ``cls``'s base, and whether the base is
    torch's (looked up once per class: this runs for every node of every pass)."""
    from executorch.exir.pass_base import ProxyValue, _ExportPassBase

    if issubclass(cls, _ExportPassBase):
        return ProxyValue, False
    from torch._export.pass_infra.proxy_value import ProxyValue as TorchProxyValue

    return TorchProxyValue, True


def proxy_value_class(pass_: Any) -> type:
    """The ``ProxyValue`` class of ``pass_``'s base."""
    return _base(pass_.__class__)[0]


def emit(pass_: Any, kind: str, target: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any],
         meta: Any, data: Any) -> Any:
    """The node for ``target(*args, **kwargs)`` with ``data`` as its result."""
    import torch
    import torch.utils._pytree as pytree

    proxy_value, torch_base = _base(pass_.__class__)
    args_proxy, kwargs_proxy = pytree.tree_map_only(
        proxy_value, lambda x: x.proxy, (args, kwargs))
    name = None
    if isinstance(target, torch._ops.OpOverload):
        name = pass_.tracer.graph._target_to_str(target.overloadpacket.__name__)
    proxy = pass_.tracer.create_proxy(kind, target, args_proxy, kwargs_proxy, name=name)
    proxy.node.meta.update(meta.data)
    if torch_base and pass_.fake_tensor_mode and (
            shape_env := pass_.fake_tensor_mode.shape_env):
        from torch.fx.experimental.symbolic_shapes import compute_unbacked_bindings

        if symbol_to_path := compute_unbacked_bindings(shape_env, data):
            proxy.node.meta["unbacked_bindings"] = symbol_to_path
    pass_.tracer.set_metadata(proxy.node, data)
    return proxy_value(data, proxy)
