// Area "namespace": the FX name allocator (twin: fastlower/_twin/namespace.py),
// exposed for tests, and the name rules handed over at load time (pyhooks.hpp); the
// fusion simulator uses both internally.
#include <memory>
#include <string>
#include <unordered_set>

#include "bindings.hpp"
#include "namespace.hpp"
#include "pyconv.hpp"
#include "pyhooks.hpp"

namespace fastlower {

void register_namespace(py::module_ &m) {
    m.def(
        "set_name_rules",
        [](py::iterable illegal_names) {
            std::unordered_set<std::string> names;
            for (py::handle name : illegal_names) names.insert(pyconv::utf8(name.ptr()));
            set_name_rules(std::move(names));
        },
        py::arg("illegal_names"),
        "Install torch.fx's illegal node names (fastlower._name_rules.ILLEGAL_NAMES); "
        "fastlower._core_loader.load_core() calls it before handing out the core.");
    py::class_<Namespace>(m, "Namespace", "Same allocation as fastlower._twin.namespace.Namespace.")
        .def(py::init([](py::iterable names_in_order) {
                 auto ns = std::make_unique<Namespace>(&python_name_hooks());
                 for (py::handle name : names_in_order) ns->create(pyconv::utf8(name.ptr()));
                 return ns;
             }),
             py::arg("names_in_order") = py::tuple())
        .def("create", [](Namespace &self, py::handle candidate) {
            return pyconv::to_str(self.create(pyconv::utf8(candidate.ptr())));
        });
    m.def(
        "snake_case",
        [](py::handle s) { return pyconv::to_str(snake_case(pyconv::utf8(s.ptr()), python_name_hooks())); },
        py::arg("s"), "torch.fx.graph._snake_case");
}

}  // namespace fastlower
