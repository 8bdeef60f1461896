// Binding-side pieces shared by the fusion area's binding files: the Python
// simulator object (bind_fusion.cpp), the GraphArrays conversion
// (bind_arrays.cpp) and the coarse call plan_graph (bind_plan.cpp).
#pragma once

#include <memory>
#include <string>

#include "bindings.hpp"
#include "fusion.hpp"

namespace fastlower {

// fastlower.FusionSimulator's state: the core and the Python objects it hands out.
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

std::unique_ptr<PySim> make_sim(py::object arrays, py::object tag_names, bool is_submodule, py::object top,
                                py::iterable taken_lowered);

// The dataclasses the bindings build results of (fastlower._schema's PartitionPlan,
// RuleStop, PlanResult), given by register_types: the extension imports no Python module.
struct ResultTypes {
    py::object partition_plan, rule_stop, plan_result;
};
const ResultTypes &result_types();

py::object make_plan(const PartitionData &p);

void register_plan_graph(py::module_ &m);

}  // namespace fastlower
