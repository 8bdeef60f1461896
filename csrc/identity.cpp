#include "identity.hpp"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

#include "checks.hpp"

namespace fastlower {

namespace {

// Hash-consing table: keys (op, target, input classes...) live in one arena;
// the map stores (offset, length) views into it.
class ClassTable {
  public:
    struct Key {
        size_t off, len;
        size_t hash;
    };
    struct KeyHash {
        size_t operator()(const Key &k) const { return k.hash; }
    };
    struct KeyEq {
        const std::vector<int64_t> *arena;
        bool operator()(const Key &a, const Key &b) const {
            return a.len == b.len && a.hash == b.hash &&
                   std::equal(arena->begin() + a.off, arena->begin() + a.off + a.len, arena->begin() + b.off);
        }
    };

    ClassTable() : map_(16, KeyHash{}, KeyEq{&arena_}) {}

    // classes of every node of one graph, appended to out
    void classes(const std::vector<int64_t> &op, const std::vector<int64_t> &target,
                 const std::vector<int64_t> &off, const std::vector<int64_t> &flat,
                 std::vector<int64_t> &out) {
        out.clear();
        // arrays checked by first_difference: off is CSR over flat, ids in [0, n)
        const int64_t n = static_cast<int64_t>(op.size());
        for (int64_t i = 0; i < n; ++i) {
            const size_t start = arena_.size();
            arena_.push_back(op[static_cast<size_t>(i)]);
            arena_.push_back(target[static_cast<size_t>(i)]);
            const int64_t lo = off[static_cast<size_t>(i)], hi = off[static_cast<size_t>(i) + 1];
            for (int64_t k = lo; k < hi; ++k) {
                const int64_t j = flat[static_cast<size_t>(k)];
                arena_.push_back(j < i ? out[static_cast<size_t>(j)] : -1 - j);
            }
            Key key{start, arena_.size() - start, 0};
            size_t h = 1469598103934665603ull ^ key.len;
            for (size_t q = start; q < arena_.size(); ++q) {
                h ^= static_cast<size_t>(arena_[q]) + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
            }
            key.hash = h;
            auto it = map_.find(key);
            if (it != map_.end()) {
                arena_.resize(start);
                out.push_back(it->second);
            } else {
                const int64_t id = static_cast<int64_t>(map_.size());
                map_.emplace(key, id);
                out.push_back(id);
            }
        }
    }

  private:
    std::vector<int64_t> arena_;
    std::unordered_map<Key, int64_t, KeyHash, KeyEq> map_;
};

}  // namespace

int64_t first_difference(const std::vector<int64_t> &op_a, const std::vector<int64_t> &target_a,
                         const std::vector<int64_t> &off_a, const std::vector<int64_t> &in_a,
                         const std::vector<int64_t> &op_b, const std::vector<int64_t> &target_b,
                         const std::vector<int64_t> &off_b, const std::vector<int64_t> &in_b) {
    const std::string where = "first_difference";
    checks::length(where, "target_a", target_a, op_a.size());
    checks::csr(where, "off_a", off_a, "in_a", in_a.size(), op_a.size());
    checks::node_ids(where, "in_a", in_a, op_a.size());
    checks::length(where, "target_b", target_b, op_b.size());
    checks::csr(where, "off_b", off_b, "in_b", in_b.size(), op_b.size());
    checks::node_ids(where, "in_b", in_b, op_b.size());
    ClassTable table;
    std::vector<int64_t> ca, cb;
    table.classes(op_a, target_a, off_a, in_a, ca);
    table.classes(op_b, target_b, off_b, in_b, cb);
    const size_t n = std::min(ca.size(), cb.size());
    for (size_t i = 0; i < n; ++i)
        if (ca[i] != cb[i]) return static_cast<int64_t>(i);
    return ca.size() == cb.size() ? -1 : static_cast<int64_t>(n);
}

}  // namespace fastlower
