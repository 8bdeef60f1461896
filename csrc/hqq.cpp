// Area "hqq" (see hqq.hpp): the kernels of hqq_kernel.inc, built portable and, on
// x86-64, for AVX2, run over row ranges on `threads` threads.
#include "hqq.hpp"

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <system_error>
#include <thread>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FASTLOWER_HQQ_AVX2 1
#include <immintrin.h>
#else
#define FASTLOWER_HQQ_AVX2 0
#endif

namespace fastlower {
namespace hqq {

namespace portable {

struct V {
    float v[8];
};

inline V vset1(float x) {
    V r;
    for (float &lane : r.v) lane = x;
    return r;
}
inline V vzero() { return vset1(0.0f); }
inline V vload(const float *p) {
    V r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
}
inline void vstore(float *p, const V &a) { std::memcpy(p, a.v, sizeof a.v); }
#define FASTLOWER_LANEWISE(name, expr)          \
    inline V name(const V &a, const V &b) {     \
        V r;                                    \
        for (int l = 0; l < 8; ++l) {           \
            const float x = a.v[l], y = b.v[l]; \
            r.v[l] = (expr);                    \
        }                                       \
        return r;                               \
    }
FASTLOWER_LANEWISE(vadd, x + y)
FASTLOWER_LANEWISE(vmul, x * y)
FASTLOWER_LANEWISE(vdiv, x / y)
#undef FASTLOWER_LANEWISE
// ties to even, as torch's round (std::nearbyint in the default rounding mode)
inline V vround(const V &a) {
    V r;
    for (int l = 0; l < 8; ++l) r.v[l] = std::nearbyint(a.v[l]);
    return r;
}
// torch's vectorized clamp: min(hi, max(lo, a)) with x86's operand rule (a NaN operand
// gives the second)
inline V vclamp(const V &a, const V &lo, const V &hi) {
    V r;
    for (int l = 0; l < 8; ++l) {
        const float t = lo.v[l] > a.v[l] ? lo.v[l] : a.v[l];
        r.v[l] = hi.v[l] < t ? hi.v[l] : t;
    }
    return r;
}

#include "hqq_kernel.inc"

}  // namespace portable

#if FASTLOWER_HQQ_AVX2
#pragma GCC push_options
#pragma GCC target("avx2")
namespace avx2 {

using V = __m256;
inline V vset1(float x) { return _mm256_set1_ps(x); }
inline V vzero() { return _mm256_setzero_ps(); }
inline V vload(const float *p) { return _mm256_loadu_ps(p); }
inline void vstore(float *p, V a) { _mm256_storeu_ps(p, a); }
inline V vadd(V a, V b) { return _mm256_add_ps(a, b); }
inline V vmul(V a, V b) { return _mm256_mul_ps(a, b); }
inline V vdiv(V a, V b) { return _mm256_div_ps(a, b); }
inline V vround(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
inline V vclamp(V a, V lo, V hi) { return _mm256_min_ps(hi, _mm256_max_ps(lo, a)); }

#include "hqq_kernel.inc"

}  // namespace avx2
#pragma GCC pop_options
#endif

namespace {

std::atomic<bool> g_portable{false};

bool avx2_available() {
#if FASTLOWER_HQQ_AVX2
    static const bool has = __builtin_cpu_supports("avx2");
    return has;
#else
    return false;
#endif
}

// Runs fn(row0, row1) over [0, rows) split in `threads` contiguous ranges; the ranges'
// results in order.
template <class Fn>
auto over_rows(int64_t rows, int threads, Fn fn) -> std::vector<decltype(fn(int64_t(0), int64_t(0)))> {
    using R = decltype(fn(int64_t(0), int64_t(0)));
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(threads, rows));
    std::vector<R> out(parts);
    std::vector<std::thread> pool;
    const int64_t per = rows / parts, extra = rows % parts;
    int64_t start = 0;
    for (int64_t p = 0; p < parts; ++p) {
        const int64_t end = start + per + (p < extra ? 1 : 0);
        bool started = false;
        if (p + 1 < parts) {  // the calling thread takes the last range, and any it cannot hand on
            try {
                pool.emplace_back([&out, p, start, end, &fn] { out[p] = fn(start, end); });
                started = true;
            } catch (const std::system_error &) {
            }
        }
        if (!started) out[p] = fn(start, end);
        start = end;
    }
    for (auto &t : pool) t.join();
    return out;
}

}  // namespace

bool uses_avx2() { return avx2_available() && !g_portable.load(); }
void force_portable(bool on) { g_portable.store(on); }

bool init_scale(const float *w, const Shape &s, float qabs, float eps, float *scale, int threads) {
    const bool fast = uses_avx2();
    const auto parts = over_rows(s.rows, threads, [&](int64_t a, int64_t b) {
#if FASTLOWER_HQQ_AVX2
        if (fast) return avx2::init_rows(w, s, qabs, eps, scale, a, b);
#endif
        (void)fast;
        return portable::init_rows(w, s, qabs, eps, scale, a, b);
    });
    return std::all_of(parts.begin(), parts.end(), [](int finite) { return finite == 1; });
}

float step(const float *w, const Shape &s, float qmin, float qmax, float eps, float *scale,
           int threads) {
    const bool fast = uses_avx2();
    const auto parts = over_rows(s.rows, threads, [&](int64_t a, int64_t b) {
#if FASTLOWER_HQQ_AVX2
        if (fast) return avx2::step_rows(w, s, qmin, qmax, eps, scale, a, b);
#endif
        (void)fast;
        return portable::step_rows(w, s, qmin, qmax, eps, scale, a, b);
    });
    float rel = parts.front();
    for (float r : parts) rel = portable::max_nan(rel, r);
    return rel;
}

void quantize(const float *w, const Shape &s, float qmin, float qmax, const float *scale,
              int32_t *q, int threads) {
    const bool fast = uses_avx2();
    over_rows(s.rows, threads, [&](int64_t a, int64_t b) {
#if FASTLOWER_HQQ_AVX2
        if (fast) return avx2::quantize_rows(w, s, qmin, qmax, scale, q, a, b), 0;
#endif
        (void)fast;
        return portable::quantize_rows(w, s, qmin, qmax, scale, q, a, b), 0;
    });
}

float ordered_sum(const float *x, int64_t n) {
#if FASTLOWER_HQQ_AVX2
    if (uses_avx2()) return avx2::sum_floats(x, n);
#endif
    return portable::sum_floats(x, n);
}

}  // namespace hqq
}  // namespace fastlower
