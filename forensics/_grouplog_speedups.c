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
 *
 * batch_columns(payload, count, base_offset, base_timestamp, position, columns)
 *     -> (commit rows added, others: list, error)
 *
 * The same walk for the Spark data source, which hands Spark Arrow columns: the commit rows'
 * fields are appended to `columns`, 11 bytearrays in grouplog.COMMIT_BUFFERS order (native
 * integers; each string column as int32 end offsets plus UTF-8 bytes, the layout of an Arrow
 * string array), so no Python object is made per commit. `others` and `error` are as in
 * batch_rows.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define ROW_FIELDS 22

static PyObject *str_offset_commit; /* "offset_commit" */
static PyObject *int_three;         /* 3 */
static PyObject *int_minus_one;     /* -1 */
static PyObject *name_error, *name_key, *name_value, *name_offset, *name_timestamp;

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

/* Where one record's fields are inside the payload. */
typedef struct {
    int64_t ts_delta, offset_delta, key_len, value_len;
    Py_ssize_t key_at, value_at;
} record_view;

static const char *varint_problem(int bad)
{
    return bad == -1 ? "index out of range" : "varint too long";
}

/* Walks the record at *pos (length, attributes, timestamp and offset deltas, key, value,
 * headers) and leaves *pos after it. Returns NULL, or the problem that stops the walk in the
 * words the Python loop's exceptions use. */
