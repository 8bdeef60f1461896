// ExecuTorch GroupBasedPartitioner.propose_partitions, exactly (partition.hpp);
// follows fastlower/_twin/partition_proposals.py step by step (same names where possible):
// group_of_nodes, seed_partitions, PairMerge (grow, escapes_and_returns, merge_all),
// reassign_getitems, finish.
#include <algorithm>

#include "partition.hpp"
#include "partition_graph.hpp"

namespace fastlower {

using namespace partition_detail;

namespace {

// each node's group (-1: none); a node in two groups is an error
std::vector<I> group_of_nodes(const std::vector<int64_t> &group_offsets, const std::vector<int64_t> &group_members,
                              size_t n) {
    if (group_offsets.empty()) throw PartitionInputError("groups: expected at least one offset");
    const size_t n_groups = group_offsets.size() - 1;
    check_csr("groups", group_offsets, group_members, n_groups, n);
    std::vector<I> group_of(n, -1);
    for (size_t gi = 0; gi < n_groups; ++gi)
        for (int64_t k = group_offsets[gi]; k < group_offsets[gi + 1]; ++k) {
            I x = static_cast<I>(group_members[k]);
            if (group_of[x] != -1)
                throw PartitionInputError("node " + std::to_string(x) + " exists in multiple groups (" +
                                          std::to_string(group_of[x]) + " and " + std::to_string(gi) + ")");
            group_of[x] = static_cast<I>(gi);
        }
    return group_of;
}

// One partition per supported node in reverse order: its group's supported members, or
// the node alone; fills `assignment`.
std::vector<std::vector<I>> seed_partitions(const PartitionGraph &g, const std::vector<I> &group_of,
                                            const std::vector<int64_t> &group_offsets,
                                            const std::vector<int64_t> &group_members, std::vector<I> &assignment) {
    std::vector<std::vector<I>> parts;
    for (I i = static_cast<I>(assignment.size()) - 1; i >= 0; --i) {
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
    return parts;
}

// The reference's pairwise merges: (p1, p2), p1 < p2 in id order, whenever the union is
// convex.  p1's strict descendants and ancestors are marked once per p1 (and grown on
// each merge).
struct PairMerge {
    const Csr &users, &inputs;
    std::vector<std::vector<I>> &parts;
    std::vector<I> &assignment;
    const I n_parts;
    std::vector<uint8_t> alive;
    std::vector<I> lo, hi;
    std::vector<uint8_t> desc, anc;
    std::vector<uint32_t> seen;
    uint32_t stamp = 0;
    std::vector<I> stack;

    PairMerge(const Csr &u, const Csr &in, std::vector<std::vector<I>> &p, std::vector<I> &a)
        : users(u), inputs(in), parts(p), assignment(a), n_parts(static_cast<I>(p.size())), alive(n_parts, 1),
          lo(n_parts), hi(n_parts), desc(a.size()), anc(a.size()), seen(a.size(), 0) {
        for (I q = 0; q < n_parts; ++q) {
            lo[q] = *std::min_element(parts[q].begin(), parts[q].end());
            hi[q] = *std::max_element(parts[q].begin(), parts[q].end());
        }
    }

    uint32_t next_stamp() {
        if (++stamp == 0) {
            std::fill(seen.begin(), seen.end(), 0);
            stamp = 1;
        }
        return stamp;
    }

    // mark strict descendants (via `step`) of the nodes of partition p
    void grow(std::vector<uint8_t> &marks, I p, const Csr &step) {
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
    }

    // Search from p2 along `step` (users: forward, inputs: backward) through nodes outside
    // the union, staying strictly inside the span (`inside`); true when it re-enters the
    // union or meets a node marked in `hit` (an ancestor/descendant of p1 outside the union).
    template <class Inside>
    bool escapes_and_returns(I p1, I p2, const Csr &step, const std::vector<uint8_t> &hit, Inside inside) {
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
    }

    // the union of p1 and p2 is convex: no outside node between two of p1's nodes but
    // p2's (`inside_outside`), and no path that leaves the union and comes back
    bool convex(I p1, I p2, const std::vector<I> &inside_outside) {
        for (I x : inside_outside)
            if (assignment[x] != p2) return false;
        const I span_lo = std::min(lo[p1], lo[p2]), span_hi = std::max(hi[p1], hi[p2]);
        if (escapes_and_returns(p1, p2, users, anc, [span_hi](I y) { return y < span_hi; })) return false;
        if (escapes_and_returns(p1, p2, inputs, desc, [span_lo](I y) { return y > span_lo; })) return false;
        return true;
    }

    // p1 absorbs p2
    void absorb(I p1, I p2) {
        for (I x : parts[p2]) {
            assignment[x] = p1;
            parts[p1].push_back(x);
        }
        lo[p1] = std::min(lo[p1], lo[p2]);
        hi[p1] = std::max(hi[p1], hi[p2]);
        alive[p2] = 0;
        grow(desc, p2, users);
        grow(anc, p2, inputs);
    }

    void merge_all() {
        std::vector<I> inside_outside;
        for (I p1 = 0; p1 < n_parts; ++p1) {
            if (!alive[p1]) continue;
            std::fill(desc.begin(), desc.end(), 0);
            std::fill(anc.begin(), anc.end(), 0);
            grow(desc, p1, users);
            grow(anc, p1, inputs);
            // nodes outside p1 on a path between two of its nodes (only an input group can
            // be non-convex; every merge yields a convex union)
            inside_outside.clear();
            for (I x = lo[p1]; x < hi[p1]; ++x)
                if (desc[x] && anc[x] && assignment[x] != p1) inside_outside.push_back(x);
            for (I p2 = p1 + 1; p2 < n_parts; ++p2) {
                if (!alive[p2] || !convex(p1, p2, inside_outside)) continue;
                absorb(p1, p2);
                inside_outside.clear();
            }
        }
    }
};

// the reference's getitem pass, once: a node whose users are all getitems takes them
// into its partition
void reassign_getitems(const PartitionGraph &g, const Csr &users, std::vector<I> &assignment, OrderedMembers &m) {
    const size_t n = assignment.size();
    std::vector<I> re_nodes, re_target(n, -1);
    std::vector<uint8_t> re_seen(n, 0);
    for (I i = 0; i < static_cast<I>(n); ++i) {
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
}

}  // namespace

ProposedPartitions propose_group_partitions(const PartitionGraph &g, const std::vector<int64_t> &group_offsets,
                                            const std::vector<int64_t> &group_members,
                                            bool allows_single_node_partition) {
    const size_t n = check_nodes(g);
    check_inputs(g, n);
    const std::vector<I> group_of = group_of_nodes(group_offsets, group_members, n);
    const Csr users(g.users_offsets, g.users), inputs(g.inputs_offsets, g.inputs);

    std::vector<I> assignment(n, -1);
    std::vector<std::vector<I>> parts = seed_partitions(g, group_of, group_offsets, group_members, assignment);
    PairMerge merge(users, inputs, parts, assignment);
    merge.merge_all();

    const I n_parts = merge.n_parts;
    OrderedMembers m;
    m.lists.resize(n_parts);
    m.slot.assign(n, -1);
    m.live_count.assign(n_parts, 0);
    for (I p = 0; p < n_parts; ++p)
        if (merge.alive[p])
            for (I x : parts[p]) m.append(p, x);
    std::vector<std::vector<I>>().swap(parts);

    reassign_getitems(g, users, assignment, m);

    std::vector<I> order;
    for (I p = 0; p < n_parts; ++p)
        if (merge.alive[p]) order.push_back(p);
    std::vector<uint8_t> has_order(n, 0);
    return finish(order, m, has_order, g.compute_weight, allows_single_node_partition);
}

}  // namespace fastlower
