// plan_graph: plan one graph in one call (constant duplication, then every tag's
// fusion, and its delegate's insertion when DELEGATES_WHILE_FUSING, or the
// delegates the options list after fusing), up to the first broken rule, reported
// as plain data where the reference meets it.
// Twin (specification): fastlower/_twin/plan.py.  Plain C++, no Python.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "fusion.hpp"
#include "schema.hpp"

namespace fastlower {

// PlanOptions (fastlower._schema), converted by the binding.
struct PlanOptionsData {
    bool is_submodule = false;
    int64_t delegate_insertion = DELEGATES_WHILE_FUSING;
    std::vector<std::vector<int64_t>> duplication_order;  // per tag, the reference's order
    std::vector<uint8_t> no_copy;                         // per node
    bool validate_at_first_duplication = false;
    // a control-flow body: the top-level graph's largest live debug handle, which a
    // delegate's handle follows (else this graph's own)
    std::optional<int64_t> top_debug_handle;
    // DELEGATES_AFTER_FUSING: the delegates to insert after fusing, in this order (the
    // multi-method path, once every preprocess ran); in a control-flow body, with the
    // top-level graph's largest debug handle at each insertion (empty: this graph's own)
    std::vector<int64_t> delegate_order, delegate_top_debug_handles;
};

// RuleStop: kind 0 = none.
struct RuleStopData {
    int64_t kind = 0, stage = STAGE_FUSE, pid = 0, tag = 0;
    std::vector<int32_t> nodes;
    explicit operator bool() const { return kind != 0; }
};

struct PlanOutcome {
    RuleStopData stop;         // planning ended there
    RuleStopData insert_stop;  // DELEGATES_AFTER_FUSING: met inserting that delegate
};

// Checks the options (checks.hpp: std::invalid_argument / std::out_of_range, same
// messages as the twin) before any edit, then plans `core`'s graph.
PlanOutcome plan_graph(FusionCore &core, const PlanOptionsData &options);

}  // namespace fastlower
