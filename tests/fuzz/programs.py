"""Random Edge programs for the differential fuzz.

A :class:`ProgramRecipe` is drawn from a ``random.Random`` (so a case is fully
determined by its integer seed) and turned into a small ``nn.Module``
(:class:`RecipeModule`) whose ``forward`` interprets the recipe.  The module is
exported with ``torch.export.export`` and converted with
``executorch.exir.to_edge``.

Every value in the recipe is a float tensor of shape ``(2, 4)``, so any step can
consume any earlier value.  Steps cover: binary ops (``add`` with or without
``alpha``, ``mul``, ``sub``), unary ops (``relu``, ``tanh``, ``sin``),
``nn.Linear``, ``mm`` with a parameter, a buffer and a lifted tensor constant as
operands, ``cat`` with list arguments (including a constant inside the list,
``cat([const, x])``), ``view``/``permute``, in-place buffer mutation
(``add_``/``copy_``), and ``torch.cond`` / ``torch.map`` bodies.  Programs have
one to three outputs and roughly 5-40 nodes.
"""

from __future__ import annotations

import copy
import random
import warnings
from dataclasses import dataclass, field
from typing import List, Sequence, Tuple

import torch
from torch import nn

from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge

SHAPE = (2, 4)
N_USER_INPUTS = 2

Step = Tuple  # ("kind", operands...) -- see RecipeModule.forward


@dataclass
class ProgramRecipe:
    """What to build: the steps, how many of each kind of state, the outputs."""

    steps: List[Step]
    outputs: List[int]
    n_linear: int = 0
    n_weights: int = 0  # (4, 4) parameters used by mm
    n_cat_weights: int = 0  # (8, 4) parameters used after cat
    n_buffers: int = 0
    n_consts: int = 0  # lifted tensor constants (plain tensor attributes)
    weights_seed: int = 0
    notes: List[str] = field(default_factory=list)

    def describe(self) -> str:
        """One line per step, for failure reports and the findings file."""
        lines = [f"  v{N_USER_INPUTS + i} = {s}" for i, s in enumerate(self.steps)]
        return "\n".join(lines + [f"  return {['v%d' % o for o in self.outputs]}"])


_BINARY = ("add", "mul", "sub", "add_alpha")
_UNARY = ("relu", "tanh", "sin")
_BODY_OPS = ("add", "mul", "sub", "sin", "relu")


