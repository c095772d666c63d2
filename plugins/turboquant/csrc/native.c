/*
 * Native CPU kernel of lmserde-turboquant: encodes K/V rows into TurboQuant slots and decodes
 * them back. It performs exactly the float32 operations of the pure-torch reference codec
 * (codec_torch.py), in the same order, so both produce identical bytes and identical decoded
 * values. Two instruction paths exist: portable scalar C and AVX2 (+F16C), chosen at run time;
 * both are IEEE-exact and equal to each other.
 *
 * Build requirements for bit-exactness: no fast-math, no FP contraction (-ffp-contract=off),
 * float evaluation in float (FLT_EVAL_METHOD == 0).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "lmserde_turboquant._native needs FLT_EVAL_METHOD == 0 (SSE floating point)"
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TQ_HAVE_AVX2 1
#include <immintrin.h>
#else
#define TQ_HAVE_AVX2 0
#endif

enum { DT_F32 = 0, DT_F16 = 1, DT_BF16 = 2 };
enum { CODEC_FP8 = 0, CODEC_MSE = 1, CODEC_MINMAX = 2 };

#define TQ_MAX_D 1024

typedef struct {
    int d;            /* head_dim: power of two, 8..TQ_MAX_D */
    int dtype;        /* encode: input dtype; decode: output dtype */
    int codec[2];     /* key, value */
    int bits[2];
    int norm_correction;
    int part_off[2];  /* byte offset of the key part (0) and the value part (KPS) */
    int slot;         /* KPS + VPS */
    int stride;       /* bytes per slot in the stream */
    const float *signs;
    const float *tab[2]; /* encode: boundaries; decode: centroids (MSE parts only) */
    float sqrt_d;
} tq_params;

/* ------------------------------------------------------------------------------------------ */
/* Scalar conversions                                                                          */
/* ------------------------------------------------------------------------------------------ */

static inline uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static const float MAGIC_RINT = 8388608.0f; /* 2^23: (t + 2^23) - 2^23 rounds 0 <= t < 2^22 */

/* float32 -> IEEE binary16, round to nearest even; NaN -> 0x7E00 | sign. */
static inline uint16_t f32_to_f16(float f) {
    uint32_t x = f2u(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) return sign | 0x7E00u;
    if (ax >= 0x477FF000u) return sign | 0x7C00u; /* >= 65520 rounds to infinity */
    if (ax < 0x38800000u) {                        /* below 2^-14: subnormal result */
        float t = u2f(ax) * 16777216.0f;           /* * 2^24, exact */
        t = (t + MAGIC_RINT) - MAGIC_RINT;
        return sign | (uint16_t)t;
    }
    ax += 0xC8000FFFu + ((ax >> 13) & 1u); /* rebias exponent (-112 << 23) and round */
    return sign | (uint16_t)(ax >> 13);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0) {
        float v = (float)m * 5.9604644775390625e-08f; /* m * 2^-24, exact */
        return u2f(f2u(v) | sign);
    }
    if (e == 31) return u2f(sign | 0x7F800000u | (m << 13));
    return u2f(sign | ((e + 112u) << 23) | (m << 13));
}

/* float32 -> bfloat16, round to nearest even; NaN -> 0x7FC0 (torch's scalar rule). */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0u;
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline float bf16_to_f32(uint16_t b) { return u2f((uint32_t)b << 16); }

/* float32 (finite) -> float8 e4m3fn, saturating at +-448, round to nearest even. */
static inline uint8_t f32_to_e4m3(float f) {
    uint32_t x = f2u(f);
    uint8_t sign = (uint8_t)((x >> 24) & 0x80u);
    float a = u2f(x & 0x7FFFFFFFu);
    if (a != a) return sign | 0x7Fu;
    if (a > 448.0f) a = 448.0f;
    if (a < 0.015625f) { /* below 2^-6: subnormal, m * 2^-9 */
        float t = a * 512.0f;
        t = (t + MAGIC_RINT) - MAGIC_RINT;
        return sign | (uint8_t)t;
    }
    uint32_t u = f2u(a);
    u += 0xC407FFFFu + ((u >> 20) & 1u); /* rebias exponent (-120 << 23) and round */
    return sign | (uint8_t)(u >> 20);
}

static float E4M3_TABLE[256];

