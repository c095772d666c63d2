/*
 * lmserde_fp8._fastcodec: fp8 encode/decode kernels.
 *
 * Contract (pinned; identical on every path, see docs/plugins/fp8.md "Range behaviour"):
 *   encode: round to nearest, ties to even, exactly like torch 2.13's CPU cast. Finite values beyond
 *           the range: float8_e4m3fn saturates to +-448 (also +-inf); float8_e5m2 rounds to +-inf
 *           (IEEE overflow) unless a scale is given, in which case values are clamped to +-57344.
 *           NaN -> 0x7F | sign.  With a scale, x is divided by (float)scale in float32 first.
 *   decode: the exact fp8 value in the destination dtype; NaN codes give torch 2.13's NaN bit patterns.
 *           With a scale, the float32 value is multiplied by (float)scale and rounded to the
 *           destination (to-nearest-even; a NaN becomes 0xFFFF in bfloat16, as torch 2.13 does).
 *
 * Two implementations: a portable scalar one and an AVX2/F16C one selected at run time (in which
 * bfloat16 divided by a scale goes through per-call code tables, looked up with AVX-512 VBMI on
 * CPUs that have it). All run with the default floating-point environment (round to nearest, no
 * flush-to-zero) and release the GIL. Callers pass raw addresses; the Python layer
 * (lmserde_fp8.kernel) validates sizes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <float.h>
#include <stdint.h>
#include <string.h>

#if !defined(FLT_EVAL_METHOD) || FLT_EVAL_METHOD != 0
#error "fp8 kernels need single-precision float evaluation (FLT_EVAL_METHOD == 0)"
#endif

#if defined(__GNUC__) && defined(__x86_64__)
#define FP8_HAVE_AVX2 1
#include <immintrin.h>
#define AVX2_FN __attribute__((target("avx2,f16c")))
#else
#define FP8_HAVE_AVX2 0
#endif

enum { KIND_F32 = 0, KIND_BF16 = 1, KIND_F16 = 2 };
enum { FP8_E4M3FN = 0, FP8_E5M2 = 1 };

static inline uint32_t f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static inline uint32_t msb_index(uint32_t m) { /* m in 1..7 */
    return m >= 4 ? 2u : (m >= 2 ? 1u : 0u);
}

/* ------------------------------------------------------------------ float conversions (scalar) */

static uint32_t f16_to_f32_bits(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1Fu) return sign | 0x7F800000u | (m << 13) | (m ? 0x400000u : 0u);
    if (e == 0) return m ? sign | f32_bits((float)m * 0x1p-24f) : sign;
    return sign | ((e + 112u) << 23) | (m << 13);
}

static uint16_t f32_to_f16_bits(uint32_t u) {
    uint32_t sign = (u >> 16) & 0x8000u;
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return (uint16_t)(sign | 0x7E00u | ((a >> 13) & 0x3FFu));
    if (a >= 0x477FF000u) return (uint16_t)(sign | 0x7C00u); /* rounds to inf (65520 and up) */
    if (a >= 0x38800000u)                                     /* fp16 normal (>= 2^-14) */
        return (uint16_t)(sign | ((a - (112u << 23) + 0xFFFu + ((a >> 13) & 1u)) >> 13));
    return (uint16_t)(sign | (f32_bits(bits_f32(a) + 0.5f) - 0x3F000000u));
}

static inline uint16_t f32_to_bf16_bits(uint32_t u) {
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return 0xFFFFu;
    return (uint16_t)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

/* ------------------------------------------------------------------ encode parameters */

typedef struct {
    uint32_t clamp;      /* |x| bits are clamped to this before rounding (NaN excluded) */
    uint32_t min_normal; /* fp32 bits of the smallest fp8 normal magnitude */
    uint32_t rebias;     /* exponent rebias plus the round-half-down bias, added mod 2^32 */
    uint32_t magic;      /* fp32 bits of 2^(min subnormal exponent + 23) */
} enc_params;

static enc_params make_params(int fp8, int scaled) {
    enc_params p;
    if (fp8 == FP8_E4M3FN) {
        p.clamp = 0x43E00000u;                           /* 448 */
        p.min_normal = 121u << 23;                       /* 2^-6 */
        p.rebias = (uint32_t)0 - (120u << 23) + 0x7FFFFu;
        p.magic = 141u << 23;                            /* 2^14: grid 2^-9 */
    } else {
        p.clamp = scaled ? 0x47600000u /* 57344 */ : 0x47800000u /* 65536 -> inf */;
        p.min_normal = 113u << 23;                       /* 2^-14 */
        p.rebias = (uint32_t)0 - (112u << 23) + 0xFFFFFu;
        p.magic = 134u << 23;                            /* 2^7: grid 2^-16 */
    }
    return p;
}

static inline uint8_t enc_one(uint32_t u, const enc_params *p, int shift) {
    uint32_t sign = (u >> 24) & 0x80u;
    uint32_t a = u & 0x7FFFFFFFu, r;
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
    if (a > p->clamp) a = p->clamp;
    if (a < p->min_normal)
        r = f32_bits(bits_f32(a) + bits_f32(p->magic)) - p->magic;
    else
        r = (a + p->rebias + ((a >> shift) & 1u)) >> shift;
    return (uint8_t)(r | sign);
}

static inline uint32_t load_bits(const unsigned char *src, int kind, size_t i) {
    if (kind == KIND_F32) { uint32_t u; memcpy(&u, src + 4 * i, 4); return u; }
    uint16_t h;
    memcpy(&h, src + 2 * i, 2);
    return kind == KIND_BF16 ? (uint32_t)h << 16 : f16_to_f32_bits(h);
}

static void enc_scalar(const unsigned char *src, int kind, uint8_t *dst, size_t n, int fp8,
                       const float *scale) {
    enc_params p = make_params(fp8, scale != NULL);
    int shift = fp8 == FP8_E4M3FN ? 20 : 21;
    size_t i;
    if (scale == NULL) {
        for (i = 0; i < n; i++) dst[i] = enc_one(load_bits(src, kind, i), &p, shift);
    } else {
        float s = *scale;
        for (i = 0; i < n; i++)
            dst[i] = enc_one(f32_bits(bits_f32(load_bits(src, kind, i)) / s), &p, shift);
    }
}

/* ------------------------------------------------------------------ decode tables (scalar) */

static uint32_t dec_f32_bits(uint32_t c, int fp8) {
    uint32_t s = (c & 0x80u) << 24, m = c & 0x7Fu, p;
    if (fp8 == FP8_E4M3FN) {
        if (m == 0x7Fu) return s | 0x7FF00000u;
        if (m >= 8u) return s | ((m << 20) + (120u << 23));
        if (m == 0) return s;
        p = msb_index(m);
        return s | ((p + 118u) << 23) | ((m ^ (1u << p)) << (23 - p));
    }
    if (m == 0x7Cu) return s | 0x7F800000u;
    if (m > 0x7Cu) return s | 0x7FC00000u | ((m & 3u) << 21);
    if (m >= 4u) return s | ((m << 21) + (112u << 23));
    if (m == 0) return s;
    p = msb_index(m);
    return s | ((p + 111u) << 23) | ((m ^ (1u << p)) << (23 - p));
}

static uint16_t dec_f16_bits(uint32_t c, int fp8) {
    uint32_t s = (c & 0x80u) << 8, m = c & 0x7Fu, p;
    if (fp8 == FP8_E5M2) return (uint16_t)((c << 8) | (m > 0x7Cu ? 0x200u : 0u));
    if (m == 0x7Fu) return (uint16_t)(s | 0x7F80u);
    if (m >= 8u) return (uint16_t)(s | ((m << 7) + 0x2000u));
    if (m == 0) return (uint16_t)s;
    p = msb_index(m);
    return (uint16_t)(s | ((p + 6u) << 10) | ((m ^ (1u << p)) << (10 - p)));
}

static uint16_t dec_bf16_bits(uint32_t c, int fp8) {
    uint32_t s = (c & 0x80u) << 8, m = c & 0x7Fu, p;
    if (fp8 == FP8_E4M3FN) {
        if (m == 0x7Fu) return 0x7FC0u;
        if (m >= 8u) return (uint16_t)(s | ((m << 4) + 0x3C00u));
        if (m == 0) return (uint16_t)s;
        p = msb_index(m);
        return (uint16_t)(s | ((p + 118u) << 7) | ((m ^ (1u << p)) << (7 - p)));
    }
    if (m == 0x7Cu) return (uint16_t)(s | 0x7F80u);
    if (m > 0x7Cu) return 0x7FC0u;
    if (m >= 4u) return (uint16_t)(s | ((m << 5) + 0x3800u));
    if (m == 0) return (uint16_t)s;
    p = msb_index(m);
    return (uint16_t)(s | ((p + 111u) << 7) | ((m ^ (1u << p)) << (7 - p)));
}

static uint32_t TAB_F32[2][256];
static uint16_t TAB_16[2][3][256]; /* [fp8][KIND_BF16 or KIND_F16][code] */

/*
 * Nibble tables of the vector decoder, per fp8 format and 16-bit destination: for a normal code
 * with high nibble h and low nibble l, out16 = sign | ((m << shift) + bias) (m = code & 0x7F) has
 * high byte NIB_H[h] + NIB_L[l] and low byte NIB_LL[l]; subnormal codes take NIB_SH[l] | sign
 * and NIB_SL[l].
 */
enum { NIB_H, NIB_L, NIB_LL, NIB_SH, NIB_SL, NIB_COUNT };
static uint8_t NIBBLES[2][3][NIB_COUNT][16];

static void dec_layout(int fp8, int kind16, int *shift, uint32_t *bias) {
    int e4 = fp8 == FP8_E4M3FN, bf = kind16 == KIND_BF16;
    *shift = e4 ? (bf ? 4 : 7) : (bf ? 5 : 8);
    *bias = e4 ? (bf ? 0x3C00u : 0x2000u) : (bf ? 0x3800u : 0u);
}

static void init_tables(void) {
    for (int f = 0; f < 2; f++)
        for (uint32_t c = 0; c < 256; c++) {
            TAB_F32[f][c] = dec_f32_bits(c, f);
            TAB_16[f][KIND_BF16][c] = dec_bf16_bits(c, f);
            TAB_16[f][KIND_F16][c] = dec_f16_bits(c, f);
        }
    for (int f = 0; f < 2; f++)
        for (int kind16 = KIND_BF16; kind16 <= KIND_F16; kind16++) {
            int shift;
            uint32_t bias;
            dec_layout(f, kind16, &shift, &bias);
            uint8_t(*t)[16] = NIBBLES[f][kind16];
            for (uint32_t j = 0; j < 16; j++) {
                t[NIB_H][j] = (uint8_t)((j & 8 ? 0x80u : 0u) |
                                        ((((j & 7u) << (shift - 4)) + (bias >> 8)) & 0x7Fu));
                t[NIB_L][j] = (uint8_t)((j << shift) >> 8);
                t[NIB_LL][j] = (uint8_t)((j << shift) & 0xFFu);
                t[NIB_SH][j] = (uint8_t)(TAB_16[f][kind16][j] >> 8);
                t[NIB_SL][j] = (uint8_t)(TAB_16[f][kind16][j] & 0xFFu);
            }
        }
}

static void dec_scalar(const uint8_t *src, int fp8, unsigned char *dst, int kind, size_t n,
                       const float *scale) {
    size_t i;
    if (scale == NULL) {
        if (kind == KIND_F32) {
            for (i = 0; i < n; i++) memcpy(dst + 4 * i, &TAB_F32[fp8][src[i]], 4);
        } else {
            const uint16_t *t = TAB_16[fp8][kind];
            for (i = 0; i < n; i++) memcpy(dst + 2 * i, &t[src[i]], 2);
        }
        return;
    }
    float s = *scale;
    for (i = 0; i < n; i++) {
        uint32_t u = f32_bits(bits_f32(TAB_F32[fp8][src[i]]) * s);
        if (kind == KIND_F32) {
            memcpy(dst + 4 * i, &u, 4);
        } else {
            uint16_t h = kind == KIND_BF16 ? f32_to_bf16_bits(u) : f32_to_f16_bits(u);
            memcpy(dst + 2 * i, &h, 2);
        }
    }
}

/* ------------------------------------------------------------------ finite abs-max (scalar) */

static float absmax_scalar(const unsigned char *src, int kind, size_t n) {
    uint32_t best = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = load_bits(src, kind, i) & 0x7FFFFFFFu;
        if (a < 0x7F800000u && a > best) best = a;
    }
    return bits_f32(best);
}

