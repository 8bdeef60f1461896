"""fastlower.in_process.cia_ops: inside a block torch's CompositeImplicitAutograd operators
are materialized again only when something they depend on changed, and the collection
``run_decompositions`` reads is torch's; torch's code everywhere else."""

import itertools
import threading

import pytest
import torch
import torch._export.utils as export_utils

from fastlower.in_process import cia_ops

_names = itertools.count()


@pytest.fixture(autouse=True)
def torch_function_after():
    cia_ops.uninstall()  # a lowering earlier in this process bound the patch
    original = export_utils.__dict__["_materialize_cpp_cia_ops"]
    yield
    cia_ops.uninstall()
    assert export_utils.__dict__["_materialize_cpp_cia_ops"] is original


def _collect() -> set:
    return export_utils._collect_all_valid_cia_ops()


def _library_with_cia_op():
    """A new namespace holding one functional operator with a CompositeImplicitAutograd
    kernel: ``(library, namespace name, operator name)``."""
    namespace = f"fastlower_cia_test_{next(_names)}"
    library = torch.library.Library(namespace, "DEF")
    library.define("twice(Tensor x) -> Tensor")
    library.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")
    return library, namespace, "twice"


def _names_of(ops: set) -> set:
    return {op.name() for op in ops}


def test_the_collection_is_torchs_and_walks_once():
    torchs = _collect()
    with cia_ops.materialized_once():
        skipped = cia_ops.skipped()
        first, second = _collect(), _collect()
    assert first == second == torchs
    # one walk per namespace other than aten in each collection: all but the first skipped
    spaces = [n for n in torch.ops._dir
              if n != "aten" and isinstance(getattr(torch.ops, n), torch._ops._OpNamespace)]
    assert cia_ops.skipped() - skipped >= 2 * len(spaces) - 1


def test_a_new_registration_is_materialized():
    with cia_ops.materialized_once():
        before = _collect()
        library, namespace, name = _library_with_cia_op()
        try:
            inside = _collect()
        finally:
            library._destroy()
    assert f"{namespace}::{name}" not in _names_of(before)
    assert f"{namespace}::{name}" in _names_of(inside)


def test_defined_again_under_the_same_name_is_collected():
    """Destroyed, then the same registrations made again: the registration list is the one
    materialized before, but the namespace's ``_dir`` lost the name, so it is walked."""
    namespace = f"fastlower_cia_test_{next(_names)}"

    def define():
        library = torch.library.Library(namespace, "DEF")
        library.define("twice(Tensor x) -> Tensor")
        library.impl("twice", lambda x: x * 2, "CompositeImplicitAutograd")
        return library

    library = define()
    with cia_ops.materialized_once():
        assert f"{namespace}::twice" in _names_of(_collect())
        library._destroy()  # no collection between: the registrations come back unchanged
        library = define()
        try:
            inside = _collect()
        finally:
            library._destroy()
    library = define()
    try:
        torchs = _collect()
    finally:
        library._destroy()
    assert f"{namespace}::twice" in _names_of(inside)
    assert _names_of(inside) == _names_of(torchs)


def test_torchs_walk_outside_and_in_other_threads(monkeypatch):
    walks = []
    original = export_utils._materialize_cpp_cia_ops

    def counted():
        walks.append(threading.current_thread().name)
        original()

    monkeypatch.setattr(export_utils, "_materialize_cpp_cia_ops", counted)
    inside, done = threading.Event(), threading.Event()

    def other():
        inside.wait()
        export_utils._materialize_cpp_cia_ops()
        export_utils._materialize_cpp_cia_ops()
        done.set()

    thread = threading.Thread(target=other, name="other")
    thread.start()
    with cia_ops.materialized_once():
        export_utils._materialize_cpp_cia_ops()
        inside.set()
        done.wait(timeout=30)
    thread.join()
    assert walks.count("other") == 2  # outside a block: torch's walk every time


def test_each_is_torchs_way(monkeypatch):
    monkeypatch.setenv("FASTLOWER_CIA_OPS", "each")
    skipped = cia_ops.skipped()
    with cia_ops.materialized_once():
        _collect()
        _collect()
    assert cia_ops.skipped() == skipped
    assert not cia_ops.installed()


def test_verify_finds_a_walk_that_changed_torch_ops(monkeypatch):
    """A change the premise does not cover (an operator packet deleted with its ``_dir``
    entry kept): verify mode runs the skipped walk and sees it change ``torch.ops``."""
    library, namespace, name = _library_with_cia_op()
    monkeypatch.setenv("FASTLOWER_CIA_OPS", "verify")
    try:
        with cia_ops.materialized_once():
            _collect()
            export_utils._materialize_cpp_cia_ops()  # the same state: verified, no change
            delattr(getattr(torch.ops, namespace), name)  # _dir keeps the name
            with pytest.raises(cia_ops.CiaOpsVerificationError, match="FASTLOWER_CIA_OPS=each"):
                export_utils._materialize_cpp_cia_ops()
    finally:
        library._destroy()
        space = getattr(torch.ops, namespace)
        while name in space._dir:  # what the deletion above left behind
            space._dir.remove(name)
        vars(space).pop(name, None)


def test_a_lowering_skips_walks_and_gives_executorchs_program():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower as reference

    from fastlower.frontends.examples.llama import edge_compile_config, export_aten
    from fastlower.patch import installed

    _, aten, _ = export_aten(1)
    expected = reference(aten, partitioner=[XnnpackPartitioner()],
                         compile_config=edge_compile_config(True)).to_executorch().buffer
    skipped = cia_ops.skipped()
    _, aten, _ = export_aten(1)
    with installed():
        from executorch.exir import to_edge_transform_and_lower

        got = to_edge_transform_and_lower(aten, partitioner=[XnnpackPartitioner()],
                                          compile_config=edge_compile_config(True))
    assert cia_ops.skipped() > skipped
    assert got.to_executorch().buffer == expected
