// Area "fusion", the coarse call: plan_graph(arrays, tag_names, options) -> plain
// data (twin: fastlower/_twin/plan.py).  Converts only: GraphArrays and PlanOptions
// in, dicts and lists out; the planning is csrc/plan.cpp, the core stays here.
#include <optional>
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

// None, else the value clamped to int64
std::optional<int64_t> optional_i64(py::handle o) {
    if (o.is_none()) return std::nullopt;
    return pyconv::to_i64_saturating(o.ptr());
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
    d.top_debug_handle = optional_i64(o.attr("top_debug_handle"));
    d.delegate_order = pyconv::ints_saturating(o.attr("delegate_order"));
    d.delegate_top_debug_handles = pyconv::ints_saturating(o.attr("delegate_top_debug_handles"));
    return d;
}

py::object stop_fields(const RuleStopData &s) {
    if (!s) return py::none();
    py::dict d;
    d["kind"] = s.kind;
    d["stage"] = s.stage;
    d["pid"] = s.pid;
    d["tag"] = s.tag;
    d["nodes"] = pyconv::to_list(s.nodes);
    return std::move(d);
}

template <class V>
py::list lists(const std::vector<V> &rows) {
    py::list out(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) out[i] = pyconv::to_list(rows[i]);
    return out;
}

// The planned graph by PlannedGraph's field names (fastlower._schema).
py::dict graph_fields(const FusionCore &c) {
    const size_t n = c.size();
    py::list users(n), names(n), alive(n);
    std::vector<int32_t> us;
    for (size_t i = 0; i < n; ++i) {
        c.users_of(static_cast<int32_t>(i), us);
        users[i] = pyconv::to_list(us);
        names[i] = pyconv::to_str(c.names[i]);
        alive[i] = py::bool_(c.alive[i] != 0);
    }
    py::dict copy_target;
    for (size_t k = 0; k < c.copies.size(); ++k) copy_target[py::int_(c.copies[k])] = pyconv::to_str(c.copy_fqn[k]);
    py::list partitions;
    for (const PartitionData &p : c.partitions) partitions.append(plan_fields(p));
    py::dict d;
    d["order"] = pyconv::to_list(c.order());
    d["op"] = pyconv::to_list(c.op);
    d["kind"] = pyconv::to_list(c.kind);
    d["origin"] = pyconv::to_list(c.origin);
    d["inputs"] = lists(c.inputs);
    d["users"] = users;
    d["names"] = names;
    d["tags"] = pyconv::to_list(c.tags);
    d["alive"] = alive;
    d["getitem_index"] = pyconv::to_list(c.getitem_index);
    d["debug_handles"] = pyconv::to_list(c.debug_handle);
    d["copies"] = pyconv::to_list(c.copies);
    d["copy_target"] = copy_target;
    d["out_args"] = pyconv::to_list(c.out_args);
    d["out_kinds"] = pyconv::to_list(c.out_kinds);
    d["out_targets"] = pyconv::to_list(c.out_targets);
    d["out_specs"] = pyconv::to_list(c.out_specs);
    d["output_node"] = c.output_node;
    d["partitions"] = partitions;
    d["lowered_count"] = c.lowered_count;
    d["max_debug_handle"] = c.max_debug_handle();
    return d;
}

py::tuple plan_graph_py(py::object arrays, py::object tag_names, py::object options) {
    std::unique_ptr<FusionCore> core = make_core(arrays, tag_names, truthy(options.attr("is_submodule")),
                                                 options.attr("taken_lowered"));
    const PlanOutcome out = plan_graph(*core, convert_options(options));
    return py::make_tuple(graph_fields(*core), stop_fields(out.stop), stop_fields(out.insert_stop));
}

}  // namespace

void register_plan_graph(py::module_ &m) {
    m.def("plan_graph", &plan_graph_py, py::arg("arrays"), py::arg("tag_names"), py::arg("options"),
          "Plan one graph in one call: duplicate its shared constants (top level, in\n"
          "options.duplication_order), then fuse every tag (inserting each delegate when\n"
          "options.delegate_insertion is DELEGATES_WHILE_FUSING, else those of\n"
          "options.delegate_order after fusing), up to the first broken rule.\n"
          "Returns plain data: (graph, stop, insert_stop), the planned graph's fields and each\n"
          "stop's (or None) as dicts; fastlower._schema.PlanResult.from_core makes the\n"
          "PlanResult fastlower._twin.plan.plan_graph returns.");
}

}  // namespace fastlower
