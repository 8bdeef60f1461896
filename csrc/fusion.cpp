#include "fusion.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include "checks.hpp"

namespace fastlower {

FusionCore::FusionCore(GraphInput &&g, std::vector<std::string> fused_candidates, bool is_sub,
                       const NameHooks *hooks)
    : is_submodule(is_sub), hooks_(hooks), ns_(hooks), fused_candidates_(std::move(fused_candidates)) {
    const int32_t n = static_cast<int32_t>(g.op.size());
    n_orig = n;
    op = g.op;
    kind.assign(n, KIND_ORIGINAL);
    origin.resize(n);
    std::iota(origin.begin(), origin.end(), 0);
    prio = std::move(g.prioritized);
    inputs = std::move(g.inputs);
    names = std::move(g.names);
    tags = std::move(g.tags);
    dh = std::move(g.debug_handles);
    fake = std::move(g.fake_vals);
    alive.assign(n, 1);
    getitem_index.assign(n, -1);
    partition_of.assign(n, -1);
    out_args = std::move(g.out_args);
    out_kinds = std::move(g.out_kinds);
    out_targets = std::move(g.out_targets);
    out_specs.resize(out_args.size());
    std::iota(out_specs.begin(), out_specs.end(), 0);
    output_node = (n && op[n - 1] == OP_OUTPUT) ? n - 1 : -1;
    g_roles_ = std::move(g.roles);
    g_targets_ = std::move(g.targets);
    if (!out_args.empty() && output_node < 0) throw Unsupported("output values without an output node");

    next_.resize(n);
    prev_.resize(n);
    pos.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        next_[i] = i + 1 < n ? i + 1 : -1;
        prev_[i] = i - 1;
        pos[i] = i;
    }
    head_ = n ? 0 : -1;
    tail_ = n - 1;

    // users: edges in the given dict order; every input edge must appear exactly once
    u_head_.assign(n, -1);
    u_tail_.assign(n, -1);
    u_count_.assign(n, 0);
    in_edge_.resize(n);
    for (int32_t u = 0; u < n; ++u) in_edge_[u].assign(inputs[u].size(), -1);
    std::unordered_map<int32_t, std::unordered_map<int32_t, int32_t>> wide;  // slot of x in inputs[u]
    for (int32_t x = 0; x < n; ++x) {
        for (int32_t u : g.users[x]) {
            const auto &in = inputs[u];
            int32_t k = -1;
            if (in.size() > 16) {
                auto it = wide.find(u);
                if (it == wide.end()) {
                    it = wide.emplace(u, std::unordered_map<int32_t, int32_t>{}).first;
                    for (size_t j = 0; j < in.size(); ++j) it->second.emplace(in[j], static_cast<int32_t>(j));
                }
                auto jt = it->second.find(x);
                if (jt != it->second.end()) k = jt->second;
            } else {
                for (size_t j = 0; j < in.size(); ++j)
                    if (in[j] == x) {
                        k = static_cast<int32_t>(j);
                        break;
                    }
            }
            if (k < 0 || in_edge_[u][k] >= 0) throw Unsupported("users do not match inputs");
            in_edge_[u][k] = link_edge(x, u);
        }
    }
    for (int32_t u = 0; u < n; ++u)
        for (int32_t e : in_edge_[u])
            if (e < 0) throw Unsupported("users do not match inputs");

    // names: Namespace(names) in node order; incremental rebuilds are exact when
    // every name comes back unchanged (unique, valid, not a Python builtin)
    name_base_.resize(n);
    name_num_.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        NameInfo info = ns_.create_info(names[i]);
        if (info.name != names[i]) canonical_ = false;
        name_base_[i] = info.base;
        name_num_[i] = info.has_num ? info.num : -1;
    }
    for (int32_t i = 0; i < n; ++i) ++dh_count_[dh[i]];
}

// -- edges --------------------------------------------------------------------
int32_t FusionCore::link_edge(int32_t x, int32_t u) {
    int32_t e;
    if (!e_free_.empty()) {
        e = e_free_.back();
        e_free_.pop_back();
    } else {
        e = static_cast<int32_t>(edges_.size());
        edges_.push_back(Edge{});
    }
    edges_[e] = Edge{u, x, u_tail_[x], -1};
    if (u_tail_[x] >= 0)
        edges_[u_tail_[x]].next = e;
    else
        u_head_[x] = e;
    u_tail_[x] = e;
    ++u_count_[x];
    return e;
}

