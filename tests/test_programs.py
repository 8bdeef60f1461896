"""``fastlower.lowering.programs``: what fastlower builds without a verifier run would pass
it, and lazily generated code is the code an eager ``GraphModule`` generates."""

import copy
import warnings

import pytest
import torch
from executorch.exir.graph_module import get_control_flow_submodules
from executorch.exir.lowered_backend_module import get_lowered_submodules
from torch.fx._lazy_graph_module import _LazyGraphModule

import fastlower
import fastlower.lowering.steps
from fastlower.lowering import programs
from tests.differential import harness as H
from tests.models.registry import MODEL_CASES

# direct-path cases covering plain, control-flow, nested, shared-constant and
# buffer-mutation lowerings
CASES = ["llama1_xnnpack", "conv_relu_tan", "cond_demo", "map_xnnpack",
         "shared_const_demo", "buffer_mutation_demo", "list_arg_const_untagged"]


def _lowered_modules(gm: torch.fx.GraphModule):
    for _, lowered, _ in get_lowered_submodules(gm):
        yield lowered
    for _, body, _ in get_control_flow_submodules(gm):
        yield from _lowered_modules(body)


@pytest.fixture
def fake_programs(monkeypatch):
    """Every program fastlower hands a partitioner, kept for inspection."""
    made = []
    original = fastlower.lowering.steps.make_fake_program

    def recording(program):
        made.append(original(program))
        return made[-1]

    monkeypatch.setattr(fastlower.lowering.steps, "make_fake_program", recording)
    return made


@pytest.mark.parametrize("name", CASES)
def test_unvalidated_programs_pass_the_verifier(name, fake_programs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lowered = H.lower(fastlower.to_backend, MODEL_CASES[name].build, "direct")
    partitions = [m for ep in lowered.programs.values()
                  for m in _lowered_modules(ep.graph_module)]
    assert partitions, f"{name}: nothing was delegated"
    assert fake_programs, f"{name}: no partitioner input was recorded"
    for lowered_module in partitions:
        lowered_module.original_module._validate()  # raises SpecViolationError if invalid
    for fake in fake_programs:
        fake._validate()


def test_unvalidated_program_skips_only_the_verifier(monkeypatch):
    ep = torch.export.export(torch.nn.Linear(3, 2), (torch.randn(1, 3),))
    kwargs = dict(root=ep.graph_module, graph=ep.graph, graph_signature=ep.graph_signature,
                  state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                  module_call_graph=ep.module_call_graph, constants=ep.constants)

    class Rejecting(ep.verifier):
        dialect = "TEST_REJECTING"

        def check_additional(self, gm):
            raise RuntimeError("verifier ran")

    monkeypatch.delenv(programs.VALIDATE_ALL_ENV, raising=False)
    built = programs.unvalidated_program(verifiers=[Rejecting], **kwargs)
    assert type(built) is torch.export.ExportedProgram
    assert "validate" not in vars(built)  # the shadowing attribute is gone again
    with pytest.raises(RuntimeError, match="verifier ran"):
        built._validate()
    monkeypatch.setenv(programs.VALIDATE_ALL_ENV, "1")
    with pytest.raises(RuntimeError, match="verifier ran"):
        programs.unvalidated_program(verifiers=[Rejecting], **kwargs)


def test_lazy_program_generates_the_eager_code():
    ep = torch.export.export(torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU()),
                             (torch.randn(2, 3),))
    kwargs = dict(graph_signature=ep.graph_signature, state_dict=ep.state_dict,
                  range_constraints=ep.range_constraints,
                  module_call_graph=ep.module_call_graph, constants=ep.constants)
    lazy = programs.unvalidated_program(lazy=True, root=ep.graph_module,
                                        graph=copy.deepcopy(ep.graph), **kwargs)
    eager = programs.unvalidated_program(root=ep.graph_module,
                                         graph=copy.deepcopy(ep.graph), **kwargs)
    assert isinstance(lazy.graph_module, _LazyGraphModule)
    assert not isinstance(eager.graph_module, _LazyGraphModule)
    assert lazy.graph_module.code == eager.graph_module.code
    x = torch.randn(2, 3)
    torch.testing.assert_close(lazy.module()(x), eager.module()(x))


