// Internals shared by the two partitioners (partition_capability.cpp,
// partition_group.cpp): input checks, the int32 CSR they traverse, and the
// reference's final filtering of the proposed partitions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "partition.hpp"

namespace fastlower {
namespace partition_detail {

using I = int32_t;

// Input checks, same order and messages as fastlower/_twin/partition_checks.py:
// PartitionInputError (ValueError) / PartitionIndexError (IndexError).
void check_csr(const char *name, const std::vector<int64_t> &offsets,
               const std::vector<int64_t> &values, size_t n_rows, size_t n);
// per-node arrays and the users CSR; returns the node count
size_t check_nodes(const PartitionGraph &g);
// the inputs CSR (only the grouped variant reads it)
void check_inputs(const PartitionGraph &g, size_t n);

// Compact CSR of int32 for traversal.
struct Csr {
    std::vector<I> off, val;
    Csr(const std::vector<int64_t> &o, const std::vector<int64_t> &v) : off(o.begin(), o.end()), val(v.begin(), v.end()) {}
    const I *begin(I i) const { return val.data() + off[i]; }
    const I *end(I i) const { return val.data() + off[i + 1]; }
};

// Ordered node list with O(1) removal (tombstones) and append.
struct OrderedMembers {
    std::vector<std::vector<I>> lists;  // per partition, -1 = removed
    std::vector<I> slot;                // per node: position in its partition's list
    std::vector<I> live_count;
    void remove(I part, I node) {
        lists[part][slot[node]] = -1;
        --live_count[part];
    }
    void append(I part, I node) {
        slot[node] = static_cast<I>(lists[part].size());
        lists[part].push_back(node);
        ++live_count[part];
    }
};

// Reference's single-node filter, then drops empty partitions; `order` lists the
// partitions in the reference's dict order.
ProposedPartitions finish(const std::vector<I> &order, const OrderedMembers &m,
                          const std::vector<uint8_t> &has_order, const std::vector<int64_t> &weight,
                          bool allows_single_node_partition);

inline bool all_users_getitem(const Csr &users, const std::vector<uint8_t> &is_getitem, I i) {
    for (const I *u = users.begin(i); u != users.end(i); ++u)
        if (!is_getitem[*u]) return false;
    return true;
}


}  // namespace partition_detail
}  // namespace fastlower