static void init_e4m3_table(void) {
    for (int b = 0; b < 256; b++) {
        int e = (b >> 3) & 0xF, m = b & 7;
        float v;
        if (e == 0) v = (float)m * 0.001953125f; /* 2^-9 */
        else if (e == 15 && m == 7) v = NAN;
        else v = ldexpf(1.0f + (float)m / 8.0f, e - 7);
        E4M3_TABLE[b] = (b & 0x80) ? -v : v;
    }
}

static inline int f16_finite(uint16_t h) { return (h & 0x7C00u) != 0x7C00u; }

/* ------------------------------------------------------------------------------------------ */
/* Scalar row kernels                                                                          */
/* ------------------------------------------------------------------------------------------ */

static void load_row_scalar(const void *src, int dtype, int d, float *x) {
    if (dtype == DT_F32) {
        memcpy(x, src, (size_t)d * 4);
    } else if (dtype == DT_BF16) {
        const uint16_t *s = (const uint16_t *)src;
        for (int i = 0; i < d; i++) x[i] = bf16_to_f32(s[i]);
    } else {
        const uint16_t *s = (const uint16_t *)src;
        for (int i = 0; i < d; i++) x[i] = f16_to_f32(s[i]);
    }
}

static void store_row_scalar(const float *x, int dtype, int d, void *dst) {
    if (dtype == DT_F32) {
        memcpy(dst, x, (size_t)d * 4);
    } else if (dtype == DT_BF16) {
        uint16_t *o = (uint16_t *)dst;
        for (int i = 0; i < d; i++) o[i] = f32_to_bf16(x[i]);
    } else {
        uint16_t *o = (uint16_t *)dst;
        for (int i = 0; i < d; i++) o[i] = f32_to_f16(x[i]);
    }
}

static float fold_sum_scalar(float *s, int d) { /* destroys s; d >= 1 */
    if (d < 1) return 0.0f;
    for (int w = d / 2; w >= 1; w /= 2)
        for (int i = 0; i < w; i++) s[i] = s[i] + s[i + w];
    return s[0];
}

static void fwht_scalar(float *x, int d) {
    for (int h = 1; h < d; h *= 2)
        for (int i = 0; i < d; i += 2 * h)
            for (int j = i; j < i + h; j++) {
                float a = x[j], b = x[j + h];
                x[j] = a + b;
                x[j + h] = a - b;
            }
}

static void pack_scalar(const uint8_t *idx, int d, int bits, uint8_t *out) {
    int nbytes = (d * bits + 7) / 8;
    memset(out, 0, (size_t)nbytes);
    for (int j = 0; j < d; j++) {
        int bit = j * bits;
        uint32_t v = (uint32_t)idx[j] << (bit & 7);
        out[bit >> 3] |= (uint8_t)v;
        if ((bit & 7) + bits > 8) out[(bit >> 3) + 1] |= (uint8_t)(v >> 8);
    }
}

static void unpack_scalar(const uint8_t *in, int d, int bits, uint8_t *idx) {
    int nbytes = (d * bits + 7) / 8;
    uint32_t mask = (1u << bits) - 1u;
    for (int j = 0; j < d; j++) {
        int bit = j * bits, byte = bit >> 3;
        uint32_t w = in[byte];
        if (byte + 1 < nbytes) w |= (uint32_t)in[byte + 1] << 8;
        idx[j] = (uint8_t)((w >> (bit & 7)) & mask);
    }
}

static inline void put_f16(uint8_t *p, float v) {
    uint16_t h = f32_to_f16(v);
    p[0] = (uint8_t)(h & 0xFF);
    p[1] = (uint8_t)(h >> 8);
}

static inline uint16_t get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }

/* Each encoder returns 1 when the row cannot be stored. */
static int encode_mse_scalar(const float *x, const tq_params *p, int part, uint8_t *out) {
    int d = p->d, bits = p->bits[part];
    int nb = (d * bits + 7) / 8, nbound = (1 << bits) - 1;
    const float *bounds = p->tab[part];
    float s[TQ_MAX_D], z[TQ_MAX_D];
    uint8_t idx[TQ_MAX_D];
    for (int i = 0; i < d; i++) s[i] = x[i] * x[i];
    float norm = sqrtf(fold_sum_scalar(s, d));
    for (int i = 0; i < d; i++) z[i] = x[i] * p->signs[i];
    fwht_scalar(z, d);
    float inv = 1.0f / ((norm + 1e-8f) * p->sqrt_d);
    for (int i = 0; i < d; i++) {
        float y = z[i] * inv;
        int c = 0;
        for (int j = 0; j < nbound; j++) c += (y >= bounds[j]);
        idx[i] = (uint8_t)c;
    }
    pack_scalar(idx, d, bits, out);
    uint16_t h = f32_to_f16(norm);
    out[nb] = (uint8_t)(h & 0xFF);
    out[nb + 1] = (uint8_t)(h >> 8);
    return !f16_finite(h);
}