/* ------------------------------------------------------------------ power-of-two scales */

#define MIN_EXPONENT (-126)
#define MAX_EXPONENT 126

/* Smallest k with amax / 2^k <= the format's max (1.75 * 2^8 or 1.75 * 2^15), within
 * [MIN_EXPONENT, cap]; 0 for amax == 0. amax: a finite float >= 0. */
static int exponent_for(float amax, int fp8, int cap) {
    uint32_t u = f32_bits(amax);
    if (u == 0) return 0;
    if ((u >> 23) == 0) return MIN_EXPONENT; /* subnormal amax: k would be far below -126 */
    int e = (int)(u >> 23) - 127;
    int k = e - (fp8 == FP8_E4M3FN ? 8 : 15) + ((u & 0x7FFFFFu) > 0x600000u ? 1 : 0);
    if (k < MIN_EXPONENT) k = MIN_EXPONENT;
    return k > cap ? cap : k;
}

static inline float pow2f(int k) { return bits_f32((uint32_t)(k + 127) << 23); }

/* ------------------------------------------------------------------ AVX2 + F16C */
#if FP8_HAVE_AVX2

/* 1 if s is a power of two whose reciprocal is a normal float (then written to *recip) */
static int pow2_reciprocal(float s, float *recip) {
    uint32_t u = f32_bits(s), e = (u >> 23) & 0xFFu;
    if ((u & 0x807FFFFFu) != 0 || e < 1 || e > 253) return 0;
    *recip = bits_f32((254u - e) << 23);
    return 1;
}

/*
 * Encoding, vector form of enc_one. Magnitudes are rounded in integer lanes (normal range) or by a
 * float32 magic add (subnormal range); sign and NaN are merged after packing to bytes: a signed
 * saturating pack of the source keeps exactly its sign bit, and a pack of the NaN masks gives 0xFF.
 */
typedef struct {
    __m256i absmask, inf, clamp, min_normal, rebias, one, magic_i, sign8, nan8;
    __m256 magic;
} enc_vconsts;

AVX2_FN static inline enc_vconsts make_vconsts(int fp8, int scaled) {
    enc_params p = make_params(fp8, scaled);
    enc_vconsts k;
    k.absmask = _mm256_set1_epi32(0x7FFFFFFF);
    k.inf = _mm256_set1_epi32(0x7F800000);
    k.clamp = _mm256_set1_epi32((int)p.clamp);
    k.min_normal = _mm256_set1_epi32((int)p.min_normal);
    k.rebias = _mm256_set1_epi32((int)p.rebias);
    k.one = _mm256_set1_epi32(1);
    k.magic_i = _mm256_set1_epi32((int)p.magic);
    k.sign8 = _mm256_set1_epi8((char)0x80);
    k.nan8 = _mm256_set1_epi8(0x7F);
    k.magic = _mm256_castsi256_ps(k.magic_i);
    return k;
}

/* |x| bits of 8 float32 lanes -> magnitude codes (NaN lanes give the clamp code) */
AVX2_FN static inline __m256i mag8(__m256i a, const enc_vconsts *k, const int shift) {
    __m256i ac = _mm256_min_epi32(a, k->clamp);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ac, shift), k->one);
    __m256i nrm = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(ac, k->rebias), lsb), shift);
    __m256i sub = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(ac), k->magic)), k->magic_i);
    return _mm256_blendv_epi8(nrm, sub, _mm256_cmpgt_epi32(k->min_normal, ac));
}

AVX2_FN static inline __m256 load8_as_f32(const unsigned char *src, int kind, size_t i) {
    if (kind == KIND_F32) return _mm256_loadu_ps((const float *)(src + 4 * i));
    __m128i h = _mm_loadu_si128((const __m128i *)(src + 2 * i));
    if (kind == KIND_F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* 32 float32 values (4 vectors, in order) -> 32 codes */
AVX2_FN static inline __m256i enc32_f32(__m256 x0, __m256 x1, __m256 x2, __m256 x3,
                                        const enc_vconsts *k, const int shift) {
    __m256i u0 = _mm256_castps_si256(x0), u1 = _mm256_castps_si256(x1);
    __m256i u2 = _mm256_castps_si256(x2), u3 = _mm256_castps_si256(x3);
    __m256i a0 = _mm256_and_si256(u0, k->absmask), a1 = _mm256_and_si256(u1, k->absmask);
    __m256i a2 = _mm256_and_si256(u2, k->absmask), a3 = _mm256_and_si256(u3, k->absmask);
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(mag8(a0, k, shift), mag8(a1, k, shift)),
                                    _mm256_packus_epi32(mag8(a2, k, shift), mag8(a3, k, shift)));
    __m256i sg = _mm256_packs_epi16(_mm256_packs_epi32(u0, u1), _mm256_packs_epi32(u2, u3));
    __m256i nn = _mm256_packs_epi16(
        _mm256_packs_epi32(_mm256_cmpgt_epi32(a0, k->inf), _mm256_cmpgt_epi32(a1, k->inf)),
        _mm256_packs_epi32(_mm256_cmpgt_epi32(a2, k->inf), _mm256_cmpgt_epi32(a3, k->inf)));
    b = _mm256_or_si256(b, _mm256_or_si256(_mm256_and_si256(sg, k->sign8), _mm256_and_si256(nn, k->nan8)));
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/*
 * Unscaled 16-bit sources are rounded in 16-bit lanes on their raw bits. The subnormal range goes
 * through float32: bfloat16 bits are the top half of a float32; float16 bits shifted left by 13 are
 * the float32 of x * 2^-112 (exact, also for float16 subnormals), rounded with a magic scaled alike.
 */
typedef struct {
    __m256i absmask, nan_above, clamp, normal_above, rebias, one, magic_i, mask_a, sign8, nan8;
    __m256 magic;
} enc16_vconsts;

AVX2_FN static inline enc16_vconsts make_enc16_vconsts(int fp8, int kind, int scaled) {
    enc_params p = make_params(fp8, scaled);
    enc16_vconsts k;
    int bf = kind == KIND_BF16, e4 = fp8 == FP8_E4M3FN;
    k.absmask = _mm256_set1_epi16(0x7FFF);
    k.nan_above = _mm256_set1_epi16((short)(bf ? 0x7F80 : 0x7C00));
    /* 448 or 65536 (bf16); 448 or inf (f16: every finite value rounds within the formula) */
    k.clamp = _mm256_set1_epi16((short)(e4 ? (bf ? 0x43E0 : 0x5F00)
                                           : (bf ? (scaled ? 0x4760 : 0x4780) : 0x7C00)));
    /* largest bits below the smallest fp8 normal, 2^-6 (e4m3fn) or 2^-14 (e5m2) */
    k.normal_above = _mm256_set1_epi16((short)((e4 ? (bf ? 0x3C80 : 0x2400) : (bf ? 0x3880 : 0x0400)) - 1));
    k.rebias = _mm256_set1_epi16(
        (short)(e4 ? (bf ? -0x3C00 + 0x7 : -0x2000 + 0x3F) : (bf ? -0x3800 + 0xF : 0x7F)));
    k.one = _mm256_set1_epi16(1);
    k.magic_i = _mm256_set1_epi32((int)(bf ? p.magic : p.magic - (112u << 23)));
    k.magic = _mm256_castsi256_ps(k.magic_i);
    k.mask_a = _mm256_set1_epi32((int)(bf ? 0xFFFF0000u : 0x0FFFE000u));
    k.sign8 = _mm256_set1_epi8((char)0x80);
    k.nan8 = _mm256_set1_epi8(0x7F);
    return k;
}

/* |x| bits of 16 bfloat16/float16 lanes -> magnitude codes (NaN lanes give the clamp code) */
AVX2_FN static inline __m256i mag16(__m256i a, const enc16_vconsts *k, const int kind,
                                    const int shift, const int need_sub) {
    __m256i ac = _mm256_min_epu16(a, k->clamp); /* unsigned: scaled bits may saturate */
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi16(ac, shift), k->one);
    __m256i r = _mm256_srli_epi16(_mm256_add_epi16(_mm256_add_epi16(ac, k->rebias), lsb), shift);
    if (need_sub) {
        __m256i even, odd;
        if (kind == KIND_BF16) {
            even = _mm256_slli_epi32(ac, 16);
            odd = _mm256_and_si256(ac, k->mask_a);
        } else {
            even = _mm256_and_si256(_mm256_slli_epi32(ac, 13), k->mask_a);
            odd = _mm256_and_si256(_mm256_srli_epi32(ac, 3), k->mask_a);
        }
        /* the magic has a zero low half, so the low 16 bits of each sum are the code */
        even = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(even), k->magic));
        odd = _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(odd), k->magic));
        __m256i sub = _mm256_blend_epi16(even, _mm256_slli_epi32(odd, 16), 0xAA);
        r = _mm256_blendv_epi8(sub, r, _mm256_cmpgt_epi16(ac, k->normal_above));
    }
    return r;
}

