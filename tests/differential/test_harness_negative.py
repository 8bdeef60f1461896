"""The comparator must be able to FAIL: each check is shown to report a
small, deliberate perturbation of an otherwise identical lowering.

Demo-backend lowerings are deep-copied (cheap and exact -- the first test is
the positive control); XNNPACK lowerings cannot be deep-copied (a
``mappingproxy`` in the XNNPACK named-data path), so those tests lower twice.
"""

import copy
import re
import types
import warnings

import pytest
import torch
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.lowered_backend_module import get_lowered_submodules

from tests.differential import harness as H
from tests.models.registry import ERROR_CASES, MODEL_CASES


def _lower(name, path="manager"):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return H.lower(H.REFERENCE, MODEL_CASES[name].build, path)


@pytest.fixture(scope="module")
def demo_base():
    return _lower("shared_const_demo")


@pytest.fixture(scope="module")
def cf_pair():
    # not deep-copied: deepcopy of a control-flow program reorders Node.users
    # (which the comparator checks), so lower twice instead.
    return _lower("cond_demo"), _lower("cond_demo")


@pytest.fixture(scope="module")
def xnn_pair():
    return _lower("shared_param_xnnpack"), _lower("shared_param_xnnpack")


def _expect_diff(ref, got, pattern):
    with pytest.raises(AssertionError) as ei:
        H.assert_same_lowering(ref, got)
    msg = str(ei.value)
    assert re.search(pattern, msg), msg
    return msg


def _ep(lowered, method="forward"):
    return lowered.epm.exported_program(method)


def _delegates(lowered, method="forward"):
    out = []
    for _, gm in H._walk_graph_modules(_ep(lowered, method).graph_module, "gm"):
        out.extend(lm for _, lm, _ in get_lowered_submodules(gm))
    return out


def _node(gm, name):
    return next(n for n in gm.graph.nodes if n.name == name)


# ------------------------------------------------------------ positive controls
def test_deepcopy_is_identical(demo_base):
    H.assert_same_lowering(demo_base, copy.deepcopy(demo_base))


def test_two_control_flow_lowerings_identical(cf_pair):
    H.assert_same_lowering(*cf_pair)


def test_two_xnnpack_lowerings_identical(xnn_pair):
    H.assert_same_lowering(*xnn_pair)


# ----------------------------------------------------------- delegate checks
def test_processed_byte(demo_base):
    got = copy.deepcopy(demo_base)
    lm = _delegates(got)[1]
    b = bytearray(lm.processed_bytes)
    b[5] ^= 1
    lm._processed_bytes = bytes(b)
    _expect_diff(demo_base, got, r"lowered_module_1\] processed_bytes bytes differ.*offset 5")


def test_compile_specs(demo_base):
    got = copy.deepcopy(demo_base)
    _delegates(got)[0]._compile_specs = [CompileSpec("max_value", bytes([5]))]
    _expect_diff(demo_base, got, r"compile_specs differs")


def test_debug_handle_map(demo_base):
    got = copy.deepcopy(demo_base)
    _delegates(got)[0].meta["debug_handle_map"] = {1: (1,), 2: (3,)}
    _expect_diff(demo_base, got, r'meta\["debug_handle_map"\] differs')


def test_delegate_info_meta(demo_base):
    got = copy.deepcopy(demo_base)
    _delegates(got)[1].meta["_delegate_info_meta"] = "other"
    _expect_diff(demo_base, got, r'meta.get\("_delegate_info_meta"\) differs')


def test_backend_id(demo_base):
    got = copy.deepcopy(demo_base)
    _delegates(got)[0]._backend_id = "SomethingElse"
    _expect_diff(demo_base, got, r"backend_id differs")


def test_named_data_store_output(xnn_pair):
    ref, got = xnn_pair
    lm = _delegates(got)[0]
    nds = lm.named_data_store_output
    assert nds is not None and nds.buffers, "XNNPACK should store weights as named data"
    saved = nds.buffers[0]
    nds.buffers[0] = bytes(saved[:-1]) + bytes([saved[-1] ^ 1])
    try:
        _expect_diff(ref, got, r"named_data_store_output differs")
    finally:
        nds.buffers[0] = saved


