/*
 * The per-record loop of down-conversion (magic-2 records -> legacy messages) in C, and the
 * group log's replay fold (`fold_latest`, below).
 *
 * storage/legacy_convert.py holds the reference implementation in Python and the contract;
 * this module does exactly the same walk for one uncompressed records payload, only faster
 * (about 20x: the Python loop costs several microseconds per record, an order of magnitude
 * more than serving the magic-2 bytes as stored). The build treats it as optional: without a
 * C compiler the Python loop is used. tests/unit/test_legacy_convert.py checks that both give
 * the same bytes.
 *
 * convert_records(payload, count, base_offset, base_timestamp, has_append_time, append_time,
 *                 magic, attributes, fetch_offset, first_budget, budget, has_relative,
 *                 relative_to) -> (messages: bytes, used: int, full: bool)
 *
 * Budgets are byte limits on the output, -1 for none: the first message may use
 * `first_budget`, all messages together `budget`. Raises ValueError when records do not parse.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

static int read_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= end || shift > 63)
            return -1;
        unsigned char b = p[(*pos)++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    /* zig-zag: (n >> 1) ^ -(n & 1) */
    *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
    return 0;
}

static void put_i64(unsigned char *q, int64_t value)
{
    uint64_t u = (uint64_t)value;
    for (int i = 7; i >= 0; i--) {
        q[i] = (unsigned char)(u & 0xFF);
        u >>= 8;
    }
}

static void put_i32(unsigned char *q, uint32_t u)
{
    q[0] = (unsigned char)(u >> 24);
    q[1] = (unsigned char)(u >> 16);
    q[2] = (unsigned char)(u >> 8);
    q[3] = (unsigned char)u;
}

static PyObject *convert_records(PyObject *self, PyObject *args)
{
    Py_buffer payload;
    long long count, base_offset, base_timestamp, append_time, fetch_offset;
    long long first_budget, budget, relative_to;
    int has_append_time, magic, attributes, has_relative;
    if (!PyArg_ParseTuple(args, "y*LLLiLiiLLLiL", &payload, &count, &base_offset,
                          &base_timestamp, &has_append_time, &append_time, &magic,
                          &attributes, &fetch_offset, &first_budget, &budget, &has_relative,
                          &relative_to))
        return NULL;
    const unsigned char *p = (const unsigned char *)payload.buf;
    Py_ssize_t size = payload.len;
    /* Every record takes at least one byte, and grows by at most 34 bytes of legacy header. */
    long long records = count < (long long)size ? count : (long long)size;
    if (records < 0)
        records = 0;
    Py_ssize_t capacity = size + 34 * (Py_ssize_t)records + 64;
    PyObject *out = PyBytes_FromStringAndSize(NULL, capacity);
    if (out == NULL) {
        PyBuffer_Release(&payload);
        return NULL;
    }
    unsigned char *q = (unsigned char *)PyBytes_AS_STRING(out);
    Py_ssize_t pos = 0, used = 0;
    long long limit = first_budget;
    int full = 0;
    const char *problem = NULL;
    for (long long i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len;
        if (read_varint(p, size, &pos, &length) || length < 1 || pos + length > size) {
            problem = "record length out of range";
            break;
        }
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos += 1; /* record attributes */
        if (read_varint(p, record_end, &pos, &ts_delta)
            || read_varint(p, record_end, &pos, &offset_delta)) {
            problem = "malformed record header";
            break;
        }
        int64_t offset = base_offset + offset_delta;
        if (offset < fetch_offset) {
            pos = record_end;
            continue;
        }
        if (read_varint(p, record_end, &pos, &key_len)) {
            problem = "malformed key length";
            break;
        }
        const unsigned char *key = p + pos;
        Py_ssize_t klen = key_len > 0 ? (Py_ssize_t)key_len : 0;
        if (pos + klen > record_end) {
            problem = "key runs past its record";
            break;
        }
        pos += klen;
        if (read_varint(p, record_end, &pos, &value_len)) {
            problem = "malformed value length";
            break;
        }
        const unsigned char *value = p + pos;
        Py_ssize_t vlen = value_len > 0 ? (Py_ssize_t)value_len : 0;
        if (pos + vlen > record_end) {
            problem = "value runs past its record";
            break;
        }
        pos = record_end; /* headers: dropped, they have no legacy form */
        if (has_relative)
            offset -= relative_to;
        Py_ssize_t after_crc = 2 + (magic ? 8 : 0) + 8 + klen + vlen;
        Py_ssize_t entry = 16 + after_crc;
        if (limit >= 0 && (long long)(used + entry) > limit) {
            full = 1;
            break;
        }
        limit = budget;
        unsigned char *m = q + used;
        put_i64(m, offset);
        put_i32(m + 8, (uint32_t)(4 + after_crc));
        unsigned char *covered = m + 16;
        unsigned char *w = covered;
        *w++ = (unsigned char)magic;
        *w++ = (unsigned char)attributes;
        if (magic) {
            put_i64(w, has_append_time ? append_time : base_timestamp + ts_delta);
            w += 8;
        }
        put_i32(w, key_len < 0 ? 0xFFFFFFFFu : (uint32_t)key_len);
        w += 4;
        memcpy(w, key, klen);
        w += klen;
        put_i32(w, value_len < 0 ? 0xFFFFFFFFu : (uint32_t)value_len);
        w += 4;
        memcpy(w, value, vlen);
        put_i32(m + 12, (uint32_t)crc32(0L, covered, (uInt)after_crc));
        used += entry;
    }
    PyBuffer_Release(&payload);
    if (problem != NULL) {
        Py_DECREF(out);
        PyErr_SetString(PyExc_ValueError, problem);
        return NULL;
    }
    if (_PyBytes_Resize(&out, used) < 0)
        return NULL;
    return Py_BuildValue("(NnO)", out, used, full ? Py_True : Py_False);
}