/*
 * The 32 codes of two vectors of 16-bit floats, stored at dst in source order: v0, v1 are the
 * source bits, a0, a1 their magnitudes (sign cleared), m0, m1 the magnitude codes mag16 made of
 * them; the sign and the NaN code (magnitudes above k->nan_above) are put in here.
 */
AVX2_FN static inline void store_codes16(uint8_t *dst, __m256i v0, __m256i v1, __m256i a0, __m256i a1,
                                         __m256i m0, __m256i m1, const enc16_vconsts *k) {
    __m256i b = _mm256_packus_epi16(m0, m1);
    __m256i sg = _mm256_and_si256(_mm256_packs_epi16(v0, v1), k->sign8);
    __m256i nn = _mm256_and_si256(
        _mm256_packs_epi16(_mm256_cmpgt_epi16(a0, k->nan_above), _mm256_cmpgt_epi16(a1, k->nan_above)),
        k->nan8);
    b = _mm256_or_si256(b, _mm256_or_si256(sg, nn));
    _mm256_storeu_si256((__m256i *)dst, _mm256_permute4x64_epi64(b, 0xD8));
}

AVX2_FN static size_t enc16_loop(const unsigned char *src, int kind, uint8_t *dst, size_t n, int fp8,
                                 const int shift, const int need_sub) {
    enc16_vconsts k = make_enc16_vconsts(fp8, kind, 0);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + 2 * i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + 2 * i + 32));
        __m256i a0 = _mm256_and_si256(v0, k.absmask), a1 = _mm256_and_si256(v1, k.absmask);
        store_codes16(dst + i, v0, v1, a0, a1, mag16(a0, &k, kind, shift, need_sub),
                      mag16(a1, &k, kind, shift, need_sub), &k);
    }
    return i;
}

/*
 * bfloat16 divided by a power-of-two scale 2^k, in 16-bit lanes: x / 2^k is x with k taken off its
 * exponent field, saturating at zero (magnitudes that fall below 2^-126 encode to 0 either way)
 * and at 0xFFFF (clamped to the format's max). For k < 0, zeros and bfloat16 subnormals are
 * masked to zero: times 2^-k they stay below 2^(-126-k), which rounds to 0 in fp8 as long as
 * k >= -116 (e4m3fn) or -109 (e5m2). Smaller k (absurdly tiny data) is
 * not handled here: the function then returns 0 and the caller takes the float32 path. Returns
 * how many elements were done.
 */
AVX2_FN static inline size_t enc16_pow2_bf16(const enc16_vconsts *kc, const unsigned char *src,
                                             uint8_t *dst, size_t n, int kexp, const int shift,
                                             int fp8) {
    if (kexp < (fp8 == FP8_E4M3FN ? -116 : -109)) return 0;
    const enc16_vconsts k = *kc;
    const __m256i kbits = _mm256_set1_epi16((short)((kexp < 0 ? -kexp : kexp) << 7));
    const __m256i smallest_normal = _mm256_set1_epi16(0x7F);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + 2 * i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + 2 * i + 32));
        __m256i a0 = _mm256_and_si256(v0, k.absmask), a1 = _mm256_and_si256(v1, k.absmask);
        __m256i s0, s1;
        if (kexp >= 0) {
            s0 = _mm256_subs_epu16(a0, kbits);
            s1 = _mm256_subs_epu16(a1, kbits);
            if (kexp >= 100) { /* inf less k would be a finite value below the saturation bound */
                s0 = _mm256_or_si256(s0, _mm256_cmpeq_epi16(a0, k.nan_above));
                s1 = _mm256_or_si256(s1, _mm256_cmpeq_epi16(a1, k.nan_above));
            }
        } else {
            s0 = _mm256_and_si256(_mm256_adds_epu16(a0, kbits), _mm256_cmpgt_epi16(a0, smallest_normal));
            s1 = _mm256_and_si256(_mm256_adds_epu16(a1, kbits), _mm256_cmpgt_epi16(a1, smallest_normal));
        }
        store_codes16(dst + i, v0, v1, a0, a1, mag16(s0, &k, KIND_BF16, shift, 1),
                      mag16(s1, &k, KIND_BF16, shift, 1), &k);
    }
    return i;
}

AVX2_FN static size_t enc16_avx2(const unsigned char *src, int kind, uint8_t *dst, size_t n, int fp8) {
    if (kind == KIND_BF16)
        return fp8 == FP8_E4M3FN ? enc16_loop(src, KIND_BF16, dst, n, fp8, 4, 1)
                                 : enc16_loop(src, KIND_BF16, dst, n, fp8, 5, 1);
    return fp8 == FP8_E4M3FN ? enc16_loop(src, KIND_F16, dst, n, fp8, 7, 1)
                             : enc16_loop(src, KIND_F16, dst, n, fp8, 8, 0);
}

AVX2_FN static void enc_avx2_shift(const unsigned char *src, int kind, uint8_t *dst, size_t n,
                                   int fp8, const float *scale, const int shift) {
    enc_vconsts k = make_vconsts(fp8, scale != NULL);
    float recip = 1.0f;
    /* x / 2^k and x * 2^-k are the same correctly rounded value: multiply when exact */
    const int use_mul = scale != NULL && pow2_reciprocal(*scale, &recip);
    const int use_div = scale != NULL && !use_mul;
    __m256 sv = _mm256_set1_ps(use_mul ? recip : (scale ? *scale : 1.0f));
    size_t i = 0;
    if (kind != KIND_F32 && scale == NULL) {
        i = enc16_avx2(src, kind, dst, n, fp8);
    } else {
        if (kind == KIND_BF16 && use_mul) {
            enc16_vconsts k16 = make_enc16_vconsts(fp8, KIND_BF16, 1);
            i = enc16_pow2_bf16(&k16, src, dst, n, (int)((f32_bits(*scale) >> 23) & 0xFFu) - 127,
                                fp8 == FP8_E4M3FN ? 4 : 5, fp8);
        }
        for (; i + 32 <= n; i += 32) {
            __m256 x0 = load8_as_f32(src, kind, i), x1 = load8_as_f32(src, kind, i + 8);
            __m256 x2 = load8_as_f32(src, kind, i + 16), x3 = load8_as_f32(src, kind, i + 24);
            if (use_mul) {
                x0 = _mm256_mul_ps(x0, sv);
                x1 = _mm256_mul_ps(x1, sv);
                x2 = _mm256_mul_ps(x2, sv);
                x3 = _mm256_mul_ps(x3, sv);
            } else if (use_div) {
                x0 = _mm256_div_ps(x0, sv);
                x1 = _mm256_div_ps(x1, sv);
                x2 = _mm256_div_ps(x2, sv);
                x3 = _mm256_div_ps(x3, sv);
            }
            _mm256_storeu_si256((__m256i *)(dst + i), enc32_f32(x0, x1, x2, x3, &k, shift));
        }
    }
    if (i < n) enc_scalar(src + i * (kind == KIND_F32 ? 4 : 2), kind, dst + i, n - i, fp8, scale);
}

AVX2_FN static void enc_avx2(const unsigned char *src, int kind, uint8_t *dst, size_t n, int fp8,
                             const float *scale) {
    if (fp8 == FP8_E4M3FN)
        enc_avx2_shift(src, kind, dst, n, fp8, scale, 20);
    else
        enc_avx2_shift(src, kind, dst, n, fp8, scale, 21);
}

AVX2_FN static float absmax_avx2(const unsigned char *src, int kind, size_t n);

/* Rows of bfloat16 divided by 2^k[r] (the exponents as in py_encode_pow2): the constants are
 * built once for all rows, which matters for short token rows. */
AVX2_FN static void enc_rows_pow2_bf16(const unsigned char *src, uint8_t *dst, size_t rows,
                                       size_t len, int fp8, int8_t *exps, int cap) {
    enc16_vconsts k16 = make_enc16_vconsts(fp8, KIND_BF16, 1);
    const int shift = fp8 == FP8_E4M3FN ? 4 : 5;
    for (size_t r = 0; r < rows; r++) {
        const unsigned char *s = src + 2 * r * len;
        uint8_t *d = dst + r * len;
        int kexp = cap >= 0 ? exponent_for(absmax_avx2(s, KIND_BF16, len), fp8, cap) : exps[r];
        if (cap >= 0) exps[r] = (int8_t)kexp;
        size_t i = enc16_pow2_bf16(&k16, s, d, len, kexp, shift, fp8);
        if (i < len) {
            float scale = pow2f(kexp);
            enc_avx2(s + 2 * i, KIND_BF16, d + i, len - i, fp8, &scale);
        }
    }
}

/*
 * Decoding to 16-bit floats works on 32 codes at a time, one byte per code: with h the high nibble
 * and l the low nibble of a code, a normal value's high byte is NIB_H[h] + NIB_L[l], its low byte
 * NIB_LL[l]; subnormal codes take both bytes from l-indexed tables plus the sign. Blocks holding
 * inf/NaN codes (rare) are decoded by the scalar tables.
 */
typedef struct {
    __m256i th, tl, tll, tsh, tsl, lo4, expmask, m7f, specthr, sign8, zero;
} dec_vconsts;

