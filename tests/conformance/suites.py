"""Which of ExecuTorch's shipped test modules the conformance plugin runs.

Modules are imported by dotted name from the installed executorch==1.5.1
wheel. ``ONLY`` optionally restricts a module to some tests
("Class" or "Class::test_method"); the rest are reported as deselected.
"""

# Every test module shipped in executorch/exir/backend/test/ (the backend
# delegation API's own test-suite). ~100 s with the reference on 2 cores.
EXIR_BACKEND_SUITE = [
    "executorch.exir.backend.test.test_backend_with_named_data_map",
    "executorch.exir.backend.test.test_backends_lifted",
    "executorch.exir.backend.test.test_backends_nested",
    "executorch.exir.backend.test.test_compatibility",
    "executorch.exir.backend.test.test_debug_handle_map",
    "executorch.exir.backend.test.test_delegate_map_builder",
    "executorch.exir.backend.test.test_graph_partition",
    "executorch.exir.backend.test.test_group_partitioner",
    "executorch.exir.backend.test.test_lowered_backend_module",
    "executorch.exir.backend.test.test_partitioner",
    "executorch.exir.backend.test.test_passes",
    "executorch.exir.backend.test.test_to_backend_multi_method",
    "executorch.exir.backend.test.test_utils",
    "executorch.exir.backend.test.demos.test_delegate_aten_mode",
    "executorch.exir.backend.test.demos.rpc.test_rpc",
]

# A small representative subset of executorch/backends/xnnpack/test/: op tests
# and model-level tests that lower through to_backend / to_edge_transform_and_lower
# with the XNNPACK partitioner and run the result in the ExecuTorch runtime.
# ~90 s with the reference on 2 cores (the whole XNNPACK suite takes far longer).
XNNPACK_SUBSET = [
    "executorch.backends.xnnpack.test.ops.test_add",
    "executorch.backends.xnnpack.test.ops.test_conv2d",
    "executorch.backends.xnnpack.test.ops.test_softmax",
    "executorch.backends.xnnpack.test.ops.test_cat",
    # a backend's preprocess error text, compared by the test
    "executorch.backends.xnnpack.test.ops.test_check_quant_params",
    "executorch.backends.xnnpack.test.fragments.test_dim_order",
    "executorch.backends.xnnpack.test.test_xnnpack_partitioner",
    "executorch.backends.xnnpack.test.models.llama2_et_example",
]

