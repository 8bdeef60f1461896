"""Native canonical partitioners and lookups: ExecuTorch's and torch.fx's results, exactly,
in near-linear time.

``accelerated()`` switches the calling thread/task to fastlower's versions of
``CapabilityBasedPartitioner``/``GroupBasedPartitioner.propose_partitions`` (so
``XnnpackPartitioner``, ``VulkanPartitioner`` and every partitioner built on
``generate_partitions_from_list_of_nodes`` / ``generate_grouped_partitions_from_list_of_nodes``),
torch.fx's ``get_source_partitions`` and ``ExportGraphSignature.inputs_to_*``;
``fastlower.to_backend`` does so while the partitioner runs unless
``FASTLOWER_NATIVE_PARTITIONERS=0``.  Every patch this needs is listed by
``registered_patches()`` and removed by ``uninstall()``.
"""

from . import native_proposals, graph_edits, signatures, source_partitions, xnnpack_gemm  # noqa: F401
from .native import propose_capability, propose_group
from .registry import registered as registered_patches
from .switch import (ENV, accelerated, enabled_by_environment, installed_patches, is_active,
                     reference, uninstall)

__all__ = ["accelerated", "reference", "is_active", "enabled_by_environment", "ENV",
           "uninstall", "installed_patches", "registered_patches",
           "propose_capability", "propose_group"]
