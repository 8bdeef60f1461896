"""fastlower: a natively accelerated drop-in for ExecuTorch's ``to_backend``."""

from .api import lower_with_report, to_backend
from .errors import (
    BackendNotFoundError, CyclicPartitionError, FastlowerError, GraphModifiedError,
    MissingPartitionTagsError, PartitionContractError, SharedConstantError, TaggedOutputError,
    TaggedUserInputError, UnknownTagError,
)
from .report import LoweringReport, build_report, last_report, report_for
from .spec import MethodProgramsPartitionerSpec
from .state import disable_validation, strict_tags, validation_disabled

__all__ = [
    "to_backend", "validation_disabled", "disable_validation", "strict_tags", "MethodProgramsPartitionerSpec",
    "LoweringReport", "last_report", "report_for", "lower_with_report", "build_report",
    "FastlowerError", "PartitionContractError",
    "BackendNotFoundError", "CyclicPartitionError", "GraphModifiedError",
    "MissingPartitionTagsError", "SharedConstantError", "TaggedOutputError",
    "TaggedUserInputError", "UnknownTagError",
]
