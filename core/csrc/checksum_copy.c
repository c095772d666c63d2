/*
 * lmserde._checksum_copy: the stored-object frame's payload checksum, computed in the same pass
 * as a copy of the payload, and incrementally over bytes fed in order.
 *
 * The checksum (pinned; lmserde.l2.serde.payload_checksum is its definition): up to SEGMENT bytes
 * (the caller passes 4 MiB) the XXH3-64 (seed 0) of the bytes; longer, the XXH3-64 of the
 * XXH3-64s of the SEGMENT-byte segments (the last one shorter), as little-endian u64s in order.
 *
 * Why in one pass: a 32 MiB payload is far larger than the CPU caches, so hashing it after a copy
 * reads it from memory a second time. Here each 1 KiB block is copied and then hashed while it is
 * in the L1 cache, with the source prefetched a few KiB ahead so that memory stays busy while the
 * block is hashed. Copies of at least STREAM_MIN_BYTES write the destination with streaming
 * (non-temporal) stores from its first 64-byte line on, as glibc's memcpy does for large copies.
 *
 * XXH3 is the reference implementation (xxhash.h, BSD-2-Clause, vendored unchanged in
 * third_party/xxhash). Its long-input loop (accumulate 16 stripes of 64 bytes, scramble) is driven
 * here block by block exactly as XXH3_hashLong_64b_internal does; the AVX-512, AVX2 and SSE2
 * variants are xxhash's own, chosen at run time like the copy (all give the same value).
 * Every entry point releases the GIL. Callers pass raw addresses; the Python layer
 * (lmserde.frame_checksum) checks sizes and keeps the memory alive.
 *
 * C API (capsule C_API, named "lmserde.payload_hasher_api"): a struct {unsigned version (1);
 * void (*update)(void *hasher, const void *data, size_t n);} through which another extension
 * feeds a hasher (a capsule named "lmserde.payload_hasher", from lmserde.PayloadHasher) without
 * the GIL, from inside its own loop over the bytes. The caller keeps the hasher alive and uses
 * it from one thread at a time.
 *
 * The module also holds the frame header's fast path (write_header, accept_header), written in
 * frame_header.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#define CC_X86 1
#include <immintrin.h>
#define XXH_X86DISPATCH 1 /* as xxhash's own xxh_x86dispatch.c: every x86 variant, 64-byte alignment */
#define XXH_DISPATCH_AVX512 1
#define XXH_DISPATCH_AVX2 1
#define XXH_TARGET_AVX512 __attribute__((__target__("avx512f")))
#define XXH_TARGET_AVX2 __attribute__((__target__("avx2")))
#else
#define CC_X86 0
#endif
#define XXH_INLINE_ALL
#include "third_party/xxhash/xxhash.h"

#include "frame_header.h"

#define BLOCK_LEN (XXH_STRIPE_LEN * ((sizeof(XXH3_kSecret) - XXH_STRIPE_LEN) / XXH_SECRET_CONSUME_RATE))
#define STRIPES_PER_BLOCK (BLOCK_LEN / XXH_STRIPE_LEN)
#define PREFETCH_AHEAD 4096
/* copies into at least this many bytes use streaming stores (smaller ones stay in the cache,
 * where a reader is likely to find them) */
#define STREAM_MIN_BYTES ((size_t)2 << 20)

enum { LEVEL_SSE2 = 0, LEVEL_AVX2 = 1, LEVEL_AVX512 = 2 };
static int g_level = LEVEL_SSE2;
static unsigned long long g_streamed_copies = 0;

typedef void (*acc_fn)(xxh_u64 *XXH_RESTRICT, const xxh_u8 *XXH_RESTRICT,
                       const xxh_u8 *XXH_RESTRICT, size_t);
typedef void (*scramble_fn)(void *XXH_RESTRICT, const void *XXH_RESTRICT);

/* ------------------------------------------------------------------ copy pieces, per SIMD level */

/* Copy [from, to) of src into dst with streaming stores, line by line, last line first when
 * `backward`. dst + from is 64-byte aligned and to - from a multiple of 64 (the callers keep it
 * so). The source is prefetched PREFETCH_AHEAD past each line whichever the direction: the
 * backward order only runs over a block the caller has just hashed (in the cache). */
