"""Anchor: ExecuTorch's own backend-delegation test-suite
(executorch/exir/backend/test/, see suites.EXIR_BACKEND_SUITE), collected by
the plugin in conftest.py and run with fastlower's to_backend swapped in.

The tests below check the swap machinery itself.
"""

import sys

import pytest

pytestmark = pytest.mark.conformance

_conftest = sys.modules[[m for m in sys.modules if m.endswith("conftest") and
                         getattr(sys.modules[m], "BindingSwap", None) is not None][0]]


def test_selected_implementation_is_bound_everywhere(conformance_impl):
    import executorch.exir.backend.backend_api as backend_api
    import executorch.exir.program._program as program

    objs = conformance_impl["objects"]
    assert backend_api.to_backend is objs["to_backend"]
    assert backend_api.validation_disabled is objs["validation_disabled"]
    assert backend_api.disable_validation is objs["disable_validation"]
    assert program.to_backend is objs["to_backend"]
    if conformance_impl["name"] == "fastlower":
        assert _conftest.reference_bindings_left() == []


def test_late_importers_are_swept_and_restored(conformance_impl, _swap_to_backend):
    """Modules imported while the swap is active get swapped before the next
    test; uninstall restores the reference everywhere, also in modules that
    copied fastlower's objects out of the patched backend_api."""
    import types

    import executorch.exir.backend.backend_api as backend_api

    ref = _conftest._REFERENCE["to_backend"]
    impl = conformance_impl["objects"]["to_backend"]
    # named like a shipped ExecuTorch module: only those are swapped
    late = types.ModuleType("executorch.fastlower_conformance_probe_late_importer")
    sys.modules[late.__name__] = late
    try:
        late.stale = ref                       # imported before the swap
        late.copied = backend_api.to_backend   # imported during the swap
        _swap_to_backend.sweep_new_modules()
        assert late.stale is impl and late.copied is impl
        _swap_to_backend.uninstall()
        assert backend_api.to_backend is ref
        assert late.stale is ref and late.copied is ref
    finally:
        del sys.modules[late.__name__]
        _swap_to_backend.install()
    assert backend_api.to_backend is impl
