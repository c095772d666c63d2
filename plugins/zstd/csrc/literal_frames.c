/*
 * lmserde_zstd._planes, part 2: byte planes coded as literal-only zstd frames, fused with the
 * plane split and merge.
 *
 * The bytes of an exponent plane are redundant in their distribution, not in repeats, so zstd's
 * match search finds nothing there and zstd ends up a Huffman coder of them. This file skips the
 * search: it codes such a plane with zstd's own Huffman coder (huff0, vendored unchanged from
 * zstd 1.5.7 in third_party/zstd) and writes a standard zstd frame (RFC 8878) whose blocks hold
 * Huffman-coded literals and no sequences, so any zstd decoder reads it. The input is processed
 * in blocks of LF_BLOCK elements: each block is split into its planes (the planes stored raw go
 * straight to their place in the output, the coded ones to a cache-sized scratch) and the coded
 * planes' blocks are compressed from the cache; decoding does the reverse, each block decoded into
 * the cache and merged from there into the destination. A plane thus never makes the round trip
 * through memory that a whole-plane split followed by whole-plane compression costs.
 *
 * Frame written for a plane of `size` bytes (nothing else is read back by decode_planes):
 *   magic 28 B5 2F FD | descriptor 0xC0 (8-byte content size, no single segment, no checksum,
 *   no dictionary) | window descriptor 0x38 (128 KiB) | content size (u64 LE), then one block per
 *   LF_BLOCK bytes of plane (the last one shorter; its header has the last-block bit):
 *     raw block (type 0) or RLE block (type 1) where Huffman coding does not pay, else
 *     a compressed block (type 2): literals section header (5 bytes: literals type 2 = Huffman
 *     with its table description, or 3 = "treeless", the previous block's table; size format 3 =
 *     four streams, 18-bit regenerated and compressed sizes), huff0's output, then the sequences
 *     section header for no sequences (one zero byte).
 *
 * decode_planes reads only frames of exactly that shape (lf_scan checks every header against the
 * lengths before a byte is decoded and records what it found, which is all the decoder uses, and
 * huff0's decoder checks every stream); the Python side hands any other zstd frame to libzstd.
 * Malformed input raises ValueError; no length in the input — not even bytes another thread
 * changes during the call — can make a call read or write outside the buffers it was given.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define HUF_STATIC_LINKING_ONLY
#include "third_party/zstd/lib/common/cpu.h"
#include "third_party/zstd/lib/common/huf.h"

#include "planes_kernels.h"

#define LF_BLOCK ((size_t)128 << 10) /* elements per block = bytes per plane block (zstd's max) */
#define LF_HEADER 14                 /* frame header bytes */
#define LF_MIN_CODED 1024            /* shorter blocks are stored raw */
#define LF_TABLE_LOG 11              /* zstd's own table log for literals */
#define LF_MAGIC 0xFD2FB528u
#define LF_DESCRIPTOR 0xC0
#define LF_WINDOW 0x38
#define BLOCK_RAW 0
#define BLOCK_RLE 1
#define BLOCK_COMPRESSED 2
#define LITERALS_HUFFMAN 2
#define LITERALS_TREELESS 3

static int g_huf_flags = 0; /* HUF_flags_bmi2 where the CPU has BMI2 (set at import) */

