"""Anchor: ExecuTorch's multi-backend export recipe test (CoreML with an XNNPACK
fallback: two partitioners lower the same program in turn), see
suites.EXPORT_RECIPES / suites.ONLY, collected by the plugin in conftest.py."""

import pytest

pytestmark = pytest.mark.conformance


def test_coreml_partitioner_importable():
    """The recipe test needs CoreML's partitioner (coremltools ships in executorch's deps)."""
    from executorch.backends.apple.coreml.partition import CoreMLPartitioner

    assert CoreMLPartitioner.__name__ == "CoreMLPartitioner"
