// plan_graph (twin: fastlower/_twin/plan.py): the rule placement and the
// duplicate-then-fuse loop the reference runs on one graph.
#include "plan.hpp"

#include <algorithm>
#include <string>

#include "checks.hpp"
#include "grouping.hpp"

namespace fastlower {

namespace {

bool ownable(int64_t role) { return role == ROLE_PARAMETER || role == ROLE_BUFFER || role == ROLE_CONSTANT; }

RuleStopData make_stop(int64_t kind, int64_t stage, int64_t pid, int64_t tag, std::vector<int32_t> nodes) {
    RuleStopData s;
    s.kind = kind;
    s.stage = stage;
    s.pid = pid;
    s.tag = tag;
    s.nodes = std::move(nodes);
    return s;
}

// Broken partition rules, by tag, where the reference meets them (see the twin's
// contract_stops): duplicating the top-level graph's constants, or fusing the tag.
// Read on the initial graph, before any edit.
struct TagStops {
    std::vector<RuleStopData> duplicating, fusing;  // kind 0: none
};

TagStops contract_stops(const FusionCore &core, const PlanOptionsData &opt) {
    const int64_t n_tags = static_cast<int64_t>(core.n_tags());
    TagStops stops;
    stops.duplicating.resize(static_cast<size_t>(n_tags));
    stops.fusing.resize(static_cast<size_t>(n_tags));
    for (int32_t i = 0; i < core.n_orig; ++i) {
        const int64_t t = core.tags[i];
        if (t < 0 || t >= n_tags) continue;
        RuleStopData &fusing = stops.fusing[t], &duplicating = stops.duplicating[t];
        if (core.op[i] == OP_OUTPUT) {
            if (!fusing) fusing = make_stop(STOP_TAGGED_OUTPUT, STAGE_FUSE, 0, t, {i});
            continue;
        }
        if (core.op[i] != OP_PLACEHOLDER) continue;
        int32_t other = -1;
        core.for_users(i, [&](int32_t u) {
            if (other < 0 && core.tags[u] != t) other = u;
        });
        if (!ownable(core.role(i))) {
            if ((other < 0 || opt.is_submodule) && !fusing)
                fusing = make_stop(STOP_TAGGED_USER_INPUT, STAGE_FUSE, 0, t, {i});
        } else if (opt.no_copy[i] && other >= 0 && !duplicating) {
            duplicating = make_stop(STOP_SHARED_CONSTANT, STAGE_FUSE, 0, t, {i, other});
        }
    }
    return stops;
}

RuleStopData duplicate_shared_constants(FusionCore &core, const PlanOptionsData &opt, const TagStops &stops) {
    bool validate = opt.validate_at_first_duplication;
    std::vector<int32_t> touched;
    for (size_t t = 0; t < opt.duplication_order.size(); ++t) {
        if (stops.duplicating[t]) return stops.duplicating[t];
        touched.clear();
        for (int64_t c64 : opt.duplication_order[t]) {
            const int32_t c = static_cast<int32_t>(c64);
            const int64_t tag = static_cast<int64_t>(t);
            if (!ownable(core.role(c))) return make_stop(STOP_TAGGED_USER_INPUT, STAGE_FUSE, 0, tag, {c});
            if (validate) return make_stop(STOP_VALIDATE, STAGE_FUSE, 0, tag, {c});
            touched.push_back(c);
            const std::vector<int32_t> made = core.duplicate_constant(c);
            touched.insert(touched.end(), made.begin(), made.end());
        }
        for (int32_t c : touched) core.retag_constant(c);
    }
    return {};
}

// A buffer update the delegate owns, also returned as another output: its getitem, or -1.
int32_t owned_update_also_returned(const FusionCore &core, const PartitionData &part) {
    for (int32_t gi : part.deleted_getitems)
        if (std::count(core.out_args.begin(), core.out_args.end(), gi) > 1) return gi;
    return -1;
}

// [getitem, *readers] of a buffer update the delegate owns read outside it, or empty.
std::vector<int32_t> owned_update_read(const FusionCore &core, const PartitionData &part) {
    for (int32_t gi : part.deleted_getitems) {
        std::vector<int32_t> read{gi};
        core.for_users(gi, [&](int32_t u) {
            if (u != core.output_node) read.push_back(u);
        });
        if (read.size() > 1) return read;
    }
    return {};
}

void fuse_all(FusionCore &core, const PlanOptionsData &opt, const TagStops &stops, PlanOutcome &out) {
    const bool while_fusing = opt.delegate_insertion == DELEGATES_WHILE_FUSING;
    const int64_t n_tags = static_cast<int64_t>(core.n_tags());
    core.renumber();
    const auto groups = group_by_tag(core.tags, n_tags);
    std::vector<int64_t> members;
    std::vector<int64_t> member_of;  // member_of[i] == t + 1: i is a member of tag t
    for (int64_t t = 0; t < n_tags; ++t) {
        members.clear();
        for (int64_t m : groups[t])
            if (core.alive[m]) members.push_back(m);
        if (members.empty()) continue;
        std::stable_sort(members.begin(), members.end(),
                         [&](int64_t a, int64_t b) { return core.pos[a] < core.pos[b]; });
        const int64_t fused = static_cast<int64_t>(core.partitions.size());
        if (stops.fusing[t]) {
            out.stop = stops.fusing[t];
            out.stop.pid = fused;
            return;
        }
        std::vector<int32_t> path;
        if (core.find_cycle(members, path)) {
            out.stop = make_stop(STOP_CYCLE, STAGE_FUSE, fused, t, std::move(path));
            return;
        }
        member_of.resize(core.size(), 0);
        for (int64_t m : members) member_of[m] = t + 1;
        bool has_output = false;
        for (int64_t m : members) {
            core.for_users(static_cast<int32_t>(m), [&](int32_t u) { has_output = has_output || member_of[u] != t + 1; });
            if (has_output) break;
        }
        if (!has_output) {
            out.stop = make_stop(STOP_NO_OUTPUT, STAGE_FUSE, fused, t, {static_cast<int32_t>(members.back())});
            return;
        }
        const int32_t pid = core.fuse(t, members);
        const int32_t returned = owned_update_also_returned(core, core.partitions[pid]);
        if (returned >= 0) {  // the reference rejects it building the partition's program
            out.stop = make_stop(STOP_MUTATION_RETURNED, STAGE_PROGRAM, fused, t, {returned});
            return;
        }
        if (while_fusing) {
            std::vector<int32_t> read = owned_update_read(core, core.partitions[pid]);
            if (!read.empty()) {
                out.stop = make_stop(STOP_OWNED_UPDATE_READ, STAGE_INSERT, fused, t, std::move(read));
                return;
            }
            if (opt.top_debug_handle)
                core.insert_delegate(pid, *opt.top_debug_handle + 1);
            else
                core.insert_delegate(pid);
        }
    }
    if (while_fusing) return;
    for (size_t pid = 0; pid < core.partitions.size(); ++pid) {
        std::vector<int32_t> read = owned_update_read(core, core.partitions[pid]);
        if (!read.empty()) {
            out.insert_stop = make_stop(STOP_OWNED_UPDATE_READ, STAGE_INSERT, static_cast<int64_t>(pid),
                                        core.partitions[pid].tag, std::move(read));
            return;
        }
    }
    // the delegates the caller inserts after fusing, in its order (none on an insert stop:
    // the reference raises before inserting)
    const std::vector<int64_t> &top_handles = opt.delegate_top_debug_handles;
    for (size_t k = 0; k < opt.delegate_order.size(); ++k) {
        if (top_handles.empty())
            core.insert_delegate(opt.delegate_order[k]);
        else
            core.insert_delegate(opt.delegate_order[k], top_handles[k] + 1);
    }
}

void check_options(const FusionCore &core, const PlanOptionsData &opt) {
    const size_t n = core.size();
    checks::length("plan_graph", "options.no_copy", opt.no_copy, n);
    if (!opt.delegate_top_debug_handles.empty())
        checks::length("plan_graph", "options.delegate_top_debug_handles", opt.delegate_top_debug_handles,
                       opt.delegate_order.size());
    if (!opt.delegate_order.empty() && opt.delegate_insertion == DELEGATES_WHILE_FUSING)
        checks::value_error("plan_graph: options.delegate_order is for DELEGATES_AFTER_FUSING");
    if (opt.is_submodule) return;
    if (opt.duplication_order.size() != core.n_tags())
        checks::value_error("plan_graph: options.duplication_order has " +
                            std::to_string(opt.duplication_order.size()) + " entries, expected " +
                            std::to_string(core.n_tags()));
    for (size_t t = 0; t < opt.duplication_order.size(); ++t)
        checks::node_ids("plan_graph", "options.duplication_order[" + std::to_string(t) + "]",
                         opt.duplication_order[t], n);
}

}  // namespace

PlanOutcome plan_graph(FusionCore &core, const PlanOptionsData &opt) {
    check_options(core, opt);
    const TagStops stops = contract_stops(core, opt);
    PlanOutcome out;
    if (!opt.is_submodule) {
        out.stop = duplicate_shared_constants(core, opt, stops);
        if (out.stop) return out;
    }
    fuse_all(core, opt, stops, out);
    return out;
}

}  // namespace fastlower