AVX2_FN static inline __m256i tbl16(const uint8_t *b) {
    __m128i t;
    memcpy(&t, b, 16);
    return _mm256_broadcastsi128_si256(t);
}

AVX2_FN static inline dec_vconsts make_dec_vconsts(int fp8, int kind16) {
    dec_vconsts k;
    uint8_t(*t)[16] = NIBBLES[fp8][kind16];
    k.th = tbl16(t[NIB_H]);
    k.tl = tbl16(t[NIB_L]);
    k.tll = tbl16(t[NIB_LL]);
    k.tsh = tbl16(t[NIB_SH]);
    k.tsl = tbl16(t[NIB_SL]);
    k.lo4 = _mm256_set1_epi8(0x0F);
    k.expmask = _mm256_set1_epi8((char)(fp8 == FP8_E4M3FN ? 0x78 : 0x7C));
    k.m7f = _mm256_set1_epi8(0x7F);
    k.specthr = _mm256_set1_epi8((char)(fp8 == FP8_E4M3FN ? 0x7E : 0x7B));
    k.sign8 = _mm256_set1_epi8((char)0x80);
    k.zero = _mm256_setzero_si256();
    return k;
}

/* 32 codes -> 32 16-bit values in *o0 (codes 0-15) and *o1 (16-31); 0 if the block has inf/NaN */
AVX2_FN static inline int dec32(__m256i c, const dec_vconsts *k, const int shift, __m256i *o0,
                                __m256i *o1) {
    __m256i spec = _mm256_cmpgt_epi8(_mm256_and_si256(c, k->m7f), k->specthr);
    if (!_mm256_testz_si256(spec, spec)) return 0;
    c = _mm256_permute4x64_epi64(c, 0xD8); /* so that the byte unpacks come out in order */
    if (shift == 8) {                      /* e5m2 -> float16: the code is the high byte */
        *o0 = _mm256_unpacklo_epi8(k->zero, c);
        *o1 = _mm256_unpackhi_epi8(k->zero, c);
        return 1;
    }
    __m256i l = _mm256_and_si256(c, k->lo4);
    __m256i h = _mm256_and_si256(_mm256_srli_epi16(c, 4), k->lo4);
    __m256i hi = _mm256_shuffle_epi8(k->th, h);
    if (shift != 4) hi = _mm256_add_epi8(hi, _mm256_shuffle_epi8(k->tl, l));
    __m256i lo = _mm256_shuffle_epi8(k->tll, l);
    __m256i sub = _mm256_cmpeq_epi8(_mm256_and_si256(c, k->expmask), k->zero);
    __m256i shi = _mm256_or_si256(_mm256_shuffle_epi8(k->tsh, l), _mm256_and_si256(c, k->sign8));
    hi = _mm256_blendv_epi8(hi, shi, sub);
    lo = _mm256_blendv_epi8(lo, _mm256_shuffle_epi8(k->tsl, l), sub);
    *o0 = _mm256_unpacklo_epi8(lo, hi);
    *o1 = _mm256_unpackhi_epi8(lo, hi);
    return 1;
}

AVX2_FN static inline __m256i bf16_round_8(__m256 f) { /* 8 floats -> bf16 bits in 32-bit lanes */
    __m256i u = _mm256_castps_si256(f);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(u, _mm256_set1_epi32(0x7FFF)), lsb), 16);
    __m256i nan = _mm256_castps_si256(_mm256_cmp_ps(f, f, _CMP_UNORD_Q));
    return _mm256_or_si256(r, _mm256_srli_epi32(nan, 16));
}

/*
 * Decoded values are written either through the cache or, for a large destination, with
 * non-temporal ("streaming") stores that skip reading each destination line from memory first
 * (see decode_row). `stream` is constant for a whole loop; a streaming store needs its address
 * aligned to its width, which decode_row guarantees by starting the streamed part on a 64-byte line.
 */
AVX2_FN static inline void put256(unsigned char *p, __m256i v, int stream) {
    if (stream)
        _mm256_stream_si256((__m256i *)(void *)p, v);
    else
        _mm256_storeu_si256((__m256i *)(void *)p, v);
}

AVX2_FN static inline void put128(unsigned char *p, __m128i v, int stream) {
    if (stream)
        _mm_stream_si128((__m128i *)(void *)p, v);
    else
        _mm_storeu_si128((__m128i *)(void *)p, v);
}

/* 16 float16 values -> 16 outputs of `kind`, times the scale when one is given */
AVX2_FN static inline void emit16_from_f16(__m256i h, unsigned char *dst, int kind, int scaled,
                                           __m256 sv, int stream) {
    __m256 f0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    __m256 f1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    if (scaled) {
        f0 = _mm256_mul_ps(f0, sv);
        f1 = _mm256_mul_ps(f1, sv);
    }
    if (kind == KIND_F32) {
        put256(dst, _mm256_castps_si256(f0), stream);
        put256(dst + 32, _mm256_castps_si256(f1), stream);
    } else if (kind == KIND_F16) {
        put128(dst, _mm256_cvtps_ph(f0, _MM_FROUND_TO_NEAREST_INT), stream);
        put128(dst + 16, _mm256_cvtps_ph(f1, _MM_FROUND_TO_NEAREST_INT), stream);
    } else {
        __m256i p = _mm256_packus_epi32(bf16_round_8(f0), bf16_round_8(f1));
        put256(dst, _mm256_permute4x64_epi64(p, 0xD8), stream);
    }
}

/*
 * kind16: the 16-bit format decoded first (bfloat16 straight to a bfloat16 destination, float16
 * otherwise: it holds every fp8 value exactly and converts to float32 in hardware). direct: the
 * destination is kind16 itself; a scale is then a power of two 2^exp_add whose products stay
 * normal, applied by adding to the exponent field of the nonzero values. Otherwise the values go
 * through float32 (times the scale, if any).
 */
AVX2_FN static void dec_avx2_shift(const uint8_t *src, int fp8, unsigned char *dst, int kind,
                                   size_t n, const float *scale, const int kind16, const int shift,
                                   const int direct, int exp_add, const int stream) {
    dec_vconsts k = make_dec_vconsts(fp8, kind16);
    const size_t es = kind == KIND_F32 ? 4 : 2;
    const __m256i ebits = _mm256_set1_epi16((short)(exp_add * 128)), mag = _mm256_set1_epi16(0x7FFF);
    __m256 sv = _mm256_set1_ps(scale ? *scale : 1.0f);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i h0, h1;
        unsigned char *d = dst + i * es;
        if (!dec32(_mm256_loadu_si256((const __m256i *)(src + i)), &k, shift, &h0, &h1)) {
            dec_scalar(src + i, fp8, d, kind, 32, scale);
        } else if (direct) {
            if (exp_add) {
                h0 = _mm256_add_epi16(h0, _mm256_andnot_si256(
                    _mm256_cmpeq_epi16(_mm256_and_si256(h0, mag), k.zero), ebits));
                h1 = _mm256_add_epi16(h1, _mm256_andnot_si256(
                    _mm256_cmpeq_epi16(_mm256_and_si256(h1, mag), k.zero), ebits));
            }
            put256(d, h0, stream);
            put256(d + 32, h1, stream);
        } else {
            emit16_from_f16(h0, d, kind, scale != NULL, sv, stream);
            emit16_from_f16(h1, d + 16 * es, kind, scale != NULL, sv, stream);
        }
    }
    if (i < n) dec_scalar(src + i, fp8, dst + i * es, kind, n - i, scale);
}

/*
 * Scaled decoding to a 16-bit destination through scale-specific nibble tables: for the finite
 * codes, the destination bits of code * scale are usually sign | (A[l] + (h & 7) << (4 + shift))
 * (normal codes; l, h: low/high nibble) or the bits of the subnormal code l (plus the sign),
 * because multiplying by 2^e commutes with both roundings while everything stays normal. The
 * tables are built from the scalar reference and then checked against it for every finite code,
 * so they are used only for scales where this structure holds exactly; 0 is returned otherwise.
 */
static int scaled_nibbles(int fp8, int kind16, int kind, float scale, uint8_t t[NIB_COUNT][16]) {
    int shift;
    uint32_t bias;
    dec_layout(fp8, kind16, &shift, &bias);
    if (kind != kind16) return 0;
    uint16_t ref[256];
    for (uint32_t c = 0; c < 256; c++) {
        uint32_t u = f32_bits(bits_f32(TAB_F32[fp8][c]) * scale);
        ref[c] = kind == KIND_BF16 ? f32_to_bf16_bits(u) : f32_to_f16_bits(u);
    }
    for (uint32_t l = 0; l < 16; l++) {
        int32_t a = (int32_t)ref[0x10u | l] - (int32_t)(1u << (4 + shift));
        if (a < 0 || a > 0xFFFF) return 0;
        t[NIB_L][l] = (uint8_t)(a >> 8);
        t[NIB_LL][l] = (uint8_t)(a & 0xFF);
        t[NIB_SH][l] = (uint8_t)(ref[l] >> 8);
        t[NIB_SL][l] = (uint8_t)(ref[l] & 0xFFu);
        t[NIB_H][l] = (uint8_t)((l & 8u ? 0x80u : 0u) | ((l & 7u) << (shift - 4)));
    }
    const uint32_t expmask = fp8 == FP8_E4M3FN ? 0x78u : 0x7Cu, specthr = fp8 == FP8_E4M3FN ? 0x7Eu : 0x7Bu;
    for (uint32_t c = 0; c < 256; c++) {
        if ((c & 0x7Fu) > specthr) continue; /* inf/NaN blocks take the scalar path */
        uint32_t h = c >> 4, l = c & 15u, hi, lo;
        if ((c & expmask) == 0) {
            hi = t[NIB_SH][l] | (c & 0x80u);
            lo = t[NIB_SL][l];
        } else {
            hi = (uint32_t)(t[NIB_H][h] + t[NIB_L][l]) & 0xFFu;
            lo = t[NIB_LL][l];
        }
        if (((hi << 8) | lo) != ref[c]) return 0;
    }
    return 1;
}

