"""Values chosen to break a shortcut's premise, set on an exported program's constants.

A mutation is ``"NAME:KIND"``: NAME is a constant of the program as
``fastlower.cache.refit.provenance.flat_constants`` names it (a torchao tensor's inner
tensors as ``name.attr``), KIND one of :data:`KINDS`, ``=NUMBER`` (every element) or
``@OTHER`` (a copy of the constant OTHER). :func:`apply` sets them in
place; :func:`draw` picks a seeded set for the fuzzer, weighted towards what broke
shortcuts before (zeros, uniform tensors, equal tensors, tensors equal to literals) and
towards one block only (the representative, the probe or a derived member).
"""

from __future__ import annotations

import random
from typing import Callable, Dict, List, Sequence

import torch


def _fill(value: float) -> Callable[[torch.Tensor, "Context"], None]:
    def run(t: torch.Tensor, ctx: "Context") -> None:
        t.fill_(value)
    return run


class Context:
    """What a kind may read: the program's other constants and its literals."""

    def __init__(self, constants: Dict[str, torch.Tensor], literals: Sequence[float],
                 rng: random.Random) -> None:
        self.constants, self.literals, self.rng = constants, literals, rng


def _element(value: float) -> Callable[[torch.Tensor, Context], None]:
    def run(t: torch.Tensor, ctx: Context) -> None:
        if t.numel():
            t.view(-1)[ctx.rng.randrange(t.numel())] = value
    return run


def _uniform(t: torch.Tensor, ctx: Context) -> None:
    if t.numel():
        t.fill_(t.reshape(-1)[0].item())


def _literal(t: torch.Tensor, ctx: Context) -> None:
    t.fill_(ctx.rng.choice(list(ctx.literals) or [0.5]))


def _equal(t: torch.Tensor, ctx: Context) -> None:
    """A copy of another constant of the same shape and dtype (tied weights)."""
    others = [o for o in ctx.constants.values()
              if o is not t and o.shape == t.shape and o.dtype == t.dtype]
    if others:
        t.copy_(ctx.rng.choice(others))


def _sign(t: torch.Tensor, ctx: Context) -> None:
    t.copy_(-t if t.dtype != torch.int8 else (-t.to(torch.int16)).clamp(-128, 127).to(t.dtype))


def _scaled(t: torch.Tensor, ctx: Context) -> None:
    """An ordinary new value (a trained checkpoint's)."""
    if t.is_floating_point():
        t.mul_(1.5).add_(0.01)
    elif t.dtype == torch.int8:
        t.copy_(((t.to(torch.int16) + 1).clamp(-8, 7) if int(t.abs().max()) <= 8
                 else (t.to(torch.int16) + 1).clamp(-127, 127)).to(t.dtype))
    else:
        t.add_(1)


def _range_ends(t: torch.Tensor, ctx: Context) -> None:
    if t.is_floating_point():
        info = torch.finfo(t.dtype)
        low, high = info.min, info.max
    elif t.dtype == torch.int8:
        low, high = (-8, 7) if int(t.abs().max()) <= 8 else (-128, 127)
    else:
        low, high = -1000, 1000
    pattern = torch.tensor([low, high], dtype=t.dtype).repeat(t.numel() // 2 + 1)
    t.view(-1).copy_(pattern[:t.numel()])


KINDS: Dict[str, Callable[[torch.Tensor, Context], None]] = {
    "zero": _fill(0.0), "negzero": _fill(-0.0), "ones": _fill(1.0), "uniform": _uniform,
    "literal": _literal, "equal": _equal, "sign": _sign, "scaled": _scaled,
    "nan": _element(float("nan")), "inf": _element(float("inf")), "zero_elem": _element(0.0),
    "subnormal": _element(1e-40), "out_of_4bit": _element(9), "range_ends": _range_ends,
}
_FLOAT_ONLY = {"negzero", "nan", "inf", "subnormal"}
# the fuzzer's draw: what broke shortcuts before, more often
_WEIGHTS = {"zero": 6, "negzero": 2, "ones": 2, "uniform": 3, "literal": 4, "equal": 4,
            "sign": 2, "scaled": 6, "nan": 1, "inf": 1, "zero_elem": 4, "subnormal": 2,
            "out_of_4bit": 1, "range_ends": 2}


def constants_of(program) -> Dict[str, torch.Tensor]:
    from fastlower.cache.refit.provenance import flat_constants

    return flat_constants(program)


def apply(program, mutations: Sequence[str], literals: Sequence[float] = (),
          seed: int = 0) -> None:
    """Set each ``NAME:KIND`` in place; a name the program lacks raises ``KeyError``."""
    constants = constants_of(program)
    ctx = Context(constants, literals, random.Random(seed))
    with torch.no_grad():
        for mutation in mutations:
            name, kind = mutation.rsplit(":", 1)
            if kind.startswith("="):
                constants[name].fill_(float(kind[1:]))
            elif kind.startswith("@"):
                constants[name].copy_(constants[kind[1:]])
            else:
                KINDS[kind](constants[name], ctx)


def draw(program, rng: random.Random) -> List[str]:
    """A seeded set of one to three mutations on the program's constants; sometimes none
    (an ordinary checkpoint, which refit then starts from)."""
    constants = constants_of(program)
    names = sorted(constants)
    count = rng.choice((0, 1, 1, 1, 2, 2, 3))
    chosen = []
    for name in rng.sample(names, min(count, len(names))):
        tensor = constants[name]
        kinds = [k for k in KINDS if tensor.is_floating_point() or k not in _FLOAT_ONLY]
        chosen.append(f"{name}:{rng.choices(kinds, [_WEIGHTS[k] for k in kinds])[0]}")
    return chosen