#if CC_X86
__attribute__((target("avx512f"))) static inline void stream_line_avx512(
    uint8_t *dst, const uint8_t *src, size_t i) {
    _mm_prefetch((const char *)(src + i + PREFETCH_AHEAD), _MM_HINT_T0);
    _mm512_stream_si512((void *)(dst + i), _mm512_loadu_si512(src + i));
}

__attribute__((target("avx2"))) static inline void stream_line_avx2(
    uint8_t *dst, const uint8_t *src, size_t i) {
    _mm_prefetch((const char *)(src + i + PREFETCH_AHEAD), _MM_HINT_T0);
    __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
    _mm256_stream_si256((__m256i *)(dst + i), a);
    _mm256_stream_si256((__m256i *)(dst + i + 32), b);
}

static inline void stream_line_sse2(uint8_t *dst, const uint8_t *src, size_t i) {
    _mm_prefetch((const char *)(src + i + PREFETCH_AHEAD), _MM_HINT_T0);
    for (size_t k = 0; k < 64; k += 16)
        _mm_stream_si128((__m128i *)(dst + i + k), _mm_loadu_si128((const __m128i *)(src + i + k)));
}

#define STREAM_LINES_TEMPLATE(NAME, ATTR, LINE)                                                     \
    ATTR static inline void NAME(uint8_t *dst, const uint8_t *src, size_t from, size_t to,          \
                                 int backward) {                                                    \
        if (backward) {                                                                             \
            for (size_t i = to; i > from;) LINE(dst, src, i -= 64);                                 \
        } else {                                                                                    \
            for (size_t i = from; i < to; i += 64) LINE(dst, src, i);                               \
        }                                                                                           \
    }
STREAM_LINES_TEMPLATE(stream_lines_avx512, __attribute__((target("avx512f"))), stream_line_avx512)
STREAM_LINES_TEMPLATE(stream_lines_avx2, __attribute__((target("avx2"))), stream_line_avx2)
STREAM_LINES_TEMPLATE(stream_lines_sse2, , stream_line_sse2)
#endif

/* Whether dst lies a little ahead of src modulo 4 KiB (by 1 to ALIAS_WINDOW bytes). The CPU
 * matches a load against the stores still queued by the low 12 bits of their addresses only;
 * copying forward from such a pair, each load of the next source lines "matches" a line just
 * stored and waits for it (4K aliasing), which made the fused copy of a 32 MiB payload whose
 * destination was 64 bytes ahead of its source 1-2 ms slower than with equal page offsets. For
 * such a pair each 1 KiB block is hashed first and copied one block later, last line first: the
 * hash's loads then lie past every store still queued, and each of the copy's loads (from the
 * cache) below the lines it has just stored. */
#define ALIAS_WINDOW 512
static inline int dst_shadows_src(const uint8_t *dst, const uint8_t *src) {
    const size_t ahead = (size_t)((uintptr_t)dst - (uintptr_t)src) & 4095;
    return ahead != 0 && ahead <= ALIAS_WINDOW;
}

/* ------------------------------------------------ stripes of a segment accumulated in place */

/* Accumulate the whole stripes [from, to) of the segment starting at seg (from and to multiples of
 * XXH_STRIPE_LEN) into acc_io, scrambling after each block they complete, as XXH3's long loop
 * does. The caller guarantees that the segment is longer than `to` (XXH3 keeps the stripe of a
 * long input's last byte for its final step, and scrambles after every block followed by more
 * bytes). The accumulators are worked on in a local, aligned copy: through the pointer the
 * compiler would store them after every stripe (measured 4x slower). */
#define ACCUMULATE_TEMPLATE(NAME, ATTR, ACC, SCRAMBLE)                                              \
    ATTR static void NAME(xxh_u64 *acc_io, const xxh_u8 *seg, size_t from, size_t to) {             \
        const xxh_u8 *secret = XXH3_kSecret;                                                        \
        XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB];                                           \
        memcpy(acc, acc_io, sizeof acc);                                                            \
        while (from < to) {                                                                         \
            const size_t block_end = from - from % BLOCK_LEN + BLOCK_LEN;                           \
            const size_t end = to < block_end ? to : block_end;                                     \
            ACC(acc, seg + from,                                                                    \
                secret + (from % BLOCK_LEN) / XXH_STRIPE_LEN * XXH_SECRET_CONSUME_RATE,             \
                (end - from) / XXH_STRIPE_LEN);                                                     \
            if (end == block_end) SCRAMBLE(acc, secret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN);    \
            from = end;                                                                             \
        }                                                                                           \
        memcpy(acc_io, acc, sizeof acc);                                                            \
    }

