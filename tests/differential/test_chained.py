"""Chained lowering: a program that already holds delegates is lowered
again. ``test_lowering.py`` compares the chain cases of ``tests.models.registry`` (``chain_*``)
with the reference on every path; these tests check what a multi-backend user
reads from the result."""

import warnings

import pytest
from executorch.devtools.backend_debug import get_delegation_info
from executorch.exir.lowered_backend_module import get_lowered_submodules

from tests.differential import harness as H
from tests.models.registry import MODEL_CASES


def _delegation(lowered: H.Lowered):
    info = get_delegation_info(lowered.epm.exported_program().graph_module)
    table = info.get_operator_delegation_dataframe()
    return (info.num_delegated_subgraphs, info.num_delegated_nodes, info.num_non_delegated_nodes,
            table.to_dict("records"))


@pytest.mark.parametrize("path", ["manager", "etl"])
def test_delegation_info_matches_the_reference(path, impl_under_test):
    case = MODEL_CASES["chain_addmul_then_xnnpack"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = H.lower(H.REFERENCE, case.build, path)
        got = H.lower(impl_under_test, case.build, path)
    assert _delegation(got) == _delegation(ref)


def _backends(lowered: H.Lowered):
    gm = lowered.epm.exported_program().graph_module
    return {name: lowered.backend_id for name, lowered, _ in get_lowered_submodules(gm)}


def test_each_delegate_keeps_its_backend(impl_under_test):
    """The first partitioner's delegates survive the second lowering, under their names."""
    case = MODEL_CASES["chain_addmul_then_xnnpack"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = H.lower(H.REFERENCE, case.build, "manager")
        got = H.lower(impl_under_test, case.build, "manager")
    backends = _backends(got)
    assert backends == _backends(ref)
    # the first lowering's delegate keeps lowered_module_0; XNNPACK's come after it
    assert backends["lowered_module_0"] == "BackendWithCompilerDemo"
    assert sorted(backends.values()).count("XnnpackBackend") == 2
    for node in got.epm.exported_program().graph_module.graph.nodes:
        if node.op == "get_attr":
            assert node.name == node.target, node.format_node()
