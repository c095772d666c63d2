/*
 * The byte-plane kernels of planes.c, shared with literal_frames.c (one extension module,
 * lmserde_zstd._planes). Each works on the n whole elements from the pointers it is given and
 * checks nothing: the Python bindings check every length first.
 */
#ifndef LMSERDE_ZSTD_PLANES_KERNELS_H
#define LMSERDE_ZSTD_PLANES_KERNELS_H

#include <Python.h>
#include <stddef.h>
#include <stdint.h>

/* planes[p][i] = src[i * es + p] for i < n. */
void planes_split(const uint8_t *src, size_t n, size_t es, uint8_t *const *planes);
/* dst[i * es + p] = planes[p][i] for i < n; `stream` (from planes_stream_wanted for the whole
 * destination) writes with non-temporal stores. */
void planes_merge(const uint8_t *const *planes, size_t n, size_t es, uint8_t *dst, int stream);
/* Whether a merge of n elements into dst should stream (large enough, line-alignable). */
int planes_stream_wanted(size_t n, size_t es, const uint8_t *dst);
/* Count one streamed merge (for the tests; call with the GIL held). */
void planes_count_streamed(void);

/* The bindings' argument checks (planes.c): ValueError unless es is 1, 2, 4 or 8; acquire es
 * buffers from the sequence `seq`, each at least n bytes (-1 with an exception, nothing held). */
int planes_check_element_size(int es);
int planes_get_buffers(PyObject *seq, int es, size_t n, int writable, Py_buffer *views);

/* literal_frames.c: its Python functions, and its set-up at import. */
extern PyMethodDef literal_frame_methods[];
int literal_frames_init(PyObject *module);

#endif
