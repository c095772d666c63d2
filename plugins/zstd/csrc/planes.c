/*
 * lmserde_zstd._planes, part 1: byte-plane split and merge (part 2, literal_frames.c, codes planes
 * with zstd's Huffman coder fused with these kernels).
 *
 * split(src, element_size, planes):  for n = len(src) // element_size elements, plane p receives
 *     byte p of every element: planes[p][i] = src[i * element_size + p]  (i < n). Bytes of src past
 *     n * element_size (a partial element) are not read.
 * merge(planes, element_size, dst):  the inverse: dst[i * element_size + p] = planes[p][i] for
 *     i < n = len(dst) // element_size; bytes of dst past n * element_size are not written.
 *
 * element_size is 1, 2, 4 or 8; planes is a sequence of element_size buffers (writable for split),
 * each at least n bytes long, else ValueError (so no call can read or write outside a buffer). The
 * bytes are the same on every path: an SSE2 kernel (x86-64 baseline: 16 elements per step, built
 * from one 2-way byte de-interleave applied log2(element_size) times) and a portable scalar loop
 * for the remaining elements and for other CPUs. The GIL is released while the bytes move.
 * A merge by the SSE2 kernel into a destination of STREAM_MIN_BYTES or more (the module constant
 * of that name; -1 when this build has no SSE2 kernel) writes it with non-temporal stores: the
 * same bytes, less memory traffic. set_portable(True) runs the scalar loop, which never streams.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__) && !defined(LMSERDE_ZSTD_PORTABLE_ONLY)
#define PLANES_HAVE_SSE2 1
#include <emmintrin.h>
#else
#define PLANES_HAVE_SSE2 0
#endif

#include "planes_kernels.h"

#define MAX_PLANES 8

/* ------------------------------------------------------------------ portable scalar kernels */

static void split_scalar(const uint8_t *src, size_t n, size_t es, uint8_t *const *planes,
                         size_t start) {
    for (size_t i = start; i < n; i++)
        for (size_t p = 0; p < es; p++) planes[p][i] = src[i * es + p];
}

static void merge_scalar(const uint8_t *const *planes, size_t n, size_t es, uint8_t *dst,
                         size_t start) {
    for (size_t i = start; i < n; i++)
        for (size_t p = 0; p < es; p++) dst[i * es + p] = planes[p][i];
}

#if PLANES_HAVE_SSE2
/* ------------------------------------------------------------------ SSE2 kernels */

/* (a, b) = 16 two-byte units; lo = their first bytes, hi = their second bytes, in order. */
static inline void split2(__m128i a, __m128i b, __m128i *lo, __m128i *hi) {
    const __m128i low_byte = _mm_set1_epi16(0x00FF);
    *lo = _mm_packus_epi16(_mm_and_si128(a, low_byte), _mm_and_si128(b, low_byte));
    *hi = _mm_packus_epi16(_mm_srli_epi16(a, 8), _mm_srli_epi16(b, 8));
}

/* The inverse of split2. */
static inline void merge2(__m128i lo, __m128i hi, __m128i *a, __m128i *b) {
    *a = _mm_unpacklo_epi8(lo, hi);
    *b = _mm_unpackhi_epi8(lo, hi);
}

#define LOAD(p) _mm_loadu_si128((const __m128i *)(const void *)(p))
#define STORE(p, v) _mm_storeu_si128((__m128i *)(void *)(p), (v))

