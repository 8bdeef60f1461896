// Binding-side pieces shared by the fusion area's binding files: the fine-grained
// simulator object of the differential tests (bind_fusion.cpp), the GraphArrays
// conversion (bind_arrays.cpp) and the coarse call plan_graph (bind_plan.cpp).
#pragma once

#include <memory>
#include <string>

#include "bindings.hpp"
#include "fusion.hpp"

namespace fastlower {

// fastlower._core.FusionSimulator's state: the core and the Python objects it hands out.
struct PySim {
    std::unique_ptr<FusionCore> core;
    py::object g;
    py::object top;  // None: this simulator is the top level
    py::list tag_names;
    py::list partitions;  // PartitionPlan instances, one per core partition
    py::dict copy_target;
    size_t copies_published = 0;

    void publish_copies();
};

// GraphArrays -> GraphInput, checked like fastlower._twin.checks.check_graph_arrays
// (same order and messages); Unsupported beyond the core's representation.
GraphInput convert_arrays(py::handle arrays);

// A FusionCore of the arrays and tag names (conversion errors the core cannot
// represent exactly become Unsupported).
std::unique_ptr<FusionCore> make_core(py::handle arrays, py::handle tag_names, bool is_submodule,
                                      py::handle taken_lowered);

std::unique_ptr<PySim> make_sim(py::object arrays, py::object tag_names, bool is_submodule, py::object top,
                                py::iterable taken_lowered);

// A partition's fields, by PartitionPlan's field names (fastlower._schema).
py::dict plan_fields(const PartitionData &p);

void register_plan_graph(py::module_ &m);

}  // namespace fastlower
