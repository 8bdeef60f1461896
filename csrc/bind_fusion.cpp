// Area "fusion": FusionSimulator (twin: fastlower/_twin/fusion.py), the fine-grained
// simulator the differential tests and the fuzz harness drive step by step; the
// lowering only ever calls plan_graph (bind_plan.cpp), which returns plain data.
//
// Per-node attributes (op, names, users, ...) are live read-only views that
// index like the twin's lists (`sim.tags[u]`, `sim.pos.__getitem__`,
// iteration, len, ==); `partitions` holds PartitionPlan dataclass instances
// (the type given to register_types) and `copy_target` is a live dict, as in
// the twin.  The coarse call plan_graph is in bind_plan.cpp.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "bind_sim.hpp"
#include "checks.hpp"
#include "pyconv.hpp"
#include "pyhooks.hpp"

namespace fastlower {

namespace {

using pyconv::to_list;
using pyconv::to_str;

enum Field : int {
    F_OP,
    F_KIND,
    F_ORIGIN,
    F_INPUTS,
    F_USERS,
    F_NAMES,
    F_TAGS,
    F_ALIVE,
    F_POS,
    F_GETITEM_INDEX,
    F_PARTITION_OF,
    F_DEBUG_HANDLE,
    F_HAS_FAKE_VAL,
    F_PRIORITIZED,
};

// PartitionPlan (fastlower._schema), given by register_types: the extension imports
// no Python module.  Never destroyed, so no Python call happens at exit.
py::object *partition_plan_type = nullptr;

py::object make_plan(const PartitionData &p) {
    if (!partition_plan_type)
        throw std::runtime_error(
            "fastlower._core.register_types(PartitionPlan) was not called "
            "(fastlower._core_loader.load_core calls it)");
    return (*partition_plan_type)(**plan_fields(p));
}

}  // namespace

void PySim::publish_copies() {
    for (; copies_published < core->copies.size(); ++copies_published)
        copy_target[py::int_(core->copies[copies_published])] = to_str(core->copy_fqn[copies_published]);
}

py::dict plan_fields(const PartitionData &p) {
    py::dict member_inputs;
    for (size_t k = 0; k < p.nodes.size(); ++k) member_inputs[py::int_(p.nodes[k])] = to_list(p.member_inputs[k]);
    py::dict kw;
    kw["tag"] = p.tag;
    kw["nodes"] = to_list(p.nodes);
    kw["inputs"] = to_list(p.inputs);
    kw["outputs"] = to_list(p.outputs);
    kw["output_order"] = to_list(p.output_order);
    kw["output_kinds"] = to_list(p.output_kinds);
    kw["output_targets"] = to_list(p.output_targets);
    kw["member_inputs"] = member_inputs;
    kw["call_module"] = p.call_module;
    kw["getitems"] = to_list(p.getitems);
    kw["get_attr"] = p.get_attr;
    kw["delegate"] = p.delegate;
    kw["lowered_index"] = p.lowered_index;
    kw["debug_handle"] = p.debug_handle;
    kw["deleted_getitems"] = to_list(p.deleted_getitems);
    kw["owns_state"] = p.owns_state;
    kw["single_output"] = p.single_output;
    return kw;
}

namespace {

struct NodeView {
    py::object owner;  // keeps the simulator alive
    const FusionCore *core;
    int field;

    size_t size() const { return core->size(); }

    py::object item(size_t i) const {
        const FusionCore &c = *core;
        switch (field) {
            case F_OP: return py::int_(c.op[i]);
            case F_KIND: return py::int_(c.kind[i]);
            case F_ORIGIN: return py::int_(c.origin[i]);
            case F_INPUTS: return to_list(c.inputs[i]);
            case F_USERS: {
                py::list out(c.user_count(static_cast<int32_t>(i)));
                Py_ssize_t k = 0;
                c.for_users(static_cast<int32_t>(i), [&](int32_t u) {
                    PyList_SET_ITEM(out.ptr(), k++, PyLong_FromLong(u));
                });
                return std::move(out);
            }
            case F_NAMES: return to_str(c.names[i]);
            case F_TAGS: return py::int_(c.tags[i]);
            case F_ALIVE: return py::bool_(c.alive[i] != 0);
            case F_POS: return py::int_(c.pos[i]);
            case F_GETITEM_INDEX: return py::int_(c.getitem_index[i]);
            case F_PARTITION_OF: return py::int_(c.partition_of[i]);
            case F_DEBUG_HANDLE: return py::int_(c.debug_handle[i]);
            case F_HAS_FAKE_VAL: return py::int_(static_cast<int>(c.has_fake_val[i]));
            case F_PRIORITIZED: return py::int_(static_cast<int>(c.prioritized[i]));
        }
        throw std::logic_error("bad field");
    }

    py::object at(int64_t i) const {
        const int64_t n = static_cast<int64_t>(size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) throw py::index_error("list index out of range");
        return item(static_cast<size_t>(i));
    }

