/* The record walk of the produce path's validation (Kafka's LogValidator iterating a v2 batch's records),
 * compiled: partitions/validation.py holds the same rules in Python and uses this module when it is built.
 *
 * scan_records(section, records_count, want_keyless) -> (min_timestamp_delta, max_timestamp_delta, keyless)
 *   section: the (decompressed) records section of one batch, any buffer
 *   Walks every record without copying anything: the length prefix, attributes, timestamp delta, offset delta,
 *   key, value and headers must each fit inside the record, the record's fields must use exactly its length,
 *   offset deltas must run 0, 1, 2, ..., and exactly records_count records must fill the section.
 *   keyless: the indexes of records without a key when want_keyless, else None.
 *   Raises ValueError naming the first problem.
 *
 * decode_columns(section, ..., columns) -> appends the records of one section to the Spark source's Arrow
 *   column buffers (see below), for spark/columns.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const unsigned char *data;
    Py_ssize_t position;
    Py_ssize_t end;
} Cursor;

/* A zigzag varint of at most max_bytes bytes ending before cursor->end. 0 on success, -1 when malformed. */
static int read_varint(Cursor *cursor, int max_bytes, int64_t *out) {
    uint64_t raw = 0;
    int shift = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (cursor->position >= cursor->end)
            return -1;
        unsigned char byte = cursor->data[cursor->position++];
        raw |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
        shift += 7;
    }
    return -1;
}

static PyObject *fail(Py_ssize_t index, const char *what) {
    PyErr_Format(PyExc_ValueError, "record %zd: %s", index, what);
    return NULL;
}

/* A length-prefixed field (key, value, header key or value): -1 (null) when null_ok, else 0..remaining. */
static int skip_bytes(Cursor *cursor, int null_ok, int64_t *length) {
    if (read_varint(cursor, 5, length) < 0)
        return -1;
    if (*length == -1 && null_ok)
        return 0;
    if (*length < 0 || *length > cursor->end - cursor->position)
        return -1;
    cursor->position += (Py_ssize_t)*length;
    return 0;
}

static PyObject *scan_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t records_count;
    int want_keyless;
    if (!PyArg_ParseTuple(args, "y*np", &view, &records_count, &want_keyless))
        return NULL;
    PyObject *keyless = NULL;
    if (want_keyless && (keyless = PyList_New(0)) == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    const unsigned char *data = view.buf;
    Py_ssize_t section_end = view.len;
    Cursor cursor = {data, 0, section_end};
    int64_t min_delta = 0, max_delta = 0;
    PyObject *result = NULL;
    Py_ssize_t index = 0;
    for (; index < records_count; index++) {
        int64_t length, timestamp_delta, offset_delta, size, header_count;
        if (cursor.position >= section_end) {
            result = fail(index, "missing: the records section ends before records_count records");
            goto done;
        }
        cursor.end = section_end;
        if (read_varint(&cursor, 5, &length) < 0 || length <= 0 || length > section_end - cursor.position) {
            result = fail(index, "invalid length prefix");
            goto done;
        }
        cursor.end = cursor.position + (Py_ssize_t)length;
        cursor.position += 1; /* attributes: unused in v2 */
        if (cursor.position > cursor.end || read_varint(&cursor, 10, &timestamp_delta) < 0
            || read_varint(&cursor, 5, &offset_delta) < 0) {
            result = fail(index, "truncated before its offset delta");
            goto done;
        }
        if (offset_delta != index) {
            PyErr_Format(PyExc_ValueError, "record %zd: offset delta %lld, expected %zd (relative offsets must be consecutive)",
                         index, (long long)offset_delta, index);
            goto done;
        }
        if (index == 0 || timestamp_delta < min_delta)
            min_delta = timestamp_delta;
        if (index == 0 || timestamp_delta > max_delta)
            max_delta = timestamp_delta;
        if (skip_bytes(&cursor, 1, &size) < 0) {
            result = fail(index, "invalid key length");
            goto done;
        }
        if (size == -1 && keyless != NULL) {
            PyObject *number = PyLong_FromSsize_t(index);
            if (number == NULL || PyList_Append(keyless, number) < 0) {
                Py_XDECREF(number);
                goto done;
            }
            Py_DECREF(number);
        }
        if (skip_bytes(&cursor, 1, &size) < 0) {
            result = fail(index, "invalid value length");
            goto done;
        }
        if (read_varint(&cursor, 5, &header_count) < 0 || header_count < 0) {
            result = fail(index, "invalid header count");
            goto done;
        }
        for (int64_t h = 0; h < header_count; h++) {
            if (skip_bytes(&cursor, 0, &size) < 0 || skip_bytes(&cursor, 1, &size) < 0) {
                result = fail(index, "invalid header");
                goto done;
            }
        }
        if (cursor.position != cursor.end) {
            result = fail(index, "its fields do not fill its length");
            goto done;
        }
    }
    if (cursor.end != section_end || (records_count == 0 && section_end != 0)) {
        PyErr_Format(PyExc_ValueError, "%zd bytes after the last of %zd records (records_count too small)",
                     section_end - cursor.end, records_count);
        goto done;
    }
    result = Py_BuildValue("LLO", (long long)min_delta, (long long)max_delta, keyless ? keyless : Py_None);
done:
    Py_XDECREF(keyless);
    PyBuffer_Release(&view);
    return result;
}

