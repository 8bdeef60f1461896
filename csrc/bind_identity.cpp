// Area "identity": first_difference (twin: fastlower/_twin/identity.py).
#include "bindings.hpp"
#include "identity.hpp"
#include "pyconv.hpp"

namespace fastlower {

void register_identity(py::module_ &m) {
    m.def(
        "first_difference",
        [](py::handle op_a, py::handle target_a, py::handle off_a, py::handle in_a, py::handle op_b,
           py::handle target_b, py::handle off_b, py::handle in_b) {
            // ids are only range-checked (a clamped id fails like any bad id); op, target and
            // the CSR offsets are compared with each other, and clamping two values beyond
            // int64 would make them equal, so such a value is an OverflowError
            return first_difference(pyconv::ints(op_a), pyconv::ints(target_a), pyconv::ints(off_a),
                                    pyconv::ints_saturating(in_a), pyconv::ints(op_b), pyconv::ints(target_b),
                                    pyconv::ints(off_b), pyconv::ints_saturating(in_b));
        },
        py::arg("op_a"), py::arg("target_a"), py::arg("off_a"), py::arg("in_a"), py::arg("op_b"),
        py::arg("target_b"), py::arg("off_b"), py::arg("in_b"),
        "Index of the first structurally different node, -1 when the graphs are identical.");
}

}  // namespace fastlower
