// FusionCore: fusing one tag (find_cycle, fuse, output classification) and the
// re-sort after each edit (legalize).  Twin: fastlower/_twin/fusion.py.
#include <algorithm>
#include <unordered_set>

#include "checks.hpp"
#include "fusion.hpp"

namespace fastlower {

// -- fusion -------------------------------------------------------------------
void FusionCore::renumber() {
    int32_t p = 0;
    for (int32_t i = head_; i != -1; i = next_[i]) pos[i] = p++;
}

std::vector<int32_t> FusionCore::members(int64_t tag) const {
    std::vector<int32_t> out;
    for (size_t i = 0; i < size(); ++i)
        if (alive[i] && tags[i] == tag && (kind[i] == KIND_ORIGINAL || kind[i] == KIND_CONSTANT_COPY))
            out.push_back(static_cast<int32_t>(i));
    std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) { return pos[a] < pos[b]; });
    return out;
}

bool FusionCore::find_cycle(const std::vector<int64_t> &member_ids, std::vector<int32_t> &path) {
    checks::node_ids("find_cycle", "members", member_ids, size());
    if (member_ids.empty()) checks::value_error("find_cycle: members is empty");
    const std::vector<int32_t> members(member_ids.begin(), member_ids.end());
    Marks &inside = mark_a_, &seen = mark_b_;
    inside.begin(size());
    seen.begin(size());
    if (parent_.size() < size()) parent_.resize(size());
    int32_t limit = pos[members[0]];
    for (int32_t m : members) {
        inside.insert(m);
        limit = std::max(limit, pos[m]);
    }
    std::vector<int32_t> &q = queue_;
    q.clear();
    for (int32_t m : members)
        for (int32_t e = u_head_[m]; e != -1; e = edges_[e].next) {
            const int32_t u = edges_[e].dst;
            if (!inside.test(u) && !seen.test(u) && pos[u] <= limit) {
                seen.insert(u);
                parent_[u] = m;
                q.push_back(u);
            }
        }
    for (size_t h = 0; h < q.size(); ++h) {
        const int32_t cur = q[h];
        for (int32_t e = u_head_[cur]; e != -1; e = edges_[e].next) {
            const int32_t u = edges_[e].dst;
            if (seen.test(u) || pos[u] > limit) continue;
            seen.insert(u);
            parent_[u] = cur;
            if (inside.test(u)) {
                path.assign(1, u);
                while (!inside.test(path.back()) || path.size() == 1) path.push_back(parent_[path.back()]);
                std::reverse(path.begin(), path.end());
                return true;
            }
            q.push_back(u);
        }
    }
    return false;
}

void FusionCore::check_fusible(int64_t tag, const std::vector<int64_t> &members) {
    const int64_t n_tags = static_cast<int64_t>(fused_candidates_.size());
    if (tag < 0 || tag >= n_tags)
        checks::index_error("fuse: tag is not a tag id in [0, " + std::to_string(n_tags) + ")");
    checks::node_ids("fuse", "members", members, size());
    if (members.empty()) checks::value_error("fuse: members is empty");
    Marks &inside = mark_a_;
    inside.begin(size());
    for (size_t k = 0; k < members.size(); ++k) {
        const int32_t m = static_cast<int32_t>(members[k]);
        if (!inside.insert(m)) checks::value_error("fuse: members[" + std::to_string(k) + "] repeats a node");
        if (!alive[m] || (kind[m] != KIND_ORIGINAL && kind[m] != KIND_CONSTANT_COPY) || op[m] == OP_OUTPUT)
            checks::value_error("fuse: node " + std::to_string(m) + " is dead, made by the planner or the output node");
    }
    for (int64_t m : members)
        for (int32_t e = u_head_[m]; e != -1; e = edges_[e].next)
            if (!inside.test(edges_[e].dst)) return;
    checks::value_error("fuse: no member has a user outside the partition");
}

