// The fusion planner: replays the reference's graph edits on integer arrays.
// Twin (specification): fastlower/_twin/fusion.py.  Plain C++, no Python.
//
// Users lists are insertion-ordered sets like the twin's dicts: every edge
// x -> u (x in inputs[u]) is a node of an intrusive doubly linked list hanging
// off x, so "u leaves users[x]" and "u joins users[x] at the end" are O(1).
// in_edge[u][k] is the edge of inputs[u][k], -1 while u is not in users[x]
// (u erased).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "namespace.hpp"
#include "schema.hpp"

namespace fastlower {

// legalize() found nodes it cannot order: RuntimeError(f"graph has a cycle through {stuck[:10]}")
struct CycleError : std::runtime_error {
    std::vector<std::string> stuck;
    explicit CycleError(std::vector<std::string> s) : std::runtime_error("graph has a cycle"), stuck(std::move(s)) {}
};

// A Python KeyError(key) of the twin (dict lookup of a missing node).
struct NodeKeyError : std::runtime_error {
    int64_t key;
    explicit NodeKeyError(int64_t k) : std::runtime_error("KeyError"), key(k) {}
};

// GraphArrays, converted and validated by the binding.
struct GraphInput {
    std::vector<int32_t> op;
    std::vector<uint8_t> prioritized;
    std::vector<std::vector<int32_t>> inputs;
    std::vector<std::vector<int32_t>> users;
    std::vector<std::string> names;
    std::vector<int64_t> tags, roles, targets, debug_handles;
    std::vector<uint8_t> fake_vals;
    std::vector<int64_t> out_args, out_kinds, out_targets;
};

struct PartitionData {
    int64_t tag = 0;
    std::vector<int32_t> nodes, inputs, outputs, output_order;
    std::vector<int64_t> output_kinds, output_targets;
    std::vector<std::vector<int32_t>> member_inputs;  // parallel to nodes
    int32_t call_module = -1;
    std::vector<int32_t> getitems;
    int32_t get_attr = -1;
    int32_t delegate = -1;
    int64_t lowered_index = -1;
    int64_t debug_handle = 0;
    std::vector<int32_t> deleted_getitems;
    // takes top-level parameters, buffers or constants: the reference then adjusts the
    // owning program (_unsafe_adjust_original_program)
    bool owns_state = false;
    bool single_output = false;
};

// Generation-stamped membership over node ids (no clearing between uses).
class Marks {
  public:
    void begin(size_t n) {
        if (v_.size() < n) v_.resize(n, 0);
        if (++gen_ == 0) {
            std::fill(v_.begin(), v_.end(), 0u);
            gen_ = 1;
        }
    }
    bool test(int64_t i) const { return i >= 0 && static_cast<size_t>(i) < v_.size() && v_[i] == gen_; }
    // true when i was not marked yet (i must be < the size given to begin)
    bool insert(int64_t i) {
        if (v_[i] == gen_) return false;
        v_[i] = gen_;
        return true;
    }

  private:
    std::vector<uint32_t> v_;
    uint32_t gen_ = 0;
};

class FusionCore {
  public:
    // Names each tag's fused module snake_case("fused_" + tag_names[t]); throws Unsupported
    // when the original names or those candidates cannot be handled exactly.
    FusionCore(GraphInput &&g, const std::vector<std::string> &tag_names, bool is_submodule,
               const NameHooks *hooks);

    // -- state read by the binding (same meaning as the twin's attributes) --
    int32_t n_orig;
    std::vector<int32_t> op, kind, origin, pos, getitem_index, partition_of;
    std::vector<int64_t> tags, debug_handle;
    std::vector<uint8_t> prioritized, has_fake_val, alive;
    std::vector<std::string> names;
    std::vector<std::vector<int32_t>> inputs;
    std::vector<int64_t> out_args, out_kinds, out_targets, out_specs;
    int32_t output_node;
    std::vector<PartitionData> partitions;
    int64_t lowered_count = 0;
    // indices i whose lowered_module_{i} the owning module already has (an
    // earlier lowering's delegates): the reference's get_lowered_module_name skips them
    std::set<int64_t> taken_lowered;
    std::vector<int32_t> copies;
    std::vector<std::string> copy_fqn;  // parallel to copies
    bool is_submodule;

