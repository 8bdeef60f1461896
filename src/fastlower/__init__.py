"""fastlower: a natively accelerated drop-in for ExecuTorch's ``to_backend``.

The public names below are imported on first use (PEP 562), so importing a
light submodule (``fastlower.frontends.cli`` for ``--help``,
``fastlower.frontends.pytest_plugin``, which pytest loads in every run of an environment
that has fastlower) does not import torch and ExecuTorch.

The packages, one layer each (docs/architecture.md): ``core`` (the native planner and
its Python twin), ``base`` (plain data and switches every layer shares), ``lowering``
(``to_backend``: partition, plan, build), ``partitioners`` (ExecuTorch's partitioners,
accelerated), ``preprocess`` (backends' ``preprocess``, parallel, cached, derived by
structure), ``cache`` (the lowering cache, refit, shared store, trust), ``in_process``
(what fastlower changes in ExecuTorch's process while it lowers), ``report``, and
``frontends`` (CLI, loading, demo, pytest plugin); ``patch``, ``errors`` and ``settings``
are public modules of their own. Module paths of earlier releases still import
(``fastlower.base.moved``).
"""

from typing import TYPE_CHECKING, Any

from .base import moved
from .base.lazy import lazy_exports

_EXPORTS = {
    "to_backend": "lowering.api", "lower_with_report": "lowering.api",
    "FastlowerError": "errors", "PartitionContractError": "errors",
    "BackendNotFoundError": "errors", "CyclicPartitionError": "errors",
    "GraphModifiedError": "errors", "MissingPartitionTagsError": "errors",
    "SharedConstantError": "errors", "TaggedOutputError": "errors",
    "TaggedUserInputError": "errors", "UnknownTagError": "errors",
    "MethodWithoutProgramError": "errors", "PartitionerEditError": "errors",
    "LoweringReport": "report", "build_report": "report", "last_report": "report",
    "report_for": "report",
    "load_program": "base.loading", "ProgramLoadError": "base.loading",
    "MethodProgramsPartitionerSpec": "lowering.spec",
    "disable_validation": "base.state", "strict_partitioners": "base.state",
    "strict_tags": "base.state", "validation_disabled": "base.state",
}

__all__ = sorted(_EXPORTS)


_getattr, __dir__ = lazy_exports(__name__, _EXPORTS)
moved.register(__name__)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, read without importing torch
        from importlib.metadata import version

        globals()[name] = version("fastlower")
        return globals()[name]
    if name in moved.MOVED:  # ``fastlower.shared`` and the like: the module's new place
        return moved.resolve(__name__, name)
    return _getattr(name)


if TYPE_CHECKING:  # pragma: no cover
    from .lowering.api import lower_with_report, to_backend  # noqa: F401
    from .base.loading import ProgramLoadError, load_program  # noqa: F401
    from .errors import (  # noqa: F401
        BackendNotFoundError, CyclicPartitionError, FastlowerError, GraphModifiedError,
        MethodWithoutProgramError, MissingPartitionTagsError, PartitionContractError,
        PartitionerEditError, SharedConstantError, TaggedOutputError, TaggedUserInputError,
        UnknownTagError,
    )
    from .report import LoweringReport, build_report, last_report, report_for  # noqa: F401
    from .lowering.spec import MethodProgramsPartitionerSpec  # noqa: F401
    from .base.state import (  # noqa: F401
        disable_validation, strict_partitioners, strict_tags, validation_disabled,
    )
