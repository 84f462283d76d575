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
 * record_positions(section, records_count) -> the record start positions (see below), for spark/vectorized.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

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

/* record_positions(section, records_count) -> bytes: records_count + 1 native int64s, the position of each
 * record's length prefix and the section's end last (the Spark source's columnar decoder computes every
 * other field from these, vectorized). Each length must be >= 0 and fit in the section, and the records
 * must end exactly at the section's end; raises ValueError otherwise. */
static PyObject *record_positions(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t records_count;
    if (!PyArg_ParseTuple(args, "y*n", &view, &records_count))
        return NULL;
    if (records_count < 0 || records_count > view.len) {
        PyBuffer_Release(&view);
        PyErr_Format(PyExc_ValueError, "%zd records cannot fit in %zd bytes", records_count, view.len);
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (records_count + 1) * (Py_ssize_t)sizeof(int64_t));
    if (out == NULL) {
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *positions = (int64_t *)PyBytes_AS_STRING(out);
    Cursor cursor = {view.buf, 0, view.len};
    for (Py_ssize_t index = 0; index < records_count; index++) {
        int64_t length;
        positions[index] = cursor.position;
        if (read_varint(&cursor, 5, &length) < 0 || length < 0 || length > cursor.end - cursor.position) {
            PyErr_Format(PyExc_ValueError, "record %zd: invalid length prefix at byte %zd", index,
                         (Py_ssize_t)positions[index]);
            Py_DECREF(out);
            PyBuffer_Release(&view);
            return NULL;
        }
        cursor.position += (Py_ssize_t)length;
    }
    positions[records_count] = cursor.position;
    if (cursor.position != view.len) {
        PyErr_Format(PyExc_ValueError, "records end at byte %zd, the section at %zd", cursor.position, view.len);
        Py_DECREF(out);
        PyBuffer_Release(&view);
        return NULL;
    }
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(section, records_count, want_keyless) -> (min_timestamp_delta, max_timestamp_delta, keyless)"},
    {"record_positions", record_positions, METH_VARARGS,
     "record_positions(section, records_count) -> bytes of records_count + 1 int64 positions"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "partitions._recordscan", NULL, -1, methods};

PyMODINIT_FUNC PyInit__recordscan(void) { return PyModule_Create(&module); }
