/*
 * The per-record loop of the group-log decoder in C.
 *
 * forensics/grouplog.py holds the reference loop in Python (`_batch_rows_py`) and the
 * contract; this module walks one uncompressed records payload the same way, only faster: the
 * OffsetCommit records the broker writes on every commit (OffsetCommitKey v0/v1 +
 * OffsetCommitValue v3, the bulk of any group log) become finished rows here, every other
 * record is handed back for `decode_record`. The build treats it as optional: without a C
 * compiler the Python loop is used. tests/forensics/test_grouplog.py checks that both give the
 * same rows.
 *
 * batch_rows(payload, count, base_offset, base_timestamp, head) -> (items: list, error)
 *
 * `head` is the (source_file, log_partition, position) tuple every row starts with. An item is
 * either a finished row (22 fields, grouplog.GROUP_LOG_COLUMNS) or, for a record this loop
 * does not unpack, the 4-tuple (offset, timestamp, key: bytes, value: bytes | None). Records
 * with a null key are skipped. `error` is None, or the text of the problem that stopped the
 * walk (the items before it are kept, as the Python generator yields them).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ROW_FIELDS 22

static PyObject *str_offset_commit; /* "offset_commit" */
static PyObject *int_three;         /* 3 */
static PyObject *int_minus_one;     /* -1 */

static int read_varint(const unsigned char *p, Py_ssize_t end, Py_ssize_t *pos, int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    for (;;) {
        if (*pos >= end)
            return -1;
        if (shift > 63)
            return -2;
        unsigned char b = p[(*pos)++];
        result |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80))
            break;
        shift += 7;
    }
    *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
    return 0;
}

static int16_t get_i16(const unsigned char *q)
{
    return (int16_t)(((uint16_t)q[0] << 8) | q[1]);
}

static int32_t get_i32(const unsigned char *q)
{
    return (int32_t)(((uint32_t)q[0] << 24) | ((uint32_t)q[1] << 16) | ((uint32_t)q[2] << 8)
                     | q[3]);
}

static int64_t get_i64(const unsigned char *q)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | q[i];
    return (int64_t)u;
}

/* A string for `len` bytes at `at`, reusing the previous one when the bytes are the same (a
 * batch repeats its group and topic names). Returns a new reference, or NULL with no error
 * set when the bytes are not UTF-8. */
static PyObject *cached_string(const unsigned char *at, Py_ssize_t len, PyObject **last,
                               const unsigned char **last_at, Py_ssize_t *last_len)
{
    if (*last != NULL && *last_len == len && memcmp(*last_at, at, (size_t)len) == 0) {
        Py_INCREF(*last);
        return *last;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)at, len, "strict");
    if (text == NULL) {
        PyErr_Clear();
        return NULL;
    }
    Py_XDECREF(*last);
    Py_INCREF(text);
    *last = text;
    *last_at = at;
    *last_len = len;
    return text;
}

