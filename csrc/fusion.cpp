// FusionCore: construction, the users/order primitives every edit is made of,
// and constant duplication.  Twin: fastlower/_twin/fusion.py.
#include "fusion.hpp"

#include <algorithm>
#include <numeric>
#include <unordered_map>

#include "checks.hpp"

namespace fastlower {

namespace {

// Each tag's fused-module name candidate, snake_case("fused_" + tag); a suffix the core
// cannot count is rejected now (Unsupported), not mid-plan.
std::vector<std::string> fused_candidates(const std::vector<std::string> &tag_names, const NameHooks &hooks) {
    std::vector<std::string> out;
    out.reserve(tag_names.size());
    for (const std::string &t : tag_names) {
        std::string candidate = snake_case("fused_" + t, hooks);
        split_name(candidate, hooks);
        out.push_back(std::move(candidate));
    }
    return out;
}

}  // namespace

FusionCore::FusionCore(GraphInput &&g, const std::vector<std::string> &tag_names, bool is_sub,
                       const NameHooks *hooks)
    : is_submodule(is_sub), hooks_(hooks), ns_(hooks), fused_candidates_(fused_candidates(tag_names, *hooks)) {
    const int32_t n = static_cast<int32_t>(g.op.size());
    n_orig = n;
    op = g.op;
    kind.assign(n, KIND_ORIGINAL);
    origin.resize(n);
    std::iota(origin.begin(), origin.end(), 0);
    prioritized = std::move(g.prioritized);
    inputs = std::move(g.inputs);
    names = std::move(g.names);
    tags = std::move(g.tags);
    debug_handle = std::move(g.debug_handles);
    has_fake_val = std::move(g.fake_vals);
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

    init_order(n);
    link_users(n, g.users);
    index_names(n);
}

void FusionCore::init_order(int32_t n) {
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
}

// users: edges in the given dict order; every input edge must appear exactly once
void FusionCore::link_users(int32_t n, const std::vector<std::vector<int32_t>> &users) {
    u_head_.assign(n, -1);
    u_tail_.assign(n, -1);
    u_count_.assign(n, 0);
    in_edge_.resize(n);
    for (int32_t u = 0; u < n; ++u) in_edge_[u].assign(inputs[u].size(), -1);
    std::unordered_map<int32_t, std::unordered_map<int32_t, int32_t>> wide;  // slot of x in inputs[u]
    for (int32_t x = 0; x < n; ++x) {
        for (int32_t u : users[x]) {
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
}

// names: Namespace(names) in node order; incremental rebuilds are exact when
// every name comes back unchanged (unique, valid, not a Python builtin)
void FusionCore::index_names(int32_t n) {
    name_base_.resize(n);
    name_num_.resize(n);
    for (int32_t i = 0; i < n; ++i) {
        NameInfo info = ns_.create_info(names[i]);
        if (info.name != names[i]) canonical_ = false;
        name_base_[i] = info.base;
        name_num_[i] = info.has_num ? info.num : -1;
    }
    for (int32_t i = 0; i < n; ++i) ++debug_handle_count_[debug_handle[i]];
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
    prioritized.push_back(0);
    inputs.push_back(ins);
    names.push_back(name.name);
    name_base_.push_back(name.base);
    name_num_.push_back(name.has_num ? name.num : -1);
    tags.push_back(-1);
    debug_handle.push_back(0);
    has_fake_val.push_back(0);
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
    ++debug_handle_count_[0];
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

void FusionCore::set_debug_handle(int32_t i, int64_t v) {
    if (alive[i]) {
        auto it = debug_handle_count_.find(debug_handle[i]);
        if (--it->second == 0) debug_handle_count_.erase(it);
        ++debug_handle_count_[v];
    }
    debug_handle[i] = v;
}

void FusionCore::erase(int32_t i) {
    for (int32_t &e : in_edge_[i])
        if (e >= 0) {
            unlink_edge(e);
            e = -1;
        }
    if (alive[i]) {
        auto it = debug_handle_count_.find(debug_handle[i]);
        if (--it->second == 0) debug_handle_count_.erase(it);
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
        set_debug_handle(k, debug_handle[c]);
        has_fake_val[k] = has_fake_val[c];
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

}  // namespace fastlower
