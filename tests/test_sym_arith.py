"""fastlower.in_process.sym_arith: inside a block, SymNode's +, -, *, ==, !=, <, <=, >, >=
are answered from a memo per shape environment, and every answer is what torch computes;
torch's code where the premise does not hold and everywhere else."""

from __future__ import annotations

import itertools
import logging
import threading

import pytest
import sympy
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental import sym_node
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from fastlower.in_process import sym_arith

OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
       "eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
       "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


@pytest.fixture(autouse=True)
def torch_functions_after(monkeypatch):
    monkeypatch.delenv("FASTLOWER_SYM_ARITH", raising=False)
    sym_arith.uninstall()  # a lowering earlier in this process bound the patch
    originals = {m: sym_node.SymNode.__dict__[f"_{m}"] for m in sym_arith.METHODS}
    yield
    sym_arith.uninstall()
    assert {m: sym_node.SymNode.__dict__[f"_{m}"] for m in sym_arith.METHODS} == originals


def _backed(env: ShapeEnv, name: str, value: int) -> torch.SymInt:
    symbol = env.create_symbol(value, source=ConstantSource(name))
    return env.create_symintnode(symbol, hint=value, source=ConstantSource(name))


def _fields(value) -> tuple:
    """Everything a result is (as torch builds it)."""
    node = value.node
    return (type(node), type(node._expr), node._expr, node.pytype, type(node._hint), node._hint,
            node._optimized_summation, node.constant, node.fx_node, node.shape_env)