void FusionCore::unlink_edge(int32_t e) {
    const Edge ed = edges_[e];
    if (ed.prev >= 0)
        edges_[ed.prev].next = ed.next;
    else
        u_head_[ed.src] = ed.next;
    if (ed.next >= 0)
        edges_[ed.next].prev = ed.prev;
    else
        u_tail_[ed.src] = ed.prev;
    --u_count_[ed.src];
    e_free_.push_back(e);
}

void FusionCore::users_of(int32_t x, std::vector<int32_t> &out) const {
    out.clear();
    out.reserve(u_count_[x]);
    for (int32_t e = u_head_[x]; e != -1; e = edges_[e].next) out.push_back(edges_[e].dst);
}

// -- graph primitives ---------------------------------------------------------
int32_t FusionCore::new_node(int32_t node_op, int32_t node_kind, const std::vector<int32_t> &ins,
                             const NameInfo &name, int32_t node_origin) {
    const int32_t i = static_cast<int32_t>(size());
    op.push_back(node_op);
    kind.push_back(node_kind);
    origin.push_back(node_origin);
    prio.push_back(0);
    inputs.push_back(ins);
    names.push_back(name.name);
    name_base_.push_back(name.base);
    name_num_.push_back(name.has_num ? name.num : -1);
    tags.push_back(-1);
    dh.push_back(0);
    fake.push_back(0);
    alive.push_back(1);
    getitem_index.push_back(-1);
    partition_of.push_back(-1);
    next_.push_back(-1);
    prev_.push_back(-1);
    pos.push_back(-1);
    u_head_.push_back(-1);
    u_tail_.push_back(-1);
    u_count_.push_back(0);
    in_edge_.emplace_back(ins.size(), -1);
    ++dh_count_[0];
    for (size_t k = 0; k < ins.size(); ++k) in_edge_[i][k] = link_edge(ins[k], i);
    return i;
}

void FusionCore::link_after(int32_t i, int32_t anchor) {
    const int32_t nxt = next_[anchor];
    prev_[i] = anchor;
    next_[i] = nxt;
    next_[anchor] = i;
    if (anchor == tail_)
        tail_ = i;
    else
        prev_[nxt] = i;
}

void FusionCore::link_before(int32_t i, int32_t anchor) {
    const int32_t prv = prev_[anchor];
    prev_[i] = prv;
    next_[i] = anchor;
    prev_[anchor] = i;
    if (anchor == head_)
        head_ = i;
    else
        next_[prv] = i;
}

void FusionCore::unlink(int32_t i) {
    const int32_t prv = prev_[i], nxt = next_[i];
    if (i == head_)
        head_ = i != tail_ ? nxt : -1;
    else
        next_[prv] = nxt;
    if (i == tail_)
        tail_ = prv;
    else
        prev_[nxt] = prv;
}

std::vector<int32_t> FusionCore::order() const {
    std::vector<int32_t> out;
    for (int32_t i = head_; i != -1; i = next_[i]) out.push_back(i);
    return out;
}

void FusionCore::set_inputs(int32_t u, const std::vector<int32_t> &new_inputs) {
    set_buf_.assign(new_inputs.begin(), new_inputs.end());  // may alias inputs[u]
    auto &ie = in_edge_[u];
    for (int32_t e : ie)
        if (e >= 0) unlink_edge(e);
    mark_dedup_.begin(size());
    auto &in = inputs[u];
    in.clear();
    for (int32_t x : set_buf_)
        if (mark_dedup_.insert(x)) in.push_back(x);
    ie.assign(in.size(), -1);
    for (size_t k = 0; k < in.size(); ++k) ie[k] = link_edge(in[k], u);
}

void FusionCore::replace_input(int32_t u, int32_t old_node, int32_t new_node_id) {
    rep_buf_.assign(inputs[u].begin(), inputs[u].end());
    for (int32_t &x : rep_buf_)
        if (x == old_node) x = new_node_id;
    set_inputs(u, rep_buf_);
    if (u == output_node)
        for (int64_t &a : out_args)
            if (a == old_node) a = new_node_id;
}

