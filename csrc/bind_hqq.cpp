// Area "hqq": torchao's scale-only HQQ steps over float32 buffers (see hqq.hpp).
// The caller passes contiguous numpy views of its tensors and keeps them alive; the
// GIL is released while the kernels run.
#include <string>

#include "bindings.hpp"
#include "hqq.hpp"

namespace fastlower {

namespace {

py::buffer_info matrix(const py::buffer &b, const char *name, const std::string &format,
                       bool writable) {
    py::buffer_info info = b.request(writable);
    if (info.format != format || info.ndim != 2)
        throw py::value_error(std::string("hqq: ") + name + " must be a 2-D " + format + " buffer");
    if (info.strides[1] != info.itemsize || info.strides[0] != info.itemsize * info.shape[1])
        throw py::value_error(std::string("hqq: ") + name + " must be C-contiguous");
    return info;
}

hqq::Shape shape_of(const py::buffer_info &w, int64_t group) {
    hqq::Shape s{w.shape[0], w.shape[1], group};
    if (group < hqq::kMinGroup || group > hqq::kMaxGroup || group % 8 != 0 || s.cols % group != 0)
        throw py::value_error("hqq: the group must be a multiple of 8 in [8, 4096] dividing the columns");
    return s;
}

const std::string kFloat = py::format_descriptor<float>::format();
const std::string kInt32 = py::format_descriptor<int32_t>::format();

py::buffer_info scales(const py::buffer &b, const hqq::Shape &s, bool writable) {
    py::buffer_info info = matrix(b, "scale", kFloat, writable);
    if (info.shape[0] != s.rows || info.shape[1] != s.cols / s.group)
        throw py::value_error("hqq: scale must have one entry per group");
    return info;
}

bool init_scale(const py::buffer &w, int64_t group, float qabs, float eps, const py::buffer &scale,
                int threads) {
    py::buffer_info wi = matrix(w, "w", kFloat, false);
    const hqq::Shape s = shape_of(wi, group);
    py::buffer_info si = scales(scale, s, true);
    py::gil_scoped_release release;
    return hqq::init_scale(static_cast<const float *>(wi.ptr), s, qabs, eps, static_cast<float *>(si.ptr),
                           threads);
}

float step(const py::buffer &w, int64_t group, float qmin, float qmax, float eps, const py::buffer &scale,
           int threads) {
    py::buffer_info wi = matrix(w, "w", kFloat, false);
    const hqq::Shape s = shape_of(wi, group);
    py::buffer_info si = scales(scale, s, true);
    py::gil_scoped_release release;
    return hqq::step(static_cast<const float *>(wi.ptr), s, qmin, qmax, eps, static_cast<float *>(si.ptr),
                     threads);
}

void quantize(const py::buffer &w, int64_t group, float qmin, float qmax, const py::buffer &scale,
              const py::buffer &q, int threads) {
    py::buffer_info wi = matrix(w, "w", kFloat, false);
    const hqq::Shape s = shape_of(wi, group);
    py::buffer_info si = scales(scale, s, false);
    py::buffer_info qi = matrix(q, "q", kInt32, true);
    if (qi.shape[0] != s.rows || qi.shape[1] != s.cols) throw py::value_error("hqq: q must have w's shape");
    py::gil_scoped_release release;
    hqq::quantize(static_cast<const float *>(wi.ptr), s, qmin, qmax, static_cast<const float *>(si.ptr),
                  static_cast<int32_t *>(qi.ptr), threads);
}

float ordered_sum(const py::buffer &x) {
    py::buffer_info info = x.request();
    if (info.format != kFloat || info.ndim != 1 || info.strides[0] != info.itemsize)
        throw py::value_error("hqq: x must be a contiguous 1-D float32 buffer");
    if (info.shape[0] < hqq::kMinGroup || info.shape[0] > hqq::kMaxGroup || info.shape[0] % 8 != 0)
        throw py::value_error("hqq: the length must be a multiple of 8 in [8, 4096]");
    return hqq::ordered_sum(static_cast<const float *>(info.ptr), info.shape[0]);
}

}  // namespace

void register_hqq(py::module_ &m) {
    m.def("hqq_init_scale", &init_scale, py::arg("w"), py::arg("group"), py::arg("qabs"), py::arg("eps"),
          py::arg("scale"), py::arg("threads"));
    m.def("hqq_step", &step, py::arg("w"), py::arg("group"), py::arg("qmin"), py::arg("qmax"), py::arg("eps"),
          py::arg("scale"), py::arg("threads"));
    m.def("hqq_quantize", &quantize, py::arg("w"), py::arg("group"), py::arg("qmin"), py::arg("qmax"),
          py::arg("scale"), py::arg("q"), py::arg("threads"));
    m.def("hqq_ordered_sum", &ordered_sum, py::arg("x"));
    m.def("hqq_uses_avx2", &hqq::uses_avx2);
    m.def("hqq_force_portable", &hqq::force_portable, py::arg("on"));
}

}  // namespace fastlower
