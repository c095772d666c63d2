/* The stored-object frame header's fast path (frame_header.c), exposed by lmserde._checksum_copy. */
#ifndef LMSERDE_FRAME_HEADER_H
#define LMSERDE_FRAME_HEADER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* write_header(addr, payload_length, checksum_or_None, config_id, chunk_hash, model_name,
 * kv_rank, object_group_id, cache_salt, layout_field, inline) writes the 64 header bytes at addr,
 * exactly as stored_frame.build_header. */
PyObject *frame_write_header(PyObject *self, PyObject *args);

/* accept_header(addr, stored_payload_bytes, payload_bound, config_id, chunk_hash, model_name,
 * kv_rank, object_group_id, cache_salt, layout_field_or_None, inline) -> False when the 64 bytes
 * at addr fail any check of stored_frame.parse_header and check_header, else the payload
 * checksum (None when the header has none). */
PyObject *frame_accept_header(PyObject *self, PyObject *args);

#endif
