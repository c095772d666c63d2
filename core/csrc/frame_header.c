/*
 * The stored-object frame header's fast path (functions of lmserde._checksum_copy, registered by
 * checksum_copy.c): writing a header, and accepting one, in one call each.
 *
 * lmserde.l2.serde.stored_frame is the format's definition (its docstring lays out the 64 bytes)
 * and keeps the complete codec in Python. This file only speeds up its two hot paths: the wrapper
 * writes a header right after a serde's pass over a payload of many MiB and reads one right
 * before the decode, when the CPU caches hold none of the interpreter's code and data; there
 * each line of Python costs microseconds (the Python codec measured 50 us to write a header and
 * 80 us to accept one; see docs/formats/stored-object.md). accept_header() only ever accepts:
 * for any header it does not accept, the caller runs the Python checks, which name the reason.
 * The tests hold both paths to the same bytes and the same verdicts.
 *
 * XXH3-64 (key fingerprint, header checksum) is xxhash's reference implementation, vendored in
 * third_party/xxhash.
 */
#include "frame_header.h"

#include <stdint.h>
#include <string.h>

#define XXH_INLINE_ALL
#include "third_party/xxhash/xxhash.h"

enum {
    HEADER_BYTES = 64,
    HEAD_BYTES = 60, /* the bytes the header checksum covers */
    LAYOUT_FIELD_BYTES = 20,
    FRAME_VERSION = 1,
    FLAG_CHECKSUM = 0x01,
    FLAG_LAYOUT_INLINE = 0x02,
};

static const uint8_t MAGIC[4] = {'L', 'M', 'S', 'F'};

/* Little-endian fields: xxhash's XXH_readLE32 / XXH_readLE64 / XXH_writeLE64, and this (xxhash
 * has no 32-bit writer). */
static void put_le32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* The fields of an ObjectKey, as stored_frame.key_fingerprint packs them. */
typedef struct {
    PyObject *chunk_hash, *model, *salt; /* bytes, str, str (borrowed) */
    PyObject *kv_rank, *group;           /* int, int (borrowed) */
} key_fields;

/* XXH3-64 of the key's fields, length-prefixed (stored_frame.key_fingerprint). Returns 0 with the
 * fingerprint in *out, or -1 with a Python error set (a field of the wrong type or range). */
static int key_fingerprint(const key_fields *key, uint64_t *out) {
    if (!PyBytes_Check(key->chunk_hash)) {
        PyErr_SetString(PyExc_TypeError, "chunk_hash must be bytes");
        return -1;
    }
    const long long kv_rank = PyLong_AsLongLong(key->kv_rank);
    if (kv_rank == -1 && PyErr_Occurred()) return -1;
    const unsigned long long group = PyLong_AsUnsignedLongLong(key->group);
    if (group == (unsigned long long)-1 && PyErr_Occurred()) return -1;
    PyObject *model = PyUnicode_AsEncodedString(key->model, "utf-8", "surrogatepass");
    if (model == NULL) return -1;
    PyObject *salt = PyUnicode_AsEncodedString(key->salt, "utf-8", "surrogatepass");
    if (salt == NULL) {
        Py_DECREF(model);
        return -1;
    }
    const Py_ssize_t parts[3] = {PyBytes_GET_SIZE(key->chunk_hash), PyBytes_GET_SIZE(model),
                                 PyBytes_GET_SIZE(salt)};
    int status = -1;
    if (parts[0] > UINT32_MAX || parts[1] > UINT32_MAX || parts[2] > UINT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "key field longer than 2**32 bytes");
    } else {
        const size_t total = 4 + (size_t)parts[0] + 4 + (size_t)parts[1] + 16 + 4 + (size_t)parts[2];
        uint8_t *packed = (uint8_t *)PyMem_Malloc(total);
        if (packed == NULL) {
            PyErr_NoMemory();
        } else {
            uint8_t *p = packed;
            put_le32(p, (uint32_t)parts[0]);
            memcpy(p + 4, PyBytes_AS_STRING(key->chunk_hash), (size_t)parts[0]);
            p += 4 + parts[0];
            put_le32(p, (uint32_t)parts[1]);
            memcpy(p + 4, PyBytes_AS_STRING(model), (size_t)parts[1]);
            p += 4 + parts[1];
            XXH_writeLE64(p, (uint64_t)kv_rank);
            XXH_writeLE64(p + 8, (uint64_t)group);
            put_le32(p + 16, (uint32_t)parts[2]);
            memcpy(p + 20, PyBytes_AS_STRING(salt), (size_t)parts[2]);
            *out = XXH3_64bits(packed, total);
            PyMem_Free(packed);
            status = 0;
        }
    }
    Py_DECREF(model);
    Py_DECREF(salt);
    return status;
}

