"""fastlower reimplements the lowering: it must not call the reference's machinery."""

from __future__ import annotations

import ast
import pathlib

import torch

import fastlower

SRC = pathlib.Path(fastlower.__file__).parent
# The demo and the bundled examples run the reference on purpose, to compare
# against it; they are tools around the lowering, not part of it. So does the
# pytest plugin's ``check_reference=True`` (outside the timed lowering).
COMPARISON_TOOLS = {"demo.py", "examples", "pytest_plugin.py"}

# (module, attribute) pairs fastlower may never use
FORBIDDEN = [
    ("executorch.exir.backend.backend_api", name) for name in (
        "to_backend", "_partition_and_lower", "_partition_and_lower_one_graph_module",
        "_get_node_list_with_same_tag", "_insert_lowered_submodule", "_create_partitions",
        "_create_partitions_in_graph_module", "lower_all_submodules_to_backend",
        "remove_used_metadata", "validation_disabled", "disable_validation")
] + [
    ("executorch.exir.backend.utils", "is_identical_graph"),
    ("executorch.exir.backend.utils", "is_same_node"),
    ("executorch.exir.backend.utils", "_maybe_duplicate_constant_nodes"),
    ("executorch.exir.backend.utils", "_assign_new_tag"),
    ("executorch.exir.backend.canonical_partitioners.duplicate_constant_node_pass",
     "duplicate_constant_node"),
] + [
    ("executorch.exir.lowered_backend_module", name) for name in (
        "create_submodule_from_nodes", "create_exported_program_from_submodule",
        "_unsafe_adjust_original_program", "arrange_graph_placeholders",
        "arrange_graph_outputs", "_get_new_signature", "_fixup_output_node")
] + [
    ("executorch.exir.program._fake_program", "get_fake_program"),
    ("executorch.exir.program._fake_program", "update_to_real_program"),
] + [
    ("torch.fx.passes.utils.fuser_utils", name) for name in (
        "topo_sort", "validate_partition", "fuse_as_graphmodule", "insert_subgm",
        "erase_nodes", "fuse_by_partitions", "legalize_graph")
] + [("torch.fx.passes.tools_common", "legalize_graph")]

FORBIDDEN_MODULES = {"executorch.exir.program._fake_program", "torch.fx.passes.utils.fuser_utils"}


def _imports(path: pathlib.Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                yield node.module, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None


def test_sources_import_nothing_forbidden():
    forbidden = set(FORBIDDEN)
    offenders = []
    files = sorted(p for p in SRC.rglob("*.py")
                   if not COMPARISON_TOOLS & set(p.relative_to(SRC).parts))
    assert files, "no fastlower sources found"
    for path in files:
        for module, name in _imports(path):
            if (module, name) in forbidden or module in FORBIDDEN_MODULES:
                offenders.append(f"{path.name}: from {module} import {name}")
    assert offenders == []


def test_lowering_runs_with_reference_machinery_disabled(monkeypatch):
    """Every forbidden function raises if called; a real lowering still succeeds."""
    import importlib

    from executorch.exir import to_edge
    from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo

    called = []
    for module_name, attr in FORBIDDEN:
        module = importlib.import_module(module_name)
        if not hasattr(module, attr):
            continue

        def trap(*args, _name=f"{module_name}.{attr}", **kwargs):
            called.append(_name)
            raise AssertionError(f"fastlower called {_name}")

        monkeypatch.setattr(module, attr, trap)

    class M(torch.nn.Module):
        def forward(self, a, x, b):
            return torch.mm(a, x) + b

    ep = to_edge(torch.export.export(
        M(), (torch.randn(2, 2), torch.randn(2, 2), torch.randn(2, 2)))).exported_program()
    out = fastlower.to_backend(ep, AddMulPartitionerDemo())
    assert "executorch_call_delegate" in out.graph_module.code
    assert called == []