AVX2_FN static int dec_avx2_scaled16(const uint8_t *src, int fp8, unsigned char *dst, int kind,
                                     size_t n, float scale, const int stream) {
    uint8_t t[NIB_COUNT][16];
    if (kind == KIND_F32 || !scaled_nibbles(fp8, kind, kind, scale, t)) return 0;
    dec_vconsts k = make_dec_vconsts(fp8, kind);
    k.th = tbl16(t[NIB_H]);
    k.tl = tbl16(t[NIB_L]);
    k.tll = tbl16(t[NIB_LL]);
    k.tsh = tbl16(t[NIB_SH]);
    k.tsl = tbl16(t[NIB_SL]);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i h0, h1;
        unsigned char *d = dst + i * 2;
        if (!dec32(_mm256_loadu_si256((const __m256i *)(src + i)), &k, 7, &h0, &h1)) {
            dec_scalar(src + i, fp8, d, kind, 32, &scale);
        } else {
            put256(d, h0, stream);
            put256(d + 32, h1, stream);
        }
    }
    if (i < n) dec_scalar(src + i, fp8, dst + i * 2, kind, n - i, &scale);
    return 1;
}

/* 1 when *scale is a power of two 2^k whose products with every finite fp8 value are normal,
 * finite bfloat16 values (k then written to *kexp); 0 otherwise. */
static int bf16_exp_add(const float *scale, int fp8, int *kexp) {
    float recip;
    if (scale == NULL || !pow2_reciprocal(*scale, &recip)) return 0;
    int k = (int)((f32_bits(*scale) >> 23) & 0xFFu) - 127;
    int lo = fp8 == FP8_E4M3FN ? -117 : -110, hi = fp8 == FP8_E4M3FN ? 119 : 112;
    if (k < lo || k > hi) return 0;
    *kexp = k;
    return 1;
}

AVX2_FN static void dec_avx2(const uint8_t *src, int fp8, unsigned char *dst, int kind, size_t n,
                             const float *scale, const int stream) {
    int kexp = 0;
    const int f16_direct = kind == KIND_F16 && scale == NULL;
    if (scale != NULL && kind != KIND_F32 && !(kind == KIND_BF16 && bf16_exp_add(scale, fp8, &kexp)) &&
        dec_avx2_scaled16(src, fp8, dst, kind, n, *scale, stream))
        return;
    if (kind == KIND_BF16 && (scale == NULL || bf16_exp_add(scale, fp8, &kexp))) {
        if (fp8 == FP8_E4M3FN)
            dec_avx2_shift(src, fp8, dst, kind, n, scale, KIND_BF16, 4, 1, kexp, stream);
        else
            dec_avx2_shift(src, fp8, dst, kind, n, scale, KIND_BF16, 5, 1, kexp, stream);
    } else if (fp8 == FP8_E4M3FN) {
        dec_avx2_shift(src, fp8, dst, kind, n, scale, KIND_F16, 7, f16_direct, 0, stream);
    } else {
        dec_avx2_shift(src, fp8, dst, kind, n, scale, KIND_F16, 8, f16_direct, 0, stream);
    }
}

/* largest unsigned 16-bit lane / 32-bit lane of a vector */
AVX2_FN static inline uint32_t hmax_epu16(__m256i v) {
    __m128i m = _mm_max_epu16(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 4));
    m = _mm_max_epu16(m, _mm_srli_si128(m, 2));
    return (uint32_t)_mm_extract_epi16(m, 0);
}

AVX2_FN static inline uint32_t hmax_epu32(__m256i v) {
    __m128i m = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    m = _mm_max_epu32(m, _mm_srli_si128(m, 8));
    m = _mm_max_epu32(m, _mm_srli_si128(m, 4));
    return (uint32_t)_mm_cvtsi128_si32(m);
}

AVX2_FN static float absmax_avx2(const unsigned char *src, int kind, size_t n) {
    size_t i = 0;
    uint32_t best = 0;
    if (kind == KIND_F32) {
        const __m256i mask = _mm256_set1_epi32(0x7FFFFFFF), inf = _mm256_set1_epi32(0x7F800000);
        __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
        for (; i + 16 <= n; i += 16) {
            __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + 4 * i)), mask);
            __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + 4 * i + 32)), mask);
            acc0 = _mm256_max_epi32(acc0, _mm256_and_si256(a, _mm256_cmpgt_epi32(inf, a)));
            acc1 = _mm256_max_epi32(acc1, _mm256_and_si256(b, _mm256_cmpgt_epi32(inf, b)));
        }
        best = hmax_epu32(_mm256_max_epi32(acc0, acc1));
    } else {
        const __m256i mask = _mm256_set1_epi16(0x7FFF),
                      inf = _mm256_set1_epi16((short)(kind == KIND_BF16 ? 0x7F80 : 0x7C00));
        __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
        for (; i + 32 <= n; i += 32) {
            __m256i a = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + 2 * i)), mask);
            __m256i b = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(src + 2 * i + 32)), mask);
            acc0 = _mm256_max_epi16(acc0, _mm256_and_si256(a, _mm256_cmpgt_epi16(inf, a)));
            acc1 = _mm256_max_epi16(acc1, _mm256_and_si256(b, _mm256_cmpgt_epi16(inf, b)));
        }
        uint32_t b16 = hmax_epu16(_mm256_max_epi16(acc0, acc1));
        best = kind == KIND_BF16 ? b16 << 16 : f16_to_f32_bits((uint16_t)b16);
    }
    if (i < n) {
        uint32_t rest = f32_bits(absmax_scalar(src + i * (kind == KIND_F32 ? 4 : 2), kind, n - i));
        best = rest > best ? rest : best;
    }
    return bits_f32(best);
}

/* ------------------------------------------------------------------ bf16 / scale by code tables */

/*
 * bfloat16 divided by a general scale s, without dividing. Write x = 2^(E-127) * (1 + m/128) (E the
 * 8-bit exponent field, m the 7 mantissa bits). Binary scaling commutes with correct rounding, so
 * for rows E whose quotients are normal float32 values, RN(x / s) = 2^(E - e_norm) * RN(x_m / s)
 * with x_m the value of mantissa m in row e_norm; and once that row's quotients are at least the
 * smallest fp8 normal, every fp8 code of a higher row is the row e_norm code plus (E - e_norm)
 * binades, i.e. g[m] + ((E - e_norm) << mantissa bits), until it saturates at the largest code.
 * The plan holds g[] (128 codes, computed by the exact scalar path) and the row bounds: rows up
 * to e_zero encode to 0 (monotonicity: their largest value does), rows between e_zero and e_norm
 * straddle the fp8 subnormal range and are left to the float32 path (a block holding one is
 * encoded there; with per-tensor scales such values are rare). Row 255 (inf and NaN) is set
 * apart: inf saturates, NaN gives 0x7F, and the sign is x's. The vector loops work in byte lanes:
 * with AVX-512 VBMI g[m] is one 128-entry table lookup (vpermi2b) per 64 values; with AVX2 it is
 * g[0] plus the number of thresholds m reaches (g rises by at most one per mantissa step and at
 * most 8 times in a row: a row spans less than one binade of quotients).
 */
#define DIV_MAX_THRESHOLDS 8

typedef struct {
    uint8_t g[128];
    int8_t below_step[DIV_MAX_THRESHOLDS]; /* m > below_step[j] adds 1 to g[0] (127: never) */
    int e_zero, e_norm, dmax, maxcode, mbits;
} bf16_div_plan;

/* Fill the plan for scale s; 0 when this scale does not fit the scheme (then nothing is done). */
static int make_bf16_div_plan(bf16_div_plan *plan, int fp8, float s) {
    enc_params p = make_params(fp8, 1);
    const int shift = fp8 == FP8_E4M3FN ? 20 : 21;
    plan->mbits = fp8 == FP8_E4M3FN ? 3 : 2;
    plan->maxcode = fp8 == FP8_E4M3FN ? 0x7E : 0x7B;
    /* rows beyond e_norm + dmax saturate: g >= 1 << mbits, so g + (dmax << mbits) > maxcode */
    plan->dmax = fp8 == FP8_E4M3FN ? 16 : 31;
    int e_zero = 0;
    while (e_zero < 254 && (enc_one(f32_bits(bits_f32(((uint32_t)(e_zero + 1) << 23) | 0x7F0000u) / s),
                                    &p, shift) & 0x7F) == 0)
        e_zero++;
    int e_norm = 1;
    while (e_norm < 255 && f32_bits(bits_f32((uint32_t)e_norm << 23) / s) < p.min_normal) e_norm++;
    /* row 0 (bf16 zeros and subnormals) must encode to 0, and row e_norm must be a bf16 row */
    if (e_zero < 1 || e_norm > 254 || e_norm <= e_zero) return 0;
    for (uint32_t m = 0; m < 128; m++)
        plan->g[m] = enc_one(f32_bits(bits_f32(((uint32_t)e_norm << 23) | (m << 16)) / s), &p, shift);
    if (plan->g[0] < (1 << plan->mbits)) return 0;
    int steps = 0;
    for (int j = 0; j < DIV_MAX_THRESHOLDS; j++) plan->below_step[j] = 127;
    for (int m = 1; m < 128; m++) {
        int rise = plan->g[m] - plan->g[m - 1];
        if (rise == 0) continue;
        if (rise != 1 || steps == DIV_MAX_THRESHOLDS) return 0; /* cannot happen; never trust it */
        plan->below_step[steps++] = (int8_t)(m - 1);
    }
    plan->e_zero = e_zero;
    plan->e_norm = e_norm;
    return 1;
}