#if CC_X86
ACCUMULATE_TEMPLATE(accumulate_avx512, __attribute__((target("avx512f"))), XXH3_accumulate_avx512,
                    XXH3_scrambleAcc_avx512)
ACCUMULATE_TEMPLATE(accumulate_avx2, __attribute__((target("avx2"))), XXH3_accumulate_avx2,
                    XXH3_scrambleAcc_avx2)
ACCUMULATE_TEMPLATE(accumulate_sse2, , XXH3_accumulate_sse2, XXH3_scrambleAcc_sse2)
#else
ACCUMULATE_TEMPLATE(accumulate_plain, , XXH3_accumulate, XXH3_scrambleAcc)
#endif

static void accumulate_stripes(xxh_u64 *acc, const xxh_u8 *seg, size_t from, size_t to) {
#if CC_X86
    if (g_level == LEVEL_AVX512) { accumulate_avx512(acc, seg, from, to); return; }
    if (g_level == LEVEL_AVX2) { accumulate_avx2(acc, seg, from, to); return; }
    accumulate_sse2(acc, seg, from, to);
#else
    accumulate_plain(acc, seg, from, to);
#endif
}

/* XXH3's accumulators before the first stripe. */
static const xxh_u64 INIT_ACC[XXH_ACC_NB] = XXH3_INIT_ACC;

/* The whole stripes XXH3 accumulates before its final step, for `len` bytes known so far of a
 * segment at least that long: none up to XXH3_MIDSIZE_MAX bytes (shorter inputs are hashed by
 * other algorithms), else those before the stripe of the last byte known. */
static size_t stripes_end(size_t len) {
    return len <= XXH3_MIDSIZE_MAX ? 0 : (len - 1) / XXH_STRIPE_LEN * XXH_STRIPE_LEN;
}

/* XXH3-64 of the `len`-byte segment at seg whose stripes [0, done) are in acc (not changed). */
static uint64_t finish_segment(const xxh_u64 *acc_in, const xxh_u8 *seg, size_t done, size_t len) {
    if (len <= XXH3_MIDSIZE_MAX) return XXH3_64bits(seg, len);
    XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB];
    memcpy(acc, acc_in, sizeof acc);
    accumulate_stripes(acc, seg, done, stripes_end(len));
    XXH3_accumulate_512(acc, seg + len - XXH_STRIPE_LEN,
                        XXH3_kSecret + sizeof(XXH3_kSecret) - XXH_STRIPE_LEN -
                            XXH_SECRET_LASTACC_START);
    return XXH3_finalizeLong_64b(acc, XXH3_kSecret, (xxh_u64)len);
}

/* ------------------------------------------------------------- one segment: copy and XXH3-64 */

/* The template of one level: copies src[0:len) to dst (dst may be NULL: hash only) and returns
 * XXH3-64 of it. `stream` says whether to copy with streaming stores. */