    py::list tolist() const {
        const size_t n = size();
        py::list out(n);
        for (size_t i = 0; i < n; ++i) out[i] = item(i);
        return out;
    }
};

FusionCore &core_of(PySim &s) { return *s.core; }

int64_t clamp_to_int64(py::handle x) { return pyconv::to_i64_saturating(x.ptr()); }

}  // namespace

std::unique_ptr<FusionCore> make_core(py::handle arrays, py::handle tag_names, bool is_submodule,
                                      py::handle taken_lowered) {
    const NameHooks &hooks = python_name_hooks();
    std::unique_ptr<FusionCore> core;
    try {
        GraphInput g = convert_arrays(arrays);
        std::vector<std::string> tags;
        for (py::handle t : tag_names) tags.push_back(pyconv::utf8(t.ptr()));
        core = std::make_unique<FusionCore>(std::move(g), tags, is_submodule, &hooks);
        for (py::handle item : taken_lowered) {
            const int64_t k = item.cast<int64_t>();
            if (k < 0) throw py::value_error("taken_lowered: lowered module indices are >= 0");
            core->taken_lowered.insert(k);
        }
    } catch (const std::overflow_error &e) {
        throw Unsupported(e.what());
    } catch (py::error_already_set &e) {
        if (e.matches(PyExc_UnicodeError) || e.matches(PyExc_OverflowError)) throw Unsupported(e.what());
        throw;
    }
    return core;
}

std::unique_ptr<PySim> make_sim(py::object arrays, py::object tag_names, bool is_submodule, py::object top,
                                py::iterable taken_lowered) {
    auto sim = std::make_unique<PySim>();
    sim->g = arrays;
    sim->tag_names = py::list(tag_names);
    sim->core = make_core(arrays, sim->tag_names, is_submodule, taken_lowered);
    if (!top.is_none()) {
        sim->top = top;
        if (py::isinstance<PySim>(top)) {
            sim->core->top_core = top.cast<PySim &>().core.get();
        } else {
            py::object t = top;
            sim->core->top_fn = [t]() { return pyconv::to_i64(t.attr("max_debug_handle")().ptr()); };
        }
    } else {
        sim->top = py::none();
    }
    return sim;
}

namespace {

// register_types, and the exceptions the core raises
void register_types_and_errors(py::module_ &m) {
    m.def(
        "register_types",
        [](py::object partition_plan) {
            if (!partition_plan_type) partition_plan_type = new py::object();
            *partition_plan_type = partition_plan;
        },
        py::arg("partition_plan"),
        "The dataclass FusionSimulator's partitions are made of (fastlower._schema's\n"
        "PartitionPlan); fastlower._core_loader registers it on load.");
    // raised when a graph is outside what the core represents exactly; plan.py
    // then falls back to the twin
    py::register_exception<Unsupported>(m, "Unsupported", PyExc_ValueError);
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const CycleError &e) {
            py::list stuck;
            for (const auto &s : e.stuck) stuck.append(to_str(s));
            std::string msg = "graph has a cycle through " + py::repr(stuck).cast<std::string>();
            PyErr_SetString(PyExc_RuntimeError, msg.c_str());
        } catch (const NodeKeyError &e) {
            PyErr_SetObject(PyExc_KeyError, py::int_(e.key).ptr());
        }
    });
}

void register_node_view(py::module_ &m) {
    py::class_<NodeView>(m, "_NodeView", "Live read-only per-node attribute of a FusionSimulator.")
        .def("__len__", &NodeView::size)
        .def("__getitem__", &NodeView::at)
        .def("__getitem__",
             [](const NodeView &v, py::slice s) {
                 size_t start, stop, step, len;
                 if (!s.compute(v.size(), &start, &stop, &step, &len)) throw py::error_already_set();
                 py::list out(len);
                 for (size_t k = 0; k < len; ++k, start += step) out[k] = v.item(start);
                 return out;
             })
        .def("__iter__", [](const NodeView &v) { return py::iter(v.tolist()); })
        .def("__contains__", [](const NodeView &v, py::handle x) { return v.tolist().contains(x); })
        .def("__eq__", [](const NodeView &v, py::handle o) { return v.tolist().equal(o); })
        .def("__ne__", [](const NodeView &v, py::handle o) { return v.tolist().not_equal(o); })
        .def("__repr__", [](const NodeView &v) { return py::repr(v.tolist()); })
        .def("tolist", &NodeView::tolist);
}