/* The AVX2 form of the table encoder: 32 values per step (see the plan above). */
AVX2_FN static size_t enc_bf16_div_avx2(const unsigned char *src, uint8_t *dst, size_t n, int fp8,
                                        const float *scale, const bf16_div_plan *plan) {
    __m256i step[DIV_MAX_THRESHOLDS];
    for (int j = 0; j < DIV_MAX_THRESHOLDS; j++) step[j] = _mm256_set1_epi8(plan->below_step[j]);
    const __m256i g0 = _mm256_set1_epi8((char)plan->g[0]);
    const __m256i e_norm = _mm256_set1_epi8((char)plan->e_norm);
    const __m256i e_zero = _mm256_set1_epi8((char)plan->e_zero);
    const __m256i dmax = _mm256_set1_epi8((char)plan->dmax);
    const __m256i maxcode = _mm256_set1_epi8((char)plan->maxcode);
    const __m128i mbits = _mm_cvtsi32_si128(plan->mbits);
    const __m256i low8 = _mm256_set1_epi16(0x00FF), m7f = _mm256_set1_epi8(0x7F);
    const __m256i one = _mm256_set1_epi8(1), ff = _mm256_set1_epi8((char)0xFF);
    const __m256i sign8 = _mm256_set1_epi8((char)0x80), zero = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(src + 2 * i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(src + 2 * i + 32));
        /* low bytes (exponent lsb | mantissa) and high bytes (sign | exponent 7..1), in order */
        __m256i lo = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_and_si256(v0, low8), _mm256_and_si256(v1, low8)), 0xD8);
        __m256i hi = _mm256_permute4x64_epi64(
            _mm256_packus_epi16(_mm256_srli_epi16(v0, 8), _mm256_srli_epi16(v1, 8)), 0xD8);
        /* E = (hi << 1) | (lo >> 7); the 16-bit shift brings each byte's bit 7 to its bit 0 */
        __m256i e = _mm256_or_si256(_mm256_add_epi8(hi, hi),
                                    _mm256_and_si256(_mm256_srli_epi16(lo, 7), one));
        __m256i at_least_norm = _mm256_cmpeq_epi8(_mm256_subs_epu8(e_norm, e), zero);
        __m256i above_zero = _mm256_xor_si256(_mm256_cmpeq_epi8(_mm256_subs_epu8(e, e_zero), zero), ff);
        if (_mm256_movemask_epi8(_mm256_andnot_si256(at_least_norm, above_zero))) {
            enc_avx2(src + 2 * i, KIND_BF16, dst + i, 32, fp8, scale);
            continue;
        }
        __m256i m = _mm256_and_si256(lo, m7f);
        __m256i g = g0;
        for (int j = 0; j < DIV_MAX_THRESHOLDS; j++) g = _mm256_sub_epi8(g, _mm256_cmpgt_epi8(m, step[j]));
        /* d < 32, so shifting 16-bit lanes moves no bit across a byte boundary */
        __m256i d = _mm256_min_epu8(_mm256_subs_epu8(e, e_norm), dmax);
        __m256i code = _mm256_min_epu8(_mm256_add_epi8(g, _mm256_sll_epi16(d, mbits)), maxcode);
        code = _mm256_and_si256(code, at_least_norm);
        __m256i inf_nan = _mm256_cmpeq_epi8(e, ff);
        code = _mm256_blendv_epi8(code, maxcode, inf_nan);
        __m256i nan = _mm256_andnot_si256(_mm256_cmpeq_epi8(m, zero), inf_nan);
        code = _mm256_blendv_epi8(code, m7f, nan);
        code = _mm256_or_si256(code, _mm256_and_si256(hi, sign8));
        _mm256_storeu_si256((__m256i *)(dst + i), code);
    }
    return i;
}

#define VBMI_FN __attribute__((target("avx512f,avx512bw,avx512vbmi,avx2,f16c")))

/* Encode n bfloat16 values divided by *scale with the plan; returns how many were done (a multiple
 * of 64; the caller encodes the rest). Blocks holding a value of a row between e_zero and e_norm
 * go through the AVX2 float32 path. */
VBMI_FN static size_t enc_bf16_div_vbmi(const unsigned char *src, uint8_t *dst, size_t n, int fp8,
                                        const float *scale, const bf16_div_plan *plan) {
    const __m512i tab_lo = _mm512_loadu_si512((const void *)plan->g);
    const __m512i tab_hi = _mm512_loadu_si512((const void *)(plan->g + 64));
    uint8_t even[64], odd[64];
    for (int j = 0; j < 64; j++) {
        even[j] = (uint8_t)(2 * j);
        odd[j] = (uint8_t)(2 * j + 1);
    }
    const __m512i idx_lo = _mm512_loadu_si512((const void *)even); /* low byte of each bf16 */
    const __m512i idx_hi = _mm512_loadu_si512((const void *)odd);  /* high byte */
    const __m512i e_norm = _mm512_set1_epi8((char)plan->e_norm);
    const __m512i e_zero = _mm512_set1_epi8((char)plan->e_zero);
    const __m512i dmax = _mm512_set1_epi8((char)plan->dmax);
    const __m512i maxcode = _mm512_set1_epi8((char)plan->maxcode);
    const __m512i m7f = _mm512_set1_epi8(0x7F), one = _mm512_set1_epi8(1);
    const __m512i ff = _mm512_set1_epi8((char)0xFF), sign8 = _mm512_set1_epi8((char)0x80);
    const __m128i mbits = _mm_cvtsi32_si128(plan->mbits);
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m512i v0 = _mm512_loadu_si512((const void *)(src + 2 * i));
        __m512i v1 = _mm512_loadu_si512((const void *)(src + 2 * i + 64));
        __m512i lo = _mm512_permutex2var_epi8(v0, idx_lo, v1); /* exponent lsb | 7 mantissa bits */
        __m512i hi = _mm512_permutex2var_epi8(v0, idx_hi, v1); /* sign | exponent bits 7..1 */
        __mmask64 neg = _mm512_movepi8_mask(hi);
        /* E = (hi << 1) | (lo >> 7) per byte: doubling hi drops the sign bit, leaves bit 0 clear */
        __m512i e2 = _mm512_add_epi8(hi, hi);
        __m512i e = _mm512_mask_add_epi8(e2, _mm512_movepi8_mask(lo), e2, one);
        __m512i m = _mm512_and_si512(lo, m7f);
        __mmask64 below = _mm512_cmplt_epu8_mask(e, e_norm);
        if (below & _mm512_cmpgt_epu8_mask(e, e_zero)) {
            enc_avx2(src + 2 * i, KIND_BF16, dst + i, 64, fp8, scale);
            continue;
        }
        /* rows above e_norm + dmax saturate, and so does row 255 (inf; NaN is set below) */
        __m512i d = _mm512_min_epu8(_mm512_subs_epu8(e, e_norm), dmax);
        /* d < 32, so shifting 16-bit lanes moves no bit across a byte boundary */
        __m512i code = _mm512_add_epi8(_mm512_permutex2var_epi8(tab_lo, m, tab_hi),
                                       _mm512_sll_epi16(d, mbits));
        code = _mm512_maskz_mov_epi8(~below, _mm512_min_epu8(code, maxcode));
        __mmask64 inf_nan = _mm512_cmpeq_epi8_mask(e, ff);
        code = _mm512_mask_mov_epi8(code, inf_nan, maxcode);
        code = _mm512_mask_mov_epi8(code, inf_nan & _mm512_test_epi8_mask(m, m), m7f);
        code = _mm512_mask_add_epi8(code, neg, code, sign8); /* codes are <= 0x7F: adds the sign */
        _mm512_storeu_si512((void *)(dst + i), code);
    }
    return i;
}

/* Below this many values the plan (about 400 scalar divisions) costs more than it saves. */
#define DIV_TABLE_MIN_VALUES 8192

#endif /* FP8_HAVE_AVX2 */

/* ------------------------------------------------------------------ dispatch */

static int g_simd_level = 0; /* 0: portable scalar, 1: AVX2 + F16C, 2: and AVX-512 VBMI */

static int effective_level(int requested) { return requested < g_simd_level ? requested : g_simd_level; }

typedef struct {
    unsigned int csr;
} fpenv;

static inline void fpenv_enter(fpenv *e) {
#if FP8_HAVE_AVX2
    e->csr = _mm_getcsr();
    _mm_setcsr(0x1F80u); /* all exceptions masked, round to nearest, no FTZ/DAZ */
#else
    (void)e;
#endif
}

static inline void fpenv_leave(const fpenv *e) {
#if FP8_HAVE_AVX2
    _mm_setcsr(e->csr);
#else
    (void)e;
#endif
}

static size_t elem_size(int kind) { return kind == KIND_F32 ? 4 : 2; }

static int check_kinds(int kind, int fp8) {
    if (kind < KIND_F32 || kind > KIND_F16 || (fp8 != FP8_E4M3FN && fp8 != FP8_E5M2)) {
        PyErr_SetString(PyExc_ValueError, "unsupported float kind or fp8 kind");
        return -1;
    }
    return 0;
}

static int check_shape(Py_ssize_t n_rows, Py_ssize_t row_len) {
    if (n_rows < 0 || row_len < 0) {
        PyErr_SetString(PyExc_ValueError, "row count and row length must be >= 0");
        return -1;
    }
    return 0;
}

static float row_absmax(const unsigned char *src, int kind, size_t n, int lv) {
#if FP8_HAVE_AVX2
    if (lv >= 1) return absmax_avx2(src, kind, n);
#endif
    (void)lv;
    return absmax_scalar(src, kind, n);
}

static void encode_row(const unsigned char *src, int kind, uint8_t *dst, size_t n, int fp8,
                       const float *scale, int lv) {
#if FP8_HAVE_AVX2
    if (lv >= 1) {
        size_t done = 0;
        bf16_div_plan plan;
        float recip;
        /* with AVX2 only, power-of-two scales are faster by exponent arithmetic in 16-bit lanes */
        if (kind == KIND_BF16 && scale != NULL && n >= DIV_TABLE_MIN_VALUES &&
            (lv >= 2 || !pow2_reciprocal(*scale, &recip)) && make_bf16_div_plan(&plan, fp8, *scale))
            done = lv >= 2 ? enc_bf16_div_vbmi(src, dst, n, fp8, scale, &plan)
                           : enc_bf16_div_avx2(src, dst, n, fp8, scale, &plan);
        if (done < n) enc_avx2(src + 2 * done, kind, dst + done, n - done, fp8, scale);
        return;
    }
#endif
    (void)lv;
    enc_scalar(src, kind, dst, n, fp8, scale);
}

/*
 * A decode whose destination holds at least STREAM_MIN_BYTES is written with streaming stores:
 * such a destination does not stay in the caches anyway, and ordinary stores would first read
 * every destination line from memory (measured on a 32 MiB bf16 destination: 5.7-6.0 GB/s ->
 * 7.3-10 GB/s). Streaming stores that do not start on a 64-byte line measured twice as slow as
 * ordinary ones, so each row's elements before its first line boundary (fewer than 32: the
 * scalar loop, which also writes the vector loops' tails) go through the cache.
 * The caller ends a streamed decode with stream_fence(). Same bytes either way.
 */
