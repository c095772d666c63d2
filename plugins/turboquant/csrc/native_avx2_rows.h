/*
 * AVX2 row kernels for head_dim = 8 * NV, included by native.c once per NV value (a template:
 * every loop bound and bit width is a compile-time constant, so rows live in registers).
 * The operations and their order are those of the scalar kernels in native.c.
 */
#define F(name) TQ_CAT(name, NV)
#define NB(bits) (NV * (bits)) /* packed bytes of one row: 8 * NV indices */

AVX2_FN void F(load_row_)(const char *src, int dtype, __m256 *x) {
    const int esz = dtype == DT_F32 ? 4 : 2;
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) x[i] = load8(src + 8 * i * esz, dtype);
}

AVX2_FN void F(store_row_)(const __m256 *x, int dtype, char *dst) {
    const int esz = dtype == DT_F32 ? 4 : 2;
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) store8(x[i], dtype, dst + 8 * i * esz);
}

AVX2_FN float F(fold_sumsq_)(const __m256 *x) {
    __m256 s[NV];
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) s[i] = _mm256_mul_ps(x[i], x[i]);
#pragma GCC unroll 8
    for (int w = NV / 2; w >= 1; w /= 2) {
#pragma GCC unroll 64
        for (int i = 0; i < w; i++) s[i] = _mm256_add_ps(s[i], s[i + w]);
    }
    return fold8(s[0]);
}

AVX2_FN void F(fwht_)(__m256 *x) {
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) x[i] = fwht8(x[i]);
#pragma GCC unroll 8
    for (int hv = 1; hv < NV; hv *= 2) {
#pragma GCC unroll 64
        for (int i = 0; i < NV; i += 2 * hv) {
#pragma GCC unroll 64
            for (int j = i; j < i + hv; j++) {
                __m256 a = x[j], b = x[j + hv];
                x[j] = _mm256_add_ps(a, b);
                x[j + hv] = _mm256_sub_ps(a, b);
            }
        }
    }
}

/* Writes exactly NB(bits) bytes at out. */
AVX2_FN void F(pack_)(const __m256i *q, const int bits, uint8_t *out) {
#pragma GCC unroll 16
    for (int i = 0; i < NV; i += 4)
        pack32(bytes32(q[i], q[i + 1], q[i + 2], q[i + 3]), bits, out + (i / 4) * 4 * bits,
               i + 4 < NV);
}

AVX2_FN void F(unpack_)(const uint8_t *in, const int bits, __m256i *q) {
    uint8_t buf[NB(4) + 8];
    memcpy(buf, in, (size_t)NB(bits));
    memset(buf + NB(bits), 0, 8);
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) q[i] = unpack8(buf, i, bits);
}

AVX2_FN int F(enc_mse_)(const __m256 *x, const tq_params *p, const __m256 *probe, const int bits,
                        uint8_t *out) {
    __m256 z[NV];
    __m256i q[NV];
    float norm = sqrtf(F(fold_sumsq_)(x));
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) z[i] = _mm256_mul_ps(x[i], _mm256_loadu_ps(p->signs + 8 * i));
    F(fwht_)(z);
    const __m256 inv = _mm256_set1_ps(1.0f / ((norm + 1e-8f) * p->sqrt_d));
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) q[i] = bucket8(_mm256_mul_ps(z[i], inv), probe, bits);
    F(pack_)(q, bits, out);
    return !put_f16_bytes(out + NB(bits), norm);
}

AVX2_FN int F(enc_minmax_)(const __m256 *v, const int bits, uint8_t *out) {
    const float levels = (float)((1 << bits) - 1);
    __m256i q[NV];
    __m256 mn = v[0], mx = v[0], unord = _mm256_cmp_ps(v[0], v[0], _CMP_UNORD_Q);
#pragma GCC unroll 64
    for (int i = 1; i < NV; i++) {
        mn = _mm256_min_ps(mn, v[i]);
        mx = _mm256_max_ps(mx, v[i]);
        unord = _mm256_or_ps(unord, _mm256_cmp_ps(v[i], v[i], _CMP_UNORD_Q));
    }
    float lo, hi;
    minmax8(mn, mx, &lo, &hi);
    lo = lo + 0.0f;
    float scale = (hi - lo) / levels;
    if (!(scale > 1e-8f)) scale = 1e-8f;
    const __m256 vlo = _mm256_set1_ps(lo), vsc = _mm256_set1_ps(scale);
    const __m256 half = _mm256_set1_ps(0.5f), zero = _mm256_setzero_ps();
    const __m256 vlev = _mm256_set1_ps(levels);
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) {
        __m256 t = _mm256_add_ps(_mm256_div_ps(_mm256_sub_ps(v[i], vlo), vsc), half);
        q[i] = _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(t, zero), vlev));
    }
    F(pack_)(q, bits, out);
    int ok = put_f16_bytes(out + NB(bits), scale);
    ok &= put_f16_bytes(out + NB(bits) + 2, lo);
    return _mm256_movemask_ps(unord) != 0 || !ok;
}

AVX2_FN int F(enc_fp8_)(const __m256 *k, uint8_t *out) {
    __m256 bad = _mm256_setzero_ps();
#pragma GCC unroll 16
    for (int i = 0; i < NV; i += 4) {
        __m256i c0 = fp8x8(k[i], &bad), c1 = fp8x8(k[i + 1], &bad);
        __m256i c2 = fp8x8(k[i + 2], &bad), c3 = fp8x8(k[i + 3], &bad);
        _mm256_storeu_si256((__m256i *)(out + 8 * i), bytes32(c0, c1, c2, c3));
    }
    return _mm256_movemask_ps(bad) != 0;
}