/* A bytearray grown by `extra` bytes: *area points at the new bytes. 0 on success, -1 with an exception. */
static int grow(PyObject *column, Py_ssize_t extra, char **area) {
    Py_ssize_t used = PyByteArray_GET_SIZE(column);
    if (PyByteArray_Resize(column, used + extra) < 0)
        return -1;
    *area = PyByteArray_AS_STRING(column) + used;
    return 0;
}

enum { COLUMN_OFFSETS, COLUMN_TIMESTAMPS, COLUMN_KEY_ENDS, COLUMN_KEY_DATA, COLUMN_KEY_VALID, COLUMN_VALUE_ENDS,
       COLUMN_VALUE_DATA, COLUMN_VALUE_VALID, COLUMN_COUNT };
#define RECORD_BODY_BYTES_MIN 6 /* attributes, timestamp_delta, offset_delta, key_length, value_length, headers_count */

/* A key or value: its length varint (-1 null; no more than fits before the record's end), then its bytes,
 * appended to data with the running end offset (Arrow's int32 offsets) and a validity byte. */
static int take_bytes(Cursor *cursor, char *data, int64_t *data_used, int32_t *end, char *valid) {
    int64_t length;
    if (read_varint(cursor, 5, &length) < 0 || length < -1 || length > cursor->end - cursor->position)
        return -1;
    *valid = length >= 0;
    if (length > 0) {
        if (*data_used + length > INT32_MAX)
            return -2;
        memcpy(data + *data_used, cursor->data + cursor->position, (size_t)length);
        cursor->position += (Py_ssize_t)length;
        *data_used += length;
    }
    *end = (int32_t)*data_used;
    return 0;
}

/* decode_columns(section, records_count, base_offset, base_timestamp, last_offset_delta, start_offset,
 *                end_offset, log_append_timestamp, columns) -> records kept
 * The records of one (decompressed) v2 records section with offsets in [start_offset, end_offset), appended
 * to `columns`, a tuple of 8 bytearrays: offsets (int64), timestamps (int64 microseconds: the record's, or
 * log_append_timestamp in ms when it is not None), key ends (int32, Arrow's offsets after their leading 0),
 * key bytes, key validity (one byte a record), value ends, value bytes, value validity. Headers are skipped
 * (one byte at least must remain for their count). Checks: each length fits its record, int32 fields fit 32 bits, offset deltas increase up to last_offset_delta, the records fill the
 * section exactly; ValueError naming the first problem otherwise (the columns are left as they were),
 * OverflowError when a binary column would pass 2 GiB. */