static PyObject *commit_row(PyObject *head, int64_t offset, int64_t timestamp, int key_version,
                            PyObject *group, PyObject *topic, int32_t partition,
                            int64_t committed, int64_t commit_timestamp)
{
    PyObject *row = PyTuple_New(ROW_FIELDS);
    if (row == NULL)
        return NULL;
    for (int i = 0; i < 3; i++) {
        PyObject *item = PyTuple_GET_ITEM(head, i);
        Py_INCREF(item);
        PyTuple_SET_ITEM(row, i, item);
    }
    PyObject *values[8] = {
        PyLong_FromLongLong(offset), PyLong_FromLongLong(timestamp), NULL,
        PyLong_FromLong(key_version), NULL, NULL, PyLong_FromLong(partition),
        PyLong_FromLongLong(committed),
    };
    PyObject *stamp = PyLong_FromLongLong(commit_timestamp);
    if (!values[0] || !values[1] || !values[3] || !values[6] || !values[7] || !stamp) {
        for (int i = 0; i < 8; i++)
            Py_XDECREF(values[i]);
        Py_XDECREF(stamp);
        Py_DECREF(row);
        Py_DECREF(group);
        Py_DECREF(topic);
        return NULL;
    }
    PyTuple_SET_ITEM(row, 3, values[0]);
    PyTuple_SET_ITEM(row, 4, values[1]);
    Py_INCREF(str_offset_commit);
    PyTuple_SET_ITEM(row, 5, str_offset_commit);
    PyTuple_SET_ITEM(row, 6, values[3]);
    Py_INCREF(int_three);
    PyTuple_SET_ITEM(row, 7, int_three);
    PyTuple_SET_ITEM(row, 8, group);
    PyTuple_SET_ITEM(row, 9, topic);
    PyTuple_SET_ITEM(row, 10, values[6]);
    PyTuple_SET_ITEM(row, 11, values[7]);
    PyTuple_SET_ITEM(row, 12, stamp);
    Py_INCREF(int_minus_one);
    PyTuple_SET_ITEM(row, 13, int_minus_one);
    Py_INCREF(Py_False);
    PyTuple_SET_ITEM(row, 14, Py_False);
    for (int i = 15; i < ROW_FIELDS; i++) {
        Py_INCREF(Py_None);
        PyTuple_SET_ITEM(row, i, Py_None);
    }
    return row;
}

