// Canonical partitioners.  See partition.hpp and fastlower/_twin/partition.py: this file
// follows the twin step by step (same names where possible).
#include "partition.hpp"

#include <algorithm>
#include <unordered_set>

namespace fastlower {

namespace {

using I = int32_t;

void check_csr(const char *name, const std::vector<int64_t> &offsets,
               const std::vector<int64_t> &values, size_t n_rows, size_t n) {
    if (offsets.size() != n_rows + 1)
        throw PartitionInputError(std::string(name) + ": expected " + std::to_string(n_rows + 1) +
                                  " offsets, got " + std::to_string(offsets.size()));
    if (offsets[0] != 0 || offsets.back() != static_cast<int64_t>(values.size()))
        throw PartitionInputError(std::string(name) + ": offsets must start at 0 and end at " +
                                  std::to_string(values.size()));
    for (size_t r = 0; r < n_rows; ++r)
        if (offsets[r] > offsets[r + 1])
            throw PartitionInputError(std::string(name) + ": offsets decrease at row " + std::to_string(r));
    for (size_t k = 0; k < values.size(); ++k)
        if (values[k] < 0 || values[k] >= static_cast<int64_t>(n))
            throw PartitionIndexError(std::string(name) + ": entry " + std::to_string(k) +
                                      " refers to node " + std::to_string(values[k]) + ", outside 0.." +
                                      std::to_string(static_cast<int64_t>(n) - 1));
}

// Compact CSR of int32 for traversal.
struct Csr {
    std::vector<I> off, val;
    Csr(const std::vector<int64_t> &o, const std::vector<int64_t> &v) : off(o.begin(), o.end()), val(v.begin(), v.end()) {}
    const I *begin(I i) const { return val.data() + off[i]; }
    const I *end(I i) const { return val.data() + off[i + 1]; }
};

size_t check_nodes(const PartitionGraph &g) {
    size_t n = g.supported.size();
    if (n >= static_cast<size_t>(INT32_MAX / 2)) throw PartitionInputError("graph too large");
    if (g.is_getitem.size() != n || g.compute_weight.size() != n)
        throw PartitionInputError("per-node arrays differ in length: supported " + std::to_string(n) +
                                  ", is_getitem " + std::to_string(g.is_getitem.size()) +
                                  ", compute_weight " + std::to_string(g.compute_weight.size()));
    check_csr("users", g.users_offsets, g.users, n, n);
    for (size_t i = 0; i < n; ++i)
        for (int64_t k = g.users_offsets[i]; k < g.users_offsets[i + 1]; ++k)
            if (g.users[k] <= static_cast<int64_t>(i))
                throw PartitionInputError("users: node " + std::to_string(i) + " has user " +
                                          std::to_string(g.users[k]) +
                                          " that does not come after it (the graph is not in topological order)");
    for (size_t i = 0; i < n; ++i)
        if (g.compute_weight[i] < 0 || g.compute_weight[i] > 2)
            throw PartitionInputError("compute_weight: node " + std::to_string(i) + " has weight " +
                                      std::to_string(g.compute_weight[i]) + ", expected 0..2");
    return n;
}

void check_inputs(const PartitionGraph &g, size_t n) {
    check_csr("inputs", g.inputs_offsets, g.inputs, n, n);
    for (size_t i = 0; i < n; ++i)
        for (int64_t k = g.inputs_offsets[i]; k < g.inputs_offsets[i + 1]; ++k)
            if (g.inputs[k] >= static_cast<int64_t>(i))
                throw PartitionInputError("inputs: node " + std::to_string(i) + " has input " +
                                          std::to_string(g.inputs[k]) +
                                          " that does not come before it (the graph is not in topological order)");
}

// Ordered node list with O(1) removal (tombstones) and append.
struct OrderedMembers {
    std::vector<std::vector<I>> lists;  // per partition, -1 = removed
    std::vector<I> slot;                // per node: position in its partition's list
    std::vector<I> live_count;
    void remove(I part, I node) {
        lists[part][slot[node]] = -1;
        --live_count[part];
    }
    void append(I part, I node) {
        slot[node] = static_cast<I>(lists[part].size());
        lists[part].push_back(node);
        ++live_count[part];
    }
};

// Reference's single-node filter, then drops empty partitions; `order` lists the
// partitions in the reference's dict order.
ProposedPartitions finish(const std::vector<I> &order, const OrderedMembers &m,
                          const std::vector<uint8_t> &has_order, const std::vector<int64_t> &weight,
                          bool allows_single_node_partition) {
    ProposedPartitions out;
    for (I pid : order) {
        std::vector<int64_t> nodes;
        int64_t weight_sum = 0, ordered = 0;
        for (I x : m.lists[pid]) {
            if (x < 0) continue;
            nodes.push_back(x);
            weight_sum += weight[x];
            ordered += has_order[x] ? 1 : 0;
        }
        if (!allows_single_node_partition && weight_sum <= 1) continue;
        if (nodes.empty()) continue;
        out.ids.push_back(pid);
        out.members.push_back(std::move(nodes));
        out.ordered_counts.push_back(ordered);
    }
    return out;
}

bool all_users_getitem(const Csr &users, const std::vector<uint8_t> &is_getitem, I i) {
    for (const I *u = users.begin(i); u != users.end(i); ++u)
        if (!is_getitem[*u]) return false;
    return true;
}

}  // namespace

// ------------------------------------------------------------------------------- capability

ProposedPartitions propose_capability_partitions(const PartitionGraph &g, bool allows_single_node_partition,
                                                 bool skip_horizontal_fusion) {
    const size_t n = check_nodes(g);
    const Csr users(g.users_offsets, g.users);
    const I N = static_cast<I>(n);

    std::vector<I> assignment(n, -1);
    std::vector<std::vector<I>> parts;                    // by id; merge target gets removed's nodes
    std::vector<uint8_t> alive;
    std::vector<std::unordered_set<I>> partition_map;
    std::vector<I> partitions_order;                      // min original id of the merged partitions
    std::vector<std::vector<I>> partition_users;          // sets, deduplicated
    std::vector<I> live;                                  // live ids

    std::vector<uint32_t> seen(n, 0);
    uint32_t stamp = 0;
    std::vector<I> stack;
    std::vector<uint32_t> pid_seen;      // by partition id
    std::vector<uint32_t> pid_expanded;  // by partition id: its map was added (same stamp)
    uint32_t pid_stamp = 0;

    auto next_stamp = [&]() {
        if (++stamp == 0) {
            std::fill(seen.begin(), seen.end(), 0);
            stamp = 1;
        }
        return stamp;
    };
    auto next_pid_stamp = [&]() {
        if (++pid_stamp == 0) {
            std::fill(pid_seen.begin(), pid_seen.end(), 0);
            std::fill(pid_expanded.begin(), pid_expanded.end(), 0);
            pid_stamp = 1;
        }
        return pid_stamp;
    };

    // partitions with a node reachable from `starts` (inclusive) and their maps, minus sources
    auto downstream_partitions = [&](const std::vector<I> &starts, I src_a, I src_b, std::vector<I> &found) {
        found.clear();
        const uint32_t s = next_stamp();
        const uint32_t ps = next_pid_stamp();
        auto add = [&](I t) {
            if (pid_seen[t] != ps) {
                pid_seen[t] = ps;
                if (t != src_a && t != src_b) found.push_back(t);
            }
        };
        stack.clear();
        for (I u : starts)
            if (seen[u] != s) {
                seen[u] = s;
                stack.push_back(u);
            }
        while (!stack.empty()) {
            I x = stack.back();
            stack.pop_back();
            I t = assignment[x];
            if (t != -1 && pid_expanded[t] != ps) {  // a partition's map is added once
                pid_expanded[t] = ps;
                add(t);
                for (I q : partition_map[t]) add(q);
            }
            for (const I *y = users.begin(x); y != users.end(x); ++y)
                if (seen[*y] != s) {
                    seen[*y] = s;
                    stack.push_back(*y);
                }
        }
    };

    auto finds_cycle = [&](const std::vector<I> &starts, I self_id, I other_id) {
        const uint32_t s = next_stamp();
        const uint32_t ps = next_pid_stamp();
        stack.clear();
        for (I u : starts)
            if (seen[u] != s) {
                seen[u] = s;
                stack.push_back(u);
            }
        while (!stack.empty()) {
            I x = stack.back();
            stack.pop_back();
            I t = assignment[x];
            if (t == self_id || t == other_id) return true;
            if (t != -1 && pid_seen[t] != ps) {
                const auto &pm = partition_map[t];
                if (pm.count(self_id) || pm.count(other_id)) return true;
                pid_seen[t] = ps;
            }
            for (const I *y = users.begin(x); y != users.end(x); ++y)
                if (seen[*y] != s) {
                    seen[*y] = s;
                    stack.push_back(*y);
                }
        }
        return false;
    };

    std::vector<I> all_user_nodes, found;
    auto maybe_merge = [&](I self_id, I other_id, bool &merged) -> I {
        merged = false;
        // union of both user sets minus both partitions' nodes
        all_user_nodes.clear();
        const uint32_t s = next_stamp();
        for (I who : {self_id, other_id})
            for (I u : partition_users[who])
                if (seen[u] != s) {
                    seen[u] = s;
                    if (assignment[u] != self_id && assignment[u] != other_id) all_user_nodes.push_back(u);
                }
        if (finds_cycle(all_user_nodes, self_id, other_id)) return self_id;
        I merge_id = self_id, removed_id = other_id;
        if (parts[self_id].size() < parts[other_id].size()) std::swap(merge_id, removed_id);
        for (I x : parts[removed_id]) {
            assignment[x] = merge_id;
            parts[merge_id].push_back(x);
        }
        std::vector<I>().swap(parts[removed_id]);
        alive[removed_id] = 0;
        partitions_order[merge_id] = std::min(partitions_order[merge_id], partitions_order[removed_id]);
        {
            auto &dst = partition_map[merge_id];
            for (I q : partition_map[removed_id]) dst.insert(q);
            std::unordered_set<I>().swap(partition_map[removed_id]);
        }
        partition_users[merge_id] = all_user_nodes;
        std::vector<I>().swap(partition_users[removed_id]);
        downstream_partitions(all_user_nodes, merge_id, removed_id, found);
        auto &dst = partition_map[merge_id];
        for (I q : found) dst.insert(q);
        dst.erase(merge_id);
        dst.erase(removed_id);
        merged = true;
        return merge_id;
    };

    I next_id = 0;
    bool dirty = false;
    std::vector<I> candidates, user_list;
    for (I i = N - 1; i >= 0; --i) {
        candidates.clear();
        bool created = false;
        if (g.supported[i] && assignment[i] == -1) {
            I pid = next_id++;
            parts.emplace_back(1, i);
            alive.push_back(1);
            partition_map.emplace_back();
            partitions_order.push_back(pid);
            pid_seen.push_back(0);
            pid_expanded.push_back(0);
            assignment[i] = pid;
            user_list.assign(users.begin(i), users.end(i));
            // set(node.users): users lists have no duplicates (dict keys)
            partition_users.emplace_back(user_list);
            downstream_partitions(user_list, pid, pid, found);
            for (I q : found) partition_map[pid].insert(q);
            live.push_back(pid);
            candidates.push_back(pid);
            created = true;
            dirty = true;
        }
        if (skip_horizontal_fusion) {
            if (created) {
                const uint32_t ps = next_pid_stamp();
                for (I c : candidates) pid_seen[c] = ps;
                for (const I *u = users.begin(i); u != users.end(i); ++u) {
                    I t = assignment[*u];
                    if (t != -1 && pid_seen[t] != ps) {
                        pid_seen[t] = ps;
                        candidates.push_back(t);
                    }
                }
            }
        } else if (dirty) {
            live.erase(std::remove_if(live.begin(), live.end(), [&](I p) { return !alive[p]; }), live.end());
            std::vector<I> by_order(live);
            std::sort(by_order.begin(), by_order.end(),
                      [&](I a, I b) { return partitions_order[a] < partitions_order[b]; });
            for (I p : by_order)
                if (candidates.empty() || p != candidates[0]) candidates.push_back(p);
        } else {
            continue;
        }
        bool merged_any = false;
        if (candidates.size() > 1) {
            I self_id = candidates[0];
            for (size_t k = 1; k < candidates.size(); ++k) {
                bool merged;
                self_id = maybe_merge(self_id, candidates[k], merged);
                merged_any = merged_any || merged;
            }
        }
        dirty = merged_any;
    }
    partition_map.clear();
    partition_map.shrink_to_fit();
    partition_users.clear();

    const I n_parts = next_id;
    OrderedMembers m;
    m.lists.resize(n_parts);
    m.slot.assign(n, -1);
    m.live_count.assign(n_parts, 0);
    std::vector<uint8_t> has_order(n, 0);
    for (I p = 0; p < n_parts; ++p) {
        if (!alive[p]) continue;
        std::sort(parts[p].begin(), parts[p].end());  // descending node order = graph order
        for (I x : parts[p]) {
            m.append(p, x);
            has_order[x] = 1;
        }
    }

    // getitem reassignment until nothing changes; a dict keeps first-insertion order
    std::vector<I> re_nodes, re_target(n, -1);
    std::vector<uint32_t> re_seen(n, 0);
    uint32_t re_stamp = 0;
    for (size_t round = 0;; ++round) {
        re_nodes.clear();
        ++re_stamp;
        for (I i = 0; i < N; ++i) {
            if (!all_users_getitem(users, g.is_getitem, i)) continue;
            I pid = assignment[i];
            for (const I *u = users.begin(i); u != users.end(i); ++u)
                if (assignment[*u] != pid) {
                    if (re_seen[*u] != re_stamp) {
                        re_seen[*u] = re_stamp;
                        re_nodes.push_back(*u);
                    }
                    re_target[*u] = pid;
                }
        }
        if (re_nodes.empty()) break;
        if (round + 1 > n + 1)
            throw PartitionInputError(
                "node " + std::to_string(re_nodes[0]) +
                ": getitem reassignment does not converge (a getitem node reads two tuple producers); "
                "the reference loops forever on this graph");
        for (I u : re_nodes) {
            I pid = re_target[u];
            if (assignment[u] != -1) m.remove(assignment[u], u);
            assignment[u] = pid;
            has_order[u] = 0;
            if (pid != -1) m.append(pid, u);
        }
    }

    std::vector<I> order;
    for (I p = 0; p < n_parts; ++p)
        if (alive[p]) order.push_back(p);
    return finish(order, m, has_order, g.compute_weight, allows_single_node_partition);
}

// --------------------------------------------------------------------------------- grouped

ProposedPartitions propose_group_partitions(const PartitionGraph &g, const std::vector<int64_t> &group_offsets,
                                            const std::vector<int64_t> &group_members,
                                            bool allows_single_node_partition) {
    const size_t n = check_nodes(g);
    check_inputs(g, n);
    if (group_offsets.empty()) throw PartitionInputError("groups: expected at least one offset");
    const size_t n_groups = group_offsets.size() - 1;
    check_csr("groups", group_offsets, group_members, n_groups, n);
    const I N = static_cast<I>(n);
    std::vector<I> group_of(n, -1);
    for (size_t gi = 0; gi < n_groups; ++gi)
        for (int64_t k = group_offsets[gi]; k < group_offsets[gi + 1]; ++k) {
            I x = static_cast<I>(group_members[k]);
            if (group_of[x] != -1)
                throw PartitionInputError("node " + std::to_string(x) + " exists in multiple groups (" +
                                          std::to_string(group_of[x]) + " and " + std::to_string(gi) + ")");
            group_of[x] = static_cast<I>(gi);
        }
    const Csr users(g.users_offsets, g.users), inputs(g.inputs_offsets, g.inputs);

    std::vector<I> assignment(n, -1);
    std::vector<std::vector<I>> parts;
    for (I i = N - 1; i >= 0; --i) {
        if (assignment[i] != -1 || !g.supported[i]) continue;
        I pid = static_cast<I>(parts.size());
        std::vector<I> nodes;
        if (group_of[i] >= 0) {
            I gi = group_of[i];
            for (int64_t k = group_offsets[gi]; k < group_offsets[gi + 1]; ++k)
                if (g.supported[group_members[k]]) nodes.push_back(static_cast<I>(group_members[k]));
        } else {
            nodes.push_back(i);
        }
        for (I x : nodes) assignment[x] = pid;
        parts.push_back(std::move(nodes));
    }

    const I n_parts = static_cast<I>(parts.size());
    std::vector<uint8_t> alive(n_parts, 1);
    std::vector<I> lo(n_parts), hi(n_parts);
    for (I p = 0; p < n_parts; ++p) {
        lo[p] = *std::min_element(parts[p].begin(), parts[p].end());
        hi[p] = *std::max_element(parts[p].begin(), parts[p].end());
    }
    std::vector<uint8_t> desc(n), anc(n);
    std::vector<uint32_t> seen(n, 0);
    uint32_t stamp = 0;
    std::vector<I> stack;
    auto next_stamp = [&]() {
        if (++stamp == 0) {
            std::fill(seen.begin(), seen.end(), 0);
            stamp = 1;
        }
        return stamp;
    };

    // mark strict descendants (via `step`) of the nodes of partition p
    auto grow = [&](std::vector<uint8_t> &marks, I p, const Csr &step) {
        stack.clear();
        for (I a : parts[p])
            for (const I *y = step.begin(a); y != step.end(a); ++y)
                if (!marks[*y]) {
                    marks[*y] = 1;
                    stack.push_back(*y);
                }
        while (!stack.empty()) {
            I x = stack.back();
            stack.pop_back();
            for (const I *y = step.begin(x); y != step.end(x); ++y)
                if (!marks[*y]) {
                    marks[*y] = 1;
                    stack.push_back(*y);
                }
        }
    };

    // Search from p2 along `step` (users: forward, inputs: backward) through nodes outside
    // the union, staying strictly inside the span (`inside`); true when it re-enters the
    // union or meets a node marked in `hit` (an ancestor/descendant of p1 outside the union).
    auto escapes_and_returns = [&](I p1, I p2, const Csr &step, const std::vector<uint8_t> &hit,
                                   auto inside) {
        const uint32_t s = next_stamp();
        stack.clear();
        for (I b : parts[p2])
            for (const I *y = step.begin(b); y != step.end(b); ++y) {
                I a = assignment[*y];
                if (a == p1 || a == p2) continue;
                if (inside(*y) && seen[*y] != s) {
                    seen[*y] = s;
                    stack.push_back(*y);
                }
            }
        while (!stack.empty()) {
            I x = stack.back();
            stack.pop_back();
            if (hit[x]) return true;
            for (const I *y = step.begin(x); y != step.end(x); ++y) {
                I a = assignment[*y];
                if (a == p1 || a == p2) return true;
                if (inside(*y) && seen[*y] != s) {
                    seen[*y] = s;
                    stack.push_back(*y);
                }
            }
        }
        return false;
    };

    std::vector<I> inside_outside;
    for (I p1 = 0; p1 < n_parts; ++p1) {
        if (!alive[p1]) continue;
        std::fill(desc.begin(), desc.end(), 0);
        std::fill(anc.begin(), anc.end(), 0);
        grow(desc, p1, users);
        grow(anc, p1, inputs);
        inside_outside.clear();
        for (I x = lo[p1]; x < hi[p1]; ++x)
            if (desc[x] && anc[x] && assignment[x] != p1) inside_outside.push_back(x);
        for (I p2 = p1 + 1; p2 < n_parts; ++p2) {
            if (!alive[p2]) continue;
            bool blocked = false;
            for (I x : inside_outside)
                if (assignment[x] != p2) {
                    blocked = true;
                    break;
                }
            if (blocked) continue;
            const I span_lo = std::min(lo[p1], lo[p2]), span_hi = std::max(hi[p1], hi[p2]);
            if (escapes_and_returns(p1, p2, users, anc, [span_hi](I y) { return y < span_hi; })) continue;
            if (escapes_and_returns(p1, p2, inputs, desc, [span_lo](I y) { return y > span_lo; })) continue;
            for (I x : parts[p2]) {
                assignment[x] = p1;
                parts[p1].push_back(x);
            }
            lo[p1] = span_lo;
            hi[p1] = span_hi;
            alive[p2] = 0;
            grow(desc, p2, users);
            grow(anc, p2, inputs);
            inside_outside.clear();
        }
    }

    OrderedMembers m;
    m.lists.resize(n_parts);
    m.slot.assign(n, -1);
    m.live_count.assign(n_parts, 0);
    for (I p = 0; p < n_parts; ++p)
        if (alive[p])
            for (I x : parts[p]) m.append(p, x);
    std::vector<std::vector<I>>().swap(parts);

    std::vector<I> re_nodes, re_target(n, -1);
    std::vector<uint8_t> re_seen(n, 0);
    for (I i = 0; i < N; ++i) {
        if (!all_users_getitem(users, g.is_getitem, i)) continue;
        I pid = assignment[i];
        if (pid == -1) continue;
        for (const I *u = users.begin(i); u != users.end(i); ++u)
            if (assignment[*u] != -1 && assignment[*u] != pid) {
                if (!re_seen[*u]) {
                    re_seen[*u] = 1;
                    re_nodes.push_back(*u);
                }
                re_target[*u] = pid;
            }
    }
    for (I u : re_nodes) {
        m.remove(assignment[u], u);
        assignment[u] = re_target[u];
        m.append(re_target[u], u);
    }

    std::vector<I> order;
    for (I p = 0; p < n_parts; ++p)
        if (alive[p]) order.push_back(p);
    std::vector<uint8_t> has_order(n, 0);
    return finish(order, m, has_order, g.compute_weight, allows_single_node_partition);
}

}  // namespace fastlower
