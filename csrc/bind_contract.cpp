// Area "contract": find_contract_violation (twin: fastlower/_twin/contract.py).
#include "bindings.hpp"
#include "contract.hpp"
#include "pyconv.hpp"

namespace fastlower {

void register_contract(py::module_ &m) {
    m.def(
        "find_contract_violation",
        [](py::handle op, py::handle tags, py::handle roles, py::handle no_copy, py::handle users_offsets,
           py::handle users_flat, py::handle strict_tags) {
            // users_offsets are compared with each other (CSR order): no clamping, a value
            // beyond int64 is an OverflowError; the other arrays are only range-checked
            auto r = find_contract_violation(
                pyconv::ints_saturating(op), pyconv::ints_saturating(tags), pyconv::ints_saturating(roles),
                pyconv::flags(no_copy), pyconv::ints(users_offsets),
                pyconv::ints_saturating(users_flat), py::bool_(py::reinterpret_borrow<py::object>(strict_tags)));
            return py::make_tuple(std::get<0>(r), std::get<1>(r), std::get<2>(r));
        },
        py::arg("op"), py::arg("tags"), py::arg("roles"), py::arg("no_copy"), py::arg("users_offsets"),
        py::arg("users_flat"), py::arg("strict_tags"), "The first broken partition rule as (code, node, other node), or (0, -1, -1).");
}

}  // namespace fastlower
