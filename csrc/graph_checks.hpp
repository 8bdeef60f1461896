// The structural checks of the arrays a simulator is built from (twin:
// fastlower._twin.checks.check_graph_arrays: same order, same messages).  Plain C++.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastlower {

using Rows = std::vector<std::vector<int64_t>>;

// std::invalid_argument / std::out_of_range (checks.hpp) on the first problem found.
void check_graph_arrays(const std::vector<int64_t> &op, const std::vector<size_t> &per_node_sizes,
                        const char *const *per_node_names, size_t n_per_node, const Rows &inputs,
                        const Rows &users, const std::vector<int64_t> &out_args, size_t n_out_kinds,
                        size_t n_out_targets);

}  // namespace fastlower