/* 16 elements per step; returns how many elements were done. */
static size_t split_sse2(const uint8_t *src, size_t n, size_t es, uint8_t *const *pl) {
    size_t i = 0;
    if (es == 2) {
        for (; i + 16 <= n; i += 16) {
            __m128i lo, hi;
            split2(LOAD(src + 2 * i), LOAD(src + 2 * i + 16), &lo, &hi);
            STORE(pl[0] + i, lo);
            STORE(pl[1] + i, hi);
        }
    } else if (es == 4) {
        for (; i + 16 <= n; i += 16) {
            const uint8_t *s = src + 4 * i;
            __m128i e0, o0, e1, o1, p0, p1, p2, p3;
            split2(LOAD(s), LOAD(s + 16), &e0, &o0);      /* bytes {0,2} / {1,3}, elements 0-7 */
            split2(LOAD(s + 32), LOAD(s + 48), &e1, &o1); /* elements 8-15 */
            split2(e0, e1, &p0, &p2);
            split2(o0, o1, &p1, &p3);
            STORE(pl[0] + i, p0);
            STORE(pl[1] + i, p1);
            STORE(pl[2] + i, p2);
            STORE(pl[3] + i, p3);
        }
    } else if (es == 8) {
        for (; i + 16 <= n; i += 16) {
            const uint8_t *s = src + 8 * i;
            __m128i e[4], o[4], ee0, eo0, ee1, eo1, oe0, oo0, oe1, oo1, p[8];
            for (int k = 0; k < 4; k++) /* bytes {0,2,4,6} / {1,3,5,7}, elements 4k..4k+3 */
                split2(LOAD(s + 32 * k), LOAD(s + 32 * k + 16), &e[k], &o[k]);
            split2(e[0], e[1], &ee0, &eo0); /* {0,4} / {2,6}, elements 0-7 */
            split2(e[2], e[3], &ee1, &eo1); /* elements 8-15 */
            split2(o[0], o[1], &oe0, &oo0); /* {1,5} / {3,7} */
            split2(o[2], o[3], &oe1, &oo1);
            split2(ee0, ee1, &p[0], &p[4]);
            split2(eo0, eo1, &p[2], &p[6]);
            split2(oe0, oe1, &p[1], &p[5]);
            split2(oo0, oo1, &p[3], &p[7]);
            for (int k = 0; k < 8; k++) STORE(pl[k] + i, p[k]);
        }
    }
    return i;
}

/* Merge 16 elements (i .. i+15) into dst; `stream` selects non-temporal stores (dst + es * i
 * must then be 16-byte aligned). Inlined into the two loops below with `stream` a constant. */
static inline __attribute__((always_inline)) void put(uint8_t *p, __m128i v, int stream) {
    if (stream)
        _mm_stream_si128((__m128i *)(void *)p, v);
    else
        STORE(p, v);
}

static inline __attribute__((always_inline)) void merge16(const uint8_t *const *pl, size_t i,
                                                          size_t es, uint8_t *dst, int stream) {
    uint8_t *d = dst + es * i;
    if (es == 2) {
        __m128i a, b;
        merge2(LOAD(pl[0] + i), LOAD(pl[1] + i), &a, &b);
        put(d, a, stream);
        put(d + 16, b, stream);
    } else if (es == 4) {
        __m128i e0, e1, o0, o1, a, b;
        merge2(LOAD(pl[0] + i), LOAD(pl[2] + i), &e0, &e1);
        merge2(LOAD(pl[1] + i), LOAD(pl[3] + i), &o0, &o1);
        merge2(e0, o0, &a, &b);
        put(d, a, stream);
        put(d + 16, b, stream);
        merge2(e1, o1, &a, &b);
        put(d + 32, a, stream);
        put(d + 48, b, stream);
    } else { /* es == 8 */
        __m128i ee0, ee1, eo0, eo1, oe0, oe1, oo0, oo1, e[4], o[4], a, b;
        merge2(LOAD(pl[0] + i), LOAD(pl[4] + i), &ee0, &ee1);
        merge2(LOAD(pl[2] + i), LOAD(pl[6] + i), &eo0, &eo1);
        merge2(LOAD(pl[1] + i), LOAD(pl[5] + i), &oe0, &oe1);
        merge2(LOAD(pl[3] + i), LOAD(pl[7] + i), &oo0, &oo1);
        merge2(ee0, eo0, &e[0], &e[1]);
        merge2(ee1, eo1, &e[2], &e[3]);
        merge2(oe0, oo0, &o[0], &o[1]);
        merge2(oe1, oo1, &o[2], &o[3]);
        for (int k = 0; k < 4; k++) {
            merge2(e[k], o[k], &a, &b);
            put(d + 32 * k, a, stream);
            put(d + 32 * k + 16, b, stream);
        }
    }
}

/* A destination at least this large is written with non-temporal stores (merge_sse2_stream):
 * it does not fit the caches anyway, and ordinary stores would first read every destination line
 * (measured on 32 MiB bf16: 5.4-6.0 ms -> 4.8-5.2 ms per merge; a smaller destination is usually
 * read again soon and is faster written through the cache). */
#define STREAM_MIN_BYTES ((size_t)2 << 20)

/* Regular stores, from the last group of 16 elements down to the first: the planes to merge were
 * usually just written by libzstd, whose latest output (their end) is the part still in the cache
 * (measured: the bf16 merge after a decode takes ~12% less time than going upwards). */
static size_t merge_sse2_cached(const uint8_t *const *pl, size_t n, size_t es, uint8_t *dst) {
    const size_t done = n - n % 16;
    for (size_t i = done; i >= 16;) {
        i -= 16;
        merge16(pl, i, es, dst, 0);
    }
    return done;
}