#define COPY_HASH_TEMPLATE(NAME, ATTR, ACC, SCRAMBLE, STREAM_LINES)                                 \
    ATTR static uint64_t NAME(uint8_t *dst, const uint8_t *src, size_t len, int stream) {           \
        if (len <= XXH3_MIDSIZE_MAX) {                                                              \
            if (dst != NULL && len) memcpy(dst, src, len);                                          \
            return XXH3_64bits(src, len);                                                           \
        }                                                                                           \
        XXH_ALIGN(XXH_ACC_ALIGN) xxh_u64 acc[XXH_ACC_NB] = XXH3_INIT_ACC;                           \
        const xxh_u8 *secret = XXH3_kSecret;                                                        \
        const size_t secret_size = sizeof(XXH3_kSecret);                                            \
        const size_t nb_blocks = (len - 1) / BLOCK_LEN;                                             \
        /* copied: how far dst is written; streaming stores start at dst's first line */            \
        size_t copied = 0;                                                                          \
        if (dst != NULL && stream) {                                                                \
            copied = (size_t)((64 - ((uintptr_t)dst & 63)) & 63);                                   \
            if (copied > len) copied = len;                                                         \
            memcpy(dst, src, copied);                                                               \
        }                                                                                           \
        const int hash_first = stream && dst != NULL && dst_shadows_src(dst, src);                  \
        for (size_t n = 0; n < nb_blocks; n++) {                                                    \
            /* hashing first, the copy trails one block behind (see dst_shadows_src) */             \
            const size_t end = (hash_first ? n : n + 1) * BLOCK_LEN;                                \
            if (hash_first) {                                                                       \
                ACC(acc, src + n * BLOCK_LEN, secret, STRIPES_PER_BLOCK);                           \
                SCRAMBLE(acc, secret + secret_size - XXH_STRIPE_LEN);                               \
            }                                                                                       \
            if (dst != NULL) {                                                                      \
                if (stream) {                                                                       \
                    if (end > copied) {                                                             \
                        size_t to = copied + ((end - copied + 63) & ~(size_t)63);                   \
                        if (to > len) to = copied + ((len - copied) & ~(size_t)63);                 \
                        STREAM_LINES(dst, src, copied, to, hash_first);                             \
                        copied = to;                                                                \
                    }                                                                               \
                } else {                                                                            \
                    memcpy(dst + n * BLOCK_LEN, src + n * BLOCK_LEN, BLOCK_LEN);                    \
                    copied = end;                                                                   \
                }                                                                                   \
            }                                                                                       \
            if (!hash_first) {                                                                      \
                ACC(acc, src + n * BLOCK_LEN, secret, STRIPES_PER_BLOCK);                           \
                SCRAMBLE(acc, secret + secret_size - XXH_STRIPE_LEN);                               \
            }                                                                                       \
        }                                                                                           \
        if (dst != NULL && copied < len) memcpy(dst + copied, src + copied, len - copied);          \
        return finish_segment(acc, src, nb_blocks * BLOCK_LEN, len); /* the last, partial block */  \
    }

#if CC_X86
COPY_HASH_TEMPLATE(copy_hash_avx512, __attribute__((target("avx512f"))), XXH3_accumulate_avx512,
                   XXH3_scrambleAcc_avx512, stream_lines_avx512)
COPY_HASH_TEMPLATE(copy_hash_avx2, __attribute__((target("avx2"))), XXH3_accumulate_avx2,
                   XXH3_scrambleAcc_avx2, stream_lines_avx2)
COPY_HASH_TEMPLATE(copy_hash_sse2, , XXH3_accumulate_sse2, XXH3_scrambleAcc_sse2,
                   stream_lines_sse2)
#else
static inline void stream_lines_plain(uint8_t *dst, const uint8_t *src, size_t from, size_t to,
                                      int backward) {
    (void)backward;
    memcpy(dst + from, src + from, to - from);
}
COPY_HASH_TEMPLATE(copy_hash_plain, , XXH3_accumulate, XXH3_scrambleAcc, stream_lines_plain)
#endif

static uint64_t copy_hash_segment(uint8_t *dst, const uint8_t *src, size_t len, int stream) {
#if CC_X86
    if (g_level == LEVEL_AVX512) return copy_hash_avx512(dst, src, len, stream);
    if (g_level == LEVEL_AVX2) return copy_hash_avx2(dst, src, len, stream);
    return copy_hash_sse2(dst, src, len, stream);
#else
    return copy_hash_plain(dst, src, len, stream);
#endif
}

/* Whether copy_checksum writes dst with streaming stores. */
static int copy_streams(const void *dst, size_t n) { return dst != NULL && n >= STREAM_MIN_BYTES; }

/* The payload checksum of src[0:n), copying it to dst unless dst is NULL. */
static uint64_t copy_checksum(uint8_t *dst, const uint8_t *src, size_t n, size_t segment) {
    const int stream = copy_streams(dst, n);
    uint64_t result;
    if (n <= segment) {
        result = copy_hash_segment(dst, src, n, stream);
    } else {  /* XXH3-64 of the segments' digests as little-endian u64s, fed as they come */
        XXH3_state_t combined;
        XXH3_64bits_reset(&combined);
        for (size_t off = 0; off < n; off += segment) {
            const size_t len = n - off < segment ? n - off : segment;
            xxh_u8 le[8];
            XXH_writeLE64(le, copy_hash_segment(dst ? dst + off : NULL, src + off, len, stream));
            XXH3_64bits_update(&combined, le, sizeof le);
        }
        result = XXH3_64bits_digest(&combined);
    }
#if CC_X86
    if (stream) _mm_sfence();
#endif
    return result;
}

/* ------------------------------------------------------- incremental payload checksum (hasher) */