#define STREAM_MIN_BYTES ((size_t)2 << 20)

static int use_stream(size_t out_bytes, int lv) { return lv >= 1 && out_bytes >= STREAM_MIN_BYTES; }

/* Decode calls that wrote part of their destination with streaming stores, for the tests
 * (counted with the GIL held). */
static unsigned long long g_streamed_decodes = 0;

static void stream_fence(int stream) {
#if FP8_HAVE_AVX2
    if (stream) _mm_sfence();
#else
    (void)stream;
#endif
}

/* Returns 1 when part of the row was written with streaming stores. */
static int decode_row(const uint8_t *src, int fp8, unsigned char *dst, int kind, size_t n,
                      const float *scale, int lv, int stream) {
#if FP8_HAVE_AVX2
    if (lv >= 1) {
        const size_t es = elem_size(kind), misalign = (64 - ((uintptr_t)dst & 63)) & 63;
        if (!stream || misalign % es) {
            dec_avx2(src, fp8, dst, kind, n, scale, 0);
            return 0;
        }
        const size_t head = misalign / es < n ? misalign / es : n; /* < 32: no vector block */
        if (head) dec_scalar(src, fp8, dst, kind, head, scale);
        if (head < n) dec_avx2(src + head, fp8, dst + head * es, kind, n - head, scale, 1);
        return head < n;
    }
#endif
    (void)lv;
    (void)stream;
    dec_scalar(src, fp8, dst, kind, n, scale);
    return 0;
}

PyDoc_STRVAR(encode_doc,
             "encode(src_addr, src_kind, dst_addr, n_rows, row_len, fp8_kind, scales_addr, level)\n"
             "Encode n_rows*row_len floats (kind 0=f32, 1=bf16, 2=f16) to fp8 codes (0=e4m3fn, 1=e5m2).\n"
             "scales_addr: 0 for no scale, else the address of n_rows float32 scales (one per row).");

static PyObject *py_encode(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr, scales_addr;
    int kind, fp8, level;
    Py_ssize_t n_rows, row_len;
    (void)self;
    if (!PyArg_ParseTuple(args, "KiKnniKi", &src_addr, &kind, &dst_addr, &n_rows, &row_len, &fp8,
                          &scales_addr, &level))
        return NULL;
    if (check_kinds(kind, fp8) < 0 || check_shape(n_rows, row_len) < 0) return NULL;
    const unsigned char *src = (const unsigned char *)(uintptr_t)src_addr;
    uint8_t *dst = (uint8_t *)(uintptr_t)dst_addr;
    const float *scales = (const float *)(uintptr_t)scales_addr;
    size_t rows = (size_t)n_rows, len = (size_t)row_len, es = elem_size(kind);
    int lv = effective_level(level);
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    if (scales == NULL) {
        len = rows * len;
        rows = len ? 1 : 0;
    }
    for (size_t r = 0; r < rows; r++)
        encode_row(src + r * len * es, kind, dst + r * len, len, fp8, scales ? scales + r : NULL, lv);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_doc,
             "decode(src_addr, fp8_kind, dst_addr, dst_kind, n_rows, row_len, scales_addr, level)\n"
             "Decode n_rows*row_len fp8 codes to floats; scales_addr as for encode.");

/*
 * decode and decode_pow2: the same arguments (aux_addr: the rows' float32 scales, or for
 * decode_pow2 their int8 exponents) and the same row loop; only a row's scale differs.
 */
static PyObject *decode_rows(PyObject *args, int pow2) {
    unsigned long long src_addr, dst_addr, aux_addr;
    int kind, fp8, level;
    Py_ssize_t n_rows, row_len;
    if (!PyArg_ParseTuple(args, "KiKinnKi", &src_addr, &fp8, &dst_addr, &kind, &n_rows, &row_len,
                          &aux_addr, &level))
        return NULL;
    if (check_kinds(kind, fp8) < 0 || check_shape(n_rows, row_len) < 0) return NULL;
    const uint8_t *src = (const uint8_t *)(uintptr_t)src_addr;
    unsigned char *dst = (unsigned char *)(uintptr_t)dst_addr;
    const float *scales = pow2 ? NULL : (const float *)(uintptr_t)aux_addr;
    const int8_t *exps = pow2 ? (const int8_t *)(uintptr_t)aux_addr : NULL;
    size_t rows = (size_t)n_rows, len = (size_t)row_len, es = elem_size(kind);
    for (size_t r = 0; pow2 && r < rows; r++) {
        if (exps[r] < MIN_EXPONENT || exps[r] > MAX_EXPONENT) {
            PyErr_SetString(PyExc_ValueError, "scale exponent outside [-126, 126]");
            return NULL;
        }
    }
    int lv = effective_level(level);
    fpenv env;
    const int stream = use_stream(rows * len * es, lv);
    int streamed = 0;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    if (!pow2 && scales == NULL) { /* unscaled: the rows are one run */
        len = rows * len;
        rows = len ? 1 : 0;
    }
    for (size_t r = 0; r < rows; r++) {
        float pow2_scale = pow2 ? pow2f(exps[r]) : 0.0f;
        const float *scale = pow2 ? &pow2_scale : scales ? scales + r : NULL;
        streamed |= decode_row(src + r * len, fp8, dst + r * len * es, kind, len, scale, lv, stream);
    }
    stream_fence(stream);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    g_streamed_decodes += (unsigned long long)streamed;
    Py_RETURN_NONE;
}

static PyObject *py_decode(PyObject *self, PyObject *args) {
    (void)self;
    return decode_rows(args, 0);
}

/* ------------------------------------------------ coding with the payload checksum in the loop */

/*
 * lmserde's payload hasher C API (lmserde.hasher_c_api(), ABI version 1): a capsule named
 * "lmserde.payload_hasher_api" holding this struct; the hasher itself is a capsule named
 * "lmserde.payload_hasher" (lmserde.PayloadHasher.c_hasher()). update needs no GIL.
 */
typedef struct {
    unsigned int version;
    void (*update)(void *hasher, const void *data, size_t n);
} lmserde_payload_hasher_api;

/*
 * Codes per piece: each piece of codes is hashed right after it is written or read, while it is
 * in the L1 cache. Measured on 32 MiB bf16 chunks in the DRAM regime (AMD EPYC, AVX-512; a hasher
 * bound to the payload, as the serde wrapper's, which hashes in place with no per-piece copy),
 * the hash's time over the plain codec: encode +0.23 ms with 1 KiB pieces against +0.72 with
 * 16 KiB ones (a piece's source and codes then stay well within L1); decode +0.12-0.16 ms with
 * 4 KiB pieces whose successor is prefetched before the piece is decoded and hashed, against
 * +0.43 with 16 KiB ones and no prefetch (memory idled while a piece was hashed). Prefetching the
 * encode's source the same way made it slower: the hardware prefetcher already streams it.
 */
#define ENCODE_HASH_PIECE ((size_t)1 << 10)
#define DECODE_HASH_PIECE ((size_t)4 << 10)

/* The arguments of encode_hashed and decode_hashed (the same for both). */
typedef struct {
    unsigned long long src_addr, dst_addr;
    Py_ssize_t n;
    int kind, fp8, level;
    void *hasher;
    const lmserde_payload_hasher_api *api;
} hashed_call;

static int parse_hashed_call(PyObject *args, hashed_call *c) {
    PyObject *hasher_capsule, *api_capsule;
    if (!PyArg_ParseTuple(args, "KKniiiOO", &c->src_addr, &c->dst_addr, &c->n, &c->kind, &c->fp8,
                          &c->level, &hasher_capsule, &api_capsule))
        return -1;
    if (check_kinds(c->kind, c->fp8) < 0 || check_shape(1, c->n) < 0) return -1;
    c->api = (const lmserde_payload_hasher_api *)PyCapsule_GetPointer(
        api_capsule, "lmserde.payload_hasher_api");
    if (c->api == NULL) return -1;
    if (c->api->version < 1 || c->api->update == NULL) {
        PyErr_SetString(PyExc_ValueError, "unsupported lmserde payload hasher C API");
        return -1;
    }
    c->hasher = PyCapsule_GetPointer(hasher_capsule, "lmserde.payload_hasher");
    return c->hasher == NULL ? -1 : 0;
}

/* Ask for the next piece of codes (at most DECODE_HASH_PIECE bytes of `left`) in the L1 cache. */
static inline void prefetch_codes(const uint8_t *next, size_t left) {
#if FP8_HAVE_AVX2
    const size_t end = left < DECODE_HASH_PIECE ? left : DECODE_HASH_PIECE;
    for (size_t k = 0; k < end; k += 64) _mm_prefetch((const char *)(next + k), _MM_HINT_T0);
#else
    (void)next;
    (void)left;
#endif
}

PyDoc_STRVAR(encode_hashed_doc,
             "encode_hashed(src_addr, dst_addr, n, float_kind, fp8_kind, level, hasher, api)\n"
             "encode() of n floats without scales, feeding each piece of codes to lmserde's\n"
             "payload hasher right after writing it.");

static PyObject *py_encode_hashed(PyObject *self, PyObject *args) {
    hashed_call c;
    (void)self;
    if (parse_hashed_call(args, &c) < 0) return NULL;
    const unsigned char *src = (const unsigned char *)(uintptr_t)c.src_addr;
    uint8_t *dst = (uint8_t *)(uintptr_t)c.dst_addr;
    const size_t n = (size_t)c.n, es = elem_size(c.kind);
    int lv = effective_level(c.level);
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    for (size_t off = 0; off < n; off += ENCODE_HASH_PIECE) {
        const size_t len = n - off < ENCODE_HASH_PIECE ? n - off : ENCODE_HASH_PIECE;
        encode_row(src + off * es, c.kind, dst + off, len, c.fp8, NULL, lv);
        c.api->update(c.hasher, dst + off, len);
    }
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_hashed_doc,
             "decode_hashed(src_addr, dst_addr, n, float_kind, fp8_kind, level, hasher, api)\n"
             "decode() of n codes without scales, feeding each piece of codes to lmserde's\n"
             "payload hasher right after reading it.");

