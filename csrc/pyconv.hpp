// Fast conversions between Python sequences and C++ vectors, shared by the
// bind_<area>.cpp files (binding-side only).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

namespace fastlower {
namespace pyconv {

namespace py = pybind11;

// operator.index(o) as int64; OverflowError beyond int64.
inline int64_t to_i64(PyObject *o) {
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(o));
    if (!idx) throw py::error_already_set();
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
    if (overflow) throw std::overflow_error("Python int too large to convert to int64");
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return v;
}

// Same, saturating instead of raising (for range filters).
inline int64_t to_i64_saturating(PyObject *o) {
    py::object idx = py::reinterpret_steal<py::object>(PyNumber_Index(o));
    if (!idx) throw py::error_already_set();
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(idx.ptr(), &overflow);
    if (overflow) return overflow > 0 ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    return v;
}

class FastSeq {
  public:
    explicit FastSeq(py::handle seq)
        : obj_(py::reinterpret_steal<py::object>(PySequence_Fast(seq.ptr(), "expected a sequence"))) {
        if (!obj_) throw py::error_already_set();
        n_ = PySequence_Fast_GET_SIZE(obj_.ptr());
        items_ = PySequence_Fast_ITEMS(obj_.ptr());
    }
    size_t size() const { return static_cast<size_t>(n_); }
    PyObject *operator[](size_t i) const { return items_[i]; }

  private:
    py::object obj_;
    Py_ssize_t n_ = 0;
    PyObject **items_ = nullptr;
};

template <class T = int64_t>
inline std::vector<T> ints(py::handle seq) {
    FastSeq s(seq);
    std::vector<T> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        int64_t v = to_i64(s[i]);
        if (v < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
            v > static_cast<int64_t>(std::numeric_limits<T>::max()))
            throw std::overflow_error("value out of range");
        out[i] = static_cast<T>(v);
    }
    return out;
}

// Same, each value clamped to int64 (arrays whose values are range-checked
// afterwards: a value beyond int64 fails that check like any other bad value).
inline std::vector<int64_t> ints_saturating(py::handle seq) {
    FastSeq s(seq);
    std::vector<int64_t> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = to_i64_saturating(s[i]);
    return out;
}

// truthiness of each element (bools / 0-1 ints)
inline std::vector<uint8_t> flags(py::handle seq) {
    FastSeq s(seq);
    std::vector<uint8_t> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) {
        int t = PyObject_IsTrue(s[i]);
        if (t < 0) throw py::error_already_set();
        out[i] = static_cast<uint8_t>(t);
    }
    return out;
}

inline std::string utf8(PyObject *o) {
    Py_ssize_t len = 0;
    const char *p = PyUnicode_AsUTF8AndSize(o, &len);
    if (!p) throw py::error_already_set();
    return std::string(p, static_cast<size_t>(len));
}

inline std::vector<std::string> strings(py::handle seq) {
    FastSeq s(seq);
    std::vector<std::string> out(s.size());
    for (size_t i = 0; i < s.size(); ++i) out[i] = utf8(s[i]);
    return out;
}

template <class V>
inline py::list to_list(const V &v) {
    py::list out(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
        PyObject *x = PyLong_FromLongLong(static_cast<long long>(v[i]));
        if (!x) throw py::error_already_set();
        PyList_SET_ITEM(out.ptr(), static_cast<Py_ssize_t>(i), x);
    }
    return out;
}

inline py::str to_str(const std::string &s) {
    PyObject *o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "strict");
    if (!o) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(o);
}

}  // namespace pyconv
}  // namespace fastlower