static void put_le(uint8_t *p, uint64_t v, int n) {
    for (int i = 0; i < n; i++) p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static size_t block_bytes(size_t size, size_t block) {
    const size_t left = size - block * LF_BLOCK;
    return left < LF_BLOCK ? left : LF_BLOCK;
}

/* ------------------------------------------------------------------ encoder */

typedef struct {
    uint8_t *dst;
    size_t cap, pos;
    int failed; /* the frame did not fit in cap */
    HUF_repeat repeat;
    HUF_CElt table[HUF_CTABLE_SIZE_ST(255)];
    uint64_t workspace[HUF_WORKSPACE_SIZE_U64];
} lf_encoder;

static void lf_begin(lf_encoder *e, uint8_t *dst, size_t cap, size_t size) {
    e->dst = dst;
    e->cap = cap;
    e->repeat = HUF_repeat_none;
    e->failed = cap < LF_HEADER;
    e->pos = LF_HEADER;
    if (e->failed) return;
    put_le(dst, LF_MAGIC, 4);
    dst[4] = LF_DESCRIPTOR;
    dst[5] = LF_WINDOW;
    put_le(dst + 6, size, 8);
}

static void put_block_header(uint8_t *p, int last, int type, size_t size) {
    put_le(p, (uint64_t)(last ? 1 : 0) | ((uint64_t)type << 1) | ((uint64_t)size << 3), 3);
}

/* Append the block `src[0:n]` (n <= LF_BLOCK) to the frame. */
static void lf_block(lf_encoder *e, const uint8_t *src, size_t n, int last) {
    if (e->failed) return;
    uint8_t *out = e->dst + e->pos;
    const size_t room = e->cap - e->pos;
    if (n >= LF_MIN_CODED && room > 3 + 5 + 1 + 8) {
        /* huff0 writes after the block and literals headers and leaves room for the zero byte */
        size_t c = HUF_compress4X_repeat(out + 8, room - 9, src, n, 255, LF_TABLE_LOG,
                                         e->workspace, sizeof e->workspace, e->table, &e->repeat,
                                         g_huf_flags);
        if (HUF_isError(c)) c = 0;
        if (c > 1 && 5 + c + 1 < n) {
            /* repeat is none after a new table was written, unchanged when the last one served */
            const int literals = e->repeat == HUF_repeat_none ? LITERALS_HUFFMAN : LITERALS_TREELESS;
            put_le(out + 3, (uint64_t)literals | (3u << 2) | ((uint64_t)n << 4) | ((uint64_t)c << 22),
                   5);
            out[8 + c] = 0; /* no sequences */
            put_block_header(out, last, BLOCK_COMPRESSED, 5 + c + 1);
            e->pos += 3 + 5 + c + 1;
            e->repeat = HUF_repeat_check; /* the next block may reuse this table */
            return;
        }
        /* Not coded: the table huff0 kept may not be the one a decoder saw last; forget it. */
        e->repeat = HUF_repeat_none;
        if (c == 1) { /* every byte the same */
            if (room < 4) {
                e->failed = 1;
                return;
            }
            put_block_header(out, last, BLOCK_RLE, n);
            out[3] = src[0];
            e->pos += 4;
            return;
        }
    }
    if (room < 3 + n) {
        e->failed = 1;
        return;
    }
    put_block_header(out, last, BLOCK_RAW, n);
    memcpy(out + 3, src, n);
    e->pos += 3 + n;
}

/* ------------------------------------------------------------------ decoder */

/* What lf_scan found about one block. The decoder uses only this, never the frame's headers
 * again: bytes another thread changes meanwhile can garble the output, never move a read outside
 * the frame. */
typedef struct {
    size_t offset;    /* the block's content, after its 3-byte header */
    size_t coded;     /* a compressed block: huff0's bytes, after the 5-byte literals header */
    uint8_t type;     /* BLOCK_RAW, BLOCK_RLE or BLOCK_COMPRESSED */
    uint8_t literals; /* a compressed block: LITERALS_HUFFMAN or LITERALS_TREELESS */
} lf_block_info;

static size_t lf_blocks(size_t size) { return (size + LF_BLOCK - 1) / LF_BLOCK; }

/* Whether frame[0:len] is a frame of the shape lf_* writes, restoring `size` bytes: every header
 * and length checked, nothing decoded. With `info` (lf_blocks(size) entries) it records each
 * block for the decoder. */
static int lf_scan(const uint8_t *f, size_t len, size_t size, lf_block_info *info) {
    if (size == 0 || len < LF_HEADER || get_le(f, 4) != LF_MAGIC || f[4] != LF_DESCRIPTOR ||
        f[5] != LF_WINDOW || get_le(f + 6, 8) != size)
        return 0;
    size_t pos = LF_HEADER;
    int have_table = 0;
    const size_t blocks = lf_blocks(size);
    for (size_t b = 0; b < blocks; b++) {
        const size_t n = block_bytes(size, b);
        if (len - pos < 3) return 0;
        const uint64_t h = get_le(f + pos, 3);
        const int last = (int)(h & 1), type = (int)((h >> 1) & 3);
        const size_t bsize = (size_t)(h >> 3);
        pos += 3;
        if (last != (b + 1 == blocks)) return 0;
        lf_block_info found = {pos, 0, (uint8_t)type, 0};
        if (type == BLOCK_RAW || type == BLOCK_RLE) {
            const size_t stored = type == BLOCK_RAW ? n : 1;
            if (bsize != n || len - pos < stored) return 0;
            pos += stored;
        } else {
            /* (a compressed block is written only when shorter than its bytes) */
            if (type != BLOCK_COMPRESSED || bsize < 5 + 1 + 1 || bsize >= n || len - pos < bsize)
                return 0;
            const uint64_t lh = get_le(f + pos, 5);
            const int literals = (int)(lh & 3);
            const size_t regenerated = (size_t)((lh >> 4) & 0x3FFFF), coded = (size_t)(lh >> 22);
            if (((lh >> 2) & 3) != 3 || regenerated != n || 5 + coded + 1 != bsize ||
                f[pos + 5 + coded] != 0)
                return 0;
            if (literals == LITERALS_HUFFMAN)
                have_table = 1;
            else if (literals != LITERALS_TREELESS || !have_table)
                return 0;
            found.coded = coded;
            found.literals = (uint8_t)literals;
            pos += bsize;
        }
        if (info != NULL) info[b] = found;
    }
    return pos == len;
}

typedef struct {
    const uint8_t *frame;
    const lf_block_info *blocks; /* from lf_scan */
    size_t next;
    HUF_DTable table[HUF_DTABLE_SIZE(HUF_TABLELOG_MAX)];
    uint32_t workspace[HUF_DECOMPRESS_WORKSPACE_SIZE_U32];
} lf_decoder;

static void lf_open(lf_decoder *d, const uint8_t *frame, const lf_block_info *blocks) {
    d->frame = frame;
    d->blocks = blocks;
    d->next = 0;
    d->table[0] = (HUF_DTable)((uint32_t)HUF_TABLELOG_MAX * 0x01000001u);
}

/* The next block (n bytes): its bytes, decoded into `scratch` unless stored raw (then the
 * frame's own bytes). NULL when huff0 finds the stream corrupt. A treeless block follows a
 * Huffman block (lf_scan), whose table the decode before this one loaded (else it failed). */
static const uint8_t *lf_next(lf_decoder *d, uint8_t *scratch, size_t n) {
    const lf_block_info *b = &d->blocks[d->next++];
    const uint8_t *p = d->frame + b->offset;
    if (b->type == BLOCK_RAW) return p;
    if (b->type == BLOCK_RLE) {
        memset(scratch, p[0], n);
        return scratch;
    }
    size_t r;
    if (b->literals == LITERALS_HUFFMAN)
        r = HUF_decompress4X_hufOnly_wksp(d->table, scratch, n, p + 5, b->coded, d->workspace,
                                          sizeof d->workspace, g_huf_flags);
    else
        r = HUF_decompress4X_usingDTable(scratch, n, p + 5, b->coded, d->table, g_huf_flags);
    return HUF_isError(r) || r != n ? NULL : scratch;
}

/* ------------------------------------------------------------------ Python bindings */

#define MAX_PLANES 8

static void release_all(Py_buffer *views, int count) {
    for (int p = 0; p < count; p++) PyBuffer_Release(&views[p]);
}

static int check_args(int es, int mask, size_t count) {
    if (planes_check_element_size(es) < 0) return -1;
    if (mask < 0 || mask >> es) {
        PyErr_Format(PyExc_ValueError, "plane mask %d names a plane beyond %d", mask, es - 1);
        return -1;
    }
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "no whole element to code");
        return -1;
    }
    return 0;
}

