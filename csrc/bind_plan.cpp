// Area "fusion", the coarse call: plan_graph(arrays, tag_names, options, top) ->
// PlanResult (twin: fastlower/_twin/plan.py).  Converts only: PlanOptions in,
// PlanResult of plain data out; the planning is csrc/plan.cpp.
#include <utility>
#include <vector>

#include "bind_sim.hpp"
#include "plan.hpp"
#include "pyconv.hpp"

namespace fastlower {

namespace {

bool truthy(py::handle o) {
    const int v = PyObject_IsTrue(o.ptr());
    if (v < 0) throw py::error_already_set();
    return v != 0;
}

PlanOptionsData convert_options(py::handle o) {
    PlanOptionsData d;
    d.is_submodule = truthy(o.attr("is_submodule"));
    d.delegate_insertion = pyconv::to_i64_saturating(o.attr("delegate_insertion").ptr());
    pyconv::FastSeq order(o.attr("duplication_order"));
    d.duplication_order.resize(order.size());
    // ids arrive clamped to int64: the range checks reject a value beyond it
    for (size_t t = 0; t < order.size(); ++t) d.duplication_order[t] = pyconv::ints_saturating(order[t]);
    d.no_copy = pyconv::flags(o.attr("no_copy"));
    d.validate_at_first_duplication = truthy(o.attr("validate_at_first_duplication"));
    return d;
}

py::object stop_object(const RuleStopData &s) {
    if (!s) return py::none();
    return result_types().rule_stop(s.kind, s.stage, s.pid, s.tag, pyconv::to_list(s.nodes));
}

py::object plan_graph_py(py::object arrays, py::object tag_names, py::object options, py::object top) {
    const ResultTypes &types = result_types();  // fail before any work when unregistered
    std::unique_ptr<PySim> sim =
        make_sim(arrays, tag_names, truthy(options.attr("is_submodule")), top, options.attr("taken_lowered"));
    const PlanOutcome out = plan_graph(*sim->core, convert_options(options));
    sim->publish_copies();
    for (const PartitionData &p : sim->core->partitions) sim->partitions.append(make_plan(p));
    py::object sim_obj = py::cast(std::move(sim));
    return types.plan_result(sim_obj, stop_object(out.stop), stop_object(out.insert_stop));
}

}  // namespace

void register_plan_graph(py::module_ &m) {
    m.def("plan_graph", &plan_graph_py, py::arg("arrays"), py::arg("tag_names"), py::arg("options"),
          py::arg("top") = py::none(),
          "Plan one graph in one call: duplicate its shared constants (top level, in\n"
          "options.duplication_order), then fuse every tag (inserting each delegate when\n"
          "options.delegate_insertion is DELEGATES_WHILE_FUSING), up to the first broken rule.\n"
          "Returns a PlanResult: the simulator after every edit and the stops as RuleStop data.\n"
          "Same results as fastlower._twin.plan.plan_graph.");
}

}  // namespace fastlower