int32_t FusionCore::fuse(int64_t tag, const std::vector<int64_t> &member_ids) {
    check_fusible(tag, member_ids);
    const std::vector<int32_t> members(member_ids.begin(), member_ids.end());
    Marks &inside = mark_a_, &seen = mark_b_;
    inside.begin(size());
    for (int32_t m : members) inside.insert(m);
    PartitionData plan;
    plan.tag = tag;
    plan.nodes = members;
    plan.member_inputs.reserve(members.size());
    for (int32_t m : members) plan.member_inputs.push_back(inputs[m]);
    seen.begin(size());
    for (int32_t m : members)
        for (int32_t x : inputs[m])
            if (!inside.test(x) && seen.insert(x)) plan.inputs.push_back(x);
    for (int32_t m : members) {
        bool external = false;
        for (int32_t e = u_head_[m]; e != -1 && !external; e = edges_[e].next) external = !inside.test(edges_[e].dst);
        if (external) plan.outputs.push_back(m);
    }
    int32_t anchor = plan.outputs[0];  // check_fusible: there is an output
    for (int32_t o : plan.outputs)
        if (pos[o] > pos[anchor]) anchor = o;
    const size_t ti = static_cast<size_t>(tag);

    const int32_t pid = static_cast<int32_t>(partitions.size());
    NameInfo cm_name = create_name(fused_candidates_[ti]);
    const int32_t cm = new_node(OP_CALL_MODULE, KIND_CALL_MODULE, plan.inputs, cm_name, -1);
    partition_of[cm] = pid;
    link_after(cm, anchor);
    plan.call_module = cm;
    if (plan.outputs.size() == 1) {
        const int32_t out = plan.outputs[0];
        origin[cm] = out;
        set_debug_handle(cm, debug_handle[out]);
        replace_all_uses(out, cm);
        if (has_fake_val[out]) {
            plan.single_output = true;
            NameInfo gname = create_name("getitem");
            const int32_t gi = new_node(OP_CALL_FUNCTION, KIND_GETITEM, {cm}, gname, out);
            getitem_index[gi] = 0;
            partition_of[gi] = pid;
            set_debug_handle(gi, debug_handle[out]);
            has_fake_val[gi] = 1;
            link_after(gi, cm);
            std::vector<int32_t> us;
            users_of(cm, us);
            for (int32_t u : us)
                if (u != gi) replace_input(u, cm, gi);
            plan.getitems.assign(1, gi);
        }
    } else {
        const int32_t anchor_next = cm != tail_ ? next_[cm] : -1;
        int32_t last = cm;
        for (size_t i = 0; i < plan.outputs.size(); ++i) {
            const int32_t out = plan.outputs[i];
            NameInfo gname = create_name("getitem");
            const int32_t gi = new_node(OP_CALL_FUNCTION, KIND_GETITEM, {cm}, gname, out);
            getitem_index[gi] = static_cast<int32_t>(i);
            partition_of[gi] = pid;
            set_debug_handle(gi, debug_handle[out]);
            has_fake_val[gi] = has_fake_val[out];
            if (anchor_next == -1)
                link_after(gi, last);
            else
                link_before(gi, anchor_next);
            last = gi;
            replace_all_uses(out, gi);
            plan.getitems.push_back(gi);
        }
    }
    for (auto it = members.rbegin(); it != members.rend(); ++it) erase(*it);
    legalize();
    partitions.push_back(std::move(plan));
    classify_outputs(pid);
    return pid;
}

void FusionCore::classify_outputs(int32_t pid) {
    PartitionData &plan = partitions[pid];
    std::unordered_set<int64_t> owned_targets;
    if (!is_submodule) {
        for (int32_t m : plan.nodes) {
            if (op[m] != OP_PLACEHOLDER) continue;
            const int64_t role = g_roles_[origin[m]];
            if (role == ROLE_PARAMETER || role == ROLE_BUFFER || role == ROLE_CONSTANT)
                owned_targets.insert(g_targets_[origin[m]]);
        }
    }
    const size_t n_out = plan.outputs.size();
    std::vector<int64_t> kinds(n_out, OUT_USER);
    plan.output_targets.assign(n_out, -1);
    std::vector<int32_t> deleted;
    if (!is_submodule && !plan.getitems.empty()) {
        Marks &in_deleted = mark_a_;
        in_deleted.begin(size());
        for (size_t p = 0; p < out_args.size(); ++p) {
            const int64_t node = out_args[p];
            if (node < 0 || kind[node] != KIND_GETITEM || partition_of[node] != pid) continue;
            if (out_kinds[p] == OUT_BUFFER_MUTATION && owned_targets.count(out_targets[p])) {
                kinds[getitem_index[node]] = OUT_BUFFER_MUTATION;
                plan.output_targets[getitem_index[node]] = out_targets[p];
                if (in_deleted.insert(node)) deleted.push_back(static_cast<int32_t>(node));
            }
        }
    }
    plan.output_order.clear();
    for (size_t i = 0; i < n_out; ++i)
        if (kinds[i] == OUT_BUFFER_MUTATION) plan.output_order.push_back(static_cast<int32_t>(i));
    for (size_t i = 0; i < n_out; ++i)
        if (kinds[i] != OUT_BUFFER_MUTATION) plan.output_order.push_back(static_cast<int32_t>(i));
    plan.output_kinds = std::move(kinds);
    plan.deleted_getitems = std::move(deleted);
    plan.owns_state = !owned_targets.empty();
    bool identity = true;
    for (size_t i = 0; i < n_out; ++i) identity = identity && plan.output_order[i] == static_cast<int32_t>(i);
    if (!identity) {
        std::vector<int32_t> new_index(n_out);
        for (size_t nw = 0; nw < n_out; ++nw) new_index[plan.output_order[nw]] = static_cast<int32_t>(nw);
        std::vector<int32_t> us;
        users_of(plan.call_module, us);
        for (int32_t gi : us) {
            const int32_t idx = getitem_index[gi];
            if (kind[gi] == KIND_GETITEM && idx >= 0 && static_cast<size_t>(idx) < n_out) {
                getitem_index[gi] = new_index[idx];
                set_inputs(gi, inputs[gi]);
            }
        }
    }
}