def test_original_module_code(demo_base):
    got = copy.deepcopy(demo_base)
    om = _delegates(got)[0].original_module
    node = _node(om.graph_module, "aten_add_tensor_1")
    node.name = "renamed_add"
    om.graph_module.recompile()
    _expect_diff(demo_base, got,
                 r"lowered_module_0\.original_module:gm\] graph_module\.code differs")


def test_original_module_signature(demo_base):
    got = copy.deepcopy(demo_base)
    om = _delegates(got)[1].original_module
    om.graph_signature.input_specs[0].target = "not_w"
    _expect_diff(demo_base, got, r"original_module\] graph_signature\.input_specs differ")


def test_original_module_state_dict_value(demo_base):
    got = copy.deepcopy(demo_base)
    om = _delegates(got)[1].original_module
    key = next(iter(om.state_dict))
    # LoweredBackendModule.__deepcopy__ SHARES original_module.state_dict with
    # the source, so replace the dict rather than mutating it in place.
    om._state_dict = dict(om.state_dict)
    om._state_dict[key] = om.state_dict[key].detach() + 1e-3
    _expect_diff(demo_base, got, r"original_module\] state_dict values differs")


def test_delegate_order(demo_base):
    got = copy.deepcopy(demo_base)
    gm = _ep(got).graph_module
    a, b = gm.lowered_module_0, gm.lowered_module_1
    gm.lowered_module_0, gm.lowered_module_1 = b, a
    _expect_diff(demo_base, got, r"backend_id differs|processed_bytes bytes differ|original_module")


# ------------------------------------------------------------ program checks
def test_rename_node(demo_base):
    got = copy.deepcopy(demo_base)
    gm = _ep(got).graph_module
    _node(gm, "aten_sin_default").name = "aten_sin_renamed"
    gm.recompile()
    _expect_diff(demo_base, got, r"graph_module\.code differs(.|\n)*aten_sin_renamed")


def test_swap_node_order(demo_base):
    got = copy.deepcopy(demo_base)
    gm = _ep(got).graph_module
    _node(gm, "lowered_module_0").append(_node(gm, "lowered_module_1"))
    gm.recompile()
    _expect_diff(demo_base, got, r"node \(op, name\) lists differ")


def test_node_meta(demo_base):
    got = copy.deepcopy(demo_base)
    gm = _ep(got).graph_module
    _node(gm, "executorch_call_delegate_1").meta["debug_handle"] += 100
    _expect_diff(demo_base, got,
                 r"node executorch_call_delegate_1\] meta\['debug_handle'\] differs")


def test_graph_signature(demo_base):
    got = copy.deepcopy(demo_base)
    _ep(got).graph_signature.output_specs[0].arg.name = "zzz"
    _expect_diff(demo_base, got, r"graph_signature\.output_specs differ")


def test_state_dict_key(xnn_pair):
    ref, got = xnn_pair
    ep = _ep(got)
    ep.state_dict["extra"] = torch.zeros(1)
    try:
        _expect_diff(ref, got, r"state_dict keys differ")
    finally:
        del ep.state_dict["extra"]


def test_constants_key(demo_base):
    got = copy.deepcopy(demo_base)
    _ep(got).constants["extra"] = torch.zeros(1)
    _expect_diff(demo_base, got, r"constants keys differ")


def test_module_call_graph(demo_base):
    got = copy.deepcopy(demo_base)
    _ep(got).module_call_graph[0].fqn = "different"
    _expect_diff(demo_base, got, r"module_call_graph differs")


def test_control_flow_submodule_code(cf_pair):
    ref, got = cf_pair
    sub = _ep(got).graph_module.submodule_0
    node = _node(sub, "aten_sub_tensor")
    node.name = "sub_renamed"
    sub.recompile()
    try:
        _expect_diff(ref, got, r"gm\.submodule_0\] graph_module\.code differs")
    finally:
        node.name = "aten_sub_tensor"
        sub.recompile()


def test_control_flow_delegate_bytes(cf_pair):
    ref, got = cf_pair
    lm = _delegates(got)[-1]  # inside a cond branch
    saved = lm.processed_bytes
    lm._processed_bytes = saved + b"!"
    try:
        _expect_diff(ref, got, r"gm\.submodule_\d\.lowered_module_0\] processed_bytes")
    finally:
        lm._processed_bytes = saved