#if CC_X86
__attribute__((target("avx512f"))) static void update_avx512(
    XXH3_state_t *state, const xxh_u8 *input, size_t len) {
    XXH3_update(state, input, len, XXH3_accumulate_avx512, XXH3_scrambleAcc_avx512);
}
__attribute__((target("avx2"))) static void update_avx2(
    XXH3_state_t *state, const xxh_u8 *input, size_t len) {
    XXH3_update(state, input, len, XXH3_accumulate_avx2, XXH3_scrambleAcc_avx2);
}
#endif

static void xxh3_update(XXH3_state_t *state, const xxh_u8 *input, size_t len) {
#if CC_X86
    if (g_level == LEVEL_AVX512) { update_avx512(state, input, len); return; }
    if (g_level == LEVEL_AVX2) { update_avx2(state, input, len); return; }
#endif
    XXH3_64bits_update(state, input, len);
}

/* The payload checksum of bytes fed in order (see the top of this file).
 *
 * A hasher may be bound to a range of memory (the payload a serde writes or reads): it then
 * accepts only that range's bytes, from its start, in order; any other piece (another address,
 * past the range) marks it broken, and a broken hasher's digest is never used. That is what
 * lets the serde wrapper trust a checksum a plugin's loop produced: the hasher read the
 * payload's own memory. A bound hasher hashes in place (bound_update): it reads the last bytes
 * fed again when their segment ends or the digest is taken, so the range must still hold the
 * bytes fed until then (the wrapper takes the digest right after the serde returns). */
typedef struct {
    XXH3_state_t *segment;  /* the current segment (unbound hashers) */
    XXH3_state_t *digests;  /* the finished segments' digests, little-endian */
    xxh_u64 acc[XXH_ACC_NB];  /* bound hashers: the current segment's accumulators */
    size_t accumulated;     /* bound hashers: bytes of the current segment in acc */
    size_t segment_size;
    size_t filled;          /* bytes in the current segment */
    size_t finished;        /* segments finished */
    uintptr_t base;         /* bound: the range's first byte (0: unbound) */
    size_t limit;           /* bound: the range's length */
    size_t fed;             /* bytes fed so far */
    int broken;             /* a piece was refused */
    int sealed;             /* the whole digest came from one fused copy (sealed_digest) */
    uint64_t sealed_digest;
} payload_hasher;

static void hasher_free(payload_hasher *h) {
    if (h == NULL) return;
    XXH3_freeState(h->segment);
    XXH3_freeState(h->digests);
    PyMem_RawFree(h);
}

static payload_hasher *hasher_new(size_t segment_size, uintptr_t base, size_t limit) {
    payload_hasher *h = (payload_hasher *)PyMem_RawCalloc(1, sizeof(payload_hasher));
    if (h == NULL) return NULL;
    h->segment = XXH3_createState();
    h->digests = XXH3_createState();
    if (h->segment == NULL || h->digests == NULL) { hasher_free(h); return NULL; }
    XXH3_64bits_reset(h->segment);
    XXH3_64bits_reset(h->digests);
    memcpy(h->acc, INIT_ACC, sizeof INIT_ACC);
    h->segment_size = segment_size;
    h->base = base;
    h->limit = base ? limit : SIZE_MAX;
    return h;
}

/* The current segment's first byte in a bound hasher's range. */
static const xxh_u8 *segment_start(const payload_hasher *h) {
    return (const xxh_u8 *)h->base + h->finished * h->segment_size;
}

/* XXH3-64 of the current segment (the hasher is not changed). */
static uint64_t segment_digest(payload_hasher *h) {
    if (!h->base) return XXH3_64bits_digest(h->segment);
    return finish_segment(h->acc, segment_start(h), h->accumulated, h->filled);
}

static void end_segment(payload_hasher *h) {
    xxh_u8 le[8];
    XXH_writeLE64(le, segment_digest(h));
    XXH3_64bits_update(h->digests, le, sizeof le);
    if (h->base) {
        memcpy(h->acc, INIT_ACC, sizeof INIT_ACC);
        h->accumulated = 0;
    } else {
        XXH3_64bits_reset(h->segment);
    }
    h->filled = 0;
    h->finished++;
}