_LINEAR = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU())


def _linear_kwargs():
    """A fresh export of the same module, as ``ExportedProgram`` keyword arguments."""
    ep = torch.export.export(_LINEAR, (torch.randn(2, 3),))
    return ep, dict(root=ep.graph_module, graph=ep.graph,
                    graph_signature=ep.graph_signature, state_dict=ep.state_dict,
                    range_constraints=ep.range_constraints,
                    module_call_graph=ep.module_call_graph, constants=ep.constants,
                    verifiers=[ep.verifier])


@pytest.mark.parametrize("lazy", [False, True])
def test_built_program_is_what_the_constructor_builds(lazy, monkeypatch):
    """fastlower assembles programs as torch 2.13's ``ExportedProgram.__init__`` does:
    the same instance attributes, of the same types, the same code and behaviour."""
    monkeypatch.delenv(programs.VALIDATE_ALL_ENV, raising=False)
    _, kwargs = _linear_kwargs()
    theirs = torch.export.ExportedProgram(**kwargs)
    _, kwargs = _linear_kwargs()
    ours = programs.unvalidated_program(lazy=lazy, **kwargs)
    assert sorted(vars(ours)) == sorted(vars(theirs))
    for name, value in vars(theirs).items():
        if name != "_graph_module":
            assert type(getattr(ours, name)) is type(value), name
    assert isinstance(ours.graph_module, _LazyGraphModule) is lazy
    assert ours.graph_module.code == theirs.graph_module.code
    assert ours.graph_module.meta.keys() == theirs.graph_module.meta.keys()
    assert ours._guards_code == theirs._guards_code
    ours._validate()
    x = torch.randn(2, 3)
    torch.testing.assert_close(ours.module()(x), theirs.module()(x))


def test_lazy_construction_changes_nothing_another_thread_sees():
    """While fastlower makes a lazy program, a ``torch.export`` in another thread gets
    torch's own eager ``GraphModule`` (no module-level factory is swapped)."""
    import threading

    factory = torch.export.exported_program._create_graph_module_for_export
    seen = {}

    def make_module(root, graph):
        def other():
            ep = torch.export.export(torch.nn.ReLU(), (torch.randn(2),))
            seen["lazy"] = isinstance(ep.graph_module, _LazyGraphModule)

        thread = threading.Thread(target=other)
        thread.start()
        thread.join(120)
        seen["factory"] = torch.export.exported_program._create_graph_module_for_export
        return _LazyGraphModule(root, graph)

    _, kwargs = _linear_kwargs()
    built = programs._construct(make_module, False, **kwargs)
    assert isinstance(built.graph_module, _LazyGraphModule)
    assert seen == {"lazy": False, "factory": factory}


def test_lazy_module_copy_matches_deepcopy():
    """The partitioner's copy: same code and meta as ``copy.deepcopy``; nothing shared
    that a partitioner could change (graph, node meta, control-flow bodies)."""
    built = MODEL_CASES["cond_demo"].build()
    gm = next(iter(built.epm._edge_programs.values())).graph_module
    gm.meta["marker"] = ["kept"]
    copied, reference = programs.lazy_module_copy(gm), copy.deepcopy(gm)
    assert copied.code == reference.code
    assert copied.meta == reference.meta and copied.meta["marker"] is not gm.meta["marker"]
    assert copied.training == gm.training
    bodies = dict((name, body) for name, body, _ in get_control_flow_submodules(gm))
    copied_bodies = dict((name, body) for name, body, _ in get_control_flow_submodules(copied))
    assert bodies.keys() == copied_bodies.keys() and bodies
    for name, body in bodies.items():
        assert copied_bodies[name] is not body
        assert copied_bodies[name].code == body.code
    for old, new in zip(gm.graph.nodes, copied.graph.nodes):
        assert new is not old and new.meta is not old.meta and new.meta == old.meta
    next(iter(copied.graph.nodes)).meta["delegation_tag"] = "t"
    assert "delegation_tag" not in next(iter(gm.graph.nodes)).meta