def draw_recipe(rng: random.Random, *, allow_control_flow: bool = True,
                allow_mutation: bool = True) -> ProgramRecipe:
    """A random recipe with 2-10 steps (kept small: each case must cost well under a second)."""
    r = ProgramRecipe(steps=[], outputs=[], weights_seed=rng.randrange(2**31))
    n_steps = rng.randint(2, 10)
    n_values = N_USER_INPUTS

    def pick_other(first: int) -> int:
        # higher-order ops reject the same tensor passed twice (aliasing)
        others = [i for i in range(n_values) if i != first]
        return rng.choice(others)

    def pick() -> int:
        # favour recent values so the DAG has depth, but reach back sometimes
        if rng.random() < 0.6:
            return rng.randrange(max(0, n_values - 3), n_values)
        return rng.randrange(n_values)

    kinds = ["binary"] * 5 + ["unary"] * 3 + ["linear", "mm", "buffer", "const", "cat",
                                               "view_permute"]
    if allow_mutation:
        kinds += ["mutate"]
    if allow_control_flow:
        kinds += ["cond", "map"]
    for _ in range(n_steps):
        kind = rng.choice(kinds)
        if kind == "binary":
            op = rng.choice(_BINARY)
            step = (op, pick(), pick())  # the picks draw from rng before alpha does
            if op == "add_alpha":
                step += (rng.choice([2.0, 0.5, -1.0]),)
        elif kind == "unary":
            step = (rng.choice(_UNARY), pick())
        elif kind == "linear":
            r.n_linear += 1
            step = ("linear", r.n_linear - 1, pick())
        elif kind == "mm":
            r.n_weights += 1
            step = ("mm", r.n_weights - 1, pick())
        elif kind == "buffer":
            # a buffer read (possibly shared by several steps)
            if r.n_buffers == 0 or rng.random() < 0.5:
                r.n_buffers += 1
            step = ("add_buffer", rng.randrange(r.n_buffers), pick())
        elif kind == "const":
            if r.n_consts == 0 or rng.random() < 0.5:
                r.n_consts += 1
            step = ("mul_const", rng.randrange(r.n_consts), pick())
        elif kind == "cat":
            r.n_cat_weights += 1
            if rng.random() < 0.5:
                if r.n_consts == 0 or rng.random() < 0.4:
                    r.n_consts += 1
                # a constant inside the list argument
                first = ("const", rng.randrange(r.n_consts))
            else:
                first = ("value", pick())
            step = ("cat", first, pick(), r.n_cat_weights - 1)
        elif kind == "view_permute":
            step = ("view_permute", pick())
        elif kind == "mutate":
            if r.n_buffers == 0 or rng.random() < 0.5:
                r.n_buffers += 1
            step = ("mutate", rng.choice(["add_", "copy_"]), rng.randrange(r.n_buffers), pick())
        elif kind == "cond":
            body = lambda: tuple(rng.choice(_BODY_OPS) for _ in range(rng.randint(1, 3)))  # noqa: E731
            a = pick()
            step = ("cond", a, pick_other(a), body(), body())
        else:  # map
            a = pick()
            # the body combines the row with the whole other operand first, so
            # every body returns (2, 4) and the mapped result (2, 2, 4)
            step = ("map", a, pick_other(a), rng.choice(("add", "mul", "sub")),
                    rng.choice(("sin", "relu")))
        r.steps.append(step)
        n_values += 1
    last = n_values - 1
    outs = {last}
    for _ in range(rng.choice([0, 0, 1, 2])):
        # now and then a user input is returned as is
        low = 0 if rng.random() < 0.1 else N_USER_INPUTS
        outs.add(rng.randrange(low, n_values))
    r.outputs = sorted(outs)
    return r


