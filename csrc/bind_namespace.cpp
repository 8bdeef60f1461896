// Area "namespace": the FX name allocator (twin: fastlower/_twin/namespace.py),
// exposed for tests; the fusion simulator uses it internally.
#include <memory>

#include <pybind11/gil_safe_call_once.h>

#include "bindings.hpp"
#include "namespace.hpp"
#include "pyconv.hpp"
#include "pyhooks.hpp"

namespace fastlower {

// Built on first use under pybind11's gil_safe_call_once_and_store (see plan_class in
// bind_fusion.cpp): a plain function-local static would hold its guard across the
// import below, which may release the GIL.
const NameHooks &python_name_hooks() {
    PYBIND11_CONSTINIT static py::gil_safe_call_once_and_store<NameHooks *> storage;
    return *storage.call_once_and_store_result([] {
        py::module_ twin = py::module_::import("fastlower._twin.namespace");
        auto illegal = std::make_shared<std::unordered_set<std::string>>();
        for (py::handle name : twin.attr("ILLEGAL_NAMES")) illegal->insert(pyconv::utf8(name.ptr()));
        auto *h = new NameHooks();  // intentionally leaked: used until interpreter exit
        h->illegal = illegal;
        // py::object copies are leaked with *h, so no Python call happens at exit
        auto *split = new py::object(twin.attr("split_name"));
        h->split_unicode = [split](const std::string &s) {
            py::tuple r = (*split)(pyconv::to_str(s));
            SplitResult out;
            out.candidate = pyconv::utf8(r[0].ptr());
            out.base = pyconv::utf8(r[1].ptr());
            out.has_num = !r[2].is_none();
            if (out.has_num) {
                try {
                    out.num = pyconv::to_i64(r[2].ptr());
                } catch (const std::overflow_error &) {
                    throw Unsupported("numeric name suffix too large: " + s);
                }
                if (out.num > 1000000000000000000LL) throw Unsupported("numeric name suffix too large: " + s);
            }
            return out;
        };
        h->lower_unicode = [](const std::string &s) {
            return pyconv::utf8(pyconv::to_str(s).attr("lower")().ptr());
        };
        return h;
    }).get_stored();
}

namespace {

class PyNamespace {
  public:
    PyNamespace() : ns_(&python_name_hooks()) {}
    std::string create(const std::string &candidate) { return ns_.create(candidate); }

  private:
    Namespace ns_;
};

}  // namespace

void register_namespace(py::module_ &m) {
    py::class_<PyNamespace>(m, "Namespace", "Same allocation as fastlower._twin.namespace.Namespace.")
        .def(py::init([](py::iterable names_in_order) {
                 auto ns = std::make_unique<PyNamespace>();
                 for (py::handle name : names_in_order) ns->create(pyconv::utf8(name.ptr()));
                 return ns;
             }),
             py::arg("names_in_order") = py::tuple())
        .def("create", [](PyNamespace &self, py::handle candidate) {
            return pyconv::to_str(self.create(pyconv::utf8(candidate.ptr())));
        });
    m.def(
        "snake_case",
        [](py::handle s) { return pyconv::to_str(snake_case(pyconv::utf8(s.ptr()), python_name_hooks())); },
        py::arg("s"), "torch.fx.graph._snake_case");
}

}  // namespace fastlower
