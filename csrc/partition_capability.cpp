// torch.fx CapabilityBasedPartitioner.propose_partitions, exactly (partition.hpp);
// follows fastlower/_twin/capability.py step by step (its module doc says what is
// skipped and why the answers stay the reference's): CapabilityState is its _State,
// main_loop its _main_loop, reassign_getitems its _reassign_getitems.
#include <algorithm>
#include <unordered_set>

#include "partition.hpp"
#include "partition_graph.hpp"

namespace fastlower {

using namespace partition_detail;

namespace {

// Partitions of the reference's main loop, by id, and the scratch space of its searches.
struct CapabilityState {
    const Csr &users;
    std::vector<I> assignment;
    std::vector<std::vector<I>> parts;                    // by id; merge target gets removed's nodes
    std::vector<uint8_t> alive;
    std::vector<std::unordered_set<I>> partition_map;
    std::vector<I> partitions_order;                      // min original id of the merged partitions
    std::vector<std::vector<I>> partition_users;          // sets, deduplicated
    std::vector<I> live;                                  // live ids

    std::vector<uint32_t> seen;
    uint32_t stamp = 0;
    std::vector<I> stack;
    std::vector<uint32_t> pid_seen;  // by partition id
    uint32_t pid_stamp = 0;
    std::vector<I> reached;          // set by search
    std::vector<I> all_user_nodes;   // scratch of maybe_merge
    std::vector<I> user_list;        // scratch of create

    CapabilityState(const Csr &u, size_t n) : users(u), assignment(n, -1), seen(n, 0) {}

    uint32_t next_stamp() {
        if (++stamp == 0) {
            std::fill(seen.begin(), seen.end(), 0);
            stamp = 1;
        }
        return stamp;
    }
    uint32_t next_pid_stamp() {
        if (++pid_stamp == 0) {
            std::fill(pid_seen.begin(), pid_seen.end(), 0);
            pid_stamp = 1;
        }
        return pid_stamp;
    }

    // Breadth-first over the users of `starts` (inclusive), each node once.  Returns true
    // at the first node of partition a or b, or of a partition whose map holds a or b (the
    // reference's cycle test; breadth first finds a hit after fewer nodes, the answer is
    // the same).  Otherwise `reached` is every partition with a node in that closure.
    bool search(const std::vector<I> &starts, I a, I b) {
        const uint32_t s = next_stamp();
        const uint32_t ps = next_pid_stamp();
        reached.clear();
        stack.clear();
        for (I u : starts)
            if (seen[u] != s) {
                seen[u] = s;
                stack.push_back(u);
            }
        for (size_t head = 0; head < stack.size(); ++head) {
            I x = stack[head];
            I t = assignment[x];
            if (t != -1) {
                if (t == a || t == b) return true;
                if (pid_seen[t] != ps) {
                    const auto &pm = partition_map[t];
                    if (pm.count(a) || pm.count(b)) return true;  // maps never hold -1
                    pid_seen[t] = ps;
                    reached.push_back(t);
                }
            }
            for (const I *y = users.begin(x); y != users.end(x); ++y)
                if (seen[*y] != s) {
                    seen[*y] = s;
                    stack.push_back(*y);
                }
        }
        return false;
    }

    // downstream_partitions of the reference from `reached`: each partition and its map,
    // live ids only (an absorbed id never comes back, and maps are only asked about live
    // ids), minus the sources
    void add_downstream(std::unordered_set<I> &dst, I src_a, I src_b) {
        for (I t : reached) {
            if (t != src_a && t != src_b) dst.insert(t);
            for (I q : partition_map[t])
                if (alive[q] && q != src_a && q != src_b) dst.insert(q);
        }
    }

    // a new partition `pid` holding node i, with its users and downstream partitions
    void create(I i, I pid) {
        parts.emplace_back(1, i);
        alive.push_back(1);
        partition_map.emplace_back();
        partitions_order.push_back(pid);
        pid_seen.push_back(0);
        assignment[i] = pid;
        user_list.assign(users.begin(i), users.end(i));
        // set(node.users): users lists have no duplicates (dict keys)
        partition_users.emplace_back(user_list);
        search(user_list, -1, -1);  // no partition is -1: the whole closure
        add_downstream(partition_map[pid], pid, pid);
        live.push_back(pid);
    }

