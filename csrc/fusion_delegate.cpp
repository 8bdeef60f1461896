// FusionCore: swapping a fused call for a delegate call, and the owning program's
// adjustment (_unsafe_adjust_original_program).  Twin: fastlower/_twin/fusion.py.
#include <algorithm>
#include <functional>
#include <string>

#include "checks.hpp"
#include "fusion.hpp"

namespace fastlower {

// -- delegate insertion -------------------------------------------------------
void FusionCore::insert_delegate(int64_t pid_arg, std::optional<int64_t> given_debug_handle) {
    const int64_t n_parts = static_cast<int64_t>(partitions.size());
    if (pid_arg < 0 || pid_arg >= n_parts)
        checks::index_error("insert_delegate: pid is not a partition id in [0, " + std::to_string(n_parts) + ")");
    const int32_t pid = static_cast<int32_t>(pid_arg);
    if (partitions[pid].delegate != -1)
        checks::value_error("insert_delegate: partition " + std::to_string(pid) + " is already delegated");
    const int32_t cm = partitions[pid].call_module;
    while (taken_lowered.count(lowered_count)) ++lowered_count;
    const int64_t lowered_index = lowered_count++;
    partitions[pid].lowered_index = lowered_index;
    NameInfo ga_name = create_name("lowered_module_" + std::to_string(lowered_index));
    const int32_t ga = new_node(OP_GET_ATTR, KIND_GET_ATTR, {}, ga_name, -1);
    link_before(ga, cm);
    std::vector<int32_t> cd_inputs;
    cd_inputs.reserve(inputs[cm].size() + 1);
    cd_inputs.push_back(ga);
    cd_inputs.insert(cd_inputs.end(), inputs[cm].begin(), inputs[cm].end());
    NameInfo cd_name = create_name("executorch_call_delegate");
    const int32_t cd = new_node(OP_CALL_FUNCTION, KIND_DELEGATE, cd_inputs, cd_name, -1);
    link_before(cd, cm);
    partition_of[ga] = partition_of[cd] = pid;
    pos[ga] = pos[cd] = pos[cm];
    PartitionData &plan = partitions[pid];
    plan.get_attr = ga;
    plan.delegate = cd;
    if (given_debug_handle) {
        plan.debug_handle = *given_debug_handle;
    } else {
        const int64_t top_max = top_core ? top_core->max_debug_handle() : top_fn ? top_fn() : max_debug_handle();
        plan.debug_handle = top_max + 1;
    }
    set_debug_handle(cd, plan.debug_handle);
    std::vector<int32_t> us;
    users_of(cm, us);
    for (int32_t u : us) replace_input(u, cm, cd);
    erase(cm);
    if (plan.owns_state) adjust_owning_program(pid);
}

// _unsafe_adjust_original_program: drops the buffer updates the delegate owns, and
// re-assigns the output node's args even when none is dropped (the output node then
// moves to the end of its inputs' users).
void FusionCore::adjust_owning_program(int32_t pid) {
    PartitionData &plan = partitions[pid];
    Marks &dropped = mark_a_;
    dropped.begin(size());
    for (int32_t g : plan.deleted_getitems) dropped.insert(g);
    size_t w = 0;
    for (size_t p = 0; p < out_args.size(); ++p) {
        if (dropped.test(out_args[p])) continue;
        out_args[w] = out_args[p];
        out_kinds[w] = out_kinds[p];
        out_targets[w] = out_targets[p];
        out_specs[w] = out_specs[p];
        ++w;
    }
    out_args.resize(w);
    out_kinds.resize(w);
    out_targets.resize(w);
    out_specs.resize(w);
    std::vector<int32_t> out_inputs;
    for (int64_t x : out_args)
        if (x >= 0) out_inputs.push_back(static_cast<int32_t>(x));
    if (output_node >= 0) set_inputs(output_node, out_inputs);  // arrays without an output node
    std::vector<int32_t> gone, us;
    users_of(plan.delegate, us);
    for (int32_t u : us)
        if (dropped.test(u)) {
            gone.push_back(getitem_index[u]);
            erase(u);
        }
    std::sort(gone.begin(), gone.end(), std::greater<int32_t>());
    users_of(plan.delegate, us);
    for (int32_t u : us) {
        const int32_t idx = getitem_index[u];
        for (size_t i = 0; i < gone.size(); ++i)
            if (idx > gone[i]) {
                getitem_index[u] = idx - static_cast<int32_t>(gone.size() - i);
                set_inputs(u, inputs[u]);
                break;
            }
    }
}

int64_t FusionCore::max_debug_handle() const {
    return debug_handle_count_.empty() ? 0 : debug_handle_count_.rbegin()->first;
}

}  // namespace fastlower