static PyObject *py_decode_hashed(PyObject *self, PyObject *args) {
    hashed_call c;
    (void)self;
    if (parse_hashed_call(args, &c) < 0) return NULL;
    const uint8_t *src = (const uint8_t *)(uintptr_t)c.src_addr;
    unsigned char *dst = (unsigned char *)(uintptr_t)c.dst_addr;
    const size_t n = (size_t)c.n, es = elem_size(c.kind);
    int lv = effective_level(c.level);
    fpenv env;
    const int stream = use_stream(n * es, lv);
    int streamed = 0;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    for (size_t off = 0; off < n; off += DECODE_HASH_PIECE) {
        const size_t len = n - off < DECODE_HASH_PIECE ? n - off : DECODE_HASH_PIECE;
        if (lv >= 1) prefetch_codes(src + off + len, n - off - len);
        streamed |= decode_row(src + off, c.fp8, dst + off * es, c.kind, len, NULL, lv, stream);
        c.api->update(c.hasher, src + off, len);
    }
    stream_fence(stream);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    g_streamed_decodes += (unsigned long long)streamed;
    Py_RETURN_NONE;
}

static int check_scale(float s) {
    if (!(s > 0.0f) || s > FLT_MAX) {
        PyErr_SetString(PyExc_ValueError, "scale must be positive and finite in float32");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(encode_scaled_doc,
             "encode_scaled(src_addr, src_kind, dst_addr, n, fp8_kind, scale, level)\n"
             "Encode n floats divided (in float32) by the float32 value of scale (positive, finite).");

static PyObject *py_encode_scaled(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr;
    int kind, fp8, level;
    Py_ssize_t n;
    float scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "KiKnifi", &src_addr, &kind, &dst_addr, &n, &fp8, &scale, &level))
        return NULL;
    if (check_kinds(kind, fp8) < 0 || check_shape(n, 0) < 0 || check_scale(scale) < 0) return NULL;
    const unsigned char *src = (const unsigned char *)(uintptr_t)src_addr;
    uint8_t *dst = (uint8_t *)(uintptr_t)dst_addr;
    int lv = effective_level(level);
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    if (n) encode_row(src, kind, dst, (size_t)n, fp8, &scale, lv);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_scaled_doc,
             "decode_scaled(src_addr, fp8_kind, dst_addr, dst_kind, n, scale, level)\n"
             "Decode n fp8 codes times the float32 value of scale (positive, finite).");

static PyObject *py_decode_scaled(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr;
    int kind, fp8, level;
    Py_ssize_t n;
    float scale;
    (void)self;
    if (!PyArg_ParseTuple(args, "KiKinfi", &src_addr, &fp8, &dst_addr, &kind, &n, &scale, &level))
        return NULL;
    if (check_kinds(kind, fp8) < 0 || check_shape(n, 0) < 0 || check_scale(scale) < 0) return NULL;
    const uint8_t *src = (const uint8_t *)(uintptr_t)src_addr;
    unsigned char *dst = (unsigned char *)(uintptr_t)dst_addr;
    int lv = effective_level(level);
    fpenv env;
    const int stream = use_stream((size_t)n * elem_size(kind), lv);
    int streamed = 0;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    if (n) streamed = decode_row(src, fp8, dst, kind, (size_t)n, &scale, lv, stream);
    stream_fence(stream);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    g_streamed_decodes += (unsigned long long)streamed;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(absmax_doc,
             "absmax(src_addr, src_kind, n_rows, row_len, out_addr, level)\n"
             "Write the largest finite |x| of each row as float32 (0.0 for rows without one).");

static PyObject *py_absmax(PyObject *self, PyObject *args) {
    unsigned long long src_addr, out_addr;
    int kind, level;
    Py_ssize_t n_rows, row_len;
    (void)self;
    if (!PyArg_ParseTuple(args, "KinnKi", &src_addr, &kind, &n_rows, &row_len, &out_addr, &level))
        return NULL;
    if (check_kinds(kind, FP8_E4M3FN) < 0 || check_shape(n_rows, row_len) < 0) return NULL;
    const unsigned char *src = (const unsigned char *)(uintptr_t)src_addr;
    float *out = (float *)(uintptr_t)out_addr;
    size_t rows = (size_t)n_rows, len = (size_t)row_len, es = elem_size(kind);
    int lv = effective_level(level);
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    for (size_t r = 0; r < rows; r++) {
        float m = row_absmax(src + r * len * es, kind, len, lv);
        memcpy(out + r, &m, 4);
    }
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

PyDoc_STRVAR(finite_absmax_doc,
             "finite_absmax(src_addr, src_kind, n, level)\n"
             "The largest finite |x| of n floats as a Python float (0.0 when there is none).");

static PyObject *py_finite_absmax(PyObject *self, PyObject *args) {
    unsigned long long src_addr;
    int kind, level;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "Kini", &src_addr, &kind, &n, &level)) return NULL;
    if (check_kinds(kind, FP8_E4M3FN) < 0 || check_shape(n, 0) < 0) return NULL;
    const unsigned char *src = (const unsigned char *)(uintptr_t)src_addr;
    int lv = effective_level(level);
    float m = 0.0f;
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
    if (n) m = row_absmax(src, kind, (size_t)n, lv);
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    return PyFloat_FromDouble((double)m);
}

PyDoc_STRVAR(encode_pow2_doc,
             "encode_pow2(src_addr, src_kind, dst_addr, n_rows, row_len, fp8_kind, exps_addr, cap, level)\n"
             "Encode each row divided by 2^k, k the row's int8 exponent at exps_addr. With cap >= 0,\n"
             "k is first computed from the row's largest finite |x| (at most cap) and written there.");

static PyObject *py_encode_pow2(PyObject *self, PyObject *args) {
    unsigned long long src_addr, dst_addr, exps_addr;
    int kind, fp8, cap, level;
    Py_ssize_t n_rows, row_len;
    (void)self;
    if (!PyArg_ParseTuple(args, "KiKnniKii", &src_addr, &kind, &dst_addr, &n_rows, &row_len, &fp8,
                          &exps_addr, &cap, &level))
        return NULL;
    if (check_kinds(kind, fp8) < 0 || check_shape(n_rows, row_len) < 0) return NULL;
    if (cap > MAX_EXPONENT) {
        PyErr_SetString(PyExc_ValueError, "exponent cap must be <= 126");
        return NULL;
    }
    const unsigned char *src = (const unsigned char *)(uintptr_t)src_addr;
    uint8_t *dst = (uint8_t *)(uintptr_t)dst_addr;
    int8_t *exps = (int8_t *)(uintptr_t)exps_addr;
    size_t rows = (size_t)n_rows, len = (size_t)row_len, es = elem_size(kind);
    int lv = effective_level(level), bad = 0;
    fpenv env;
    Py_BEGIN_ALLOW_THREADS
    fpenv_enter(&env);
#if FP8_HAVE_AVX2
    if (lv >= 1 && kind == KIND_BF16) {
        for (size_t r = 0; cap < 0 && r < rows; r++)
            bad |= exps[r] < MIN_EXPONENT || exps[r] > MAX_EXPONENT;
        if (!bad) enc_rows_pow2_bf16(src, dst, rows, len, fp8, exps, cap);
        rows = 0;
    }
#endif
    for (size_t r = 0; r < rows && !bad; r++) {
        const unsigned char *s = src + r * len * es;
        int k;
        if (cap >= 0) {
            k = exponent_for(row_absmax(s, kind, len, lv), fp8, cap);
            exps[r] = (int8_t)k;
        } else {
            k = exps[r];
            if (k < MIN_EXPONENT || k > MAX_EXPONENT) {
                bad = 1;
                break;
            }
        }
        float scale = pow2f(k);
        encode_row(s, kind, dst + r * len, len, fp8, &scale, lv);
    }
    fpenv_leave(&env);
    Py_END_ALLOW_THREADS
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "scale exponent outside [-126, 126]");
        return NULL;
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(decode_pow2_doc,
             "decode_pow2(src_addr, fp8_kind, dst_addr, dst_kind, n_rows, row_len, exps_addr, level)\n"
             "Decode each row times 2^k, k the row's int8 exponent (checked: -126 <= k <= 126).");

static PyObject *py_decode_pow2(PyObject *self, PyObject *args) {
    (void)self;
    return decode_rows(args, 1);
}

static PyObject *py_streamed_decodes(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromUnsignedLongLong(g_streamed_decodes);
}

static PyObject *py_simd_level(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromLong(g_simd_level);
}

static PyMethodDef methods[] = {
    {"streamed_decodes", py_streamed_decodes, METH_NOARGS,
     "streamed_decodes() -> int: decode calls so far that wrote part of their destination with\n"
     "streaming stores"},
    {"encode", py_encode, METH_VARARGS, encode_doc},
    {"decode", py_decode, METH_VARARGS, decode_doc},
    {"encode_hashed", py_encode_hashed, METH_VARARGS, encode_hashed_doc},
    {"decode_hashed", py_decode_hashed, METH_VARARGS, decode_hashed_doc},
    {"absmax", py_absmax, METH_VARARGS, absmax_doc},
    {"finite_absmax", py_finite_absmax, METH_VARARGS, finite_absmax_doc},
    {"encode_scaled", py_encode_scaled, METH_VARARGS, encode_scaled_doc},
    {"decode_scaled", py_decode_scaled, METH_VARARGS, decode_scaled_doc},
    {"encode_pow2", py_encode_pow2, METH_VARARGS, encode_pow2_doc},
    {"decode_pow2", py_decode_pow2, METH_VARARGS, decode_pow2_doc},
    {"simd_level", py_simd_level, METH_NOARGS, "Highest kernel level this CPU runs (0 scalar, 1 AVX2, 2 AVX-512 VBMI)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_fastcodec", "fp8 encode/decode kernels for lmserde_fp8.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__fastcodec(void) {
    init_tables();
#if FP8_HAVE_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
        g_simd_level = 1;
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vbmi"))
            g_simd_level = 2;
    }
#endif
    PyObject *module = PyModule_Create(&moddef);
    if (module == NULL) return NULL;
    /* decodes into at least this many bytes use streaming stores (see decode_row) */
    if (PyModule_AddIntConstant(module, "STREAM_MIN_BYTES", (long)STREAM_MIN_BYTES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