/* Bytes from p to the next 64-byte cache-line boundary (0 when p is on one). */
static size_t line_gap(const uint8_t *p) { return (64 - ((uintptr_t)p & 63)) & 63; }

/* Whether some element of dst starts a 64-byte cache line. */
static int can_stream(size_t es, const uint8_t *dst) { return line_gap(dst) % es == 0; }

/* Non-temporal stores, upwards from the first element whose destination starts a 64-byte cache
 * line (the elements before it are merged by the scalar loop). Streaming stores that do not start
 * on a line boundary measured twice as slow as ordinary ones, so a destination that cannot be
 * line-aligned on an element boundary takes the cached path (stream_wanted checks it first; the
 * check here keeps the function safe on its own). Returns the elements done from 0. */
static size_t merge_sse2_stream(const uint8_t *const *pl, size_t n, size_t es, uint8_t *dst) {
    if (!can_stream(es, dst)) return merge_sse2_cached(pl, n, es, dst);
    const size_t head = line_gap(dst) / es < n ? line_gap(dst) / es : n;
    merge_scalar(pl, head, es, dst, 0);
    size_t i = head;
    for (; i + 16 <= n; i += 16) merge16(pl, i, es, dst, 1);
    _mm_sfence();
    return i;
}

/* `stream`: from stream_wanted (large enough, and dst can be line-aligned on an element). */
static size_t merge_sse2(const uint8_t *const *pl, size_t n, size_t es, uint8_t *dst, int stream) {
    if (es != 2 && es != 4 && es != 8) return 0;
    if (stream) return merge_sse2_stream(pl, n, es, dst);
    return merge_sse2_cached(pl, n, es, dst);
}
#endif

/* ------------------------------------------------------------------ dispatch */

static int g_portable_only = 0; /* set by set_portable(True): the scalar loop for every element */

void planes_split(const uint8_t *src, size_t n, size_t es, uint8_t *const *planes) {
    size_t done = 0;
    if (es == 1) {
        if (n) memcpy(planes[0], src, n);
        return;
    }
#if PLANES_HAVE_SSE2
    if (!g_portable_only) done = split_sse2(src, n, es, planes);
#endif
    split_scalar(src, n, es, planes, done);
}

/* Merges written with non-temporal stores, for the tests; counted with the GIL held. */
static unsigned long long g_streamed_merges = 0;

void planes_count_streamed(void) { g_streamed_merges++; }

int planes_stream_wanted(size_t n, size_t es, const uint8_t *dst) {
#if PLANES_HAVE_SSE2
    return !g_portable_only && es != 1 && n * es >= STREAM_MIN_BYTES && can_stream(es, dst);
#else
    (void)n;
    (void)es;
    (void)dst;
    return 0;
#endif
}

void planes_merge(const uint8_t *const *planes, size_t n, size_t es, uint8_t *dst, int stream) {
    size_t done = 0;
    if (es == 1) {
        if (n) memcpy(dst, planes[0], n);
        return;
    }
#if PLANES_HAVE_SSE2
    if (!g_portable_only) done = merge_sse2(planes, n, es, dst, stream);
#else
    (void)stream;
#endif
    merge_scalar(planes, n, es, dst, done);
}

/* ------------------------------------------------------------------ Python bindings */

int planes_check_element_size(int es) {
    if (es == 1 || es == 2 || es == 4 || es == 8) return 0;
    PyErr_Format(PyExc_ValueError, "element size must be 1, 2, 4 or 8, got %d", es);
    return -1;
}

/* Acquire element_size plane buffers from the sequence `seq`, each at least n bytes. */
int planes_get_buffers(PyObject *seq, int es, size_t n, int writable, Py_buffer *views) {
    PyObject *fast = PySequence_Fast(seq, "planes must be a sequence of buffers");
    if (fast == NULL) return -1;
    if (PySequence_Fast_GET_SIZE(fast) != es) {
        PyErr_Format(PyExc_ValueError, "expected %d planes, got %zd", es,
                     PySequence_Fast_GET_SIZE(fast));
        Py_DECREF(fast);
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    for (int p = 0; p < es; p++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, p), &views[p], flags) < 0) {
            for (int q = 0; q < p; q++) PyBuffer_Release(&views[q]);
            Py_DECREF(fast);
            return -1;
        }
        if ((size_t)views[p].len < n) {
            PyErr_Format(PyExc_ValueError, "plane %d holds %zd bytes, %zu needed", p, views[p].len,
                         n);
            for (int q = 0; q <= p; q++) PyBuffer_Release(&views[q]);
            Py_DECREF(fast);
            return -1;
        }
    }
    Py_DECREF(fast);
    return 0;
}

