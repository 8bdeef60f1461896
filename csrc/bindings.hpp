// Registration entry points, one per binding area (csrc/bind_<area>.cpp).
// To add an area: declare `void register_<area>(pybind11::module_ &m);` here,
// implement it in csrc/bind_<area>.cpp, and call it from csrc/module.cpp.
#pragma once

#include <pybind11/pybind11.h>

namespace py = pybind11;

namespace fastlower {

void register_info(py::module_ &m);
void register_grouping(py::module_ &m);
void register_contract(py::module_ &m);
void register_identity(py::module_ &m);
void register_namespace(py::module_ &m);
void register_fusion(py::module_ &m);
void register_partition(py::module_ &m);
void register_meta_watch(py::module_ &m);
void register_hqq(py::module_ &m);

}  // namespace fastlower
