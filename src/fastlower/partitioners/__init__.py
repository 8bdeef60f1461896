"""Native canonical partitioners: ExecuTorch's and torch.fx's partitions, exactly, in
near-linear time and O(nodes + edges) memory.

``accelerated()`` switches the calling thread's ``CapabilityBasedPartitioner`` and
``GroupBasedPartitioner`` (so ``XnnpackPartitioner`` and every partitioner built on
``generate_partitions_from_list_of_nodes`` / ``generate_grouped_partitions_from_list_of_nodes``)
to the native ``propose_partitions``; ``fastlower.to_backend`` does so while the
partitioner runs unless ``FASTLOWER_NATIVE_PARTITIONERS=0``.
"""

from .native import propose_capability, propose_group
from .switch import ENV, accelerated, enabled_by_environment, is_active, reference

__all__ = ["accelerated", "reference", "is_active", "enabled_by_environment", "ENV",
           "propose_capability", "propose_group"]