static int encode_minmax_scalar(const float *v, const tq_params *p, int part, uint8_t *out) {
    int d = p->d, bits = p->bits[part];
    int nb = (d * bits + 7) / 8;
    float levels = (float)((1 << bits) - 1);
    uint8_t idx[TQ_MAX_D];
    float lo = v[0], hi = v[0];
    int nan = 0;
    for (int i = 0; i < d; i++) {
        if (v[i] != v[i]) nan = 1;
        if (v[i] < lo) lo = v[i];
        if (v[i] > hi) hi = v[i];
    }
    lo = lo + 0.0f;
    float scale = (hi - lo) / levels;
    if (!(scale > 1e-8f)) scale = 1e-8f;
    for (int i = 0; i < d; i++) {
        float q = (v[i] - lo) / scale + 0.5f;
        q = q < 0.0f ? 0.0f : q;
        q = q > levels ? levels : q;
        idx[i] = (uint8_t)q;
    }
    pack_scalar(idx, d, bits, out);
    uint16_t hs = f32_to_f16(scale), hz = f32_to_f16(lo);
    out[nb] = (uint8_t)(hs & 0xFF);
    out[nb + 1] = (uint8_t)(hs >> 8);
    out[nb + 2] = (uint8_t)(hz & 0xFF);
    out[nb + 3] = (uint8_t)(hz >> 8);
    return nan || !f16_finite(hs) || !f16_finite(hz);
}

static int encode_fp8_scalar(const float *k, const tq_params *p, uint8_t *out) {
    int bad = 0;
    for (int i = 0; i < p->d; i++) {
        float a = fabsf(k[i]);
        if (!(a <= FLT_MAX)) bad = 1;
        out[i] = f32_to_e4m3(k[i]);
    }
    return bad;
}

static void decode_mse_scalar(const uint8_t *in, const tq_params *p, int part, float *x) {
    int d = p->d, bits = p->bits[part];
    int nb = (d * bits + 7) / 8;
    const float *cent = p->tab[part];
    uint8_t idx[TQ_MAX_D];
    float s[TQ_MAX_D];
    unpack_scalar(in, d, bits, idx);
    for (int i = 0; i < d; i++) x[i] = cent[idx[i]];
    float norm = f16_to_f32(get_u16(in + nb));
    float g;
    if (p->norm_correction) {
        for (int i = 0; i < d; i++) s[i] = x[i] * x[i];
        float den = sqrtf(fold_sum_scalar(s, d) + 1e-16f) * p->sqrt_d;
        g = norm / den;
    } else {
        g = norm / p->sqrt_d;
    }
    fwht_scalar(x, d);
    for (int i = 0; i < d; i++) x[i] = (x[i] * g) * p->signs[i];
}

static void decode_minmax_scalar(const uint8_t *in, const tq_params *p, int part, float *v) {
    int d = p->d, bits = p->bits[part];
    int nb = (d * bits + 7) / 8;
    uint8_t idx[TQ_MAX_D];
    unpack_scalar(in, d, bits, idx);
    float scale = f16_to_f32(get_u16(in + nb));
    float zero = f16_to_f32(get_u16(in + nb + 2));
    for (int i = 0; i < d; i++) v[i] = (float)idx[i] * scale + zero;
}

static int encode_part_scalar(const float *x, const tq_params *p, int part, uint8_t *out) {
    switch (p->codec[part]) {
    case CODEC_FP8: return encode_fp8_scalar(x, p, out);
    case CODEC_MSE: return encode_mse_scalar(x, p, part, out);
    default: return encode_minmax_scalar(x, p, part, out);
    }
}

static void decode_part_scalar(const uint8_t *in, const tq_params *p, int part, float *x) {
    switch (p->codec[part]) {
    case CODEC_FP8:
        for (int i = 0; i < p->d; i++) x[i] = E4M3_TABLE[in[i]];
        break;
    case CODEC_MSE: decode_mse_scalar(in, p, part, x); break;
    default: decode_minmax_scalar(in, p, part, x); break;
    }
}

