"""Anchor: a small representative subset of ExecuTorch's XNNPACK backend tests
(executorch/backends/xnnpack/test/, see suites.XNNPACK_SUBSET / suites.ONLY),
collected by the plugin in conftest.py. They lower through to_backend /
to_edge_transform_and_lower with XnnpackPartitioner (the harness wraps it in
validation_disabled()) and run the result in the ExecuTorch runtime.
"""

import pytest

pytestmark = pytest.mark.conformance


def test_xnnpack_runtime_available():
    from executorch.extension.pybindings import portable_lib

    assert "XnnpackBackend" in portable_lib._get_registered_backend_names()
