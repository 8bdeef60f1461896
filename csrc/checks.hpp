// Input checks of the core's entry points.  Twin (same checks, same order, same
// messages): fastlower/_twin/checks.py.  Every entry point runs these before it
// touches its arrays, so malformed input is a Python exception, never UB:
// std::invalid_argument -> ValueError, std::out_of_range -> IndexError (pybind11).
// Each check is one O(n) pass.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schema.hpp"

namespace fastlower {
namespace checks {

// group_by_tag returns one list per tag: bound the output a caller can ask for
constexpr int64_t kMaxTags = MAX_TAGS;

[[noreturn]] inline void value_error(const std::string &msg) { throw std::invalid_argument(msg); }
[[noreturn]] inline void index_error(const std::string &msg) { throw std::out_of_range(msg); }

inline std::string str(int64_t v) { return std::to_string(v); }

template <class V>
void length(const std::string &where, const std::string &name, const V &v, size_t n) {
    if (v.size() != n)
        value_error(where + ": " + name + " has " + std::to_string(v.size()) + " entries, expected " +
                    std::to_string(n));
}

template <class T>
bool is_node_id(T x, size_t n) {
    return x >= 0 && static_cast<uint64_t>(x) < static_cast<uint64_t>(n);
}

template <class V>
void node_ids(const std::string &where, const std::string &name, const V &ids, size_t n) {
    for (size_t k = 0; k < ids.size(); ++k)
        if (!is_node_id(ids[k], n))
            index_error(where + ": " + name + "[" + std::to_string(k) + "] is not a node id in [0, " +
                        std::to_string(n) + ")");
}

inline void node_id(const std::string &where, const std::string &name, int64_t x, size_t n) {
    if (!is_node_id(x, n))
        index_error(where + ": " + name + " is not a node id in [0, " + std::to_string(n) + ")");
}

// CSR offsets of n rows: n + 1 entries, start at 0, never decrease, end at flat_len
inline void csr(const std::string &where, const std::string &offsets_name, const std::vector<int64_t> &off,
                const std::string &flat_name, size_t flat_len, size_t n) {
    length(where, offsets_name, off, n + 1);
    if (off[0] != 0) value_error(where + ": " + offsets_name + "[0] is not 0");
    for (size_t k = 1; k <= n; ++k)
        if (off[k] < off[k - 1]) value_error(where + ": " + offsets_name + " decreases at " + std::to_string(k));
    if (off[n] != static_cast<int64_t>(flat_len))
        value_error(where + ": " + offsets_name + "[" + std::to_string(n) + "] is not len(" + flat_name +
                    ") = " + std::to_string(flat_len));
}

// every tag -2 (unknown), -1 (untagged) or in [0, n_tags); n_tags < 0: unbounded
inline void tag_ids(const std::string &where, const std::string &name, const std::vector<int64_t> &tags,
                    int64_t n_tags) {
    for (size_t k = 0; k < tags.size(); ++k) {
        const int64_t t = tags[k];
        if (t < -2 || (n_tags >= 0 && t >= n_tags)) {
            const std::string bound = n_tags >= 0 ? "in [0, " + str(n_tags) + ")" : std::string(">= 0");
            index_error(where + ": " + name + "[" + std::to_string(k) + "] is not -2, -1 or a tag id " + bound);
        }
    }
}

}  // namespace checks
}  // namespace fastlower
