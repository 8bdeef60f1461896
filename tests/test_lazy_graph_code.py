"""fastlower.in_process.lazy_graph_code: inside a preprocess call new plain GraphModules
make their code when it is read (torch's _LazyGraphModule), with the same code, the same
results and the same printing; a subclass, another thread and everything outside the
block get torch's GraphModule; XNNPACK's preprocess gives the same bytes either way."""

import copy
import pickle
import threading

import pytest
import torch
from torch.fx import GraphModule, symbolic_trace
from torch.fx._lazy_graph_module import _LazyGraphModule

from fastlower.in_process import lazy_graph_code


class _Small(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) * 2


@pytest.fixture(autouse=True)
def torch_new_after():
    lazy_graph_code.PATCH.uninstall()  # a preprocess earlier in this process bound it
    original = GraphModule.__dict__["__new__"]
    yield
    lazy_graph_code.PATCH.uninstall()
    assert GraphModule.__dict__["__new__"] is original


def test_inside_the_block_the_code_is_made_when_read():
    traced = symbolic_trace(_Small())
    plain = GraphModule(traced, copy.deepcopy(traced.graph))
    x = torch.randn(2, 4)
    with lazy_graph_code.lazy_code():
        lazy = GraphModule(traced, copy.deepcopy(traced.graph))
        assert isinstance(lazy, _LazyGraphModule) and isinstance(lazy, GraphModule)
        assert type(lazy)._needs_recompile()  # no code made yet
        assert lazy.code == plain.code  # made now, the same
        assert not type(lazy)._needs_recompile()
        again = GraphModule(traced, copy.deepcopy(traced.graph))
        assert torch.equal(again(x), traced(x))  # a call makes it too
        assert str(again) == str(plain)
        copied = copy.deepcopy(again)
        assert torch.equal(pickle.loads(pickle.dumps(copied))(x), traced(x))
    after = GraphModule(traced, copy.deepcopy(traced.graph))
    assert not isinstance(after, _LazyGraphModule)  # outside the block: torch's


def test_a_subclass_another_thread_and_off_are_left_alone():
    class Mine(GraphModule):
        pass

    traced = symbolic_trace(_Small())
    made = {}
    with lazy_graph_code.lazy_code():
        mine = Mine(traced, copy.deepcopy(traced.graph))
        thread = threading.Thread(
            target=lambda: made.update(gm=GraphModule(traced, copy.deepcopy(traced.graph))))
        thread.start()
        thread.join()
    with lazy_graph_code.lazy_code(enabled=False):
        off = GraphModule(traced, copy.deepcopy(traced.graph))
    assert type(mine).__mro__[1] is Mine and not isinstance(mine, _LazyGraphModule)
    assert not isinstance(made["gm"], _LazyGraphModule)
    assert not isinstance(off, _LazyGraphModule)


def test_xnnpack_preprocess_gives_the_same_bytes(monkeypatch):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge

    import fastlower

    program = torch.export.export(_Small().eval(), (torch.randn(2, 4),))
    found = []
    for setting in ("0", "1"):
        monkeypatch.setenv("FASTLOWER_LAZY_GRAPH_CODE", setting)
        edge = to_edge(copy.deepcopy(program))
        lowered = fastlower.to_backend(edge.exported_program(), XnnpackPartitioner())
        modules = [m for _, m in lowered.graph_module.named_children()
                   if hasattr(m, "processed_bytes")]
        found.append([bytes(m.processed_bytes) for m in modules])
    assert found[0] and found[0] == found[1]
