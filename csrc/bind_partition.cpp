// Area "partition": canonical partitioners' propose_partitions
// (twin: fastlower/_twin/partition.py).
#include "bindings.hpp"
#include "partition.hpp"
#include "pyconv.hpp"

namespace fastlower {

namespace {

PartitionGraph graph_from(py::handle users_offsets, py::handle users, py::handle inputs_offsets,
                          py::handle inputs, py::handle is_getitem, py::handle supported,
                          py::handle compute_weight) {
    PartitionGraph g;
    g.users_offsets = pyconv::ints(users_offsets);
    g.users = pyconv::ints(users);
    if (!inputs_offsets.is_none()) {
        g.inputs_offsets = pyconv::ints(inputs_offsets);
        g.inputs = pyconv::ints(inputs);
    }
    g.is_getitem = pyconv::flags(is_getitem);
    g.supported = pyconv::flags(supported);
    g.compute_weight = pyconv::ints(compute_weight);
    return g;
}

py::tuple to_python(const ProposedPartitions &r) {
    py::list members(r.members.size());
    for (size_t i = 0; i < r.members.size(); ++i) members[i] = pyconv::to_list(r.members[i]);
    return py::make_tuple(pyconv::to_list(r.ids), members, pyconv::to_list(r.ordered_counts));
}

template <class F>
py::tuple guarded(F &&f) {
    try {
        return f();
    } catch (const PartitionIndexError &e) {
        throw py::index_error(e.what());
    } catch (const PartitionInputError &e) {
        throw py::value_error(e.what());
    } catch (const std::overflow_error &e) {
        throw py::value_error(e.what());
    }
}

}  // namespace

void register_partition(py::module_ &m) {
    m.def(
        "propose_capability_partitions",
        [](py::handle users_offsets, py::handle users, py::handle is_getitem, py::handle supported,
           py::handle compute_weight, bool allows_single_node_partition, bool skip_horizontal_fusion) {
            return guarded([&] {
                PartitionGraph g = graph_from(users_offsets, users, py::none(), py::none(), is_getitem,
                                              supported, compute_weight);
                ProposedPartitions r;
                {
                    py::gil_scoped_release release;
                    r = propose_capability_partitions(g, allows_single_node_partition, skip_horizontal_fusion);
                }
                return to_python(r);
            });
        },
        py::arg("users_offsets"), py::arg("users"), py::arg("is_getitem"), py::arg("supported"),
        py::arg("compute_weight"), py::arg("allows_single_node_partition"), py::arg("skip_horizontal_fusion"),
        "CapabilityBasedPartitioner.propose_partitions on the flat encoding: (ids, members, ordered_counts).");
    m.def(
        "propose_group_partitions",
        [](py::handle users_offsets, py::handle users, py::handle inputs_offsets, py::handle inputs,
           py::handle is_getitem, py::handle supported, py::handle compute_weight, py::handle group_offsets,
           py::handle group_members, bool allows_single_node_partition) {
            return guarded([&] {
                PartitionGraph g = graph_from(users_offsets, users, inputs_offsets, inputs, is_getitem,
                                              supported, compute_weight);
                std::vector<int64_t> go = pyconv::ints(group_offsets), gm = pyconv::ints(group_members);
                ProposedPartitions r;
                {
                    py::gil_scoped_release release;
                    r = propose_group_partitions(g, go, gm, allows_single_node_partition);
                }
                return to_python(r);
            });
        },
        py::arg("users_offsets"), py::arg("users"), py::arg("inputs_offsets"), py::arg("inputs"),
        py::arg("is_getitem"), py::arg("supported"), py::arg("compute_weight"), py::arg("group_offsets"),
        py::arg("group_members"), py::arg("allows_single_node_partition"),
        "GroupBasedPartitioner.propose_partitions on the flat encoding: (ids, members, ordered_counts).");
}

}  // namespace fastlower
