// Area "fusion", GraphArrays side: conversion to GraphInput (the structural
// checks are graph_checks.cpp).
#include <string>
#include <vector>

#include "bind_sim.hpp"
#include "graph_checks.hpp"
#include "pyconv.hpp"

namespace fastlower {

namespace {

Rows node_rows(py::handle seq) {
    pyconv::FastSeq s(seq);
    Rows out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = pyconv::ints_saturating(s[i]);
    return out;
}

std::vector<std::vector<int32_t>> narrow_rows(const Rows &rows) {
    std::vector<std::vector<int32_t>> out(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) out[i].assign(rows[i].begin(), rows[i].end());
    return out;
}

}  // namespace

GraphInput convert_arrays(py::handle a) {
    GraphInput g;
    std::vector<int64_t> op = pyconv::ints_saturating(a.attr("op"));
    const size_t n = op.size();
    if (n >= static_cast<size_t>(INT32_MAX / 4)) throw Unsupported("graph too large");
    g.prioritized = pyconv::flags(a.attr("prioritized"));
    Rows inputs = node_rows(a.attr("inputs"));
    Rows users = node_rows(a.attr("users"));
    g.names = pyconv::strings(a.attr("names"));
    g.tags = pyconv::ints(a.attr("tags"));
    g.roles = pyconv::ints(a.attr("roles"));
    g.targets = pyconv::ints(a.attr("targets"));
    g.debug_handles = pyconv::ints(a.attr("debug_handles"));
    g.fake_vals = pyconv::flags(a.attr("fake_vals"));
    g.out_args = pyconv::ints_saturating(a.attr("out_args"));
    g.out_kinds = pyconv::ints(a.attr("out_kinds"));
    g.out_targets = pyconv::ints(a.attr("out_targets"));
    static const char *const kPerNode[] = {"prioritized", "inputs",  "users",         "names",    "tags",
                                           "roles",       "targets", "debug_handles", "fake_vals"};
    const std::vector<size_t> sizes = {g.prioritized.size(), inputs.size(),       users.size(),
                                       g.names.size(),       g.tags.size(),       g.roles.size(),
                                       g.targets.size(),     g.debug_handles.size(), g.fake_vals.size()};
    check_graph_arrays(op, sizes, kPerNode, 9, inputs, users, g.out_args, g.out_kinds.size(),
                       g.out_targets.size());
    // limits of the core's representation (the twin has none): fall back to it
    size_t n_edges = 0;
    for (const auto &in : inputs) n_edges += in.size();
    if (n_edges >= static_cast<size_t>(INT32_MAX / 4)) throw Unsupported("graph too large");
    for (int64_t d : g.debug_handles)
        if (d > (int64_t(1) << 62) || d < -(int64_t(1) << 62)) throw Unsupported("debug handle out of range");
    g.op.assign(op.begin(), op.end());
    g.inputs = narrow_rows(inputs);
    g.users = narrow_rows(users);
    return g;
}

}  // namespace fastlower
