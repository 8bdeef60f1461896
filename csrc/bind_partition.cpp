// Area "partition": canonical partitioners' propose_partitions
// (twin: fastlower/_twin/partition_proposals.py).  Conversion only: the core checks its input
// and throws PartitionInputError / PartitionIndexError, which pybind11 turns into
// ValueError / IndexError (std::invalid_argument / std::out_of_range).
#include "bindings.hpp"
#include "partition.hpp"
#include "pyconv.hpp"

namespace fastlower {

namespace {

// A value beyond int64 is malformed input like any other: ValueError, not OverflowError.
std::vector<int64_t> ints(py::handle seq) {
    try {
        return pyconv::ints(seq);
    } catch (const std::overflow_error &e) {
        throw py::value_error(e.what());
    }
}

PartitionGraph graph_from(py::handle users_offsets, py::handle users, py::handle inputs_offsets,
                          py::handle inputs, py::handle is_getitem, py::handle supported,
                          py::handle compute_weight) {
    PartitionGraph g;
    g.users_offsets = ints(users_offsets);
    g.users = ints(users);
    if (!inputs_offsets.is_none()) {
        g.inputs_offsets = ints(inputs_offsets);
        g.inputs = ints(inputs);
    }
    g.is_getitem = pyconv::flags(is_getitem);
    g.supported = pyconv::flags(supported);
    g.compute_weight = ints(compute_weight);
    return g;
}

py::tuple to_python(const ProposedPartitions &r) {
    py::list members(r.members.size());
    for (size_t i = 0; i < r.members.size(); ++i) members[i] = pyconv::to_list(r.members[i]);
    return py::make_tuple(pyconv::to_list(r.ids), members, pyconv::to_list(r.ordered_counts));
}

}  // namespace

void register_partition(py::module_ &m) {
    m.def(
        "propose_capability_partitions",
        [](py::handle users_offsets, py::handle users, py::handle is_getitem, py::handle supported,
           py::handle compute_weight, bool allows_single_node_partition, bool skip_horizontal_fusion) {
            PartitionGraph g = graph_from(users_offsets, users, py::none(), py::none(), is_getitem, supported,
                                          compute_weight);
            ProposedPartitions r;
            {
                py::gil_scoped_release release;
                r = propose_capability_partitions(g, allows_single_node_partition, skip_horizontal_fusion);
            }
            return to_python(r);
        },
        py::arg("users_offsets"), py::arg("users"), py::arg("is_getitem"), py::arg("supported"),
        py::arg("compute_weight"), py::arg("allows_single_node_partition"), py::arg("skip_horizontal_fusion"),
        "CapabilityBasedPartitioner.propose_partitions on the flat encoding: (ids, members, ordered_counts).");
    m.def(
        "propose_group_partitions",
        [](py::handle users_offsets, py::handle users, py::handle inputs_offsets, py::handle inputs,
           py::handle is_getitem, py::handle supported, py::handle compute_weight, py::handle group_offsets,
           py::handle group_members, bool allows_single_node_partition) {
            PartitionGraph g = graph_from(users_offsets, users, inputs_offsets, inputs, is_getitem, supported,
                                          compute_weight);
            std::vector<int64_t> go = ints(group_offsets), gm = ints(group_members);
            ProposedPartitions r;
            {
                py::gil_scoped_release release;
                r = propose_group_partitions(g, go, gm, allows_single_node_partition);
            }
            return to_python(r);
        },
        py::arg("users_offsets"), py::arg("users"), py::arg("inputs_offsets"), py::arg("inputs"),
        py::arg("is_getitem"), py::arg("supported"), py::arg("compute_weight"), py::arg("group_offsets"),
        py::arg("group_members"), py::arg("allows_single_node_partition"),
        "GroupBasedPartitioner.propose_partitions on the flat encoding: (ids, members, ordered_counts).");
}

}  // namespace fastlower
