// Input checks and final filtering shared by both partitioners (partition_graph.hpp).
#include "partition_graph.hpp"

namespace fastlower {
namespace partition_detail {

void check_csr(const char *name, const std::vector<int64_t> &offsets,
               const std::vector<int64_t> &values, size_t n_rows, size_t n) {
    if (offsets.size() != n_rows + 1)
        throw PartitionInputError(std::string(name) + ": expected " + std::to_string(n_rows + 1) +
                                  " offsets, got " + std::to_string(offsets.size()));
    if (offsets[0] != 0 || offsets.back() != static_cast<int64_t>(values.size()))
        throw PartitionInputError(std::string(name) + ": offsets must start at 0 and end at " +
                                  std::to_string(values.size()));
    for (size_t r = 0; r < n_rows; ++r)
        if (offsets[r] > offsets[r + 1])
            throw PartitionInputError(std::string(name) + ": offsets decrease at row " + std::to_string(r));
    for (size_t k = 0; k < values.size(); ++k)
        if (values[k] < 0 || values[k] >= static_cast<int64_t>(n))
            throw PartitionIndexError(std::string(name) + ": entry " + std::to_string(k) +
                                      " refers to node " + std::to_string(values[k]) + ", outside 0.." +
                                      std::to_string(static_cast<int64_t>(n) - 1));
}

size_t check_nodes(const PartitionGraph &g) {
    size_t n = g.supported.size();
    if (n >= static_cast<size_t>(INT32_MAX / 2)) throw PartitionInputError("graph too large");
    if (g.is_getitem.size() != n || g.compute_weight.size() != n)
        throw PartitionInputError("per-node arrays differ in length: supported " + std::to_string(n) +
                                  ", is_getitem " + std::to_string(g.is_getitem.size()) +
                                  ", compute_weight " + std::to_string(g.compute_weight.size()));
    check_csr("users", g.users_offsets, g.users, n, n);
    for (size_t i = 0; i < n; ++i)
        for (int64_t k = g.users_offsets[i]; k < g.users_offsets[i + 1]; ++k)
            if (g.users[k] <= static_cast<int64_t>(i))
                throw PartitionInputError("users: node " + std::to_string(i) + " has user " +
                                          std::to_string(g.users[k]) +
                                          " that does not come after it (the graph is not in topological order)");
    for (size_t i = 0; i < n; ++i)
        if (g.compute_weight[i] < 0 || g.compute_weight[i] > 2)
            throw PartitionInputError("compute_weight: node " + std::to_string(i) + " has weight " +
                                      std::to_string(g.compute_weight[i]) + ", expected 0..2");
    return n;
}

void check_inputs(const PartitionGraph &g, size_t n) {
    check_csr("inputs", g.inputs_offsets, g.inputs, n, n);
    for (size_t i = 0; i < n; ++i)
        for (int64_t k = g.inputs_offsets[i]; k < g.inputs_offsets[i + 1]; ++k)
            if (g.inputs[k] >= static_cast<int64_t>(i))
                throw PartitionInputError("inputs: node " + std::to_string(i) + " has input " +
                                          std::to_string(g.inputs[k]) +
                                          " that does not come before it (the graph is not in topological order)");
}

// Reference's single-node filter, then drops empty partitions; `order` lists the
// partitions in the reference's dict order.
ProposedPartitions finish(const std::vector<I> &order, const OrderedMembers &m,
                          const std::vector<uint8_t> &has_order, const std::vector<int64_t> &weight,
                          bool allows_single_node_partition) {
    ProposedPartitions out;
    for (I pid : order) {
        std::vector<int64_t> nodes;
        int64_t weight_sum = 0, ordered = 0;
        for (I x : m.lists[pid]) {
            if (x < 0) continue;
            nodes.push_back(x);
            weight_sum += weight[x];
            ordered += has_order[x] ? 1 : 0;
        }
        if (!allows_single_node_partition && weight_sum <= 1) continue;
        if (nodes.empty()) continue;
        out.ids.push_back(pid);
        out.members.push_back(std::move(nodes));
        out.ordered_counts.push_back(ordered);
    }
    return out;
}

}  // namespace partition_detail
}  // namespace fastlower
