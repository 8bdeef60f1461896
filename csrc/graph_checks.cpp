// The structural checks of GraphArrays (twin: fastlower/_twin/checks.py).
#include "graph_checks.hpp"

#include <string>
#include <unordered_map>

#include "checks.hpp"
#include "schema.hpp"

namespace fastlower {

namespace {

// Position of each input of one node, for the users/inputs match.
class InputSlots {
  public:
    explicit InputSlots(const Rows &inputs) : inputs_(inputs), seen_(inputs.size()) {
        for (size_t u = 0; u < inputs.size(); ++u) seen_[u].assign(inputs[u].size(), 0);
    }
    // slot of x in inputs[u], or -1
    int64_t find(size_t u, int64_t x) {
        const auto &in = inputs_[u];
        if (in.size() <= 16) {
            for (size_t k = 0; k < in.size(); ++k)
                if (in[k] == x) return static_cast<int64_t>(k);
            return -1;
        }
        auto it = wide_.find(u);
        if (it == wide_.end()) {
            it = wide_.emplace(u, std::unordered_map<int64_t, int64_t>{}).first;
            for (size_t k = 0; k < in.size(); ++k) it->second.emplace(in[k], static_cast<int64_t>(k));
        }
        auto jt = it->second.find(x);
        return jt == it->second.end() ? -1 : jt->second;
    }
    std::vector<std::vector<uint8_t>> &seen() { return seen_; }

  private:
    const Rows &inputs_;
    std::vector<std::vector<uint8_t>> seen_;
    std::unordered_map<size_t, std::unordered_map<int64_t, int64_t>> wide_;
};


}  // namespace

// The checks of fastlower._twin.fusion.check_graph_arrays, same order and messages.
void check_graph_arrays(const std::vector<int64_t> &op, const std::vector<size_t> &per_node_sizes,
                        const char *const *per_node_names, size_t n_per_node, const Rows &inputs,
                        const Rows &users, const std::vector<int64_t> &out_args, size_t n_out_kinds,
                        size_t n_out_targets) {
    const std::string where = "FusionSimulator";
    const size_t n = op.size();
    for (size_t f = 0; f < n_per_node; ++f)
        if (per_node_sizes[f] != n)
            checks::value_error(where + ": g." + per_node_names[f] + " has " + std::to_string(per_node_sizes[f]) +
                                " entries, expected " + std::to_string(n));
    const size_t m = out_args.size();
    checks::length(where, "g.out_kinds", std::vector<char>(n_out_kinds), m);
    checks::length(where, "g.out_targets", std::vector<char>(n_out_targets), m);
    for (size_t i = 0; i < n; ++i)
        if (op[i] < OP_PLACEHOLDER || op[i] > OP_OUTPUT)
            checks::value_error(where + ": g.op[" + std::to_string(i) + "] is not an op code in [0, 5]");
    for (size_t i = 0; i < n; ++i) checks::node_ids(where, "g.inputs[" + std::to_string(i) + "]", inputs[i], n);
    for (size_t i = 0; i < n; ++i) checks::node_ids(where, "g.users[" + std::to_string(i) + "]", users[i], n);
    // node.all_input_nodes has no duplicates
    std::vector<uint32_t> stamp(n, 0);
    for (size_t i = 0; i < n; ++i)
        for (int64_t x : inputs[i]) {
            if (stamp[static_cast<size_t>(x)] == i + 1)
                checks::value_error(where + ": g.inputs[" + std::to_string(i) + "] lists a node twice");
            stamp[static_cast<size_t>(x)] = static_cast<uint32_t>(i + 1);
        }
    // users[x] lists exactly the nodes that take x as an input, each once
    InputSlots slots(inputs);
    size_t matched = 0, expected = 0;
    for (const auto &in : inputs) expected += in.size();
    for (size_t x = 0; x < n; ++x)
        for (int64_t u : users[x]) {
            const int64_t k = slots.find(static_cast<size_t>(u), static_cast<int64_t>(x));
            if (k < 0 || slots.seen()[static_cast<size_t>(u)][static_cast<size_t>(k)])
                checks::value_error(where + ": g.users[" + std::to_string(x) + "] does not match g.inputs (user " +
                                    std::to_string(u) + ")");
            slots.seen()[static_cast<size_t>(u)][static_cast<size_t>(k)] = 1;
            ++matched;
        }
    if (matched != expected)
        for (size_t u = 0; u < n; ++u)
            for (size_t k = 0; k < inputs[u].size(); ++k)
                if (!slots.seen()[u][k])
                    checks::value_error(where + ": g.users[" + std::to_string(inputs[u][k]) + "] lacks node " +
                                        std::to_string(u) + ", which takes it as an input");
    for (size_t p = 0; p < m; ++p)
        if (out_args[p] != -1 && !checks::is_node_id(out_args[p], n))
            checks::index_error(where + ": g.out_args[" + std::to_string(p) + "] is neither -1 nor a node id in [0, " +
                                std::to_string(n) + ")");
    if (m && !(n && op[n - 1] == OP_OUTPUT))
        checks::value_error(where + ": g.out_args is not empty but the last node is not an output node");
    if (m) {
        std::vector<uint8_t> is_out_input(n, 0);
        for (int64_t x : inputs[n - 1]) is_out_input[static_cast<size_t>(x)] = 1;
        for (size_t p = 0; p < m; ++p)
            if (out_args[p] != -1 && !is_out_input[static_cast<size_t>(out_args[p])])
                checks::value_error(where + ": g.out_args[" + std::to_string(p) +
                                    "] is not an input of the output node");
    }
}

}  // namespace fastlower
