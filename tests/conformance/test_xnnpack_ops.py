"""Anchor: ExecuTorch's whole XNNPACK op suite (executorch/backends/xnnpack/test/ops/,
less test_linear.py and test_conv2d.py, plus test_xnnpack_partitioner.py; see
suites.XNNPACK_OPS), collected by the plugin in conftest.py, slow mode only. Several
of its tests compare a backend's error text with ``str(exception)``;
test_check_quant_params.py also runs in the default run (suites.XNNPACK_SUBSET)."""

import pytest

pytestmark = pytest.mark.conformance


def test_xnnpack_op_tests_shipped():
    import importlib.util

    assert importlib.util.find_spec("executorch.backends.xnnpack.test.ops.test_check_quant_params")