static PyObject *decode_columns(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t records_count;
    long long base_offset, base_timestamp, last_offset_delta, start_offset, end_offset;
    PyObject *log_append, *columns;
    if (!PyArg_ParseTuple(args, "y*nLLLLLOO!", &view, &records_count, &base_offset, &base_timestamp,
                          &last_offset_delta, &start_offset, &end_offset, &log_append, &PyTuple_Type, &columns))
        return NULL;
    PyObject *column[COLUMN_COUNT];
    Py_ssize_t used[COLUMN_COUNT];
    PyObject *result = NULL;
    int grown = 0;
    if (PyTuple_GET_SIZE(columns) != COLUMN_COUNT) {
        PyErr_Format(PyExc_TypeError, "columns must be a tuple of %d bytearrays", COLUMN_COUNT);
        goto done;
    }
    for (int i = 0; i < COLUMN_COUNT; i++) {
        column[i] = PyTuple_GET_ITEM(columns, i);
        if (!PyByteArray_Check(column[i])) {
            PyErr_Format(PyExc_TypeError, "columns[%d] is not a bytearray", i);
            goto done;
        }
        used[i] = PyByteArray_GET_SIZE(column[i]);
    }
    int64_t override_ms = 0;
    int overridden = log_append != Py_None;
    if (overridden && (override_ms = PyLong_AsLongLong(log_append)) == -1 && PyErr_Occurred())
        goto done;
    if (records_count < 0 || records_count > view.len) {
        PyErr_Format(PyExc_ValueError, "%zd records cannot fit in %zd bytes", records_count, view.len);
        goto done;
    }
    /* Room for every record and every byte first (the data can be no longer than the section), trimmed after. */
    char *area[COLUMN_COUNT];
    const Py_ssize_t per_record[COLUMN_COUNT] = {8, 8, 4, 0, 1, 4, 0, 1};
    for (int i = 0; i < COLUMN_COUNT; i++) {
        Py_ssize_t extra = per_record[i] ? per_record[i] * records_count : view.len;
        if (grow(column[i], extra, &area[i]) < 0)
            goto undo;
        grown = i + 1;
    }
    int64_t *offsets = (int64_t *)area[COLUMN_OFFSETS], *timestamps = (int64_t *)area[COLUMN_TIMESTAMPS];
    int32_t *key_ends = (int32_t *)area[COLUMN_KEY_ENDS], *value_ends = (int32_t *)area[COLUMN_VALUE_ENDS];
    char *key_valid = area[COLUMN_KEY_VALID], *value_valid = area[COLUMN_VALUE_VALID];
    /* ends continue from the column's last end (the leading 0 is the builder's) */
    int64_t key_used = used[COLUMN_KEY_DATA], value_used = used[COLUMN_VALUE_DATA];
    Cursor cursor = {view.buf, 0, view.len};
    Py_ssize_t kept = 0;
    int64_t previous_delta = -1;
    for (Py_ssize_t index = 0; index < records_count; index++) {
        int64_t length, timestamp_delta, offset_delta;
        Py_ssize_t at = cursor.position;
        cursor.end = view.len;
        if (read_varint(&cursor, 5, &length) < 0 || length < RECORD_BODY_BYTES_MIN
            || length > cursor.end - cursor.position) {
            PyErr_Format(PyExc_ValueError, "record %zd: invalid length prefix at byte %zd", index, at);
            goto undo;
        }
        Py_ssize_t record_end = cursor.position + (Py_ssize_t)length;
        cursor.end = record_end;
        cursor.position += 1; /* attributes: unused in v2 */
        if (read_varint(&cursor, 10, &timestamp_delta) < 0 || read_varint(&cursor, 5, &offset_delta) < 0
            || offset_delta <= previous_delta || offset_delta > last_offset_delta || offset_delta > INT32_MAX) {
            PyErr_Format(PyExc_ValueError, "record %zd: invalid timestamp or offset delta (offset deltas must "
                         "increase, up to the batch's last offset delta %lld)", index, last_offset_delta);
            goto undo;
        }
        previous_delta = offset_delta;
        int64_t offset = base_offset + offset_delta;
        if (offset >= start_offset && offset < end_offset) {
            int taken = take_bytes(&cursor, area[COLUMN_KEY_DATA] - used[COLUMN_KEY_DATA], &key_used,
                                   &key_ends[kept], &key_valid[kept]);
            if (taken == 0)
                taken = take_bytes(&cursor, area[COLUMN_VALUE_DATA] - used[COLUMN_VALUE_DATA], &value_used,
                                   &value_ends[kept], &value_valid[kept]);
            if (taken == -2) {
                PyErr_SetString(PyExc_OverflowError, "a binary column would pass 2 GiB (Arrow's int32 offsets)");
                goto undo;
            }
            if (taken < 0 || cursor.position >= record_end) {
                PyErr_Format(PyExc_ValueError, "record %zd: invalid key or value length, or no headers count",
                             index);
                goto undo;
            }
            offsets[kept] = offset;
            /* microseconds, wrapping like Arrow's unchecked multiply for a hostile timestamp */
            timestamps[kept] = (int64_t)((uint64_t)(overridden ? override_ms : base_timestamp + timestamp_delta)
                                         * 1000u);
            kept++;
        }
        cursor.position = record_end;
    }
    if (cursor.position != view.len) {
        PyErr_Format(PyExc_ValueError, "records end at byte %zd, the section at %zd", cursor.position, view.len);
        goto undo;
    }
    const Py_ssize_t final[COLUMN_COUNT] = {
        used[0] + 8 * kept, used[1] + 8 * kept, used[2] + 4 * kept, (Py_ssize_t)key_used, used[4] + kept,
        used[5] + 4 * kept, (Py_ssize_t)value_used, used[7] + kept};
    for (int i = 0; i < COLUMN_COUNT; i++)
        if (PyByteArray_Resize(column[i], final[i]) < 0)
            goto undo;
    result = PyLong_FromSsize_t(kept);
    goto done;
undo:
    for (int i = 0; i < grown; i++) {
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        PyByteArray_Resize(column[i], used[i]); /* shrinking does not fail */
        PyErr_Restore(type, value, traceback);
    }
done:
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(section, records_count, want_keyless) -> (min_timestamp_delta, max_timestamp_delta, keyless)"},
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(section, records_count, base_offset, base_timestamp, last_offset_delta, start_offset, "
     "end_offset, log_append_timestamp, columns) -> records kept"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "partitions._recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }
