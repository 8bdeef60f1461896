// Structural graph identity by hash-consing, linear (no recursion).
// Twin: fastlower/_twin/identity.py.
#pragma once

#include <cstdint>
#include <vector>

namespace fastlower {

// Index of the first node whose structure differs, -1 when identical; the
// shorter length when only the node counts differ.  Each graph's off/in is CSR
// over its nodes with input ids in [0, n) (a forward reference is allowed);
// malformed arrays throw std::invalid_argument / std::out_of_range (checks.hpp).
int64_t first_difference(const std::vector<int64_t> &op_a, const std::vector<int64_t> &target_a,
                         const std::vector<int64_t> &off_a, const std::vector<int64_t> &in_a,
                         const std::vector<int64_t> &op_b, const std::vector<int64_t> &target_b,
                         const std::vector<int64_t> &off_b, const std::vector<int64_t> &in_b);

}  // namespace fastlower
