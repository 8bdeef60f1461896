#include "contract.hpp"

#include <stdexcept>

#include "fusion.hpp"  // OP_* and ROLE_* codes
#include "checks.hpp"

namespace fastlower {

std::tuple<int64_t, int64_t, int64_t> find_contract_violation(
    const std::vector<int64_t> &op, const std::vector<int64_t> &tags, const std::vector<int64_t> &roles,
    const std::vector<uint8_t> &no_copy, const std::vector<int64_t> &users_offsets,
    const std::vector<int64_t> &users_flat, bool strict_tags) {
    const std::string where = "find_contract_violation";
    const size_t n = op.size();
    checks::length(where, "tags", tags, n);
    checks::length(where, "roles", roles, n);
    checks::length(where, "no_copy", no_copy, n);
    checks::csr(where, "users_offsets", users_offsets, "users_flat", users_flat.size(), n);
    checks::node_ids(where, "users_flat", users_flat, n);
    checks::tag_ids(where, "tags", tags, -1);
    // from here on every index below is in range
    for (size_t i = 0; i < n; ++i) {
        const int64_t t = tags[i];
        const int64_t node = static_cast<int64_t>(i);
        if (t == TAG_NONE || (t == TAG_UNKNOWN && !strict_tags)) continue;
        if (t == TAG_UNKNOWN) return {CONTRACT_UNKNOWN_TAG, node, -1};
        const int64_t o = op[i];
        if (o == OP_OUTPUT) return {CONTRACT_TAGGED_OUTPUT, node, -1};
        if (o == OP_PLACEHOLDER) {
            const int64_t role = roles[i];
            if (role != ROLE_PARAMETER && role != ROLE_BUFFER && role != ROLE_CONSTANT)
                return {CONTRACT_TAGGED_USER_INPUT, node, -1};
            if (no_copy[i]) {
                for (int64_t k = users_offsets[i]; k < users_offsets[i + 1]; ++k) {
                    const int64_t u = users_flat[static_cast<size_t>(k)];
                    if (tags[static_cast<size_t>(u)] != t) return {CONTRACT_NO_COPY_SHARED, node, u};
                }
            }
        }
    }
    return {CONTRACT_OK, -1, -1};
}

}  // namespace fastlower