/*
 * fold_latest(chunk, latest, min_offset) -> None
 *
 * The group log's replay loop (coordinator/grouplog/log.py, `_fold_latest_py` in
 * storage/record_batch.py is the reference): for every keyed record of a run of uncompressed,
 * non-transactional magic-2 batches at or past `min_offset`, `latest[key]` is removed and set
 * again to (offset, value), so the dict keeps the last value of every key in the order of the
 * last writes. Control batches are skipped. Raises ValueError when a record does not parse
 * (the records before it are folded in, as in the Python loop).
 */
static PyObject *fold_latest(PyObject *self, PyObject *args)
{
    Py_buffer view;
    PyObject *latest;
    long long min_offset;
    if (!PyArg_ParseTuple(args, "y*O!L", &view, &PyDict_Type, &latest, &min_offset))
        return NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t end = view.len, pos = 0;
    while (pos + 61 <= end) {
        int64_t base_offset = 0;
        for (int i = 0; i < 8; i++)
            base_offset = (int64_t)(((uint64_t)base_offset << 8) | p[pos + i]);
        int32_t length = (int32_t)(((uint32_t)p[pos + 8] << 24) | ((uint32_t)p[pos + 9] << 16)
                                   | ((uint32_t)p[pos + 10] << 8) | p[pos + 11]);
        unsigned char magic = p[pos + 16];
        int attributes = (p[pos + 21] << 8) | p[pos + 22];
        int32_t count = (int32_t)(((uint32_t)p[pos + 57] << 24) | ((uint32_t)p[pos + 58] << 16)
                                  | ((uint32_t)p[pos + 59] << 8) | p[pos + 60]);
        Py_ssize_t batch_end = pos + 12 + (Py_ssize_t)length;
        if (magic != 2 || (attributes & 0x07)) {
            PyErr_Format(PyExc_ValueError, "unsupported batch at %zd: magic %d, attributes %d",
                         pos, (int)magic, attributes);
            goto fail;
        }
        if (attributes & 0x20) { /* control batch: no data records */
            pos = batch_end;
            continue;
        }
        if (attributes & 0x10) { /* its records count only from a marker: not for this fold */
            PyErr_Format(PyExc_ValueError, "transactional batch at %zd", pos);
            goto fail;
        }
        Py_ssize_t cur = pos + 61;
        for (int32_t r = 0; r < count; r++) {
            int64_t skip, offset_delta, key_len, value_len, headers;
            if (read_varint(p, end, &cur, &skip) < 0)  /* record length */
                goto truncated;
            cur += 1; /* attributes */
            if (read_varint(p, end, &cur, &skip) < 0 /* timestamp delta */
                || read_varint(p, end, &cur, &offset_delta) < 0
                || read_varint(p, end, &cur, &key_len) < 0)
                goto truncated;
            Py_ssize_t key_at = cur;
            if (key_len > 0) {
                if (key_len > end - cur)
                    goto truncated;
                cur += (Py_ssize_t)key_len;
            }
            if (read_varint(p, end, &cur, &value_len) < 0)
                goto truncated;
            Py_ssize_t value_at = cur;
            if (value_len > 0) {
                if (value_len > end - cur)
                    goto truncated;
                cur += (Py_ssize_t)value_len;
            }
            if (read_varint(p, end, &cur, &headers) < 0)
                goto truncated;
            for (int64_t h = 0; h < headers; h++) {
                int64_t header_key_len, header_value_len;
                if (read_varint(p, end, &cur, &header_key_len) < 0)
                    goto truncated;
                cur += (Py_ssize_t)header_key_len;
                if (read_varint(p, end, &cur, &header_value_len) < 0)
                    goto truncated;
                if (header_value_len > 0)
                    cur += (Py_ssize_t)header_value_len;
            }
            int64_t offset = base_offset + offset_delta;
            if (key_len < 0 || offset < min_offset)
                continue;
            PyObject *key = PyBytes_FromStringAndSize((const char *)p + key_at,
                                                      (Py_ssize_t)key_len);
            if (key == NULL)
                goto fail;
            PyObject *value;
            if (value_len < 0) {
                value = Py_None;
                Py_INCREF(value);
            } else {
                value = PyBytes_FromStringAndSize((const char *)p + value_at,
                                                  (Py_ssize_t)value_len);
            }
            PyObject *entry = value == NULL ? NULL : Py_BuildValue("(LN)", (long long)offset, value);
            if (entry == NULL) {
                Py_DECREF(key);
                goto fail;
            }
            /* Removed first, so the dict's order follows the last write of each key. */
            if (PyDict_DelItem(latest, key) < 0) {
                if (!PyErr_ExceptionMatches(PyExc_KeyError)) {
                    Py_DECREF(key);
                    Py_DECREF(entry);
                    goto fail;
                }
                PyErr_Clear();
            }
            int set = PyDict_SetItem(latest, key, entry);
            Py_DECREF(key);
            Py_DECREF(entry);
            if (set < 0)
                goto fail;
        }
        pos = batch_end;
    }
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
truncated:
    PyErr_Format(PyExc_ValueError, "record runs past the end of its batch data at %zd", pos);
fail:
    PyBuffer_Release(&view);
    return NULL;
}

static PyMethodDef methods[] = {
    {"fold_latest", fold_latest, METH_VARARGS,
     "Fold the keyed records of uncompressed batches into a dict of the latest per key."},
    {"convert_records", convert_records, METH_VARARGS,
     "Legacy messages for the records of one uncompressed magic-2 payload."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._legacy_speedups", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__legacy_speedups(void)
{
    return PyModule_Create(&module);
}