/* The 20-byte layout field argument: bytes of exactly that length. */
static int check_layout_field(PyObject *field) {
    if (!PyBytes_Check(field) || PyBytes_GET_SIZE(field) != LAYOUT_FIELD_BYTES) {
        PyErr_SetString(PyExc_ValueError, "layout field must be 20 bytes");
        return -1;
    }
    return 0;
}

PyObject *frame_write_header(PyObject *self, PyObject *args) {
    unsigned long long addr, payload_length, config_id;
    PyObject *checksum, *field;
    int inline_layout;
    key_fields key;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKOKO!UOOUO!p", &addr, &payload_length, &checksum, &config_id,
                          &PyBytes_Type, &key.chunk_hash, &key.model, &key.kv_rank, &key.group,
                          &key.salt, &PyBytes_Type, &field, &inline_layout))
        return NULL;
    if (addr == 0 || check_layout_field(field) < 0) {
        if (addr == 0) PyErr_SetString(PyExc_ValueError, "write_header: null address");
        return NULL;
    }
    uint64_t checksum_value = 0;
    if (checksum != Py_None) {
        checksum_value = PyLong_AsUnsignedLongLong(checksum);
        if (checksum_value == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    }
    uint64_t key_id;
    if (key_fingerprint(&key, &key_id) < 0) return NULL;
    uint8_t header[HEADER_BYTES];
    memcpy(header, MAGIC, 4);
    header[4] = FRAME_VERSION;
    header[5] = (uint8_t)((checksum != Py_None ? FLAG_CHECKSUM : 0) |
                          (inline_layout ? FLAG_LAYOUT_INLINE : 0));
    header[6] = header[7] = 0;
    XXH_writeLE64(header + 8, payload_length);
    XXH_writeLE64(header + 16, checksum_value);
    XXH_writeLE64(header + 24, config_id);
    XXH_writeLE64(header + 32, key_id);
    memcpy(header + 40, PyBytes_AS_STRING(field), LAYOUT_FIELD_BYTES);
    put_le32(header + HEAD_BYTES, (uint32_t)XXH3_64bits(header, HEAD_BYTES));
    memcpy((void *)(uintptr_t)addr, header, HEADER_BYTES);
    Py_RETURN_NONE;
}

PyObject *frame_accept_header(PyObject *self, PyObject *args) {
    unsigned long long addr, stored_payload_bytes, payload_bound, config_id;
    PyObject *field;
    int inline_layout;
    key_fields key;
    (void)self;
    if (!PyArg_ParseTuple(args, "KKKKO!UOOUOp", &addr, &stored_payload_bytes, &payload_bound,
                          &config_id, &PyBytes_Type, &key.chunk_hash, &key.model, &key.kv_rank,
                          &key.group, &key.salt, &field, &inline_layout))
        return NULL;
    if (addr == 0) {
        PyErr_SetString(PyExc_ValueError, "accept_header: null address");
        return NULL;
    }
    if (field != Py_None && check_layout_field(field) < 0) return NULL;
    uint8_t header[HEADER_BYTES];
    memcpy(header, (const void *)(uintptr_t)addr, HEADER_BYTES);
    /* parse_header's checks, then check_header's, in their order */
    const int flags = header[5];
    if (memcmp(header, MAGIC, 4) != 0 ||
        XXH_readLE32(header + HEAD_BYTES) != (uint32_t)XXH3_64bits(header, HEAD_BYTES) ||
        header[4] != FRAME_VERSION || (flags & ~(FLAG_CHECKSUM | FLAG_LAYOUT_INLINE)) != 0 ||
        header[6] != 0 || header[7] != 0)
        Py_RETURN_FALSE;
    const uint64_t length = XXH_readLE64(header + 8);
    if (length != stored_payload_bytes || length > payload_bound) Py_RETURN_FALSE;
    if (XXH_readLE64(header + 24) != config_id) Py_RETURN_FALSE;
    uint64_t key_id;
    if (key_fingerprint(&key, &key_id) < 0) return NULL;
    if (XXH_readLE64(header + 32) != key_id) Py_RETURN_FALSE;
    if (field != Py_None) {
        const int stored_inline = (flags & FLAG_LAYOUT_INLINE) != 0;
        /* an inline layout is compared whole; a hashed one by its 8-byte hash */
        if (stored_inline != (inline_layout != 0) ||
            memcmp(header + 40, PyBytes_AS_STRING(field),
                   stored_inline ? LAYOUT_FIELD_BYTES : 8) != 0)
            Py_RETURN_FALSE;
    }
    if (!(flags & FLAG_CHECKSUM)) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(XXH_readLE64(header + 16));
}