PyDoc_STRVAR(split_doc,
             "split(src, element_size, planes) -> int\n"
             "Write byte p of each of the len(src) // element_size elements of src to planes[p].\n"
             "Returns the element count. Each plane must be writable and hold that many bytes.");

static PyObject *py_split(PyObject *self, PyObject *args) {
    Py_buffer src;
    int es;
    PyObject *seq;
    Py_buffer views[MAX_PLANES];
    uint8_t *planes[MAX_PLANES];
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iO", &src, &es, &seq)) return NULL;
    if (planes_check_element_size(es) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    size_t n = (size_t)src.len / (size_t)es;
    if (planes_get_buffers(seq, es, n, 1, views) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    for (int p = 0; p < es; p++) planes[p] = (uint8_t *)views[p].buf;
    Py_BEGIN_ALLOW_THREADS
    planes_split((const uint8_t *)src.buf, n, (size_t)es, planes);
    Py_END_ALLOW_THREADS
    for (int p = 0; p < es; p++) PyBuffer_Release(&views[p]);
    PyBuffer_Release(&src);
    return PyLong_FromSize_t(n);
}

PyDoc_STRVAR(merge_doc,
             "merge(planes, element_size, dst) -> int\n"
             "Write planes[p][i] to byte p of element i of dst, for the len(dst) // element_size\n"
             "elements of dst. Returns the element count. Each plane must hold that many bytes.");

static PyObject *py_merge(PyObject *self, PyObject *args) {
    Py_buffer dst;
    int es;
    PyObject *seq;
    Py_buffer views[MAX_PLANES];
    const uint8_t *planes[MAX_PLANES];
    (void)self;
    if (!PyArg_ParseTuple(args, "Oiw*", &seq, &es, &dst)) return NULL;
    if (planes_check_element_size(es) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    size_t n = (size_t)dst.len / (size_t)es;
    if (planes_get_buffers(seq, es, n, 0, views) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    for (int p = 0; p < es; p++) planes[p] = (const uint8_t *)views[p].buf;
    const int stream = planes_stream_wanted(n, (size_t)es, (const uint8_t *)dst.buf);
    if (stream) planes_count_streamed();
    Py_BEGIN_ALLOW_THREADS
    planes_merge(planes, n, (size_t)es, (uint8_t *)dst.buf, stream);
    Py_END_ALLOW_THREADS
    for (int p = 0; p < es; p++) PyBuffer_Release(&views[p]);
    PyBuffer_Release(&dst);
    return PyLong_FromSize_t(n);
}

static PyObject *py_set_portable(PyObject *self, PyObject *arg) {
    (void)self;
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    g_portable_only = on;
    Py_RETURN_NONE;
}

static PyObject *py_streamed_merges(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyLong_FromUnsignedLongLong(g_streamed_merges);
}

static PyObject *py_simd(PyObject *self, PyObject *noargs) {
    (void)self;
    (void)noargs;
    return PyUnicode_FromString(PLANES_HAVE_SSE2 && !g_portable_only ? "sse2" : "scalar");
}

static PyMethodDef methods[] = {
    {"split", py_split, METH_VARARGS, split_doc},
    {"merge", py_merge, METH_VARARGS, merge_doc},
    {"streamed_merges", py_streamed_merges, METH_NOARGS,
     "streamed_merges() -> int: merges so far written with non-temporal stores"},
    {"set_portable", py_set_portable, METH_O,
     "set_portable(flag): True runs the portable scalar loop only (tests compare both paths)."},
    {"simd", py_simd, METH_NOARGS, "The kernel in use: 'sse2' or 'scalar'."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moddef = {
    PyModuleDef_HEAD_INIT, "_planes", "Byte-plane split/merge for lmserde_zstd.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__planes(void) {
    PyObject *module = PyModule_Create(&moddef);
    if (module == NULL) return NULL;
    if (PyModule_AddFunctions(module, literal_frame_methods) < 0 ||
        literal_frames_init(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#if PLANES_HAVE_SSE2
    const long stream_min = (long)STREAM_MIN_BYTES;
#else
    const long stream_min = -1; /* no streaming stores on this build */
#endif
    if (PyModule_AddIntConstant(module, "STREAM_MIN_BYTES", stream_min) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