void FusionCore::replace_all_uses(int32_t old_node, int32_t new_node_id) {
    std::vector<int32_t> us;
    users_of(old_node, us);
    for (int32_t u : us) replace_input(u, old_node, new_node_id);
}

void FusionCore::set_dh(int32_t i, int64_t v) {
    if (alive[i]) {
        auto it = dh_count_.find(dh[i]);
        if (--it->second == 0) dh_count_.erase(it);
        ++dh_count_[v];
    }
    dh[i] = v;
}

void FusionCore::erase(int32_t i) {
    for (int32_t &e : in_edge_[i])
        if (e >= 0) {
            unlink_edge(e);
            e = -1;
        }
    if (alive[i]) {
        auto it = dh_count_.find(dh[i]);
        if (--it->second == 0) dh_count_.erase(it);
        erased_since_rebuild_.push_back(i);
    }
    alive[i] = 0;
    unlink(i);
}

// -- constant duplication -----------------------------------------------------
std::vector<int32_t> FusionCore::duplicate_constant(int64_t c_arg) {
    checks::node_id("duplicate_constant", "c", c_arg, size());
    const int32_t c = static_cast<int32_t>(c_arg);
    if (!alive[c] || op[c] != OP_PLACEHOLDER)
        checks::value_error("duplicate_constant: node " + std::to_string(c) + " is not a live placeholder");
    std::vector<int32_t> us, made;
    users_of(c, us);
    for (size_t ith = 1; ith < us.size(); ++ith) {
        std::string fqn = names[c] + "_copy_" + std::to_string(ith - 1);
        NameInfo nm = create_name(snake_case(fqn, *hooks_));
        const int32_t k = new_node(OP_PLACEHOLDER, KIND_CONSTANT_COPY, {}, nm, c);
        copy_fqn.push_back(std::move(fqn));
        set_dh(k, dh[c]);
        fake[k] = fake[c];
        tags[k] = tags[c];
        link_before(k, c);
        replace_input(us[ith], c, k);
        made.push_back(k);
    }
    copies.insert(copies.end(), made.begin(), made.end());
    return made;
}

void FusionCore::retag_constant(int64_t c_arg) {
    checks::node_id("retag_constant", "c", c_arg, size());
    const int32_t c = static_cast<int32_t>(c_arg);
    bool one = false, many = false;
    int64_t t = 0;
    for_users(c, [&](int32_t u) {
        if (!one) {
            one = true;
            t = tags[u];
        } else if (tags[u] != t) {
            many = true;
        }
    });
    if (one && !many) tags[c] = t;
}

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
        set_dh(cm, dh[out]);
        replace_all_uses(out, cm);
        if (fake[out]) {
            plan.single_output = true;
            NameInfo gname = create_name("getitem");
            const int32_t gi = new_node(OP_CALL_FUNCTION, KIND_GETITEM, {cm}, gname, out);
            getitem_index[gi] = 0;
            partition_of[gi] = pid;
            set_dh(gi, dh[out]);
            fake[gi] = 1;
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
            set_dh(gi, dh[out]);
            fake[gi] = fake[out];
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

void FusionCore::legalize() {
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
                if (prio[u])
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
    // relink
    for (size_t p = 0; p < m; ++p) {
        const int32_t i = new_order[p];
        pos[i] = static_cast<int32_t>(p);
        prev_[i] = p ? new_order[p - 1] : -1;
        next_[i] = p + 1 < m ? new_order[p + 1] : -1;
    }
    head_ = m ? new_order[0] : -1;
    tail_ = m ? new_order[m - 1] : -1;
    // users rebuilt in the new node order: every live edge belongs to a node of
    // new_order; renumber them so each node's users are contiguous (counting sort)
    // (u_count_ already counts exactly those edges: erased nodes left every users list)
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
    // Namespace(names in new order)
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

// -- delegate insertion -------------------------------------------------------
void FusionCore::insert_delegate(int64_t pid_arg) {
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
    const int64_t top_max = top_core ? top_core->max_debug_handle() : top_fn ? top_fn() : max_debug_handle();
    plan.debug_handle = top_max + 1;
    set_dh(cd, plan.debug_handle);
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

int64_t FusionCore::max_debug_handle() const { return dh_count_.empty() ? 0 : dh_count_.rbegin()->first; }

}  // namespace fastlower
