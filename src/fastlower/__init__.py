"""fastlower: a natively accelerated drop-in for ExecuTorch's ``to_backend``.

The public names below are imported on first use (PEP 562), so importing a
light submodule (``fastlower.cli`` for ``--help``, ``fastlower.pytest_plugin``,
which pytest loads in every run of an environment that has fastlower) does not
import torch and ExecuTorch.
"""

from typing import TYPE_CHECKING, Any

from ._lazy import lazy_exports

_EXPORTS = {
    "to_backend": "api", "lower_with_report": "api",
    "FastlowerError": "errors", "PartitionContractError": "errors",
    "BackendNotFoundError": "errors", "CyclicPartitionError": "errors",
    "GraphModifiedError": "errors", "MissingPartitionTagsError": "errors",
    "SharedConstantError": "errors", "TaggedOutputError": "errors",
    "TaggedUserInputError": "errors", "UnknownTagError": "errors",
    "MethodWithoutProgramError": "errors", "PartitionerEditError": "errors",
    "LoweringReport": "report", "build_report": "report", "last_report": "report",
    "report_for": "report",
    "load_program": "loading", "ProgramLoadError": "loading",
    "MethodProgramsPartitionerSpec": "spec",
    "disable_validation": "state", "strict_partitioners": "state", "strict_tags": "state",
    "validation_disabled": "state",
}

__all__ = sorted(_EXPORTS)


_getattr, __dir__ = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's, read without importing torch
        from importlib.metadata import version

        globals()[name] = version("fastlower")
        return globals()[name]
    return _getattr(name)


if TYPE_CHECKING:  # pragma: no cover
    from .api import lower_with_report, to_backend  # noqa: F401
    from .loading import ProgramLoadError, load_program  # noqa: F401
    from .errors import (  # noqa: F401
        BackendNotFoundError, CyclicPartitionError, FastlowerError, GraphModifiedError,
        MethodWithoutProgramError, MissingPartitionTagsError, PartitionContractError,
        PartitionerEditError, SharedConstantError, TaggedOutputError, TaggedUserInputError,
        UnknownTagError,
    )
    from .report import LoweringReport, build_report, last_report, report_for  # noqa: F401
    from .spec import MethodProgramsPartitionerSpec  # noqa: F401
    from .state import (  # noqa: F401
        disable_validation, strict_partitioners, strict_tags, validation_disabled,
    )
