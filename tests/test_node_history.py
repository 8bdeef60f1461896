"""fastlower.in_process.node_history: NodeSource shares a node's history inside a block, equal value
for value to torch's deep copy; torch's code everywhere else."""

import threading

import pytest
import torch
from torch.fx.traceback import NodeSource, NodeSourceAction

from fastlower.in_process import node_history


@pytest.fixture
def node():
    """A node whose from_node history is two levels deep."""
    graph = torch.fx.symbolic_trace(torch.nn.Sequential(torch.nn.ReLU(), torch.nn.Tanh())).graph
    first, second = [n for n in graph.nodes if n.op == "call_module"]
    first.meta["from_node"] = [NodeSource(None, "export", NodeSourceAction.CREATE)]
    second.meta["from_node"] = [NodeSource(first, "retrace", NodeSourceAction.REPLACE)]
    return second


@pytest.fixture(autouse=True)
def torch_init_after():
    node_history.uninstall()  # a lowering earlier in this process bound the patch
    original = NodeSource.__dict__["__init__"]
    yield
    node_history.uninstall()
    assert NodeSource.__dict__["__init__"] is original


def test_shared_inside_equal_to_the_copy(node):
    copied = NodeSource(node, "pass", NodeSourceAction.CREATE)
    with node_history.shared_history():
        shared = NodeSource(node, "pass", NodeSourceAction.CREATE)
    assert shared.to_dict() == copied.to_dict()
    assert list(vars(shared)) == list(vars(copied))  # same fields, same order
    assert shared.from_node is not node.meta["from_node"]
    assert shared.from_node[0] is node.meta["from_node"][0]
    assert copied.from_node[0] is not node.meta["from_node"][0]


def test_torchs_copy_outside_and_in_other_threads(node):
    made = {}
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        made["other"] = NodeSource(node)
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with node_history.shared_history():
        inside.set()
        done.wait(timeout=30)
    thread.join()
    assert node_history.installed()
    assert made["other"].from_node[0] is not node.meta["from_node"][0]
    assert NodeSource(node).from_node[0] is not node.meta["from_node"][0]


def test_copy_mode_binds_nothing(node, monkeypatch):
    monkeypatch.setenv("FASTLOWER_NODE_HISTORY", "copy")
    with node_history.shared_history():
        made = NodeSource(node)
    assert not node_history.installed()
    assert made.from_node[0] is not node.meta["from_node"][0]


def test_uninstall_keeps_a_later_binding(node):
    with node_history.shared_history():
        pass
    theirs = NodeSource.__dict__["__init__"]

    def wrapped(self, *args, **kwargs):
        theirs(self, *args, **kwargs)

    NodeSource.__init__ = wrapped
    try:
        node_history.uninstall()
        assert NodeSource.__dict__["__init__"] is wrapped
    finally:
        NodeSource.__init__ = theirs.__wrapped__  # torch's own (functools.wraps)


def test_nodes_without_history_and_keyword_calls(node):
    with node_history.shared_history():
        plain = NodeSource(None, pass_name="p")
        keyword = NodeSource(node, pass_name="p", action=[NodeSourceAction.CREATE])
    assert plain.from_node == [] and plain.node_info is None
    assert keyword.action == [NodeSourceAction.CREATE] and keyword.name == node.name


def test_a_lowering_binds_it_and_torchs_copy_stays_outside(node):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge

    import fastlower

    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    program = to_edge(torch.export.export(model, (torch.randn(2, 8),))).exported_program()
    fastlower.to_backend(program, XnnpackPartitioner())
    assert node_history.installed()
    assert NodeSource(node).from_node[0] is not node.meta["from_node"][0]
