#include "contract.hpp"

#include <stdexcept>

#include "fusion.hpp"  // OP_* and ROLE_* codes
#include "indexing.hpp"

namespace fastlower {

std::tuple<int64_t, int64_t, int64_t> find_contract_violation(
    const std::vector<int64_t> &op, const std::vector<int64_t> &tags, const std::vector<int64_t> &roles,
    const std::vector<int64_t> &no_copy, const std::vector<int64_t> &users_offsets,
    const std::vector<int64_t> &users_flat, bool strict_tags) {
    const int64_t n = static_cast<int64_t>(tags.size());
    for (int64_t i = 0; i < n; ++i) {
        const int64_t t = tags[static_cast<size_t>(i)];
        if (t == -1 || (t == -2 && !strict_tags)) continue;
        if (t == -2) return {UNKNOWN_TAG, i, -1};
        const int64_t o = py_at(op, i);
        if (o == OP_OUTPUT) return {TAGGED_OUTPUT, i, -1};
        if (o == OP_PLACEHOLDER) {
            const int64_t role = py_at(roles, i);
            if (role != ROLE_PARAMETER && role != ROLE_BUFFER && role != ROLE_CONSTANT)
                return {TAGGED_USER_INPUT, i, -1};
            if (py_at(no_copy, i)) {
                const int64_t lo = py_at(users_offsets, i), hi = py_at(users_offsets, i + 1);
                for (int64_t k = lo; k < hi; ++k) {
                    const int64_t u = py_at(users_flat, k);
                    if (py_at(tags, u) != t) return {NO_COPY_SHARED, i, u};
                }
            }
        }
    }
    return {CONTRACT_OK, -1, -1};
}

}  // namespace fastlower
