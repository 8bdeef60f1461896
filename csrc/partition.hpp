// Canonical partitioners' propose_partitions (torch.fx CapabilityBasedPartitioner,
// ExecuTorch GroupBasedPartitioner), exactly, without transitive closures.
// Twin: fastlower/_twin/partition_proposals.py (its module docstring describes the encoding).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fastlower {

// Malformed input (lengths, CSR offsets, ordering): ValueError in Python.
struct PartitionInputError : std::invalid_argument {
    using std::invalid_argument::invalid_argument;
};
// A node index outside 0..n-1: IndexError in Python.
struct PartitionIndexError : std::out_of_range {
    using std::out_of_range::out_of_range;
};

struct PartitionGraph {
    std::vector<int64_t> users_offsets, users;
    std::vector<int64_t> inputs_offsets, inputs;  // only read by the grouped variant
    std::vector<uint8_t> is_getitem, supported;
    std::vector<int64_t> compute_weight;
};

struct ProposedPartitions {
    std::vector<int64_t> ids;
    std::vector<std::vector<int64_t>> members;
    std::vector<int64_t> ordered_counts;
};

ProposedPartitions propose_capability_partitions(const PartitionGraph &g,
                                                 bool allows_single_node_partition,
                                                 bool skip_horizontal_fusion);

ProposedPartitions propose_group_partitions(const PartitionGraph &g,
                                            const std::vector<int64_t> &group_offsets,
                                            const std::vector<int64_t> &group_members,
                                            bool allows_single_node_partition);

}  // namespace fastlower
