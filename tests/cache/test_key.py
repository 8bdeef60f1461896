"""The lowering cache's key (issue 18, item 2): complete, stable, and refused when it cannot be.

A change of any one ingredient is another key, and a lowering with it is a miss
(end to end, with ExecuTorch's demo partitioner: cheap); the same inputs built
again are the same key; inputs with no canonical form are lowered without the
cache and say why in one debug line. Stability across processes is tested in
``test_across_processes.py``.
"""

from __future__ import annotations

import io
import logging

import pytest
import torch
from executorch.exir import EdgeCompileConfig

from fastlower.cache.errors import Uncacheable
from fastlower.cache.key import lowering_key

from .helpers import (
    KeepGraphPass, base_args, cache_at, demo_partitioner, keep_graph_too, lower, small_aten,
)


def _key(program=None, **changes):
    args = base_args(**changes)
    return lowering_key(program if program is not None else small_aten(), generate_etrecord=False,
                        **args).key


# each changes one ingredient of the base call
VARIANTS = {
    "parameter": dict(program="param"),
    "partitioner option": dict(partitioner=lambda: [_demo_with_spec()]),
    "partitioner list": dict(partitioner=lambda: [demo_partitioner(), demo_partitioner()]),
    "pass": dict(transform_passes=lambda: [keep_graph_too]),
    "pass state": dict(transform_passes=lambda: [KeepGraphPass(level=1)]),
    "constant_methods": dict(constant_methods=lambda: {"get_answer": 43}),
    "compile config": dict(compile_config=lambda: EdgeCompileConfig(_check_ir_validity=True,
                                                                    _skip_dim_order=True)),
}


def _demo_with_spec():
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    partitioner = demo_partitioner()
    partitioner.delegation_spec.compile_specs.append(CompileSpec("level", b"\x01"))
    return partitioner


def _variant(name):
    spec = dict(VARIANTS[name])
    program = small_aten(spec.pop("program", None))
    return program, {k: v() for k, v in spec.items()}


def test_same_inputs_built_again_are_the_same_key():
    assert _key() == _key()
    assert _key().startswith("lowering:")


@pytest.mark.parametrize("name", list(VARIANTS))
def test_each_ingredient_changes_the_key(name):
    program, changes = _variant(name)
    assert _key(program, **changes) != _key()


@pytest.mark.parametrize("name", list(VARIANTS))
def test_only_a_value_keeps_the_structure_key(name):
    """The structure key (fastlower.cache.refit) leaves constant values out, nothing else."""
    program, changes = _variant(name)
    args = base_args(**changes)
    changed = lowering_key(program, generate_etrecord=False, **args).structure
    base = lowering_key(small_aten(), generate_etrecord=False, **base_args()).structure
    assert base and changed
    assert (changed == base) == (name == "parameter")


def test_a_change_of_one_ingredient_is_a_miss(tmp_path):
    """Base twice (miss, hit), then every variant: each a miss but the new parameter
    value, which refits the base's entry (same structure)."""
    with cache_at(tmp_path):
        _, first = lower(small_aten(), **base_args())
        _, again = lower(small_aten(), **base_args())
        assert (first.lowering_cache, again.lowering_cache) == ("miss", "hit")
        for name in VARIANTS:
            program, changes = _variant(name)
            _, report = lower(program, **base_args(**changes))
            assert report.lowering_cache == ("refit" if name == "parameter" else "miss"), name


def _local_partitioner():
    class Local(type(demo_partitioner())):
        pass

    return Local()


class _HoldsFile(type(demo_partitioner())):
    def __init__(self):
        super().__init__()
        self.log = io.StringIO()


UNCACHEABLE = {
    "lambda pass": (dict(transform_passes=[lambda gm: None]), "lambda"),
    "etrecord": (dict(generate_etrecord=True), "generate_etrecord=True"),
    "local partitioner class": (dict(partitioner=[_local_partitioner()]), "defined inside"),
    "open file in partitioner": (dict(partitioner=[_HoldsFile()]), "StringIO"),
    "constant_methods holding a lambda": (dict(constant_methods={"f": lambda: 1}), "lambda"),
}


@pytest.mark.parametrize("name", list(UNCACHEABLE))
def test_uncacheable_inputs_have_no_key(name):
    changes, why = UNCACHEABLE[name]
    args = base_args(**changes)
    etrecord = args.pop("generate_etrecord", False)
    with pytest.raises(Uncacheable, match=why):
        lowering_key(small_aten(), generate_etrecord=etrecord, **args)


@pytest.mark.parametrize("name", ["lambda pass", "local partitioner class", "etrecord"])
def test_uncacheable_call_lowers_normally_and_logs_why(name, tmp_path, caplog):
    changes, why = UNCACHEABLE[name]
    with cache_at(tmp_path), caplog.at_level(logging.DEBUG, logger="fastlower.cache"):
        manager, report = lower(small_aten(), **base_args(**changes))
        again, report_again = lower(small_aten(), **base_args(**changes))
    lines = [r.getMessage() for r in caplog.records if r.name == "fastlower.cache"]
    assert len(lines) == 2 and all("not cached" in line and why in line for line in lines), lines
    assert report.lowering_cache == report_again.lowering_cache == "uncacheable"
    assert not any(tmp_path.glob("**/*.val")), "nothing may be stored"
    assert (manager.exported_program().graph_module.code
            == again.exported_program().graph_module.code)


def test_tensor_subclass_parameters_are_keyed_by_content():
    pytest.importorskip("torchao")
    from torchao.quantization import Int8WeightOnlyConfig, quantize_

    def exported(delta):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(32, 32)).eval()
        with torch.no_grad():
            model[0].weight[0, 0] += delta
        quantize_(model, Int8WeightOnlyConfig())
        return torch.export.export(model, (torch.randn(2, 32),), strict=False)

    program = exported(0.0)
    assert any(type(t).__module__.startswith("torchao") for t in program.state_dict.values())
    same = lowering_key(exported(0.0), None, None, None, None, False).key
    assert lowering_key(program, None, None, None, None, False).key == same
    assert lowering_key(exported(0.5), None, None, None, None, False).key != same
