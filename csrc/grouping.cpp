#include "grouping.hpp"

namespace fastlower {

std::vector<std::vector<int64_t>> group_by_tag(const std::vector<int64_t> &tags, int64_t n_tags) {
    std::vector<std::vector<int64_t>> groups(n_tags > 0 ? static_cast<size_t>(n_tags) : 0);
    for (size_t i = 0; i < tags.size(); ++i) {
        const int64_t t = tags[i];
        if (t >= 0 && t < n_tags) groups[static_cast<size_t>(t)].push_back(static_cast<int64_t>(i));
    }
    return groups;
}

}  // namespace fastlower