static const char *next_record(const unsigned char *p, Py_ssize_t size, Py_ssize_t *pos,
                               record_view *r)
{
    int64_t length, headers;
    int bad;
    if ((bad = read_varint(p, size, pos, &length)))
        return varint_problem(bad);
    *pos += 1; /* attributes */
    if ((bad = read_varint(p, size, pos, &r->ts_delta))
        || (bad = read_varint(p, size, pos, &r->offset_delta))
        || (bad = read_varint(p, size, pos, &r->key_len)))
        return varint_problem(bad);
    r->key_at = *pos;
    if (r->key_len > 0)
        *pos += (Py_ssize_t)r->key_len;
    if ((bad = read_varint(p, size, pos, &r->value_len)))
        return varint_problem(bad);
    r->value_at = *pos;
    if (r->value_len > 0)
        *pos += (Py_ssize_t)r->value_len;
    if ((bad = read_varint(p, size, pos, &headers)))
        return varint_problem(bad);
    for (int64_t h = 0; h < headers; h++) {
        int64_t header_key_len, header_value_len;
        if ((bad = read_varint(p, size, pos, &header_key_len)))
            return varint_problem(bad);
        *pos += (Py_ssize_t)header_key_len;
        if ((bad = read_varint(p, size, pos, &header_value_len)))
            return varint_problem(bad);
        if (header_value_len > 0)
            *pos += (Py_ssize_t)header_value_len;
    }
    if (*pos > size)
        return "record runs past the end of its batch";
    return NULL;
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

/* An OffsetCommit record the loops unpack themselves: OffsetCommitKey v0/v1 (int16 group
 * length, group, int16 topic length, topic, int32 partition) + OffsetCommitValue v3 (int64
 * offset, int32 leader epoch, int16 metadata length, metadata, int64 commit timestamp). */
typedef struct {
    int key_version;
    const unsigned char *group, *topic;
    Py_ssize_t group_len, topic_len;
    int32_t partition;
    int64_t committed, commit_timestamp;
} commit_view;

/* True when the key and value are such a commit, with its fields in `c`. */
static int key_value_commit(const unsigned char *key, int64_t key_len,
                            const unsigned char *value, int64_t value_len, commit_view *c)
{
    if (!(key_len >= 10 && key[0] == 0 && key[1] <= 1 && value_len >= 24 && value[0] == 0
          && value[1] == 3))
        return 0;
    int16_t group_len = get_i16(key + 2);
    Py_ssize_t topic_from = 4 + (Py_ssize_t)group_len; /* relative to the key */
    int16_t topic_len = group_len >= 0 && topic_from + 2 <= key_len
                            ? get_i16(key + topic_from) : -1;
    Py_ssize_t partition_from = topic_from + 2 + topic_len;
    int16_t metadata_len = get_i16(value + 14);
    Py_ssize_t timestamp_from = 16 + (Py_ssize_t)metadata_len;
    if (!(group_len >= 0 && topic_len >= 0 && partition_from + 4 == key_len
          && metadata_len >= 0 && timestamp_from + 8 == value_len))
        return 0;
    c->key_version = key[1];
    c->group = key + 4;
    c->group_len = group_len;
    c->topic = key + topic_from + 2;
    c->topic_len = topic_len;
    c->partition = get_i32(key + partition_from);
    c->committed = get_i64(value + 2);
    c->commit_timestamp = get_i64(value + timestamp_from);
    return 1;
}

/* True when the record is such a commit, with its fields in `c`. */
static int as_commit(const unsigned char *p, const record_view *r, commit_view *c)
{
    return key_value_commit(p + r->key_at, r->key_len, p + r->value_at, r->value_len, c);
}

/* Appends (offset, timestamp, key: bytes, value: bytes | None) for `decode_record`. */
static int append_record(PyObject *items, const unsigned char *p, const record_view *r,
                         int64_t offset, int64_t timestamp)
{
    PyObject *key_bytes = PyBytes_FromStringAndSize((const char *)p + r->key_at,
                                                    (Py_ssize_t)r->key_len);
    PyObject *value_bytes;
    if (r->value_len >= 0) {
        value_bytes = PyBytes_FromStringAndSize((const char *)p + r->value_at,
                                                (Py_ssize_t)r->value_len);
    } else {
        value_bytes = Py_None;
        Py_INCREF(Py_None);
    }
    if (!key_bytes || !value_bytes) {
        Py_XDECREF(key_bytes);
        Py_XDECREF(value_bytes);
        return -1;
    }
    PyObject *item = Py_BuildValue("(LLNN)", (long long)offset, (long long)timestamp,
                                   key_bytes, value_bytes);
    if (item == NULL)
        return -1;
    int appended = PyList_Append(items, item);
    Py_DECREF(item);
    return appended;
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
        record_view r;
        if ((problem = next_record(p, size, &pos, &r)) != NULL)
            break;
        if (r.key_len < 0)
            continue; /* not a coordinator record */
        int64_t offset = base_offset + r.offset_delta;
        int64_t timestamp = base_timestamp + r.ts_delta;
        commit_view c;
        if (as_commit(p, &r, &c)) {
            PyObject *group = cached_string(c.group, c.group_len, &last_group, &group_at,
                                            &group_size);
            PyObject *topic = group == NULL ? NULL
                : cached_string(c.topic, c.topic_len, &last_topic, &topic_at, &topic_size);
            if (PyErr_Occurred())
                goto failed;
            if (group != NULL && topic != NULL) {
                PyObject *row = commit_row(head, offset, timestamp, c.key_version, group, topic,
                                           c.partition, c.committed, c.commit_timestamp);
                if (row == NULL || PyList_Append(items, row) < 0) {
                    Py_XDECREF(row);
                    goto failed;
                }
                Py_DECREF(row);
                continue;
            }
            Py_XDECREF(group); /* not UTF-8: the generic codec reports it */
        }
        if (append_record(items, p, &r, offset, timestamp) < 0)
            goto failed;
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

/* Columns of the commit rows, grown batch by batch; `batch_columns` appends to them. */
enum {
    COL_POSITION, COL_OFFSET, COL_TIMESTAMP, COL_KEY_VERSION, COL_PARTITION, COL_COMMITTED,
    COL_COMMIT_TIMESTAMP, COL_GROUP_ENDS, COL_GROUP_DATA, COL_TOPIC_ENDS, COL_TOPIC_DATA,
    COLUMN_COUNT
};

/* Appends `len` bytes to a bytearray (which grows with room to spare, so a run of small
 * appends stays linear). */
static int extend(PyObject *column, const void *bytes, Py_ssize_t len)
{
    Py_ssize_t at = PyByteArray_GET_SIZE(column);
    if (len == 0)
        return 0;
    if (PyByteArray_Resize(column, at + len) < 0)
        return -1;
    memcpy(PyByteArray_AS_STRING(column) + at, bytes, (size_t)len);
    return 0;
}

/* True when the bytes are UTF-8 (ASCII is checked here; anything else by Python's decoder,
 * once per distinct name in the call). */
static int is_utf8(const unsigned char *at, Py_ssize_t len, const unsigned char **last_at,
                   Py_ssize_t *last_len)
{
    if (*last_at != NULL && *last_len == len && memcmp(*last_at, at, (size_t)len) == 0)
        return 1;
    int ascii = 1;
    for (Py_ssize_t i = 0; i < len && ascii; i++)
        ascii = at[i] < 0x80;
    if (!ascii) {
        PyObject *text = PyUnicode_DecodeUTF8((const char *)at, len, "strict");
        if (text == NULL) {
            PyErr_Clear();
            return 0;
        }
        Py_DECREF(text);
    }
    *last_at = at;
    *last_len = len;
    return 1;
}

/* Appends one commit row to the column buffers; `group_end` and `topic_end` are the string
 * columns' running end offsets. */
static int append_commit(PyObject **column, const commit_view *c, int64_t position,
                         int64_t offset, int64_t timestamp, int64_t *group_end,
                         int64_t *topic_end)
{
    int32_t key_version = c->key_version;
    int32_t group_stop, topic_stop;
    *group_end += c->group_len;
    *topic_end += c->topic_len;
    if (*group_end > INT32_MAX || *topic_end > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "string column over 2 GiB");
        return -1;
    }
    group_stop = (int32_t)*group_end;
    topic_stop = (int32_t)*topic_end;
    if (extend(column[COL_POSITION], &position, 8) < 0
        || extend(column[COL_OFFSET], &offset, 8) < 0
        || extend(column[COL_TIMESTAMP], &timestamp, 8) < 0
        || extend(column[COL_KEY_VERSION], &key_version, 4) < 0
        || extend(column[COL_PARTITION], &c->partition, 4) < 0
        || extend(column[COL_COMMITTED], &c->committed, 8) < 0
        || extend(column[COL_COMMIT_TIMESTAMP], &c->commit_timestamp, 8) < 0
        || extend(column[COL_GROUP_ENDS], &group_stop, 4) < 0
        || extend(column[COL_GROUP_DATA], c->group, c->group_len) < 0
        || extend(column[COL_TOPIC_ENDS], &topic_stop, 4) < 0
        || extend(column[COL_TOPIC_DATA], c->topic, c->topic_len) < 0)
        return -1;
    return 0;
}

/* The 11 bytearray columns of `columns` (a list) into `column`; -1 with an error if not. */
static int get_columns(PyObject *columns, PyObject **column)
{
    if (!PyList_Check(columns) || PyList_GET_SIZE(columns) != COLUMN_COUNT) {
        PyErr_SetString(PyExc_ValueError, "columns must be 11 bytearrays");
        return -1;
    }
    for (int i = 0; i < COLUMN_COUNT; i++) {
        column[i] = PyList_GET_ITEM(columns, i);
        if (!PyByteArray_CheckExact(column[i])) {
            PyErr_SetString(PyExc_TypeError, "columns must be 11 bytearrays");
            return -1;
        }
    }
    return 0;
}

/* record_columns(keys, values, offsets, timestamps, columns): records given one by one (a
 * client's fetched messages: lists of key bytes, value bytes or None, offsets, timestamps).
 * The commits are appended to the columns with their offset as their position; returns
 * (rows appended, [indexes of the other records]). */
static PyObject *record_columns(PyObject *self, PyObject *args)
{
    PyObject *keys, *values, *offsets, *timestamps, *columns;
    if (!PyArg_ParseTuple(args, "O!O!O!O!O!", &PyList_Type, &keys, &PyList_Type, &values,
                          &PyList_Type, &offsets, &PyList_Type, &timestamps, &PyList_Type,
                          &columns))
        return NULL;
    PyObject *column[COLUMN_COUNT];
    if (get_columns(columns, column) < 0)
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(keys);
    if (PyList_GET_SIZE(values) != count || PyList_GET_SIZE(offsets) != count
        || PyList_GET_SIZE(timestamps) != count) {
        PyErr_SetString(PyExc_ValueError, "keys, values, offsets and timestamps differ in length");
        return NULL;
    }
    int64_t group_end = PyByteArray_GET_SIZE(column[COL_GROUP_DATA]);
    int64_t topic_end = PyByteArray_GET_SIZE(column[COL_TOPIC_DATA]);
    const unsigned char *group_at = NULL, *topic_at = NULL;
    Py_ssize_t group_size = 0, topic_size = 0;
    long long rows = 0;
    PyObject *others = PyList_New(0);
    if (others == NULL)
        return NULL;
    for (Py_ssize_t n = 0; n < count; n++) {
        PyObject *key = PyList_GET_ITEM(keys, n);
        PyObject *value = PyList_GET_ITEM(values, n);
        commit_view c;
        int commit = PyBytes_CheckExact(key) && PyBytes_CheckExact(value)
            && key_value_commit((const unsigned char *)PyBytes_AS_STRING(key),
                                PyBytes_GET_SIZE(key),
                                (const unsigned char *)PyBytes_AS_STRING(value),
                                PyBytes_GET_SIZE(value), &c)
            && is_utf8(c.group, c.group_len, &group_at, &group_size)
            && is_utf8(c.topic, c.topic_len, &topic_at, &topic_size);
        if (commit) {
            int64_t offset = PyLong_AsLongLong(PyList_GET_ITEM(offsets, n));
            int64_t timestamp = PyLong_AsLongLong(PyList_GET_ITEM(timestamps, n));
            if (PyErr_Occurred())
                goto failed;
            if (append_commit(column, &c, offset, offset, timestamp, &group_end,
                              &topic_end) < 0)
                goto failed;
            rows++; /* the names' bytes stay alive in `keys` for the whole call */
            continue;
        }
        PyObject *index = PyLong_FromSsize_t(n);
        if (index == NULL || PyList_Append(others, index) < 0) {
            Py_XDECREF(index);
            goto failed;
        }
        Py_DECREF(index);
    }
    return Py_BuildValue("(LN)", rows, others);

failed:
    Py_DECREF(others);
    return NULL;
}

/* `is_utf8` for names whose bytes do not outlive the call: the last name found valid is
 * remembered as a copy (names longer than the copy are checked every time). */
typedef struct {
    unsigned char bytes[256];
    Py_ssize_t len; /* -1: nothing remembered */
} name_cache;

static int is_utf8_cached(const unsigned char *at, Py_ssize_t len, name_cache *cache)
{
    if (cache->len == len && memcmp(cache->bytes, at, (size_t)len) == 0)
        return 1;
    const unsigned char *last_at = NULL;
    Py_ssize_t last_len = 0;
    if (!is_utf8(at, len, &last_at, &last_len))
        return 0;
    if (len <= (Py_ssize_t)sizeof(cache->bytes)) {
        memcpy(cache->bytes, at, (size_t)len);
        cache->len = len;
    }
    return 1;
}

/* message_columns(messages, end, columns): a client's fetched messages (objects with the
 * methods error(), key(), value(), offset() and timestamp(), as confluent-kafka's Message),
 * taken from the front while they carry no error and their offset is below `end`. The commits
 * are appended to the columns with their offset as their position; returns (rows appended,
 * [indexes of the other records taken], messages taken). The caller looks at the message that
 * stopped it (an error, the end of the partition, the end of the range) itself. */
static PyObject *message_columns(PyObject *self, PyObject *args)
{
    PyObject *messages, *columns;
    long long end;
    if (!PyArg_ParseTuple(args, "O!LO!", &PyList_Type, &messages, &end, &PyList_Type,
                          &columns))
        return NULL;
    PyObject *column[COLUMN_COUNT];
    if (get_columns(columns, column) < 0)
        return NULL;
    int64_t group_end = PyByteArray_GET_SIZE(column[COL_GROUP_DATA]);
    int64_t topic_end = PyByteArray_GET_SIZE(column[COL_TOPIC_DATA]);
    name_cache group_seen = {.len = -1}, topic_seen = {.len = -1};
    long long rows = 0;
    PyObject *others = PyList_New(0);
    if (others == NULL)
        return NULL;
    Py_ssize_t count = PyList_GET_SIZE(messages), n = 0;
    for (; n < count; n++) {
        PyObject *message = PyList_GET_ITEM(messages, n);
        PyObject *error = PyObject_CallMethodNoArgs(message, name_error);
        if (error == NULL)
            goto failed;
        int has_error = error != Py_None;
        Py_DECREF(error);
        if (has_error)
            break;
        PyObject *number = PyObject_CallMethodNoArgs(message, name_offset);
        if (number == NULL)
            goto failed;
        int64_t offset = PyLong_AsLongLong(number);
        Py_DECREF(number);
        if (offset == -1 && PyErr_Occurred())
            goto failed;
        if (offset >= end)
            break;
        PyObject *key = PyObject_CallMethodNoArgs(message, name_key);
        if (key == NULL)
            goto failed;
        PyObject *value = PyObject_CallMethodNoArgs(message, name_value);
        if (value == NULL) {
            Py_DECREF(key);
            goto failed;
        }
        commit_view c;
        int commit = PyBytes_CheckExact(key) && PyBytes_CheckExact(value)
            && key_value_commit((const unsigned char *)PyBytes_AS_STRING(key),
                                PyBytes_GET_SIZE(key),
                                (const unsigned char *)PyBytes_AS_STRING(value),
                                PyBytes_GET_SIZE(value), &c)
            && is_utf8_cached(c.group, c.group_len, &group_seen)
            && is_utf8_cached(c.topic, c.topic_len, &topic_seen);
        if (commit) {
            int64_t timestamp = 0;
            PyObject *stamp = PyObject_CallMethodNoArgs(message, name_timestamp);
            int ok = stamp != NULL && PyTuple_Check(stamp) && PyTuple_GET_SIZE(stamp) == 2;
            if (ok) {
                timestamp = PyLong_AsLongLong(PyTuple_GET_ITEM(stamp, 1));
                ok = !(timestamp == -1 && PyErr_Occurred());
            }
            else if (stamp != NULL)
                PyErr_SetString(PyExc_TypeError, "timestamp() must be a (type, ms) tuple");
            /* the names point into `key` and `value`: appended before they are released */
            ok = ok && append_commit(column, &c, offset, offset, timestamp, &group_end,
                                     &topic_end) == 0;
            Py_XDECREF(stamp);
            Py_DECREF(key);
            Py_DECREF(value);
            if (!ok)
                goto failed;
            rows++;
            continue;
        }
        Py_DECREF(key);
        Py_DECREF(value);
        PyObject *index = PyLong_FromSsize_t(n);
        if (index == NULL || PyList_Append(others, index) < 0) {
            Py_XDECREF(index);
            goto failed;
        }
        Py_DECREF(index);
    }
    return Py_BuildValue("(LNn)", rows, others, n);

failed:
    Py_DECREF(others);
    return NULL;
}

static PyObject *batch_columns(PyObject *self, PyObject *args)
{
    Py_buffer payload;
    long long count, base_offset, base_timestamp, position;
    PyObject *columns;
    if (!PyArg_ParseTuple(args, "y*LLLLO!", &payload, &count, &base_offset, &base_timestamp,
                          &position, &PyList_Type, &columns))
        return NULL;
    if (PyList_GET_SIZE(columns) != COLUMN_COUNT) {
        PyBuffer_Release(&payload);
        PyErr_SetString(PyExc_ValueError, "columns must be 11 bytearrays");
        return NULL;
    }
    PyObject *column[COLUMN_COUNT];
    for (int i = 0; i < COLUMN_COUNT; i++) {
        column[i] = PyList_GET_ITEM(columns, i);
        if (!PyByteArray_CheckExact(column[i])) {
            PyBuffer_Release(&payload);
            PyErr_SetString(PyExc_TypeError, "columns must be 11 bytearrays");
            return NULL;
        }
    }
    const unsigned char *p = (const unsigned char *)payload.buf;
    Py_ssize_t size = payload.len;
    /* The string columns' end offsets continue from what the earlier batches wrote. */
    int64_t group_end = PyByteArray_GET_SIZE(column[COL_GROUP_DATA]);
    int64_t topic_end = PyByteArray_GET_SIZE(column[COL_TOPIC_DATA]);
    const unsigned char *group_at = NULL, *topic_at = NULL;
    Py_ssize_t group_size = 0, topic_size = 0;
    const char *problem = NULL;
    long long rows = 0;
    PyObject *others = PyList_New(0);
    if (others == NULL)
        goto failed;
    Py_ssize_t pos = 0;
    for (long long n = 0; n < count; n++) {
        record_view r;
        if ((problem = next_record(p, size, &pos, &r)) != NULL)
            break;
        if (r.key_len < 0)
            continue; /* not a coordinator record */
        int64_t offset = base_offset + r.offset_delta;
        int64_t timestamp = base_timestamp + r.ts_delta;
        commit_view c;
        if (as_commit(p, &r, &c) && is_utf8(c.group, c.group_len, &group_at, &group_size)
            && is_utf8(c.topic, c.topic_len, &topic_at, &topic_size)) {
            if (append_commit(column, &c, position, offset, timestamp, &group_end,
                              &topic_end) < 0)
                goto failed;
            rows++;
            continue;
        }
        if (append_record(others, p, &r, offset, timestamp) < 0)
            goto failed;
    }
    PyBuffer_Release(&payload);
    if (problem == NULL)
        return Py_BuildValue("(LNO)", rows, others, Py_None);
    return Py_BuildValue("(LNs)", rows, others, problem);

failed:
    PyBuffer_Release(&payload);
    Py_XDECREF(others);
    return NULL;
}

static PyMethodDef methods[] = {
    {"batch_rows", batch_rows, METH_VARARGS,
     "Rows (or undecoded records) of one uncompressed magic-2 records payload."},
    {"batch_columns", batch_columns, METH_VARARGS,
     "Commit rows of one records payload appended to column buffers; the other records."},
    {"record_columns", record_columns, METH_VARARGS,
     "Commit rows of fetched records appended to column buffers; the others' indexes."},
    {"message_columns", message_columns, METH_VARARGS,
     "Commit rows of a client's fetched messages appended to column buffers; the others' "
     "indexes and how many messages were taken."},
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
    name_error = PyUnicode_InternFromString("error");
    name_key = PyUnicode_InternFromString("key");
    name_value = PyUnicode_InternFromString("value");
    name_offset = PyUnicode_InternFromString("offset");
    name_timestamp = PyUnicode_InternFromString("timestamp");
    if (str_offset_commit == NULL || int_three == NULL || int_minus_one == NULL
        || name_error == NULL || name_key == NULL || name_value == NULL || name_offset == NULL
        || name_timestamp == NULL)
        return NULL;
    return PyModule_Create(&module);
}