static Py_ssize_t encode_rows_scalar(const char *k, const char *v, Py_ssize_t ks, Py_ssize_t vs,
                                     Py_ssize_t n, uint8_t *out, const tq_params *p) {
    float x[TQ_MAX_D];
    int esz = p->dtype == DT_F32 ? 4 : 2;
    Py_ssize_t first_bad = -1;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint8_t *o = out + r * (Py_ssize_t)p->stride;
        int bad;
        load_row_scalar(k + r * ks * esz, p->dtype, p->d, x);
        bad = encode_part_scalar(x, p, 0, o + p->part_off[0]);
        load_row_scalar(v + r * vs * esz, p->dtype, p->d, x);
        bad |= encode_part_scalar(x, p, 1, o + p->part_off[1]);
        if (p->stride > p->slot) memset(o + p->slot, 0, (size_t)(p->stride - p->slot));
        if (bad && first_bad < 0) first_bad = r;
    }
    return first_bad;
}

static void decode_rows_scalar(const uint8_t *in, Py_ssize_t n, char *k, char *v, Py_ssize_t ks,
                               Py_ssize_t vs, const tq_params *p) {
    float x[TQ_MAX_D];
    int esz = p->dtype == DT_F32 ? 4 : 2;
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint8_t *s = in + r * (Py_ssize_t)p->stride;
        decode_part_scalar(s + p->part_off[0], p, 0, x);
        store_row_scalar(x, p->dtype, p->d, k + r * ks * esz);
        decode_part_scalar(s + p->part_off[1], p, 1, x);
        store_row_scalar(x, p->dtype, p->d, v + r * vs * esz);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* AVX2 + F16C row kernels (the same operations, 8 lanes at a time)                           */
/* ------------------------------------------------------------------------------------------ */
#if TQ_HAVE_AVX2
#define AVX2_FN static inline __attribute__((target("avx2,f16c"), always_inline))
#define AVX2_ENTRY static __attribute__((target("avx2,f16c"), noinline))

/* Per-call constant tables. */
typedef struct {
    __m256 probe[2][4];              /* MSE encode: binary-search probes per part and step */
    __m256 cent_lo[2], cent_hi[2];   /* MSE decode: centroids 0..7 and 8..15 per part */
} avx2_tables;

/* Probes of step s (s = bits-1 .. 0) are bounds[j * 2^(s+1) + 2^s - 1], j < 2^(bits-1-s). */
static void avx2_tables_init(const tq_params *p, avx2_tables *t) {
    memset(t, 0, sizeof(*t));
    for (int part = 0; part < 2; part++) {
        if (p->codec[part] != CODEC_MSE) continue;
        int bits = p->bits[part];
        const float *tab = p->tab[part];
        for (int s = bits - 1; s >= 0; s--) {
            float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (int j = 0; j < (1 << (bits - 1 - s)); j++) v[j] = tab[j * (2 << s) + (1 << s) - 1];
            if (s == bits - 1) /* the first step has one probe: broadcast it */
                for (int j = 1; j < 8; j++) v[j] = v[0];
            memcpy(&t->probe[part][s], v, sizeof(v));
        }
        float c[16] = {0};
        memcpy(c, tab, sizeof(float) << bits);
        memcpy(&t->cent_lo[part], c, 32);
        memcpy(&t->cent_hi[part], c + 8, 32);
    }
}

AVX2_FN __m256 load8(const char *src, int dtype) {
    if (dtype == DT_BF16) {
        __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)src));
        return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
    }
    if (dtype == DT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src));
    return _mm256_loadu_ps((const float *)src);
}

AVX2_FN void store8(__m256 x, int dtype, char *dst) {
    if (dtype == DT_BF16) {
        const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7FFF);
        __m256i u = _mm256_castps_si256(x);
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), one);
        __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, bias), lsb), 16);
        __m256 isnan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
        r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7FC0), _mm256_castps_si256(isnan));
        __m128i lo = _mm256_castsi256_si128(r), hi = _mm256_extracti128_si256(r, 1);
        _mm_storeu_si128((__m128i *)dst, _mm_packus_epi32(lo, hi));
    } else if (dtype == DT_F16) {
        _mm_storeu_si128((__m128i *)dst, _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    } else {
        _mm256_storeu_ps((float *)dst, x);
    }
}