def test_input_mutation(demo_base):
    got = copy.deepcopy(demo_base)
    got.inputs_after["forward"].constants["leaked"] = torch.zeros(1)
    _expect_diff(demo_base, got, r"input\[forward\]\] input program constants after lowering")


# --------------------------------------------------------- executorch checks
def _fake_et(et, **over):
    ns = types.SimpleNamespace(
        buffer=bytes(et.buffer),
        debug_handle_map=et.debug_handle_map,
        delegate_map=et.delegate_map,
    )
    for k, v in over.items():
        setattr(ns, k, v)
    return ns


# NOTE: to_executorch() rewrites the EdgeProgramManager's programs in place
# (out-variants, memory planning), so these tests lower their own programs.
def test_pte_byte():
    ref, got = _lower("shared_param_xnnpack"), _lower("shared_param_xnnpack")
    ref_et, got_et = H.to_executorch(ref), H.to_executorch(got)
    H.assert_same_executorch(ref_et, got_et)
    buf = bytearray(got_et.buffer)
    buf[len(buf) // 2] ^= 0x10
    with pytest.raises(AssertionError, match=r"\.pte buffer bytes differ"):
        H.assert_same_executorch(ref_et, _fake_et(got_et, buffer=bytes(buf)))
    with pytest.raises(AssertionError, match=r"delegate_map differs"):
        H.assert_same_executorch(ref_et, _fake_et(got_et, delegate_map={"forward": {}}))


def test_runtime_numerics_can_fail():
    ref = _lower("shared_param_xnnpack")
    bad = copy.copy(ref.built)
    bad.expected = {
        m: [tuple(t + 1e-2 for t in outs) for outs in lst]
        for m, lst in ref.built.expected.items()
    }
    H.check_eager(ref)
    with pytest.raises(AssertionError, match=r"eager lowered forward\[0\]"):
        H.check_eager(H.Lowered(ref.path, ref.epm, None, bad))
    et = H.to_executorch(ref)
    H.check_runtime(et, ref.built)
    with pytest.raises(AssertionError, match=r"runtime forward\[0\]"):
        H.check_runtime(et, bad)


# -------------------------------------------------------------- error checks
def test_error_comparison_can_fail():
    case = ERROR_CASES["unknown_backend"]
    ref = H.lower_error(H.REFERENCE, case.build, "direct")
    H.assert_same_error(ref, H.lower_error(H.REFERENCE, case.build, "direct"), exact=True)

    def error(exc_type, message, inputs_before=ref.inputs_before):
        """The reference's outcome with another exception type or message."""
        return H.LoweringError(exc_type, message, ref.inputs_after, inputs_before)

    with pytest.raises(AssertionError, match="exception message differs"):
        H.assert_same_error(ref, error(ref.type, ref.message + "!"), exact=True)
    with pytest.raises(AssertionError, match="exception type differs"):
        H.assert_same_error(ref, error(RuntimeError, ref.message), exact=True)
    # compatible mode: a subclass with the reference's very message accepted, others not
    sub = type("Sub", (ref.type,), {})
    H.assert_same_error(ref, error(sub, ref.message), exact=False)
    with pytest.raises(AssertionError, match="not a subclass"):
        H.assert_same_error(ref, error(RuntimeError, ref.message), exact=False)
    with pytest.raises(AssertionError, match="is not the reference's"):
        H.assert_same_error(ref, error(ref.type, "other"), exact=False)
    # fastlower's context belongs in notes: a message with more than the reference's fails
    with pytest.raises(AssertionError, match="is not the reference's"):
        H.assert_same_error(ref, error(sub, "[x] " + ref.message + " (hint)"), exact=False)
    # prefix: the reference's deterministic start, which the message must begin with
    H.assert_same_error(ref, error(sub, ref.message + " (the rest)"), exact=False, prefix=True)
    with pytest.raises(AssertionError, match="is not the reference's"):
        H.assert_same_error(ref, error(sub, "[x] " + ref.message), exact=False, prefix=True)
    # compatible mode also requires the input program to be left unchanged
    changed = {name: ("changed",) for name in ref.inputs_before}
    with pytest.raises(AssertionError, match="input program state"):
        H.assert_same_error(ref, error(ref.type, ref.message, changed), exact=False)


def test_lower_error_requires_raise():
    with pytest.raises(AssertionError, match="did not raise"):
        H.lower_error(H.REFERENCE, MODEL_CASES["missing_tag"].build, "direct")
