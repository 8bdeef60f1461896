#include "grouping.hpp"

#include "checks.hpp"

namespace fastlower {

std::vector<std::vector<int64_t>> group_by_tag(const std::vector<int64_t> &tags, int64_t n_tags) {
    if (n_tags < 0 || n_tags > checks::kMaxTags)
        checks::value_error("group_by_tag: n_tags is not in [0, " + checks::str(checks::kMaxTags) + "]");
    checks::tag_ids("group_by_tag", "tags", tags, n_tags);
    std::vector<std::vector<int64_t>> groups(static_cast<size_t>(n_tags));
    for (size_t i = 0; i < tags.size(); ++i) {
        const int64_t t = tags[i];
        if (t >= 0) groups[static_cast<size_t>(t)].push_back(static_cast<int64_t>(i));
    }
    return groups;
}

}  // namespace fastlower