/* Butterflies h = 1, 2, 4 inside one vector: out = partner + (+-self), i.e. (a + b, a - b). */
AVX2_FN __m256 fwht8(__m256 v) {
    const __m256 m1 = _mm256_castsi256_ps(_mm256_setr_epi32(0, INT32_MIN, 0, INT32_MIN, 0,
                                                            INT32_MIN, 0, INT32_MIN));
    const __m256 m2 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, INT32_MIN, INT32_MIN, 0, 0,
                                                            INT32_MIN, INT32_MIN));
    const __m256 m4 = _mm256_castsi256_ps(_mm256_setr_epi32(0, 0, 0, 0, INT32_MIN, INT32_MIN,
                                                            INT32_MIN, INT32_MIN));
    v = _mm256_add_ps(_mm256_permute_ps(v, 0xB1), _mm256_xor_ps(v, m1));
    v = _mm256_add_ps(_mm256_permute_ps(v, 0x4E), _mm256_xor_ps(v, m2));
    return _mm256_add_ps(_mm256_permute2f128_ps(v, v, 1), _mm256_xor_ps(v, m4));
}

/* Sum of the 8 lanes in fold-halves order: lanes i + 4, then i + 2, then i + 1. */
AVX2_FN float fold8(__m256 s) {
    __m128 a = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    a = _mm_add_ps(a, _mm_movehl_ps(a, a));
    a = _mm_add_ss(a, _mm_shuffle_ps(a, a, 1));
    return _mm_cvtss_f32(a);
}

/* count(bounds <= y): branchless binary search. j indexes the probes of the current step and
 * becomes 2j + (y >= probe) after it (the compare mask is -1 when true). */
AVX2_FN __m256i bucket8(__m256 y, const __m256 *probe, const int bits) {
    __m256i j = _mm256_castps_si256(_mm256_cmp_ps(y, probe[bits - 1], _CMP_GE_OQ));
    j = _mm256_sub_epi32(_mm256_setzero_si256(), j);
    for (int s = bits - 2; s >= 0; s--) {
        __m256 thr = _mm256_permutevar8x32_ps(probe[s], j);
        __m256i ge = _mm256_castps_si256(_mm256_cmp_ps(y, thr, _CMP_GE_OQ));
        j = _mm256_sub_epi32(_mm256_add_epi32(j, j), ge);
    }
    return j;
}

AVX2_FN __m256 lookup8(__m256i q, __m256 lo, __m256 hi, const int bits) {
    __m256 a = _mm256_permutevar8x32_ps(lo, q);
    if (bits < 4) return a;
    __m256 b = _mm256_permutevar8x32_ps(hi, q);
    return _mm256_blendv_ps(a, b, _mm256_castsi256_ps(_mm256_slli_epi32(q, 28)));
}

/* 32 indices (four vectors) as 32 bytes in natural order. */
AVX2_FN __m256i bytes32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    __m256i a = _mm256_packs_epi32(q0, q1), b = _mm256_packs_epi32(q2, q3);
    return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, b), order);
}

/* Pack 32 byte indices into 4*bits bytes at out. With more != 0 it may write up to 4 bytes past
 * them (the next group overwrites them); the last group of a row writes exactly its bytes. */
AVX2_FN void pack32(__m256i by, const int bits, uint8_t *out, int more) {
    if (bits == 4) {
        __m256i w = _mm256_maddubs_epi16(by, _mm256_set1_epi16(0x1001)); /* b0 + 16 b1 */
        __m256i pk = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
        _mm_storeu_si128((__m128i *)out, _mm256_castsi256_si128(pk));
    } else if (bits == 3) {
        /* 24 bits per qword; lane 0's six bytes go to bytes 0..5, lane 1's to 6..11 */
        const __m256i sh = _mm256_setr_epi8(0, 1, 2, 8, 9, 10, -1, -1, -1, -1, -1, -1, -1, -1,
                                            -1, -1, -1, -1, -1, -1, -1, -1, 0, 1, 2, 8, 9, 10,
                                            -1, -1, -1, -1);
        __m256i w = _mm256_maddubs_epi16(by, _mm256_set1_epi16(0x0801));   /* b0 + 8 b1 */
        __m256i dw = _mm256_madd_epi16(w, _mm256_set1_epi32(0x00400001)); /* + 64 * next */
        __m256i qw = _mm256_or_si256(dw, _mm256_srli_epi64(dw, 20));
        __m256i pk = _mm256_shuffle_epi8(qw, sh);
        __m128i lo = _mm_or_si128(_mm256_castsi256_si128(pk), _mm256_extracti128_si256(pk, 1));
        if (more) {
            _mm_storeu_si128((__m128i *)out, lo);
        } else {
            uint32_t tail = (uint32_t)_mm_extract_epi32(lo, 2);
            _mm_storel_epi64((__m128i *)out, lo);
            memcpy(out + 8, &tail, 4);
        }
    } else if (bits == 2) {
        __m256i w = _mm256_maddubs_epi16(by, _mm256_set1_epi16(0x0401));   /* b0 + 4 b1 */
        __m256i dw = _mm256_madd_epi16(w, _mm256_set1_epi32(0x00100001)); /* + 16 * next */
        const __m256i zero = _mm256_setzero_si256();
        __m256i pk = _mm256_packus_epi16(_mm256_packus_epi32(dw, zero), zero); /* 4 bytes per lane */
        __m128i hi = _mm_slli_si128(_mm256_extracti128_si256(pk, 1), 4);
        _mm_storel_epi64((__m128i *)out, _mm_or_si128(_mm256_castsi256_si128(pk), hi));
    } else {
        uint8_t idx[32];
        _mm256_storeu_si256((__m256i *)idx, by);
        pack_scalar(idx, 32, bits, out);
    }
}