PyDoc_STRVAR(encode_planes_doc,
             "encode_planes(src, element_size, dests, coded) -> tuple[int, ...]\n"
             "Split the n = len(src) // element_size elements of src into their planes, plane p\n"
             "into dests[p]: as it is (n bytes) unless bit p of the mask `coded` is set, then as a\n"
             "literal-only zstd frame restoring those n bytes. Returns, per plane, the bytes\n"
             "written: n for a plane stored as it is; the frame's length, or -1 when the frame did\n"
             "not fit in dests[p], for a coded plane (huff0 wants a few spare bytes: a frame\n"
             "within about 13 bytes of the capacity may be refused).");

PyObject *lf_encode_planes(PyObject *self, PyObject *args) {
    Py_buffer src, views[MAX_PLANES];
    int es;
    int coded;
    PyObject *seq;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iOi", &src, &es, &seq, &coded)) return NULL;
    const size_t count = es > 0 ? (size_t)src.len / (size_t)es : 0;
    if (check_args(es, coded, count) < 0 || planes_get_buffers(seq, es, 0, 1, views) < 0) {
        PyBuffer_Release(&src);
        return NULL;
    }
    PyObject *result = NULL;
    lf_encoder *enc = NULL, *slot[MAX_PLANES] = {0};
    uint8_t *scratch = NULL, *into[MAX_PLANES];
    int ncoded = 0;
    for (int p = 0; p < es; p++) {
        ncoded += (int)(coded >> p & 1);
        if (!(coded >> p & 1) && (size_t)views[p].len < count) {
            PyErr_Format(PyExc_ValueError, "plane %d holds %zd bytes, %zu needed", p,
                         views[p].len, count);
            goto done;
        }
    }
    enc = ncoded ? malloc(sizeof(lf_encoder) * (size_t)ncoded) : NULL;
    scratch = ncoded ? malloc(LF_BLOCK * (size_t)ncoded) : NULL;
    if (ncoded && (enc == NULL || scratch == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    for (int p = 0, k = 0; p < es; p++)
        if (coded >> p & 1) {
            slot[p] = &enc[k++];
            lf_begin(slot[p], (uint8_t *)views[p].buf, (size_t)views[p].len, count);
        }
    const uint8_t *in = (const uint8_t *)src.buf;
    const size_t blocks = lf_blocks(count);
    for (size_t b = 0; b < blocks; b++) {
        const size_t n = block_bytes(count, b), at = b * LF_BLOCK;
        const uint8_t *block_src = in + at * (size_t)es;
        for (int p = 0, k = 0; p < es; p++)
            into[p] = slot[p] ? scratch + LF_BLOCK * (size_t)k++ : (uint8_t *)views[p].buf + at;
        if (es == 1 && slot[0]) { /* one coded plane: code the input itself */
            lf_block(slot[0], block_src, n, b + 1 == blocks);
            continue;
        }
        planes_split(block_src, n, (size_t)es, into);
        for (int p = 0; p < es; p++)
            if (slot[p]) lf_block(slot[p], into[p], n, b + 1 == blocks);
    }
    Py_END_ALLOW_THREADS
    result = PyTuple_New(es);
    for (int p = 0; result != NULL && p < es; p++) {
        const Py_ssize_t written = slot[p] == NULL ? (Py_ssize_t)count
                                   : slot[p]->failed ? -1 : (Py_ssize_t)slot[p]->pos;
        PyObject *item = PyLong_FromSsize_t(written);
        if (item == NULL) Py_CLEAR(result);
        else PyTuple_SET_ITEM(result, p, item);
    }
done:
    free(enc);
    free(scratch);
    release_all(views, es);
    PyBuffer_Release(&src);
    return result;
}

PyDoc_STRVAR(is_literal_frame_doc,
             "is_literal_frame(frame, size) -> bool\n"
             "Whether frame is, exactly, a literal-only zstd frame as encode_planes writes it,\n"
             "restoring size bytes (headers and lengths checked; nothing decoded).");

PyObject *lf_is_literal_frame(PyObject *self, PyObject *args) {
    Py_buffer frame;
    Py_ssize_t size;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*n", &frame, &size)) return NULL;
    const int ok = size > 0 && lf_scan((const uint8_t *)frame.buf, (size_t)frame.len, (size_t)size,
                                       NULL);
    PyBuffer_Release(&frame);
    return PyBool_FromLong(ok);
}

PyDoc_STRVAR(decode_planes_doc,
             "decode_planes(sources, element_size, framed, dst) -> int\n"
             "The inverse of encode_planes: merge the planes into the n = len(dst) // element_size\n"
             "elements of dst (trailing partial-element bytes are not written). sources[p] is the\n"
             "plane's n bytes, or, where bit p of `framed` is set, a literal-only frame restoring\n"
             "them (is_literal_frame). Returns n; ValueError for a frame of another shape or a\n"
             "corrupt Huffman stream (dst is then partly written).");

PyObject *lf_decode_planes(PyObject *self, PyObject *args) {
    Py_buffer dst, views[MAX_PLANES];
    int es;
    int framed;
    PyObject *seq;
    (void)self;
    if (!PyArg_ParseTuple(args, "Oiiw*", &seq, &es, &framed, &dst)) return NULL;
    const size_t count = es > 0 ? (size_t)dst.len / (size_t)es : 0;
    if (check_args(es, framed, count) < 0 || planes_get_buffers(seq, es, 0, 0, views) < 0) {
        PyBuffer_Release(&dst);
        return NULL;
    }
    PyObject *result = NULL;
    int nframed = 0;
    for (int p = 0; p < es; p++) nframed += (int)(framed >> p & 1);
    const size_t blocks = lf_blocks(count);
    lf_decoder *dec = nframed ? malloc(sizeof(lf_decoder) * (size_t)nframed) : NULL;
    uint8_t *scratch = nframed ? malloc(LF_BLOCK * (size_t)nframed) : NULL;
    lf_block_info *info = nframed ? malloc(sizeof(lf_block_info) * blocks * (size_t)nframed) : NULL;
    long bad_plane = -1;
    size_t bad_block = 0;
    int stream = 0;
    lf_decoder *slot[MAX_PLANES] = {0};
    const uint8_t *from[MAX_PLANES];
    if (nframed && (dec == NULL || scratch == NULL || info == NULL)) {
        PyErr_NoMemory();
        goto done;
    }
    for (int p = 0, k = 0; p < es; p++) {
        const char *problem = NULL;
        if (framed >> p & 1) {
            if (!lf_scan((const uint8_t *)views[p].buf, (size_t)views[p].len, count,
                         info + blocks * (size_t)k++))
                problem = "is not a literal-only zstd frame of the plane's size";
        } else if ((size_t)views[p].len < count) {
            problem = "is shorter than the plane";
        }
        if (problem != NULL) {
            PyErr_Format(PyExc_ValueError, "plane %d %s", p, problem);
            goto done;
        }
    }
    stream = planes_stream_wanted(count, (size_t)es, (const uint8_t *)dst.buf);
    Py_BEGIN_ALLOW_THREADS
    for (int p = 0, k = 0; p < es; p++)
        if (framed >> p & 1) {
            slot[p] = &dec[k];
            lf_open(slot[p], (const uint8_t *)views[p].buf, info + blocks * (size_t)k);
            k++;
        }
    uint8_t *out = (uint8_t *)dst.buf;
    for (size_t b = 0; b < blocks && bad_plane < 0; b++) {
        const size_t n = block_bytes(count, b), at = b * LF_BLOCK;
        for (int p = 0, k = 0; p < es && bad_plane < 0; p++) {
            if (slot[p] == NULL) {
                from[p] = (const uint8_t *)views[p].buf + at;
                continue;
            }
            /* one plane: decode straight into dst */
            uint8_t *into = es == 1 ? out + at : scratch + LF_BLOCK * (size_t)k;
            k++;
            from[p] = lf_next(slot[p], into, n);
            if (from[p] == NULL) {
                bad_plane = p;
                bad_block = b;
            }
        }
        if (bad_plane >= 0) break;
        if (es == 1) {
            if (from[0] != out + at) memcpy(out + at, from[0], n);
        } else {
            planes_merge(from, n, (size_t)es, out + at * (size_t)es, stream);
        }
    }
    Py_END_ALLOW_THREADS
    if (bad_plane >= 0) {
        PyErr_Format(PyExc_ValueError, "plane %ld, block %zu: corrupt Huffman stream", bad_plane,
                     bad_block);
        goto done;
    }
    if (stream) planes_count_streamed();
    result = PyLong_FromSize_t(count);
done:
    free(dec);
    free(scratch);
    free(info);
    release_all(views, es);
    PyBuffer_Release(&dst);
    return result;
}

PyMethodDef literal_frame_methods[] = {
    {"encode_planes", lf_encode_planes, METH_VARARGS, encode_planes_doc},
    {"is_literal_frame", lf_is_literal_frame, METH_VARARGS, is_literal_frame_doc},
    {"decode_planes", lf_decode_planes, METH_VARARGS, decode_planes_doc},
    {NULL, NULL, 0, NULL},
};

int literal_frames_init(PyObject *module) {
    (void)module;
    g_huf_flags = ZSTD_cpuid_bmi2(ZSTD_cpuid()) ? HUF_flags_bmi2 : 0;
    return 0;
}
