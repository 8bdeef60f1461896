"""``fastlower lower --check``: run the ``.pte`` in ``executorch.runtime`` and compare it
with the exported program's own output."""

from __future__ import annotations

import logging
from typing import Any

from ..console import out
from .common import EXIT_MISMATCH, EXIT_OK

log = logging.getLogger("fastlower.frontends.cli")


def check_pte(program: Any, buffer: bytes, atol: float = 1e-3, rtol: float = 1e-3) -> int:
    """Run ``buffer`` in ``executorch.runtime`` and compare it with ``program``'s own output,
    leaf by leaf (the ``.pte`` returns the program's output tree flattened)."""
    import torch
    from executorch.runtime import Runtime
    from torch.utils import _pytree as pytree

    args, kwargs = example_inputs(program)
    expected_tree = program.module()(*args, **kwargs)
    try:
        expected = pytree.tree_flatten_with_path(expected_tree)[0]
    except ValueError:  # a container registered without key paths: positions only
        expected = [((), leaf) for leaf in pytree.tree_leaves(expected_tree)]
    method = Runtime.get().load_program(buffer).load_method("forward")
    got = [t.clone() if isinstance(t, torch.Tensor) else t
           for t in method.execute(pytree.tree_leaves((args, kwargs)))]
    del method
    if len(got) != len(expected):
        out(f"check: FAILED: {len(got)} outputs, the exported program has {len(expected)}")
        return EXIT_MISMATCH
    worst = 0.0
    for i, ((path, e), g) in enumerate(zip(expected, got)):
        name = f"output {i}" + (f" ({pytree.keystr(path)})" if path else "")
        if isinstance(e, torch.Tensor):
            if not isinstance(g, torch.Tensor) or e.shape != g.shape \
                    or not torch.allclose(g.to(e.dtype), e, atol=atol, rtol=rtol):
                same_shape = isinstance(g, torch.Tensor) and e.shape == g.shape
                diff = (g.to(e.dtype) - e).abs().max().item() if same_shape else float("nan")
                got_shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
                out(f"check: FAILED: {name} differs (max abs error {diff:.3g}, "
                    f"shape {got_shape} vs {tuple(e.shape)})")
                return EXIT_MISMATCH
            if e.numel() and e.is_floating_point():
                worst = max(worst, (g.to(e.dtype) - e).abs().max().item())
        elif e != g:
            out(f"check: FAILED: {name} is {g!r}, the exported program gives {e!r}")
            return EXIT_MISMATCH
    names = [pytree.keystr(p) for p, _ in expected if p]
    shown = f" ({', '.join(names[:8])}{', ...' if len(names) > 8 else ''})" if names else ""
    out(f"check: ok, {len(got)} output(s){shown} match the exported program, leaf by leaf "
        f"(max abs error {worst:.2e})")
    return EXIT_OK


def example_inputs(program: Any) -> Any:
    """The program's saved example inputs, else random ones of the exported shapes, put
    in the program's input tree (its containers, stand-ins included)."""
    import torch
    from torch.utils import _pytree as pytree

    if program.example_inputs is not None:
        return program.example_inputs
    log.warning("no example inputs saved with the program: checking on random inputs")
    user_inputs = [n for n in program.graph.nodes if n.op == "placeholder"
                   and n.name in program.graph_signature.user_inputs]
    gen = torch.Generator().manual_seed(0)
    leaves = []
    for node in user_inputs:
        val = node.meta["val"]
        if not isinstance(val, torch.Tensor):
            leaves.append(val)
            continue
        shape = [int(d) for d in val.shape]
        if val.dtype.is_floating_point:
            leaves.append(torch.randn(shape, dtype=val.dtype, generator=gen))
        elif val.dtype == torch.bool:
            leaves.append(torch.randint(0, 2, shape, generator=gen).bool())
        else:
            leaves.append(torch.randint(0, 2, shape, dtype=val.dtype, generator=gen))
    in_spec = program.call_spec.in_spec
    if in_spec is None:
        return tuple(leaves), {}
    return pytree.tree_unflatten(leaves, in_spec)