/* Indices 8g .. 8g+7 from a zero-padded packed buffer (group g starts at byte g*bits). */
AVX2_FN __m256i unpack8(const uint8_t *buf, int g, const int bits) {
    const __m256i shifts = _mm256_setr_epi32(0, bits, 2 * bits, 3 * bits, 4 * bits, 5 * bits,
                                             6 * bits, 7 * bits);
    uint32_t w;
    memcpy(&w, buf + g * bits, 4);
    return _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32((int)w), shifts),
                            _mm256_set1_epi32((1 << bits) - 1));
}

/* float8 e4m3fn codes (as int32 lanes); lanes with inf/NaN input are flagged in *bad. */
AVX2_FN __m256i fp8x8(__m256 k, __m256 *bad) {
    const __m256 absmask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    const __m256 magic = _mm256_set1_ps(MAGIC_RINT);
    const __m256i one = _mm256_set1_epi32(1);
    __m256 a = _mm256_and_ps(k, absmask);
    *bad = _mm256_or_ps(*bad, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
    a = _mm256_min_ps(a, _mm256_set1_ps(448.0f));
    __m256 t = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(a, _mm256_set1_ps(512.0f)), magic), magic);
    __m256i sub = _mm256_cvttps_epi32(t);
    __m256i u = _mm256_castps_si256(a);
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(u, 20), one);
    __m256i nrm = _mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32((int)0xC407FFFFu)), odd);
    nrm = _mm256_and_si256(_mm256_srli_epi32(nrm, 20), _mm256_set1_epi32(0x7F));
    __m256 is_sub = _mm256_cmp_ps(a, _mm256_set1_ps(0.015625f), _CMP_LT_OQ);
    __m256i code = _mm256_blendv_epi8(nrm, sub, _mm256_castps_si256(is_sub));
    __m256i sign = _mm256_srli_epi32(_mm256_castps_si256(k), 31);
    return _mm256_or_si256(code, _mm256_slli_epi32(sign, 7));
}

AVX2_FN int put_f16_bytes(uint8_t *o, float v) {
    uint16_t h = f32_to_f16(v);
    o[0] = (uint8_t)(h & 0xFF);
    o[1] = (uint8_t)(h >> 8);
    return f16_finite(h);
}

AVX2_FN void minmax8(__m256 mn, __m256 mx, float *lo, float *hi) {
    __m128 a = _mm_min_ps(_mm256_castps256_ps128(mn), _mm256_extractf128_ps(mn, 1));
    __m128 b = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
    a = _mm_min_ps(a, _mm_movehl_ps(a, a));
    b = _mm_max_ps(b, _mm_movehl_ps(b, b));
    a = _mm_min_ss(a, _mm_shuffle_ps(a, a, 1));
    b = _mm_max_ss(b, _mm_shuffle_ps(b, b, 1));
    *lo = _mm_cvtss_f32(a);
    *hi = _mm_cvtss_f32(b);
}

#define TQ_CAT2(a, b) a##b
#define TQ_CAT(a, b) TQ_CAT2(a, b)
#define NV 4
#include "native_avx2_rows.h"
#undef NV
#define NV 8
#include "native_avx2_rows.h"
#undef NV
#define NV 16
#include "native_avx2_rows.h"
#undef NV
#define NV 32
#include "native_avx2_rows.h"
#undef NV
#define NV 64
#include "native_avx2_rows.h"
#undef NV

