// Area "grouping": group_by_tag (twin: fastlower/_twin/grouping.py).
#include "bindings.hpp"
#include "grouping.hpp"
#include "pyconv.hpp"

namespace fastlower {

void register_grouping(py::module_ &m) {
    m.def(
        "group_by_tag",
        [](py::handle tags, py::handle n_tags) {
            auto groups = group_by_tag(pyconv::ints_saturating(tags), pyconv::to_i64_saturating(n_tags.ptr()));
            py::list out(groups.size());
            for (size_t i = 0; i < groups.size(); ++i) out[i] = pyconv::to_list(groups[i]);
            return out;
        },
        py::arg("tags"), py::arg("n_tags"),
        "Node indices of each tag 0..n_tags-1, in node order; -1 and -2 are ignored.\n"
        "ValueError for n_tags outside [0, 2**20], IndexError for another tag value.");
}

}  // namespace fastlower