/* A bound hasher's next `take` bytes, which lie in its range: it hashes them in place. Whole
 * stripes go into the accumulators as soon as XXH3 would take them (see stripes_end); the rest
 * is read back from the range when the segment ends or the digest is taken. That spares
 * XXH3_update's copies through its internal buffer, which for the 1 KiB pieces lmserde-fp8
 * feeds cost nearly as much as the hashing. */
static void bound_update(payload_hasher *h, size_t take) {
    h->filled += take;
    const size_t end = stripes_end(h->filled);
    if (end > h->accumulated) {
        accumulate_stripes(h->acc, segment_start(h), h->accumulated, end);
        h->accumulated = end;
    }
}

/* Feed n bytes; needs no GIL (the C API hands this to other extensions). */
static void hasher_update(void *opaque, const void *data, size_t n) {
    payload_hasher *h = (payload_hasher *)opaque;
    const xxh_u8 *p = (const xxh_u8 *)data;
    if (h->broken || n == 0) return;
    if (h->sealed || n > h->limit - h->fed || (h->base && (uintptr_t)p != h->base + h->fed)) {
        h->broken = 1;  /* not the next bytes of the bound range */
        return;
    }
    h->fed += n;
    while (n > 0) {
        if (h->filled == h->segment_size) end_segment(h);  /* more bytes follow a full segment */
        size_t take = h->segment_size - h->filled;
        if (take > n) take = n;
        if (h->base) {
            bound_update(h, take);
        } else {
            xxh3_update(h->segment, p, take);
            h->filled += take;
        }
        p += take;
        n -= take;
    }
}

/* Copy n bytes between the bound range's start and `other` (into the range: dir_in) and take the
 * whole digest from the fused copy; only as the first and only use of a bound hasher. */
/* Copy n bytes between `other` and the start of the bound range (the caller checked that the
 * hasher is bound and n <= limit). The bytes are always copied; the checksum is taken from the
 * copy only as the hasher's first and only use, any other use breaks the hasher (it then vouches
 * for nothing, and the wrapper hashes the payload itself). */
static void hasher_copy_whole(payload_hasher *h, uint8_t *other, size_t n, int dir_in) {
    uint8_t *range = (uint8_t *)h->base;
    if (h->broken || h->sealed || h->fed != 0) {
        h->broken = 1;
        if (n) memmove(dir_in ? range : other, dir_in ? other : range, n);
        return;
    }
    if (n == 0) {  /* an empty range may have no address */
        h->sealed_digest = XXH3_64bits(NULL, 0);
        h->sealed = 1;
        return;
    }
    h->sealed_digest = dir_in ? copy_checksum(range, other, n, h->segment_size)
                              : copy_checksum(other, range, n, h->segment_size);
    h->sealed = 1;
    h->fed = n;
}

static uint64_t hasher_digest(payload_hasher *h) {
    if (h->sealed) return h->sealed_digest;
    if (h->finished == 0) return segment_digest(h);
    XXH3_state_t copy;  /* digest without changing the hasher */
    XXH3_copyState(&copy, h->digests);
    xxh_u8 le[8];
    XXH_writeLE64(le, segment_digest(h));
    XXH3_64bits_update(&copy, le, sizeof le);
    return XXH3_64bits_digest(&copy);
}

static const char *HASHER_CAPSULE = "lmserde.payload_hasher";
static const char *API_CAPSULE = "lmserde.payload_hasher_api";

/* The C API other extensions use to feed a hasher without the GIL (lmserde-fp8 hashes each
 * piece of codes it writes or reads). ABI version 1. The struct is append-only: a later version
 * may add members after these, never change or remove them, so a reader of version >= 1 can use
 * the members it knows. */
typedef struct {
    unsigned int version;
    void (*update)(void *hasher, const void *data, size_t n);
} payload_hasher_api;

static const payload_hasher_api g_api = {1, hasher_update};

static void free_hasher_capsule(PyObject *capsule) {
    hasher_free((payload_hasher *)PyCapsule_GetPointer(capsule, HASHER_CAPSULE));
}

static payload_hasher *hasher_of(PyObject *capsule) {
    return (payload_hasher *)PyCapsule_GetPointer(capsule, HASHER_CAPSULE);
}

/* ---------------------------------------------------------------------------------- Python API */

PyDoc_STRVAR(copy_checksum_doc,
             "copy_checksum(dst_addr, src_addr, n, segment) -> int\n"
             "Copy n bytes from src_addr to dst_addr (0: do not copy) and return the payload\n"
             "checksum of those bytes with segments of `segment` bytes. The regions must not\n"
             "overlap.");