static Py_ssize_t encode_rows_avx2(const char *k, const char *v, Py_ssize_t ks, Py_ssize_t vs,
                                   Py_ssize_t n, uint8_t *out, const tq_params *p) {
    avx2_tables t;
    avx2_tables_init(p, &t);
    switch (p->d) {
    case 32: return encode_rows_avx2_4(k, v, ks, vs, n, out, p, &t);
    case 64: return encode_rows_avx2_8(k, v, ks, vs, n, out, p, &t);
    case 128: return encode_rows_avx2_16(k, v, ks, vs, n, out, p, &t);
    case 256: return encode_rows_avx2_32(k, v, ks, vs, n, out, p, &t);
    case 512: return encode_rows_avx2_64(k, v, ks, vs, n, out, p, &t);
    default: return encode_rows_scalar(k, v, ks, vs, n, out, p);
    }
}

static void decode_rows_avx2(const uint8_t *in, Py_ssize_t n, char *k, char *v, Py_ssize_t ks,
                             Py_ssize_t vs, const tq_params *p) {
    avx2_tables t;
    avx2_tables_init(p, &t);
    switch (p->d) {
    case 32: decode_rows_avx2_4(in, n, k, v, ks, vs, p, &t); break;
    case 64: decode_rows_avx2_8(in, n, k, v, ks, vs, p, &t); break;
    case 128: decode_rows_avx2_16(in, n, k, v, ks, vs, p, &t); break;
    case 256: decode_rows_avx2_32(in, n, k, v, ks, vs, p, &t); break;
    case 512: decode_rows_avx2_64(in, n, k, v, ks, vs, p, &t); break;
    default: decode_rows_scalar(in, n, k, v, ks, vs, p); break;
    }
}

static int cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
}
#else
static int cpu_has_avx2(void) { return 0; }
#endif

/* ------------------------------------------------------------------------------------------ */
/* Python bindings                                                                             */
/* ------------------------------------------------------------------------------------------ */

static int HAVE_AVX2 = 0;

static int check_params(tq_params *p) {
    if (p->d < 8 || p->d > TQ_MAX_D || (p->d & (p->d - 1)) != 0) {
        PyErr_Format(PyExc_ValueError, "head_dim must be a power of two in 8..%d, got %d",
                     TQ_MAX_D, p->d);
        return -1;
    }
    if (p->dtype < DT_F32 || p->dtype > DT_BF16) {
        PyErr_SetString(PyExc_ValueError, "unsupported dtype code");
        return -1;
    }
    for (int part = 0; part < 2; part++) {
        int c = p->codec[part], b = p->bits[part];
        if (c < CODEC_FP8 || c > CODEC_MINMAX || (c != CODEC_FP8 && (b < 1 || b > 4))) {
            PyErr_SetString(PyExc_ValueError, "invalid part codec or bit width");
            return -1;
        }
        if (c == CODEC_MSE && p->tab[part] == NULL) {
            PyErr_SetString(PyExc_ValueError, "MSE part needs a codebook table");
            return -1;
        }
    }
    if (p->slot > p->stride) {
        PyErr_SetString(PyExc_ValueError, "slot stride smaller than the slot");
        return -1;
    }
    return 0;
}

/* Arguments shared by encode and decode: rows of n_layers layers, slots [n_layers, padded, stride]. */
typedef struct {
    const char *k, *v;             /* first row of the first layer */
    uint8_t *slots;
    Py_ssize_t k_row, v_row;       /* row strides (elements) */
    Py_ssize_t k_layer, v_layer;   /* layer strides (elements) */
    Py_ssize_t n_layers, n_rows, padded_rows;
    const float *signs;            /* [n_layers, d] */
    int simd;
} tq_call;

static int parse_call(PyObject *args, tq_call *c, tq_params *p) {
    unsigned long long kp, vp, sp, signs, tab0, tab1;
    double sqrt_d;
    if (!PyArg_ParseTuple(args, "KKKnnnnnnniiiiiiiiiipKKKd", &kp, &vp, &sp, &c->k_row, &c->v_row,
                          &c->k_layer, &c->v_layer, &c->n_layers, &c->n_rows, &c->padded_rows,
                          &p->d, &p->dtype, &p->codec[0], &p->bits[0], &p->codec[1],
                          &p->bits[1], &p->norm_correction, &p->part_off[1], &p->slot,
                          &p->stride, &c->simd, &signs, &tab0, &tab1, &sqrt_d))
        return -1;
    c->k = (const char *)(uintptr_t)kp;
    c->v = (const char *)(uintptr_t)vp;
    c->slots = (uint8_t *)(uintptr_t)sp;
    c->signs = (const float *)(uintptr_t)signs;
    p->part_off[0] = 0;
    p->signs = c->signs;
    p->tab[0] = (const float *)(uintptr_t)tab0;
    p->tab[1] = (const float *)(uintptr_t)tab1;
    p->sqrt_d = (float)sqrt_d;
    if (c->n_layers < 0 || c->n_rows < 0 || c->padded_rows < c->n_rows || c->k_row < p->d ||
        c->v_row < p->d) {
        PyErr_SetString(PyExc_ValueError, "invalid layer/row counts or row strides");
        return -1;
    }
    return check_params(p);
}