    // top-level simulator for max_debug_handle (nullptr + empty fn: this one)
    const FusionCore *top_core = nullptr;
    std::function<int64_t()> top_fn;

    size_t size() const { return op.size(); }
    int32_t user_count(int32_t x) const { return u_count_[x]; }
    template <class F>
    void for_users(int32_t x, F &&f) const {
        for (int32_t e = u_head_[x]; e != -1; e = edges_[e].next) f(edges_[e].dst);
    }
    void users_of(int32_t x, std::vector<int32_t> &out) const;
    // input-spec role of original node i (ROLE_*)
    int64_t role(int32_t i) const { return g_roles_[i]; }
    size_t n_tags() const { return fused_candidates_.size(); }

    // -- the twin's methods --
    std::vector<int32_t> order() const;
    void renumber();
    std::vector<int32_t> members(int64_t tag) const;
    // Each method checks its arguments first (checks.hpp, same messages as the
    // twin): std::out_of_range for an id out of range, std::invalid_argument for
    // a node/partition in the wrong state; the simulator is then unchanged.
    std::vector<int32_t> duplicate_constant(int64_t c);
    void retag_constant(int64_t c);
    bool find_cycle(const std::vector<int64_t> &members, std::vector<int32_t> &path);
    int32_t fuse(int64_t tag, const std::vector<int64_t> &members);  // returns pid
    void legalize();
    // the delegate's debug handle: one more than the top-level graph's largest (the
    // simulator's top, else this graph) unless given
    void insert_delegate(int64_t pid, std::optional<int64_t> given_debug_handle = std::nullopt);
    int64_t max_debug_handle() const;

  private:
    int32_t new_node(int32_t op, int32_t kind, const std::vector<int32_t> &ins, const NameInfo &name,
                     int32_t origin);
    NameInfo create_name(const std::string &candidate) { return ns_.create_info(candidate); }
    void link_after(int32_t i, int32_t anchor);
    void link_before(int32_t i, int32_t anchor);
    void unlink(int32_t i);
    void set_inputs(int32_t u, const std::vector<int32_t> &new_inputs);
    void replace_all_uses(int32_t old_node, int32_t new_node);
    void replace_input(int32_t u, int32_t old_node, int32_t new_node);
    void erase(int32_t i);
    void set_debug_handle(int32_t i, int64_t v);
    void classify_outputs(int32_t pid);
    void adjust_owning_program(int32_t pid);
    void check_fusible(int64_t tag, const std::vector<int64_t> &members);

    // construction: the doubly linked node order, the users lists, the names' index
    void init_order(int32_t n);
    void link_users(int32_t n, const std::vector<std::vector<int32_t>> &users);
    void index_names(int32_t n);
    // legalize's steps: Kahn's order (new_order_), then node order, users and names in it
    const std::vector<int32_t> &kahn_order();
    void relink(const std::vector<int32_t> &new_order);
    void rebuild_users(const std::vector<int32_t> &new_order);
    void rebuild_namespace(const std::vector<int32_t> &new_order);

    int32_t link_edge(int32_t x, int32_t u);
    void unlink_edge(int32_t e);

    // users lists (intrusive, per source node)
    std::vector<int32_t> u_head_, u_tail_, u_count_;
    std::vector<std::vector<int32_t>> in_edge_;
    struct Edge {
        int32_t dst, src, prev, next;
    };
    std::vector<Edge> edges_;
    std::vector<int32_t> e_free_;
    // node order
    std::vector<int32_t> next_, prev_;
    int32_t head_ = -1, tail_ = -1;
    // names
    const NameHooks *hooks_;
    Namespace ns_;
    bool canonical_ = true;  // every live name is its own create() result -> incremental rebuild
    std::vector<int32_t> name_base_;
    std::vector<int64_t> name_num_;  // -1: no numeric suffix
    std::vector<int32_t> erased_since_rebuild_;
    std::vector<std::string> fused_candidates_;
    // alive debug handles (multiset) for max_debug_handle
    std::map<int64_t, int64_t> debug_handle_count_;
    std::vector<int64_t> g_roles_, g_targets_;
    // scratch
    Marks mark_a_, mark_b_, mark_dedup_;
    std::vector<int32_t> parent_, indeg_, queue_, order_buf_, new_order_, set_buf_, rep_buf_, cursor_;
};

}  // namespace fastlower