static PyObject *py_copy_checksum(PyObject *self, PyObject *args) {
    unsigned long long dst_addr, src_addr;
    Py_ssize_t n, segment;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKnn", &dst_addr, &src_addr, &n, &segment)) return NULL;
    if (n < 0 || segment <= XXH3_MIDSIZE_MAX) {
        PyErr_SetString(PyExc_ValueError, "copy_checksum: bad length or segment size");
        return NULL;
    }
    if (n > 0 && src_addr == 0) {
        PyErr_SetString(PyExc_ValueError, "copy_checksum: null source");
        return NULL;
    }
    uint8_t *dst = (uint8_t *)(uintptr_t)dst_addr;
    const uint8_t *src = (const uint8_t *)(uintptr_t)src_addr;
    uint64_t result;
    Py_BEGIN_ALLOW_THREADS
    result = copy_checksum(dst, src, (size_t)n, (size_t)segment);
    Py_END_ALLOW_THREADS
    if (copy_streams(dst, (size_t)n)) g_streamed_copies++;
    return PyLong_FromUnsignedLongLong(result);
}

static PyObject *py_hasher_new(PyObject *self, PyObject *args) {
    Py_ssize_t segment, limit = 0;
    unsigned long long base = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "n|Kn", &segment, &base, &limit)) return NULL;
    if (segment <= 0 || limit < 0) {
        PyErr_SetString(PyExc_ValueError, "hasher_new: bad segment size or range");
        return NULL;
    }
    payload_hasher *h = hasher_new((size_t)segment, (uintptr_t)base, (size_t)limit);
    if (h == NULL) return PyErr_NoMemory();
    PyObject *capsule = PyCapsule_New(h, HASHER_CAPSULE, free_hasher_capsule);
    if (capsule == NULL) hasher_free(h);
    return capsule;
}

static PyObject *py_hasher_update(PyObject *self, PyObject *args) {
    PyObject *capsule;
    unsigned long long addr;
    Py_ssize_t n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OKn", &capsule, &addr, &n)) return NULL;
    payload_hasher *h = hasher_of(capsule);
    if (h == NULL) return NULL;
    if (n < 0 || (n > 0 && addr == 0)) {
        PyErr_SetString(PyExc_ValueError, "hasher_update: bad address or length");
        return NULL;
    }
    if (n > 0) {
        Py_BEGIN_ALLOW_THREADS
        hasher_update(h, (const void *)(uintptr_t)addr, (size_t)n);
        Py_END_ALLOW_THREADS
    }
    Py_RETURN_NONE;
}

static PyObject *py_hasher_copy(PyObject *self, PyObject *args) {
    PyObject *capsule;
    unsigned long long other;
    Py_ssize_t n;
    int dir_in;
    (void)self;
    if (!PyArg_ParseTuple(args, "OKnp", &capsule, &other, &n, &dir_in)) return NULL;
    payload_hasher *h = hasher_of(capsule);
    if (h == NULL) return NULL;
    if (n < 0 || (n > 0 && other == 0)) {
        PyErr_SetString(PyExc_ValueError, "hasher_copy: bad address or length");
        return NULL;
    }
    if (n > 0 && (h->base == 0 || (size_t)n > h->limit)) {
        PyErr_Format(PyExc_ValueError, "hasher_copy: %zd bytes do not fit the hasher's bound "
                     "range (%s)", n, h->base == 0 ? "none" : "shorter");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    hasher_copy_whole(h, (uint8_t *)(uintptr_t)other, (size_t)n, dir_in);
    Py_END_ALLOW_THREADS
    if (!h->broken && copy_streams((const void *)(uintptr_t)other, (size_t)n)) g_streamed_copies++;
    Py_RETURN_NONE;
}

static PyObject *py_hasher_state(PyObject *self, PyObject *capsule) {
    (void)self;
    payload_hasher *h = hasher_of(capsule);
    if (h == NULL) return NULL;
    return Py_BuildValue("(nO)", (Py_ssize_t)h->fed, h->broken ? Py_False : Py_True);
}

static PyObject *py_hasher_digest(PyObject *self, PyObject *capsule) {
    (void)self;
    payload_hasher *h = hasher_of(capsule);
    if (h == NULL) return NULL;
    return PyLong_FromUnsignedLongLong(hasher_digest(h));
}

static PyObject *py_streamed_copies(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromUnsignedLongLong(g_streamed_copies);
}

static PyObject *py_simd_level(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    static const char *names[] = {"sse2", "avx2", "avx512"};
#if CC_X86
    return PyUnicode_FromString(names[g_level]);
#else
    (void)names;
    return PyUnicode_FromString("portable");
#endif
}

/* The highest level this CPU runs (set once at import). */
static int g_max_level = LEVEL_SSE2;

static PyObject *py_set_simd_level(PyObject *self, PyObject *arg) {
    (void)self;
    static const char *names[] = {"sse2", "avx2", "avx512"};
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) return NULL;
#if CC_X86
    for (int level = LEVEL_SSE2; level <= LEVEL_AVX512; level++) {
        if (strcmp(name, names[level]) != 0) continue;
        if (level > g_max_level) {
            PyErr_Format(PyExc_ValueError, "set_simd_level: this CPU does not run %s", name);
            return NULL;
        }
        const int previous = g_level;
        g_level = level;  /* every level computes the same values: a hash may change level */
        return PyUnicode_FromString(names[previous]);
    }
#else
    (void)names;
#endif
    PyErr_Format(PyExc_ValueError, "set_simd_level: unknown or unsupported level %R", arg);
    return NULL;
}