// the simulator's per-node attributes, live NodeViews
void def_node_views(py::class_<PySim> &cls) {
    auto view = [](int field) {
        return [field](py::object self) {
            return NodeView{self, self.cast<PySim &>().core.get(), field};
        };
    };
    cls.def_property_readonly("op", view(F_OP))
        .def_property_readonly("kind", view(F_KIND))
        .def_property_readonly("origin", view(F_ORIGIN))
        .def_property_readonly("inputs", view(F_INPUTS))
        .def_property_readonly("users", view(F_USERS))
        .def_property_readonly("names", view(F_NAMES))
        .def_property_readonly("tags", view(F_TAGS))
        .def_property_readonly("alive", view(F_ALIVE))
        .def_property_readonly("pos", view(F_POS))
        .def_property_readonly("getitem_index", view(F_GETITEM_INDEX))
        .def_property_readonly("partition_of", view(F_PARTITION_OF))
        .def_property_readonly("debug_handle", view(F_DEBUG_HANDLE))
        .def_property_readonly("has_fake_val", view(F_HAS_FAKE_VAL))
        .def_property_readonly("prioritized", view(F_PRIORITIZED));
}

// the simulator's graph-level state
void def_graph_state(py::class_<PySim> &cls) {
    cls.def_property_readonly("g", [](PySim &s) { return s.g; })
        .def_property_readonly("tag_names", [](PySim &s) { return s.tag_names; })
        .def_property_readonly("is_submodule", [](PySim &s) { return s.core->is_submodule; })
        .def_property_readonly("top", [](py::object self) {
            PySim &s = self.cast<PySim &>();
            return s.top.is_none() ? self : s.top;
        })
        .def_property_readonly("out_args", [](PySim &s) { return to_list(s.core->out_args); })
        .def_property_readonly("out_kinds", [](PySim &s) { return to_list(s.core->out_kinds); })
        .def_property_readonly("out_targets", [](PySim &s) { return to_list(s.core->out_targets); })
        .def_property_readonly("out_specs", [](PySim &s) { return to_list(s.core->out_specs); })
        .def_property_readonly("output_node", [](PySim &s) { return s.core->output_node; })
        .def_property_readonly("copies", [](PySim &s) { return to_list(s.core->copies); })
        .def_property_readonly("copy_target", [](PySim &s) { return s.copy_target; })
        .def_property_readonly("partitions", [](PySim &s) { return s.partitions; })
        .def_property_readonly("lowered_count", [](PySim &s) { return s.core->lowered_count; });
}

// the simulator's steps: the reference's edits, one call each
void def_steps(py::class_<PySim> &cls) {
    cls.def("order", [](PySim &s) { return to_list(s.core->order()); })
        .def("renumber", [](PySim &s) { s.core->renumber(); })
        // ids arrive clamped to int64 (pyconv::to_i64_saturating): the core's range
        // checks then reject a value beyond int64 like any other bad id
        .def("members",
             [](PySim &s, py::handle tag) { return to_list(s.core->members(clamp_to_int64(tag))); })
        .def(
            "duplicate_constant",
            [](PySim &s, py::handle c) {
                auto made = core_of(s).duplicate_constant(clamp_to_int64(c));
                s.publish_copies();
                return to_list(made);
            },
            py::arg("c"))
        .def("retag_constant", [](PySim &s, py::handle c) { s.core->retag_constant(clamp_to_int64(c)); })
        .def("find_cycle",
             [](PySim &s, py::handle members) -> py::object {
                 std::vector<int32_t> path;
                 if (s.core->find_cycle(pyconv::ints_saturating(members), path)) return to_list(path);
                 return py::none();
             })
        .def("fuse",
             [](PySim &s, py::handle tag, py::handle members) {
                 int32_t pid = s.core->fuse(clamp_to_int64(tag), pyconv::ints_saturating(members));
                 py::object plan = make_plan(s.core->partitions[pid]);
                 s.partitions.append(plan);
                 return plan;
             })
        .def("legalize", [](PySim &s) { s.core->legalize(); })
        .def("insert_delegate",
             [](PySim &s, py::handle pid_arg) {
                 const int64_t pid = clamp_to_int64(pid_arg);
                 s.core->insert_delegate(pid);
                 const PartitionData &p = s.core->partitions[pid];
                 py::object plan = s.partitions[static_cast<size_t>(pid)];
                 plan.attr("lowered_index") = p.lowered_index;
                 plan.attr("get_attr") = p.get_attr;
                 plan.attr("delegate") = p.delegate;
                 plan.attr("debug_handle") = p.debug_handle;
             })
        .def("max_debug_handle", [](PySim &s) { return s.core->max_debug_handle(); });
}

}  // namespace

void register_fusion(py::module_ &m) {
    register_types_and_errors(m);
    register_node_view(m);
    py::class_<PySim> sim(m, "FusionSimulator",
                          "Replays the reference's fusion edits on integer arrays; same interface and\n"
                          "results as fastlower._twin.fusion.FusionSimulator.");
    sim.def(py::init(&make_sim), py::arg("g"), py::arg("tag_names"), py::arg("is_submodule"),
            py::arg("top") = py::none(), py::arg("taken_lowered") = py::tuple());
    def_node_views(sim);
    def_graph_state(sim);
    def_steps(sim);
    register_plan_graph(m);
}

}  // namespace fastlower
