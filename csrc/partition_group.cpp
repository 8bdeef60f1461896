// ExecuTorch GroupBasedPartitioner.propose_partitions, exactly (partition.hpp);
// follows fastlower/_twin/partition.py step by step (same names where possible).
#include <algorithm>

#include "partition.hpp"
#include "partition_graph.hpp"

namespace fastlower {

using namespace partition_detail;

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
