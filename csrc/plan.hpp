// plan_graph: plan one graph in one call (constant duplication, then every tag's
// fusion, and its delegate's insertion when DELEGATES_WHILE_FUSING), up to the
// first broken rule, reported as plain data where the reference meets it.
// Twin (specification): fastlower/_twin/plan.py.  Plain C++, no Python.
#pragma once

#include <cstdint>
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