# ExecuTorch's whole XNNPACK op suite, less test_linear.py and test_conv2d.py (which
# take far longer than the rest), and the partitioner tests
# (206 tests). Slow mode only (`pytest -m slow tests/conformance/test_xnnpack_ops.py`);
# ONLY does not restrict it.
XNNPACK_OPS = [
    "executorch.backends.xnnpack.test.ops.test_abs",
    "executorch.backends.xnnpack.test.ops.test_add",
    "executorch.backends.xnnpack.test.ops.test_avgpool2d",
    "executorch.backends.xnnpack.test.ops.test_batch_norm",
    "executorch.backends.xnnpack.test.ops.test_bilinear2d",
    "executorch.backends.xnnpack.test.ops.test_bmm",
    "executorch.backends.xnnpack.test.ops.test_cat",
    "executorch.backends.xnnpack.test.ops.test_ceil",
    "executorch.backends.xnnpack.test.ops.test_check_quant_params",
    "executorch.backends.xnnpack.test.ops.test_clamp",
    "executorch.backends.xnnpack.test.ops.test_clone",
    "executorch.backends.xnnpack.test.ops.test_conv1d",
    "executorch.backends.xnnpack.test.ops.test_cos",
    "executorch.backends.xnnpack.test.ops.test_div",
    "executorch.backends.xnnpack.test.ops.test_elu",
    "executorch.backends.xnnpack.test.ops.test_exp",
    "executorch.backends.xnnpack.test.ops.test_floor",
    "executorch.backends.xnnpack.test.ops.test_gelu",
    "executorch.backends.xnnpack.test.ops.test_hardswish",
    "executorch.backends.xnnpack.test.ops.test_hardtanh",
    "executorch.backends.xnnpack.test.ops.test_leaky_relu",
    "executorch.backends.xnnpack.test.ops.test_log",
    "executorch.backends.xnnpack.test.ops.test_lstm",
    "executorch.backends.xnnpack.test.ops.test_max_dim",
    "executorch.backends.xnnpack.test.ops.test_maximum",
    "executorch.backends.xnnpack.test.ops.test_maxpool2d",
    "executorch.backends.xnnpack.test.ops.test_mean_dim",
    "executorch.backends.xnnpack.test.ops.test_minimum",
    "executorch.backends.xnnpack.test.ops.test_multiply",
    "executorch.backends.xnnpack.test.ops.test_negate",
    "executorch.backends.xnnpack.test.ops.test_permute",
    "executorch.backends.xnnpack.test.ops.test_pow",
    "executorch.backends.xnnpack.test.ops.test_prelu",
    "executorch.backends.xnnpack.test.ops.test_quantize_per_tensor",
    "executorch.backends.xnnpack.test.ops.test_relu",
    "executorch.backends.xnnpack.test.ops.test_rsqrt",
    "executorch.backends.xnnpack.test.ops.test_sigmoid",
    "executorch.backends.xnnpack.test.ops.test_sin",
    "executorch.backends.xnnpack.test.ops.test_slice_copy",
    "executorch.backends.xnnpack.test.ops.test_softmax",
    "executorch.backends.xnnpack.test.ops.test_sqrt",
    "executorch.backends.xnnpack.test.ops.test_square",
    "executorch.backends.xnnpack.test.ops.test_static_constant_pad",
    "executorch.backends.xnnpack.test.ops.test_sub",
    "executorch.backends.xnnpack.test.ops.test_tanh",
    "executorch.backends.xnnpack.test.ops.test_to_copy",
    "executorch.backends.xnnpack.test.test_xnnpack_partitioner",
]

# suites run whole (ONLY does not apply) and only in slow mode: suite -> reason
SLOW_SUITES: dict[str, str] = {
    "XNNPACK_OPS": "ExecuTorch's whole XNNPACK op suite (slow mode)",
}

# Multi-backend export recipes: two partitioners in turn (CoreML, then XNNPACK
# as the fallback), the chained-lowering path.
EXPORT_RECIPES = [
    "executorch.export.tests.test_target_recipes",
]

ONLY: dict[str, list[str]] = {
    "executorch.export.tests.test_target_recipes": [
        "TestTargetRecipes::test_ios_fp32_recipe_with_xnnpack_fallback",
    ],
    "executorch.backends.xnnpack.test.ops.test_add": [
        "TestAdd::test_fp32_add",
        "TestAdd::test_qs8_add",
    ],
    "executorch.backends.xnnpack.test.ops.test_conv2d": ["TestConv2d::test_fp32_conv2d"],
    "executorch.backends.xnnpack.test.ops.test_softmax": [
        "TestSoftmax::test_fp32_softmax",
        "TestSoftmax::test_fp32_softmax_unsupported",  # nothing partitioned
    ],
    "executorch.backends.xnnpack.test.ops.test_cat": ["TestCat::test_fp32_cat2"],
    # a backend's preprocess error text; the module's two other tests (quantized linears
    # lowered and run, 15 s each) run in slow mode with the whole XNNPACK op suite
    "executorch.backends.xnnpack.test.ops.test_check_quant_params": [
        "TestCheckQuantParams::test_inject_invalid_zp",
    ],
    # fragments/test_dim_order.py: all (1 test)
    # test_xnnpack_partitioner.py: all (3 tests: edge.to_backend path, multi-method)
    "executorch.backends.xnnpack.test.models.llama2_et_example": [
        "TestLlama2ETExample::test_f32",  # Llama-style decoder, lowered + run
    ],
}
