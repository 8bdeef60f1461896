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
    "executorch.backends.xnnpack.test.fragments.test_dim_order",
    "executorch.backends.xnnpack.test.test_xnnpack_partitioner",
    "executorch.backends.xnnpack.test.models.llama2_et_example",
]

# Multi-backend export recipes: two partitioners in turn (CoreML, then XNNPACK
# as the fallback), the chained-lowering path of issue #13.
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
    # fragments/test_dim_order.py: all (1 test)
    # test_xnnpack_partitioner.py: all (3 tests: edge.to_backend path, multi-method)
    "executorch.backends.xnnpack.test.models.llama2_et_example": [
        "TestLlama2ETExample::test_f32",  # Llama-style decoder, lowered + run
    ],
}
