"""The ``from_node`` links a retrace that changes no operator adds, added the same way.

``run_decompositions`` unlifts the program (``ExportedProgram.module()``: every node of
the new module gets one ``NodeSource`` of its old node) and traces it
(``Interpreter_PropagateUnbackedSymInts``: one more per traced node), so after a retrace,
with ``U(x)`` the unlifted node's history, ``[module() <- x]`` then ``x``'s own:

* a traced node (``call_function``): ``[Interpreter_PropagateUnbackedSymInts <- x] + U(x)``,
  and a ``getitem`` its producer's (the tracer makes it while replaying the producer);
* a parameter or buffer placeholder: ``U(r)`` of its last reader ``r`` (written with the
  other fields the retrace copies from readers, :mod:`.retrace_meta`), or, read by no
  operator, ``[module().unlift() (create, replace) <- itself] + U(itself)``;
* the output: ``[module().unlift() (create, replace) <- output] + U(output)``;
* user inputs: none.

Each link names its node and target as they were when the retrace read them, and a
graph id that is the id of a graph the retrace made and freed (here a placeholder
value: only the oldest ancestor's graph id is read, by debug handles, and that is
unchanged). Other nodes keep their history.
"""

from __future__ import annotations

import operator
from typing import Any, List

import torch
from torch.fx import GraphModule

_UNLIFT = "ExportedProgram.module()"
_TRACE = "Interpreter_PropagateUnbackedSymInts"
_RELIFT = "ExportedProgram.module().unlift()"


def _link(node: torch.fx.Node, pass_name: str, actions: List[str], below: List[Any]) -> Any:
    from torch.fx.traceback import NodeSource, NodeSourceAction

    source = NodeSource(None, pass_name, [NodeSourceAction[a] for a in actions])
    source.node_info = NodeSource.NodeInfo(node.name, str(node.target), -1)
    source.from_node = below
    return source


def unlifted(node: torch.fx.Node) -> List[Any]:
    """The history the retrace's unlifted module gives ``node``: ``U(node)``."""
    return [_link(node, _UNLIFT, ["CREATE"], list(node.meta.get("from_node", [])))]


def relifted(node: torch.fx.Node) -> List[Any]:
    """The history the retrace's re-lifting gives ``node`` (the output, and a parameter
    or buffer no operator reads)."""
    return [_link(node, _RELIFT, ["CREATE", "REPLACE"], unlifted(node))]


def add_retrace_links(root: GraphModule) -> None:
    """Extends the root graph's traced nodes' and output's histories as a retrace would
    (parameters and buffers: :func:`unlifted` of their reader, by the caller)."""
    new = {}
    for node in root.graph.nodes:  # all from the old histories, then written
        if node.op == "call_function":
            source = node
            if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
                source = node.args[0]  # made while its producer is replayed
            new[node] = [_link(source, _TRACE, ["CREATE"], unlifted(source))]
        elif node.op == "output":
            new[node] = relifted(node)
    for node, history in new.items():
        node.meta["from_node"] = history
