#pragma once
// Python-style checked indexing shared by the planning areas: the twin raises
// IndexError on a bad index, so the core does too (pybind11 maps out_of_range).

#include <cstdint>
#include <stdexcept>
#include <vector>

namespace fastlower {

inline int64_t py_at(const std::vector<int64_t> &v, int64_t i) {
    const int64_t n = static_cast<int64_t>(v.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) throw std::out_of_range("list index out of range");
    return v[static_cast<size_t>(i)];
}

}  // namespace fastlower