// legalize_graph: Kahn's algorithm, FIFO, prioritised ops jump the queue; then the node
// order, the users lists and the namespace are rebuilt in the new order
void FusionCore::legalize() {
    const std::vector<int32_t> &new_order = kahn_order();
    relink(new_order);
    rebuild_users(new_order);
    rebuild_namespace(new_order);
}

// the new node order in new_order_; CycleError when some nodes cannot be ordered
const std::vector<int32_t> &FusionCore::kahn_order() {
    std::vector<int32_t> &order = order_buf_;
    order.clear();
    for (int32_t i = head_; i != -1; i = next_[i]) order.push_back(i);
    const size_t m = order.size();
    if (indeg_.size() < size()) indeg_.resize(size());
    for (int32_t i : order) indeg_[i] = static_cast<int32_t>(inputs[i].size());
    // deque as a window of a 2m+1 buffer: appendleft moves h down, append moves t up
    queue_.resize(2 * m + 1);
    size_t h = m, t = m;
    for (int32_t i : order)
        if (indeg_[i] == 0) queue_[t++] = i;
    std::vector<int32_t> &new_order = new_order_;
    new_order.clear();
    while (h < t) {
        const int32_t cur = queue_[h++];
        new_order.push_back(cur);
        for (int32_t e = u_head_[cur]; e != -1; e = edges_[e].next) {
            const int32_t u = edges_[e].dst;
            if (!alive[u]) throw NodeKeyError(u);
            if (--indeg_[u] == 0) {
                if (prioritized[u])
                    queue_[--h] = u;
                else
                    queue_[t++] = u;
            }
        }
    }
    if (new_order.size() != m) {
        std::vector<std::string> stuck;
        for (int32_t i : order)
            if (indeg_[i] != 0 && stuck.size() < 10) stuck.push_back(names[i]);
        throw CycleError(std::move(stuck));
    }
    return new_order;
}

void FusionCore::relink(const std::vector<int32_t> &new_order) {
    const size_t m = new_order.size();
    for (size_t p = 0; p < m; ++p) {
        const int32_t i = new_order[p];
        pos[i] = static_cast<int32_t>(p);
        prev_[i] = p ? new_order[p - 1] : -1;
        next_[i] = p + 1 < m ? new_order[p + 1] : -1;
    }
    head_ = m ? new_order[0] : -1;
    tail_ = m ? new_order[m - 1] : -1;
}

// users rebuilt in the new node order: every live edge belongs to a node of
// new_order; renumber them so each node's users are contiguous (counting sort)
// (u_count_ already counts exactly those edges: erased nodes left every users list)
void FusionCore::rebuild_users(const std::vector<int32_t> &new_order) {
    const size_t n_all = size();
    size_t n_edges = 0;
    cursor_.resize(n_all);
    for (size_t x = 0; x < n_all; ++x) {
        const int32_t c = u_count_[x];
        cursor_[x] = static_cast<int32_t>(n_edges);
        u_head_[x] = c ? static_cast<int32_t>(n_edges) : -1;
        n_edges += static_cast<size_t>(c);
        u_tail_[x] = c ? static_cast<int32_t>(n_edges) - 1 : -1;
    }
    if (n_edges >= static_cast<size_t>(INT32_MAX)) throw std::length_error("too many edges");
    edges_.resize(n_edges);
    e_free_.clear();
    for (int32_t i : new_order) {
        const auto &in = inputs[i];
        auto &ie = in_edge_[i];
        for (size_t k = 0; k < in.size(); ++k) {
            const int32_t x = in[k];
            const int32_t e = cursor_[x]++;
            if (e > u_tail_[x]) throw std::logic_error("users lists out of sync with inputs");
            const bool first = e == u_head_[x], last = e == u_tail_[x];
            edges_[e] = Edge{i, x, first ? -1 : e - 1, last ? -1 : e + 1};
            ie[k] = e;
        }
    }
}

// Namespace(names in new order)
void FusionCore::rebuild_namespace(const std::vector<int32_t> &new_order) {
    if (canonical_) {
        for (int32_t i : erased_since_rebuild_) ns_.remove(names[i]);
        std::fill(ns_.count.begin(), ns_.count.end(), 0);
        for (int32_t i : new_order)
            if (name_num_[i] >= 0) ns_.count[name_base_[i]] = name_num_[i];
    } else {
        ns_.clear();
        for (int32_t i : new_order) ns_.create_info(names[i]);
    }
    erased_since_rebuild_.clear();
}

}  // namespace fastlower