static PyMethodDef methods[] = {
    {"copy_checksum", py_copy_checksum, METH_VARARGS, copy_checksum_doc},
    {"hasher_new", py_hasher_new, METH_VARARGS,
     "hasher_new(segment[, base, limit]) -> capsule 'lmserde.payload_hasher': the payload\n"
     "checksum of bytes fed in order, with segments of `segment` bytes; bound to the memory\n"
     "range [base, base + limit) when base is given"},
    {"hasher_copy", py_hasher_copy, METH_VARARGS,
     "hasher_copy(hasher, other_addr, n, into): copy n bytes between a fresh bound hasher's\n"
     "range start and other_addr (into the range when `into`), taking the digest from the copy"},
    {"hasher_state", py_hasher_state, METH_O,
     "hasher_state(hasher) -> (bytes fed, still valid)"},
    {"hasher_update", py_hasher_update, METH_VARARGS,
     "hasher_update(hasher, addr, n): feed n bytes at addr"},
    {"hasher_digest", py_hasher_digest, METH_O,
     "hasher_digest(hasher) -> int: the payload checksum of the bytes fed so far"},
    {"streamed_copies", py_streamed_copies, METH_NOARGS,
     "streamed_copies() -> int: copies so far that wrote with streaming stores"},
    {"simd_level", py_simd_level, METH_NOARGS,
     "simd_level() -> str: the kernels this CPU runs (avx512, avx2, sse2 or portable)"},
    {"write_header", frame_write_header, METH_VARARGS,
     "write_header(addr, payload_length, checksum, config_id, chunk_hash, model_name, kv_rank,\n"
     "object_group_id, cache_salt, layout_field, inline): write a stored-object frame header\n"
     "at addr (frame_header.c)"},
    {"accept_header", frame_accept_header, METH_VARARGS,
     "accept_header(addr, stored_payload_bytes, payload_bound, config_id, chunk_hash,\n"
     "model_name, kv_rank, object_group_id, cache_salt, layout_field, inline) -> False, None or\n"
     "int: False unless the header at addr passes every check (frame_header.c), else its\n"
     "payload checksum"},
    {"set_simd_level", py_set_simd_level, METH_O,
     "set_simd_level(name) -> str: run the kernels of a lower level (sse2, avx2, avx512) than\n"
     "the CPU's best, for tests and A/B benchmarks; returns the previous level"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_checksum_copy",
    "The stored-object frame's payload checksum, fused with a copy.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__checksum_copy(void) {
#if CC_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2")) g_level = LEVEL_AVX2;
    if (__builtin_cpu_supports("avx512f")) g_level = LEVEL_AVX512;
    g_max_level = g_level;
#endif
    PyObject *module = PyModule_Create(&moddef);
    if (module == NULL) return NULL;
    if (PyModule_AddIntConstant(module, "STREAM_MIN_BYTES", (long)STREAM_MIN_BYTES) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    PyObject *api = PyCapsule_New((void *)&g_api, API_CAPSULE, NULL);
    if (api == NULL || PyModule_AddObject(module, "C_API", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