AVX2_FN int F(enc_part_)(const __m256 *x, const tq_params *p, const avx2_tables *t, int part,
                         uint8_t *out) {
    const __m256 *probe = t->probe[part];
    switch (p->codec[part]) {
    case CODEC_FP8: return F(enc_fp8_)(x, out);
    case CODEC_MSE:
        switch (p->bits[part]) {
        case 1: return F(enc_mse_)(x, p, probe, 1, out);
        case 2: return F(enc_mse_)(x, p, probe, 2, out);
        case 3: return F(enc_mse_)(x, p, probe, 3, out);
        default: return F(enc_mse_)(x, p, probe, 4, out);
        }
    default:
        switch (p->bits[part]) {
        case 1: return F(enc_minmax_)(x, 1, out);
        case 2: return F(enc_minmax_)(x, 2, out);
        case 3: return F(enc_minmax_)(x, 3, out);
        default: return F(enc_minmax_)(x, 4, out);
        }
    }
}

AVX2_FN void F(dec_mse_)(const uint8_t *in, const tq_params *p, __m256 lo, __m256 hi,
                         const int bits, __m256 *x) {
    __m256i q[NV];
    F(unpack_)(in, bits, q);
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) x[i] = lookup8(q[i], lo, hi, bits);
    float norm = f16_to_f32(get_u16(in + NB(bits)));
    float g;
    if (p->norm_correction) {
        float den = sqrtf(F(fold_sumsq_)(x) + 1e-16f) * p->sqrt_d;
        g = norm / den;
    } else {
        g = norm / p->sqrt_d;
    }
    F(fwht_)(x);
    const __m256 vg = _mm256_set1_ps(g);
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++)
        x[i] = _mm256_mul_ps(_mm256_mul_ps(x[i], vg), _mm256_loadu_ps(p->signs + 8 * i));
}

AVX2_FN void F(dec_minmax_)(const uint8_t *in, const int bits, __m256 *v) {
    __m256i q[NV];
    F(unpack_)(in, bits, q);
    const __m256 sc = _mm256_set1_ps(f16_to_f32(get_u16(in + NB(bits))));
    const __m256 zr = _mm256_set1_ps(f16_to_f32(get_u16(in + NB(bits) + 2)));
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++)
        v[i] = _mm256_add_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(q[i]), sc), zr);
}

AVX2_FN void F(dec_fp8_)(const uint8_t *in, __m256 *x) {
#pragma GCC unroll 64
    for (int i = 0; i < NV; i++) {
        __m256i b = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(in + 8 * i)));
        x[i] = _mm256_i32gather_ps(E4M3_TABLE, b, 4);
    }
}

AVX2_FN void F(dec_part_)(const uint8_t *in, const tq_params *p, const avx2_tables *t, int part,
                          __m256 *x) {
    __m256 lo = t->cent_lo[part], hi = t->cent_hi[part];
    switch (p->codec[part]) {
    case CODEC_FP8: F(dec_fp8_)(in, x); break;
    case CODEC_MSE:
        switch (p->bits[part]) {
        case 1: F(dec_mse_)(in, p, lo, hi, 1, x); break;
        case 2: F(dec_mse_)(in, p, lo, hi, 2, x); break;
        case 3: F(dec_mse_)(in, p, lo, hi, 3, x); break;
        default: F(dec_mse_)(in, p, lo, hi, 4, x); break;
        }
        break;
    default:
        switch (p->bits[part]) {
        case 1: F(dec_minmax_)(in, 1, x); break;
        case 2: F(dec_minmax_)(in, 2, x); break;
        case 3: F(dec_minmax_)(in, 3, x); break;
        default: F(dec_minmax_)(in, 4, x); break;
        }
    }
}

AVX2_ENTRY Py_ssize_t F(encode_rows_avx2_)(const char *k, const char *v, Py_ssize_t ks,
                                           Py_ssize_t vs, Py_ssize_t n, uint8_t *out,
                                           const tq_params *p, const avx2_tables *t) {
    __m256 x[NV];
    const int esz = p->dtype == DT_F32 ? 4 : 2;
    Py_ssize_t first_bad = -1;
    for (Py_ssize_t r = 0; r < n; r++) {
        uint8_t *o = out + r * (Py_ssize_t)p->stride;
        int bad;
        F(load_row_)(k + r * ks * esz, p->dtype, x);
        bad = F(enc_part_)(x, p, t, 0, o);
        F(load_row_)(v + r * vs * esz, p->dtype, x);
        bad |= F(enc_part_)(x, p, t, 1, o + p->part_off[1]);
        if (p->stride > p->slot) o[p->slot] = 0;
        if (bad && first_bad < 0) first_bad = r;
    }
    return first_bad;
}

AVX2_ENTRY void F(decode_rows_avx2_)(const uint8_t *in, Py_ssize_t n, char *k, char *v,
                                     Py_ssize_t ks, Py_ssize_t vs, const tq_params *p,
                                     const avx2_tables *t) {
    __m256 x[NV];
    const int esz = p->dtype == DT_F32 ? 4 : 2;
    for (Py_ssize_t r = 0; r < n; r++) {
        const uint8_t *s = in + r * (Py_ssize_t)p->stride;
        F(dec_part_)(s, p, t, 0, x);
        F(store_row_)(x, p->dtype, k + r * ks * esz);
        F(dec_part_)(s + p->part_off[1], p, t, 1, x);
        F(store_row_)(x, p->dtype, v + r * vs * esz);
    }
}

#undef NB
#undef F