#define ARGS_DOC \
    "(k_ptr, v_ptr, slots_ptr, k_row_stride, v_row_stride, k_layer_stride, v_layer_stride,\n" \
    " n_layers, n_rows, padded_rows, head_dim, dtype, key_codec, key_bits, value_codec,\n" \
    " value_bits, norm_correction, value_offset, slot_bytes, slot_stride, simd, signs_ptr,\n" \
    " key_table_ptr, value_table_ptr, sqrt_d)\n" \
    "Rows of layer l start at ptr + l * layer_stride (strides in elements); slots are\n" \
    "[n_layers, padded_rows, slot_stride] bytes; signs are float32 [n_layers, head_dim].\n"

static const char encode_doc[] =
    "encode" ARGS_DOC "-> -1, or layer * n_rows + row of the first row that cannot be stored.\n"
    "Slot rows n_rows..padded_rows-1 of each layer are zeroed. Tables are codebook boundaries.\n"
    "Raw pointers: the caller guarantees them.";

static PyObject *py_encode(PyObject *self, PyObject *args) {
    tq_call c;
    tq_params p;
    Py_ssize_t bad = -1;
    (void)self;
    if (parse_call(args, &c, &p) < 0) return NULL;
    const int esz = p.dtype == DT_F32 ? 4 : 2;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t l = 0; l < c.n_layers; l++) {
        const char *k = c.k + l * c.k_layer * esz, *v = c.v + l * c.v_layer * esz;
        uint8_t *out = c.slots + l * c.padded_rows * (Py_ssize_t)p.stride;
        Py_ssize_t r;
        p.signs = c.signs + l * p.d;
#if TQ_HAVE_AVX2
        if (c.simd && HAVE_AVX2)
            r = encode_rows_avx2(k, v, c.k_row, c.v_row, c.n_rows, out, &p);
        else
#endif
            r = encode_rows_scalar(k, v, c.k_row, c.v_row, c.n_rows, out, &p);
        memset(out + c.n_rows * (Py_ssize_t)p.stride, 0,
               (size_t)((c.padded_rows - c.n_rows) * (Py_ssize_t)p.stride));
        if (r >= 0 && bad < 0) bad = l * c.n_rows + r;
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(bad);
}

static const char decode_doc[] =
    "decode" ARGS_DOC "-> None. The row pointers are the outputs; tables are codebook\n"
    "centroids. Raw pointers: the caller guarantees them.";

static PyObject *py_decode(PyObject *self, PyObject *args) {
    tq_call c;
    tq_params p;
    (void)self;
    if (parse_call(args, &c, &p) < 0) return NULL;
    const int esz = p.dtype == DT_F32 ? 4 : 2;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t l = 0; l < c.n_layers; l++) {
        char *k = (char *)c.k + l * c.k_layer * esz, *v = (char *)c.v + l * c.v_layer * esz;
        const uint8_t *in = c.slots + l * c.padded_rows * (Py_ssize_t)p.stride;
        p.signs = c.signs + l * p.d;
#if TQ_HAVE_AVX2
        if (c.simd && HAVE_AVX2)
            decode_rows_avx2(in, c.n_rows, k, v, c.k_row, c.v_row, &p);
        else
#endif
            decode_rows_scalar(in, c.n_rows, k, v, c.k_row, c.v_row, &p);
    }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_simd_isa(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(HAVE_AVX2 ? "avx2" : "scalar");
}

static PyMethodDef methods[] = {
    {"encode", py_encode, METH_VARARGS, encode_doc},
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"simd_isa", py_simd_isa, METH_NOARGS, "The SIMD path used when simd=True."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_native", "Native TurboQuant slot codec (see codec_native.py).", -1,
    methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__native(void) {
    init_e4m3_table();
    HAVE_AVX2 = cpu_has_avx2();
    return PyModule_Create(&module);
}