def _body_apply(ops: Sequence[str], a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    out = a
    for op in ops:
        if op == "add":
            out = out + b
        elif op == "mul":
            out = out * b
        elif op == "sub":
            out = out - b
        elif op == "sin":
            out = out.sin()
        else:
            out = out.relu()
    return out


def _storage_roots(recipe: ProgramRecipe) -> List[int]:
    """For each value, the value whose storage it shares (``view_permute`` makes views)."""
    roots = list(range(N_USER_INPUTS))
    for i, step in enumerate(recipe.steps):
        roots.append(roots[step[1]] if step[0] == "view_permute" else N_USER_INPUTS + i)
    return roots


class RecipeModule(nn.Module):
    """An ``nn.Module`` whose ``forward`` interprets a :class:`ProgramRecipe`."""

    def __init__(self, recipe: ProgramRecipe) -> None:
        super().__init__()
        self.recipe = recipe
        g = torch.Generator().manual_seed(recipe.weights_seed)
        self.linears = nn.ModuleList(nn.Linear(4, 4) for _ in range(recipe.n_linear))
        for lin in self.linears:
            with torch.no_grad():
                lin.weight.copy_(torch.randn(4, 4, generator=g) * 0.5)
                lin.bias.copy_(torch.randn(4, generator=g) * 0.5)
        for i in range(recipe.n_weights):
            self.register_parameter(f"w{i}", nn.Parameter(torch.randn(4, 4, generator=g) * 0.5))
        for i in range(recipe.n_cat_weights):
            self.register_parameter(f"cw{i}", nn.Parameter(torch.randn(8, 4, generator=g) * 0.3))
        for i in range(recipe.n_buffers):
            self.register_buffer(f"buf{i}", torch.randn(*SHAPE, generator=g))
        for i in range(recipe.n_consts):
            # a plain tensor attribute: export lifts it as a tensor constant
            setattr(self, f"const{i}", torch.randn(*SHAPE, generator=g))
        self.storage_of = _storage_roots(recipe)

    def _operands(self, vals: List[torch.Tensor], step: Step) -> Tuple[torch.Tensor, torch.Tensor]:
        """A cond's or map's two operands; torch.export rejects operands that alias each
        other (a value and its view), so the second is then a copy."""
        a, b = vals[step[1]], vals[step[2]]
        if self.storage_of[step[1]] == self.storage_of[step[2]]:
            b = b.clone()
        return a, b

    def forward(self, *inputs: torch.Tensor):
        vals: List[torch.Tensor] = list(inputs)
        for step in self.recipe.steps:
            kind = step[0]
            if kind == "add":
                v = vals[step[1]] + vals[step[2]]
            elif kind == "add_alpha":
                v = torch.add(vals[step[1]], vals[step[2]], alpha=step[3])
            elif kind == "mul":
                v = vals[step[1]] * vals[step[2]]
            elif kind == "sub":
                v = vals[step[1]] - vals[step[2]]
            elif kind == "relu":
                v = torch.relu(vals[step[1]])
            elif kind == "tanh":
                v = torch.tanh(vals[step[1]])
            elif kind == "sin":
                v = torch.sin(vals[step[1]])
            elif kind == "linear":
                v = self.linears[step[1]](vals[step[2]])
            elif kind == "mm":
                v = torch.mm(vals[step[2]], getattr(self, f"w{step[1]}"))
            elif kind == "add_buffer":
                v = vals[step[2]] + getattr(self, f"buf{step[1]}")
            elif kind == "mul_const":
                v = vals[step[2]] * getattr(self, f"const{step[1]}")
            elif kind == "cat":
                src, idx = step[1]
                first = getattr(self, f"const{idx}") if src == "const" else vals[idx]
                v = torch.mm(torch.cat([first, vals[step[2]]], dim=1),
                             getattr(self, f"cw{step[3]}"))
            elif kind == "view_permute":
                v = vals[step[1]].reshape(4, 2).permute(1, 0).reshape(2, 4)
            elif kind == "mutate":
                buf = getattr(self, f"buf{step[2]}")
                getattr(buf, step[1])(vals[step[3]])
                v = buf.clone()  # read the updated buffer
            elif kind == "cond":
                t_ops, f_ops = step[3], step[4]
                a, b = self._operands(vals, step)
                # both branches are traced by this call, in this iteration; a default argument
                # would change the branch signatures torch.cond traces
                v = torch.cond(a.sum() > 0,
                               lambda p, q: _body_apply(t_ops, p, q),  # noqa: B023
                               lambda p, q: _body_apply(f_ops, p, q),  # noqa: B023
                               (a, b))
            elif kind == "map":
                from torch._higher_order_ops.map import map as hop_map

                op1, op2 = step[3], step[4]
                # called by map in this iteration (see cond above)
                mapped = hop_map(lambda row, other: _body_apply((op1, op2), row, other),  # noqa: B023
                                 *self._operands(vals, step))
                v = mapped.sum(0)
            else:  # pragma: no cover - recipes are generated above
                raise ValueError(f"unknown step {step!r}")
            vals.append(v)
        return tuple(vals[i] for i in self.recipe.outputs)


def example_inputs(seed: int) -> Tuple[torch.Tensor, ...]:
    """The user inputs of a case, deterministic in ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(*SHAPE, generator=g) for _ in range(N_USER_INPUTS))


@dataclass
class BuiltProgram:
    """One exported case: the Edge manager, its inputs and the eager outputs."""

    recipe: ProgramRecipe
    epm: EdgeProgramManager
    inputs: Tuple[torch.Tensor, ...]
    expected: Tuple[torch.Tensor, ...]

    def fresh(self) -> EdgeProgramManager:
        """An independent copy of the Edge manager (the reference mutates its input)."""
        return copy.deepcopy(self.epm)


def build_program(recipe: ProgramRecipe, seed: int) -> BuiltProgram:
    """Export the recipe's module and convert it to Edge."""
    module = RecipeModule(recipe).eval()
    inputs = example_inputs(seed)
    with torch.no_grad():
        expected = copy.deepcopy(module)(*copy.deepcopy(inputs))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            aten = torch.export.export(module, inputs, strict=False)
            epm = to_edge(aten, compile_config=EdgeCompileConfig(_check_ir_validity=True))
    return BuiltProgram(recipe, epm, inputs, tuple(expected))
