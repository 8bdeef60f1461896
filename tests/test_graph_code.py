"""fastlower.in_process.graph_code: inside fastlower's blocks a graph module's generated
Python is compiled once per source text; the code each recompile gets is, field for field
(``co_filename`` included, nested code objects too), what torch's ``compile`` gives, and
the program lowered with the memo is ExecuTorch's."""

from __future__ import annotations

import functools
import linecache
import traceback

import pytest
import torch
import torch.fx as fx
import torch.fx.graph_module as fx_graph_module

from fastlower.in_process import graph_code, while_lowering

# a source with code objects nested two deep (torch.fx's own code has none; the memo
# must rename them all the same)
NESTED = ("def forward(self, x):\n"
          "    ys = [v * 2 for v in x]\n"
          "    return (lambda: [w for w in ys])()\n")


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    monkeypatch.delenv("FASTLOWER_GRAPH_CODE", raising=False)


class _Model(torch.nn.Module):
    def forward(self, x):
        return (x + 1).relu() * 2


def test_a_remembered_code_equals_compiles_field_for_field():
    memo = graph_code._Memo(verify=False)
    first = memo.code(NESTED, "<a>")
    again = memo.code(NESTED, "<b>")
    assert graph_code.fields(first) == graph_code.fields(
        compile(NESTED, "<a>", "exec", dont_inherit=True))
    assert graph_code.fields(again) == graph_code.fields(
        compile(NESTED, "<b>", "exec", dont_inherit=True))
    assert graph_code.fields(again) != graph_code.fields(first)  # the name is in the fields
    inner = [c for c in again.co_consts if hasattr(c, "co_filename")][0]
    deeper = [c for c in inner.co_consts if hasattr(c, "co_filename")]
    assert deeper and all(c.co_filename == "<b>" for c in deeper)


def test_a_recompile_inside_the_block_compiles_a_known_source_once():
    module = fx.symbolic_trace(_Model())
    x = torch.randn(3)
    with while_lowering.lowering_step():
        before = graph_code.counts()
        module.recompile()
        module.recompile()
        after = graph_code.counts()
        code = module.forward.__code__
        last_key = f"<eval_with_key>.{fx_graph_module._loader.next_id - 1}"
        assert torch.equal(module(x), _Model()(x))
    assert after["remembered"] - before["remembered"] >= 1
    # the key torch's loader gave this compile (not the first's), its source in linecache
    assert code.co_filename.split(" ")[0] == last_key
    assert linecache.getline(code.co_filename, code.co_firstlineno) \
        == module.code.splitlines(keepends=True)[code.co_firstlineno - 1]


def test_a_traceback_points_at_the_compile_that_ran():
    module = fx.symbolic_trace(_Model())
    with while_lowering.lowering_step():
        module.recompile()
        module.recompile()
        filename = module.forward.__code__.co_filename
        with pytest.raises(TypeError) as raised:  # the generated function itself, unwrapped
            type(module).forward(module, "not a tensor")
    frames = traceback.extract_tb(raised.value.__traceback__)
    assert filename in [frame.filename for frame in frames]
    assert any(frame.filename == filename and frame.line for frame in frames)


def test_outside_a_block_and_with_each_torch_compiles(monkeypatch):
    module = fx.symbolic_trace(_Model())
    with while_lowering.lowering_step():
        pass  # binds the patch
    before = graph_code.counts()
    module.recompile()
    module.recompile()
    monkeypatch.setenv("FASTLOWER_GRAPH_CODE", "each")
    with while_lowering.lowering_step():
        module.recompile()
        module.recompile()
    assert graph_code.counts() == before


def test_verify_mode_raises_at_a_remembered_code_that_differs(monkeypatch):
    memo = graph_code._Memo(verify=True)
    memo.code(NESTED, "<a>")
    assert memo.code(NESTED, "<b>").co_filename == "<b>"  # the same: no error
    memo._codes[NESTED] = compile(NESTED.replace("* 2", "* 3"), "<a>", "exec")
    with pytest.raises(graph_code.GraphCodeVerificationError, match="<c>"):
        memo.code(NESTED, "<c>")


def test_the_memo_keeps_the_last_sources(monkeypatch):
    monkeypatch.setattr(graph_code, "_ENTRIES", 2)
    memo = graph_code._Memo(verify=False)
    sources = [f"def forward(self):\n    return {n}\n" for n in range(3)]
    for src in sources:
        memo.code(src, "<k>")
    assert list(memo._codes) == sources[1:]
    monkeypatch.setattr(graph_code, "_CHARS", len(sources[0]))
    memo.code(sources[0], "<k>")
    assert list(memo._codes) == sources[:1] and memo._chars == len(sources[0])


def test_only_torchs_function_is_replaced():
    def another(src, globals, co_fields=None):
        exec(src, globals)

    assert graph_code._compiling_once(another) is another
    # something else bound there (no Python code object of its own) is left alone too
    wrapped = functools.partial(another)
    assert graph_code._compiling_once(wrapped) is wrapped
    graph_code.uninstall()
    torchs = fx_graph_module._exec_with_source
    assert graph_code._compiling_once(torchs) is not torchs


def test_a_function_left_alone_is_not_reported_installed(monkeypatch):
    """Something else bound where torch's function was: the block leaves it in place,
    and ``installed()`` says nothing was replaced."""
    def another(src, globals, co_fields=None):
        exec(src, globals)

    graph_code.uninstall()
    monkeypatch.setattr(fx_graph_module, "_exec_with_source", another)
    with while_lowering.lowering_step():
        assert fx_graph_module._exec_with_source is another
        assert not graph_code.installed()
    graph_code.uninstall()
    assert fx_graph_module._exec_with_source is another


def test_uninstall_puts_torchs_function_back():
    with while_lowering.lowering_step():
        assert graph_code.installed()
    graph_code.uninstall()
    assert not graph_code.installed()
    assert fx_graph_module._exec_with_source.__module__ == "torch.fx.graph_module"
    with while_lowering.lowering_step():  # and the next block binds it again
        assert graph_code.installed()


@pytest.mark.parametrize("family", ["executorch_llama-dynamic", "conv"])
def test_the_lowered_program_is_executorchs(monkeypatch, family):
    """``to_edge_transform_and_lower`` then ``to_executorch`` inside the block, with the
    memo and with torch's compiles: the same programs and ``.pte`` bytes."""
    from executorch.exir import to_edge_transform_and_lower

    from fastlower.cache import compare
    from tests.edge.models import aten_program, partitioners

    def lowered(mode: str):
        monkeypatch.setenv("FASTLOWER_GRAPH_CODE", mode)
        with while_lowering.lowering_step():
            before = graph_code.counts()["remembered"]
            manager = to_edge_transform_and_lower(aten_program(family, n_layers=2),
                                                  partitioner=partitioners("dq+xnnpack"))
            pte = manager.to_executorch()
            return manager, pte, graph_code.counts()["remembered"] - before

    reference, pte_ref, none = lowered("each")
    memo, pte_memo, remembered = lowered("once")
    assert none == 0 and remembered > 0
    assert compare.first_difference(compare.describe(reference._edge_programs),
                                    compare.describe(memo._edge_programs)) is None
    assert pte_memo.buffer == pte_ref.buffer
    assert pte_memo.debug_handle_map == pte_ref.debug_handle_map
