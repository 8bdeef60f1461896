// Area "grouping": group_by_tag (twin: fastlower/_twin/grouping.py).
#include "bindings.hpp"
#include "grouping.hpp"
#include "pyconv.hpp"

namespace fastlower {

void register_grouping(py::module_ &m) {
    m.def(
        "group_by_tag",
        [](py::handle tags, py::handle n_tags) {
            pyconv::FastSeq s(tags);
            std::vector<int64_t> t(s.size());
            for (size_t i = 0; i < s.size(); ++i) t[i] = pyconv::to_i64_saturating(s[i]);
            auto groups = group_by_tag(t, pyconv::to_i64(n_tags.ptr()));
            py::list out(groups.size());
            for (size_t i = 0; i < groups.size(); ++i) out[i] = pyconv::to_list(groups[i]);
            return out;
        },
        py::arg("tags"), py::arg("n_tags"),
        "Node indices of each tag 0..n_tags-1, in node order; other values are ignored.");
}

}  // namespace fastlower
