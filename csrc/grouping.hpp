// Group node indices by delegation tag.  Twin: fastlower/_twin/grouping.py.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fastlower {

// Node indices of each tag 0..n_tags-1, in node order; -1 and -2 are ignored.
// n_tags outside [0, kMaxTags] throws std::invalid_argument, a tag outside
// {-2, -1} u [0, n_tags) std::out_of_range (checks.hpp).
std::vector<std::vector<int64_t>> group_by_tag(const std::vector<int64_t> &tags, int64_t n_tags);

}  // namespace fastlower
