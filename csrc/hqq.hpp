// Area "hqq": torchao's scale-only HQQ quantization of a 2-D weight, fused per group
// (twin: fastlower/core/twin/hqq.py).
//
// torchao's _choose_qparams_and_quantize_scale_only_hqq runs each step as a torch
// operator over the whole weight (a division, a round, a clamp, two products, two sums
// per iteration, each a new tensor).  Each group of `group` consecutive weights is
// independent of the others but for the early stop (the largest relative change over
// all groups), so one pass per iteration computes every group's step in cache.  The
// arithmetic is the same float32 operations in the same order as torch's CPU kernels:
// element-wise steps are exactly rounded IEEE operations, and the two sums add in the
// order of torch's vectorized inner-dimension sum (SumKernel.cpp: 8-lane vectors, four
// accumulators, cascade levels, a scalar tail, then the lanes), so the results are
// torchao's bit for bit.  The caller (fastlower/quantize/hqq.py) checks that premise
// once per process against torchao and keeps to the inputs it covers.
#pragma once

#include <cstdint>

namespace fastlower {
namespace hqq {

struct Shape {
    int64_t rows = 0;   // n
    int64_t cols = 0;   // k, a multiple of group
    int64_t group = 0;  // elements per group, kMinGroup..kMaxGroup
};

constexpr int64_t kMinGroup = 8;     // torch's vectorized sum needs a full vector
constexpr int64_t kMaxGroup = 4096;  // one cascade level: a group's sums stay in order

// scale[g] = max(|w| over group g) / qabs, clamped below at eps.  Returns whether every
// weight is finite (the kernels' premise; torchao's amax would propagate a NaN).
bool init_scale(const float *w, const Shape &s, float qabs, float eps, float *scale, int threads);

// One HQQ iteration in place: quantize with scale, solve the least-squares scale, keep
// the old one where the quantized group is all zeros, clamp at eps, take |.|.  Returns
// the largest relative change (NaN when any change is NaN, as torch's max).
float step(const float *w, const Shape &s, float qmin, float qmax, float eps, float *scale,
           int threads);

// q = clamp(round(w / scale), qmin, qmax) as int32.
void quantize(const float *w, const Shape &s, float qmin, float qmax, const float *scale,
              int32_t *q, int threads);

// torch's CPU sum of n float32 values over a contiguous inner dimension, in its order
// (exposed for tests of the order itself).
float ordered_sum(const float *x, int64_t n);

// Whether the AVX2 kernels run (else the portable ones; both give the same bits).
bool uses_avx2();
void force_portable(bool on);

}  // namespace hqq
}  // namespace fastlower