def _operands(env: ShapeEnv) -> list:
    """Backed and unbacked sizes, sums of symbols (optimized summations), products,
    constants made symbolic and a SymBool: the operands torch's contiguity checks use."""
    s0, s1, s2 = _backed(env, "a", 4), _backed(env, "b", 7), _backed(env, "c", 1 << 20)
    u0 = env.create_unbacked_symint()
    return [s0, s1, s2, u0, s0 + s1, s1 + s0 + s2, s0 * s1, s0 * 0 + s1, u0 * s0, u0 + 1,
            s0 - s0, s2 // 4 * 4]


def _all_results(env: ShapeEnv, operands: list) -> list:
    out = []
    for (name, op), a, b in itertools.product(OPS.items(), operands, operands):
        try:
            result = op(a, b)
        except Exception as exc:  # noqa: BLE001 - the same failure is expected both ways
            out.append((name, type(exc).__name__))
            continue
        out.append((name, _fields(result)) if isinstance(result, torch.SymInt | torch.SymBool)
                   else (name, type(result).__name__, result))
    return out


def test_every_answer_is_torchs():
    env = ShapeEnv()
    operands = _operands(env)
    torchs = _all_results(env, operands)
    before = sym_arith.counts()
    with sym_arith.remembered():
        first = _all_results(env, operands)
        second = _all_results(env, operands)
    after = sym_arith.counts()
    assert first == torchs
    assert second == torchs
    assert after["answered"] - before["answered"] >= len(OPS) * len(operands) ** 2 // 2


def test_symbolic_tensors_are_torchs():
    """What the memo is for: fake tensors with symbolic sizes, made and viewed again."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.symbolic_shapes import DimDynamic, StatelessSymbolicContext

    def made(env: ShapeEnv) -> list:
        mode = FakeTensorMode(shape_env=env)
        context = StatelessSymbolicContext(dynamic_sizes=[DimDynamic.DYNAMIC] * 3)
        x = mode.from_tensor(torch.randn(2, 3, 4), symbolic_context=context)
        with mode:
            outs = [x.transpose(0, 2).contiguous(), x.reshape(-1, 4), x[:, 1:], x.sum(1),
                    x.permute(2, 0, 1).reshape(4, -1)]
        return [(str(o.shape), str(o.stride()), o.is_contiguous(), str(o.numel()))
                for o in outs]

    torchs = made(ShapeEnv())
    with sym_arith.remembered():
        assert made(ShapeEnv()) == torchs
        assert made(ShapeEnv()) == torchs


def test_a_replacement_made_since_is_read():
    """The key holds the operands' expressions as read now: after a replacement
    (``s0 == 4`` learned) the same nodes ask another question."""
    env = ShapeEnv()
    a, b = _backed(env, "a", 4), _backed(env, "b", 7)
    with sym_arith.remembered():
        before = _fields(a * b)
        torch._check(a == 4)  # a guard replacing s0 by 4
        inside = _fields(a * b)
    outside = _fields(a * b)
    assert before != inside
    assert inside == outside
    assert inside[2] == 4 * b.node.expr


def test_an_int_and_a_bool_of_one_value_differ():
    env = ShapeEnv()
    one = sym_node.SymNode(sympy.Integer(1), env, int, 1)
    true = sym_node.SymNode(sympy.Integer(1), env, bool, True)
    other = sym_node.SymNode(sympy.Integer(1), env, int, 1)
    torchs = [_fields(torch.SymInt(one.add(other))), _fields(torch.SymInt(true.add(other)))]
    with sym_arith.remembered():
        for _ in range(2):
            got = [_fields(torch.SymInt(one.add(other))), _fields(torch.SymInt(true.add(other)))]
            assert got == torchs


def test_tracing_records_every_operation():
    """With a tracing mode active, torch's code runs: each operation is a graph node."""
    def f(x):
        n = x.shape[0] * x.shape[1] + x.shape[0]
        return x.reshape(-1)[: n - x.shape[0]] * (x.shape[0] * x.shape[1])

    def traced() -> str:
        return make_fx(f, tracing_mode="symbolic")(torch.randn(3, 5)).code

    torchs = traced()
    with sym_arith.remembered():
        inside, again = traced(), traced()
    assert inside == again == torchs
    assert "mul" in torchs and "sym_size" in torchs


@pytest.mark.parametrize("setting", ["translation_validation", "float", "debug_log", "off"])
def test_outside_the_premise_torch_computes(setting, monkeypatch, caplog):
    env = ShapeEnv()
    a, b = _backed(env, "a", 4), _backed(env, "b", 7)
    if setting == "translation_validation":
        monkeypatch.setattr(env, "_translation_validation_enabled", True, raising=False)
        a, b = sym_node.SymNode(a.node.expr, env, int, 4), sym_node.SymNode(b.node.expr, env,
                                                                            int, 7)
        a, b = torch.SymInt(a), torch.SymInt(b)
    elif setting == "float":
        a, b = torch.sym_float(a), torch.sym_float(b)
    elif setting == "debug_log":
        caplog.set_level(logging.DEBUG, logger=sym_node.sym_node_log.name)
        monkeypatch.setattr(sym_node.sym_node_log, "disabled", False)
    elif setting == "off":
        monkeypatch.setenv("FASTLOWER_SYM_ARITH", "off")
    before = sym_arith.counts()
    with sym_arith.remembered():
        for _ in range(3):
            a * b + a
    assert sym_arith.counts() == before
    if setting == "off":
        assert not sym_arith.installed()


def test_other_threads_and_after_the_block_run_torchs_code():
    env = ShapeEnv()
    a, b = _backed(env, "a", 4), _backed(env, "b", 7)
    counts = []

    def other():
        before = sym_arith.counts()
        for _ in range(3):
            a * b
        counts.append(sym_arith.counts() == before)

    with sym_arith.remembered():
        a * b
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    before = sym_arith.counts()
    a * b
    assert counts == [True]
    assert sym_arith.counts() == before
    assert sym_arith.installed()  # bound until uninstall, inert outside its blocks


def test_verify_mode_raises_at_a_difference(monkeypatch):
    env = ShapeEnv()
    a, b = _backed(env, "a", 4), _backed(env, "b", 7)
    monkeypatch.setenv("FASTLOWER_SYM_ARITH", "verify")
    with sym_arith.remembered():
        assert _fields(a * b) == _fields(a * b)  # computed, then answered and checked
        memo = sym_arith._memos[env]
        key = next(k for k in memo if k[0] == "mul")
        fields = list(memo[key])
        fields[1] = fields[1] + 1  # a remembered expression off by one
        memo[key] = tuple(fields)
        with pytest.raises(sym_arith.SymArithVerificationError, match="SymNode.mul"):
            a * b


def test_a_memo_lives_with_its_shape_environment():
    import gc

    env = ShapeEnv()
    a, b = _backed(env, "a", 4), _backed(env, "b", 7)
    with sym_arith.remembered():
        a * b
        assert env in sym_arith._memos
    del a, b, env
    gc.collect()
    assert len(sym_arith._memos) == 0


def _twins(env: ShapeEnv) -> dict:
    """Pairs of operands alike in all but one thing the answer depends on; torch answers
    each pair differently, so a key missing that thing answers one of them wrongly."""
    s0 = env.create_symbol(4, source=ConstantSource("t0"))
    s1 = env.create_symbol(7, source=ConstantSource("t1"))
    u0 = env.create_unbacked_symint().node.expr

    def node(expr, pytype=int, hint=sym_node._NO_HINT, optimized=False):
        return sym_node.SymNode(expr, env, pytype, hint, optimized_summation=optimized)

    right = node(s1, hint=7)
    return {
        "hint": ((node(s0, hint=4), right), (node(s0), right)),
        "pytype": ((node(u0, int), node(u0, int)), (node(u0, bool), node(u0, int))),
        "optimized summation": ((node(s0, hint=4), right),
                                (node(s0, hint=4, optimized=True), right)),
    }


@pytest.mark.parametrize("what", ["hint", "pytype", "optimized summation"])
def test_operands_differing_in_one_thing_are_two_questions(what):
    env = ShapeEnv()
    (a, b), (c, d) = _twins(env)[what]
    torchs = [_fields(torch.SymInt(a.add(b))), _fields(torch.SymInt(c.add(d)))]
    assert torchs[0][1:] != torchs[1][1:]  # torch's answers differ
    with sym_arith.remembered():
        for _ in range(2):
            assert [_fields(torch.SymInt(a.add(b))), _fields(torch.SymInt(c.add(d)))] == torchs


def test_a_python_int_and_a_sympy_integer_are_two_questions():
    env = ShapeEnv()
    s0 = env.create_symbol(4, source=ConstantSource("t0"))
    left = sym_node.SymNode(s0, env, int, 4)
    python, sympys = (sym_node.SymNode(1, env, int, 1),
                      sym_node.SymNode(sympy.Integer(1), env, int, 1))
    with sym_arith.remembered():
        left.mul(python)
        key = sym_arith._key(sym_arith._torch(), "mul", left, python)
        assert key != sym_arith._key(sym_arith._torch(), "mul", left, sympys)
        assert _fields(torch.SymInt(left.mul(sympys))) == \
            _fields(torch.SymInt(sym_arith._PATCHES[2]._original(left, sympys)))