    // the reference's attempt to merge two partitions; returns the surviving id
    I maybe_merge(I self_id, I other_id, bool &merged) {
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
        // no cycle: the search saw the whole closure, none of it in either partition, so
        // the merge below relabels none of it and `reached` is the merged partition's
        // downstream set too
        if (search(all_user_nodes, self_id, other_id)) return self_id;
        I merge_id = self_id, removed_id = other_id;
        if (parts[self_id].size() < parts[other_id].size()) std::swap(merge_id, removed_id);
        for (I x : parts[removed_id]) {
            assignment[x] = merge_id;
            parts[merge_id].push_back(x);
        }
        std::vector<I>().swap(parts[removed_id]);
        alive[removed_id] = 0;
        partitions_order[merge_id] = std::min(partitions_order[merge_id], partitions_order[removed_id]);
        auto &dst = partition_map[merge_id];
        for (I q : partition_map[removed_id])
            if (alive[q]) dst.insert(q);
        std::unordered_set<I>().swap(partition_map[removed_id]);
        partition_users[merge_id] = all_user_nodes;
        std::vector<I>().swap(partition_users[removed_id]);
        add_downstream(dst, merge_id, removed_id);
        dst.erase(merge_id);
        dst.erase(removed_id);
        merged = true;
        return merge_id;
    }
};

// The reference's main loop: nodes in reverse order, a supported unassigned node starts
// a partition, then a chain of merge attempts.  Returns the number of partition ids.
I main_loop(CapabilityState &st, const PartitionGraph &g, I N, bool skip_horizontal_fusion) {
    I next_id = 0;
    bool dirty = false;  // a chain that merged nothing is not repeated
    std::vector<I> candidates;
    for (I i = N - 1; i >= 0; --i) {
        candidates.clear();
        bool created = false;
        if (g.supported[i] && st.assignment[i] == -1) {
            st.create(i, next_id);
            candidates.push_back(next_id);
            ++next_id;
            created = true;
            dirty = true;
        }
        if (skip_horizontal_fusion) {
            if (created) {
                const uint32_t ps = st.next_pid_stamp();
                for (I c : candidates) st.pid_seen[c] = ps;
                for (const I *u = st.users.begin(i); u != st.users.end(i); ++u) {
                    I t = st.assignment[*u];
                    if (t != -1 && st.pid_seen[t] != ps) {
                        st.pid_seen[t] = ps;
                        candidates.push_back(t);
                    }
                }
            }
        } else if (dirty) {
            st.live.erase(std::remove_if(st.live.begin(), st.live.end(), [&](I p) { return !st.alive[p]; }),
                          st.live.end());
            std::vector<I> by_order(st.live);
            std::sort(by_order.begin(), by_order.end(),
                      [&](I a, I b) { return st.partitions_order[a] < st.partitions_order[b]; });
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
                self_id = st.maybe_merge(self_id, candidates[k], merged);
                merged_any = merged_any || merged;
            }
        }
        dirty = merged_any;
    }
    return next_id;
}

// Live partitions' members in graph order (nodes were added in reverse order), each
// marked as carrying a node order.
OrderedMembers ordered_members(CapabilityState &st, size_t n, I n_parts, std::vector<uint8_t> &has_order) {
    OrderedMembers m;
    m.lists.resize(n_parts);
    m.slot.assign(n, -1);
    m.live_count.assign(n_parts, 0);
    for (I p = 0; p < n_parts; ++p) {
        if (!st.alive[p]) continue;
        std::sort(st.parts[p].begin(), st.parts[p].end());  // descending node order = graph order
        for (I x : st.parts[p]) {
            m.append(p, x);
            has_order[x] = 1;
        }
    }
    return m;
}

// getitem reassignment until nothing changes; a dict keeps first-insertion order
void reassign_getitems(const PartitionGraph &g, const Csr &users, std::vector<I> &assignment, OrderedMembers &m,
                       std::vector<uint8_t> &has_order) {
    const size_t n = assignment.size();
    const I N = static_cast<I>(n);
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
        if (re_nodes.empty()) return;
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
}

}  // namespace

ProposedPartitions propose_capability_partitions(const PartitionGraph &g, bool allows_single_node_partition,
                                                 bool skip_horizontal_fusion) {
    const size_t n = check_nodes(g);
    const Csr users(g.users_offsets, g.users);
    CapabilityState st(users, n);
    const I n_parts = main_loop(st, g, static_cast<I>(n), skip_horizontal_fusion);
    st.partition_map.clear();
    st.partition_map.shrink_to_fit();
    st.partition_users.clear();

    std::vector<uint8_t> has_order(n, 0);
    OrderedMembers m = ordered_members(st, n, n_parts, has_order);
    reassign_getitems(g, users, st.assignment, m, has_order);

    std::vector<I> order;
    for (I p = 0; p < n_parts; ++p)
        if (st.alive[p]) order.push_back(p);
    return finish(order, m, has_order, g.compute_weight, allows_single_node_partition);
}

}  // namespace fastlower
