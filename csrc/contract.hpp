// Partition contract validation on the encoded graph.  Twin: fastlower/_twin/contract.py.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "schema.hpp"

namespace fastlower {

// The first broken rule as (CONTRACT_* code, node, other node), or (CONTRACT_OK, -1, -1).  Unknown
// tags (-2) are a violation only when strict_tags.  Malformed arrays (lengths,
// CSR offsets, user ids, tags below -2) throw std::invalid_argument /
// std::out_of_range before anything is read (checks.hpp).
std::tuple<int64_t, int64_t, int64_t> find_contract_violation(
    const std::vector<int64_t> &op, const std::vector<int64_t> &tags, const std::vector<int64_t> &roles,
    const std::vector<uint8_t> &no_copy, const std::vector<int64_t> &users_offsets,
    const std::vector<int64_t> &users_flat, bool strict_tags);

}  // namespace fastlower