static PyObject *batch_rows(PyObject *self, PyObject *args)
{
    Py_buffer payload;
    long long count, base_offset, base_timestamp;
    PyObject *head;
    if (!PyArg_ParseTuple(args, "y*LLLO!", &payload, &count, &base_offset, &base_timestamp,
                          &PyTuple_Type, &head))
        return NULL;
    if (PyTuple_GET_SIZE(head) != 3) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "head must be (source_file, log_partition, position)");
        return NULL;
    }
    const unsigned char *p = (const unsigned char *)payload.buf;
    Py_ssize_t size = payload.len;
    PyObject *items = PyList_New(0);
    PyObject *last_group = NULL, *last_topic = NULL;
    const unsigned char *group_at = NULL, *topic_at = NULL;
    Py_ssize_t group_size = 0, topic_size = 0;
    const char *problem = NULL;
    if (items == NULL)
        goto failed;
    Py_ssize_t pos = 0;
    for (long long n = 0; n < count; n++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, headers;
        int bad;
        if ((bad = read_varint(p, size, &pos, &length))) {
            problem = bad == -1 ? "index out of range" : "varint too long";
            break;
        }
        pos += 1; /* attributes */
        if ((bad = read_varint(p, size, &pos, &ts_delta))
            || (bad = read_varint(p, size, &pos, &offset_delta))
            || (bad = read_varint(p, size, &pos, &key_len))) {
            problem = bad == -1 ? "index out of range" : "varint too long";
            break;
        }
        Py_ssize_t key_at = pos;
        if (key_len > 0)
            pos += (Py_ssize_t)key_len;
        if ((bad = read_varint(p, size, &pos, &value_len))) {
            problem = bad == -1 ? "index out of range" : "varint too long";
            break;
        }
        Py_ssize_t value_at = pos;
        if (value_len > 0)
            pos += (Py_ssize_t)value_len;
        if ((bad = read_varint(p, size, &pos, &headers))) {
            problem = bad == -1 ? "index out of range" : "varint too long";
            break;
        }
        for (int64_t h = 0; h < headers && !bad; h++) {
            int64_t header_key_len, header_value_len;
            if ((bad = read_varint(p, size, &pos, &header_key_len)))
                break;
            pos += (Py_ssize_t)header_key_len;
            if ((bad = read_varint(p, size, &pos, &header_value_len)))
                break;
            if (header_value_len > 0)
                pos += (Py_ssize_t)header_value_len;
        }
        if (bad) {
            problem = bad == -1 ? "index out of range" : "varint too long";
            break;
        }
        if (pos > size) {
            problem = "record runs past the end of its batch";
            break;
        }
        if (key_len < 0)
            continue; /* not a coordinator record */
        int64_t offset = base_offset + offset_delta;
        int64_t timestamp = base_timestamp + ts_delta;
        const unsigned char *key = p + key_at;
        const unsigned char *value = p + value_at;
        if (key_len >= 10 && key[0] == 0 && key[1] <= 1 && value_len >= 24 && value[0] == 0
            && value[1] == 3) {
            int16_t group_len = get_i16(key + 2);
            Py_ssize_t topic_from = 4 + (Py_ssize_t)group_len; /* relative to the key */
            int16_t topic_len = group_len >= 0 && topic_from + 2 <= key_len
                                    ? get_i16(key + topic_from) : -1;
            Py_ssize_t partition_from = topic_from + 2 + topic_len;
            int16_t metadata_len = get_i16(value + 14);
            Py_ssize_t timestamp_from = 16 + (Py_ssize_t)metadata_len;
            if (group_len >= 0 && topic_len >= 0 && partition_from + 4 == key_len
                && metadata_len >= 0 && timestamp_from + 8 == value_len) {
                PyObject *group = cached_string(key + 4, group_len, &last_group, &group_at,
                                                &group_size);
                PyObject *topic = group == NULL ? NULL
                    : cached_string(key + topic_from + 2, topic_len, &last_topic, &topic_at,
                                    &topic_size);
                if (PyErr_Occurred())
                    goto failed;
                if (group != NULL && topic != NULL) {
                    PyObject *row = commit_row(head, offset, timestamp, key[1], group, topic,
                                               get_i32(key + partition_from),
                                               get_i64(value + 2),
                                               get_i64(value + timestamp_from));
                    if (row == NULL || PyList_Append(items, row) < 0) {
                        Py_XDECREF(row);
                        goto failed;
                    }
                    Py_DECREF(row);
                    continue;
                }
                Py_XDECREF(group); /* not UTF-8: the generic codec reports it */
            }
        }
        PyObject *key_bytes = PyBytes_FromStringAndSize((const char *)key, (Py_ssize_t)key_len);
        PyObject *value_bytes;
        if (value_len >= 0) {
            value_bytes = PyBytes_FromStringAndSize((const char *)value, (Py_ssize_t)value_len);
        } else {
            value_bytes = Py_None;
            Py_INCREF(Py_None);
        }
        PyObject *item = key_bytes && value_bytes
            ? Py_BuildValue("(LLNN)", (long long)offset, (long long)timestamp, key_bytes,
                            value_bytes)
            : NULL;
        if (item == NULL) {
            if (!key_bytes || !value_bytes) {
                Py_XDECREF(key_bytes);
                Py_XDECREF(value_bytes);
            }
            goto failed;
        }
        if (PyList_Append(items, item) < 0) {
            Py_DECREF(item);
            goto failed;
        }
        Py_DECREF(item);
    }
    PyBuffer_Release(&payload);
    Py_XDECREF(last_group);
    Py_XDECREF(last_topic);
    if (problem == NULL)
        return Py_BuildValue("(NO)", items, Py_None);
    return Py_BuildValue("(Ns)", items, problem);

failed:
    PyBuffer_Release(&payload);
    Py_XDECREF(last_group);
    Py_XDECREF(last_topic);
    Py_XDECREF(items);
    return NULL;
}

static PyMethodDef methods[] = {
    {"batch_rows", batch_rows, METH_VARARGS,
     "Rows (or undecoded records) of one uncompressed magic-2 records payload."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "forensics._grouplog_speedups", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__grouplog_speedups(void)
{
    str_offset_commit = PyUnicode_InternFromString("offset_commit");
    int_three = PyLong_FromLong(3);
    int_minus_one = PyLong_FromLong(-1);
    if (str_offset_commit == NULL || int_three == NULL || int_minus_one == NULL)
        return NULL;
    return PyModule_Create(&module);
}
