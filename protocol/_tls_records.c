/* The TLS layer's record path in C: decrypt what the client sent and hand it to the
 * connection, encrypt what the connection writes and send it, without an interpreter frame.
 *
 * `protocol.tls.TlsLayer` derives from `RecordLayer`. The handshake, the certificates, the
 * close and every failure stay in Python; once the handshake is done the layer binds its
 * `ssl.SSLObject` and memory BIOs (`_bind_records`), and from then on each `data_received`
 * is one BIO write and one `SSL_read` per record, and each `write` one `SSL_write` and one BIO
 * read, called here directly. Until then, or where binding is refused, the three methods call
 * the layer's Python versions (`_data_received_python`, `_read_records_python`,
 * `_write_python`), which do the same through the `ssl` module.
 *
 * OpenSSL is called through the `_ssl` module's own library (looked up in it with `dlsym`, so
 * that it is the very library, and version, that made the objects). The `SSL *` and `BIO *`
 * are read from the `_ssl` objects, whose C layout CPython keeps private; binding checks them
 * against each other first (the `SSLObject`'s context pointer is the context object Python
 * reports, its `SSL`'s context is that context's `SSL_CTX`, and its read and write BIOs are
 * the two memory BIOs given), and refuses otherwise: the layer then keeps its Python path.
 *
 *   bind_library(path_of__ssl, openssl_version_number, SSLError, SSLEOFError,
 *                SSLObject_type, MemoryBIO_type, SSLContext_type) -> bool
 *   class RecordLayer:  _app, _raw, _closing, _app_reading_paused;
 *                       _bind_records(sslobj, incoming, outgoing) -> bool;
 *                       data_received(data); _read_records(); write(data); _records_bound;
 *                       release_record_buffers() -> bool; keeping_record_buffers
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

#include <dlfcn.h>
#include <limits.h>
#include <time.h>

/* OpenSSL's values (ssl.h, bio.h, err.h, sslerr.h of OpenSSL 3), stable in its ABI. */
#define OSSL_ERROR_NONE 0
#define OSSL_ERROR_SSL 1
#define OSSL_ERROR_WANT_READ 2
#define OSSL_ERROR_SYSCALL 5
#define OSSL_ERROR_ZERO_RETURN 6
#define OSSL_R_UNEXPECTED_EOF_WHILE_READING 294
#define OSSL_ERR_SYSTEM_FLAG ((unsigned long)INT_MAX + 1)
#define OSSL_ERR_REASON_MASK 0x7FFFFFUL
#define OSSL_CTRL_MODE 33
#define OSSL_CTRL_CLEAR_MODE 78
#define OSSL_MODE_RELEASE_BUFFERS 0x10L

/* CPython sets SSL_MODE_RELEASE_BUFFERS on every context: a connection frees its read buffer
 * after each record and its write buffer after each write, and allocates both (about 17 KB
 * each) again for the next one. A busy connection keeps them instead, as a Kafka broker's TLS
 * connections keep theirs: one whose data came BUSY_STREAK times in a row, each within
 * BUSY_GAP_MS of the time before (a request is one TCP read here, most often one record). Data
 * after a longer gap hands them back once read; so does
 * `release_record_buffers()` (the server's idle sweep). A client that authenticates and then
 * heartbeats every few seconds never keeps them. */
#define BUSY_GAP_MS 50
#define BUSY_STREAK 16

/* A TLS record carries at most 16 KiB of data (RFC 8446 5.1). */
#define RECORD_SIZE (16 * 1024)

typedef struct ssl_st SSL;
typedef struct bio_st BIO;
typedef struct ssl_ctx_st SSL_CTX;

static int (*ssl_read)(SSL *, void *, int);
static int (*ssl_write)(SSL *, const void *, int);
static int (*ssl_get_error)(const SSL *, int);
static BIO *(*ssl_get_rbio)(const SSL *);
static BIO *(*ssl_get_wbio)(const SSL *);
static SSL_CTX *(*ssl_get_ssl_ctx)(const SSL *);
static long (*ssl_ctrl)(SSL *, int, long, void *);
static int (*ssl_free_buffers)(SSL *);
static int (*bio_write)(BIO *, const void *, int);
static int (*bio_read)(BIO *, void *, int);
static size_t (*bio_ctrl_pending)(BIO *);
static void (*err_clear_error)(void);
static unsigned long (*err_peek_last_error)(void);
static const char *(*err_reason_error_string)(unsigned long);

static int library_bound = 0;
static PyObject *ssl_error_type, *ssl_eof_error_type;
static PyTypeObject *sslobject_type, *memorybio_type, *sslcontext_type;

/* CPython's `_ssl` objects, as far as they are read here (Modules/_ssl.c). */
typedef struct {
    PyObject_HEAD
    SSL_CTX *ctx;
} CPythonSslContext;

typedef struct {
    PyObject_HEAD
    PyObject *socket;
    SSL *ssl;
    PyObject *ctx;
} CPythonSslObject;

typedef struct {
    PyObject_HEAD
    BIO *bio;
} CPythonMemoryBio;

static PyObject *str_data_received, *str_protocol_error, *str_end_of_stream, *str_write,
    *str_data_received_python, *str_read_records_python, *str_write_python,
    *str_context;

typedef struct {
    PyObject_HEAD
    PyObject *app;  /* the connection's protocol, once the handshake is done */
    PyObject *raw;  /* the TCP transport */
    char closing;
    char reading_paused;
    /* Set by _bind_records: the objects are held so that the pointers stay valid. */
    PyObject *sslobj, *incoming, *outgoing;
    SSL *ssl;
    BIO *in_bio, *out_bio;
    long long last_record_ms;  /* when data last came, on the coarse monotonic clock */
    unsigned int streak;       /* records in a row, each within BUSY_GAP_MS of the one before */
    char keeping_buffers;      /* SSL_MODE_RELEASE_BUFFERS cleared on this connection */
} RecordLayer;

static long long coarse_now_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void keep_buffers(RecordLayer *self, char keep) {
    ssl_ctrl(self->ssl, keep ? OSSL_CTRL_CLEAR_MODE : OSSL_CTRL_MODE, OSSL_MODE_RELEASE_BUFFERS,
             NULL);
    self->keeping_buffers = keep;
}

/* Whether this connection keeps its record buffers, from the pace of its data. */
static void pace(RecordLayer *self) {
    long long now = coarse_now_ms();
    self->streak = now - self->last_record_ms <= BUSY_GAP_MS ? self->streak + 1 : 0;
    self->last_record_ms = now;
    char keep = self->streak >= BUSY_STREAK;
    if (keep != self->keeping_buffers)
        keep_buffers(self, keep);
}

/* The exception the ssl module would raise for this failed call (only its type and message
 * are used by the layer). */
static PyObject *failure(RecordLayer *self, int result) {
    int code = ssl_get_error(self->ssl, result);
    unsigned long error = err_peek_last_error();
    if (code == OSSL_ERROR_SSL && error != 0) {
        unsigned long reason = (error & OSSL_ERR_SYSTEM_FLAG) ? 0 : (error & OSSL_ERR_REASON_MASK);
        if (reason == OSSL_R_UNEXPECTED_EOF_WHILE_READING)
            return PyObject_CallFunction(ssl_eof_error_type, "is", 8,
                                         "EOF occurred in violation of protocol");
        const char *text = err_reason_error_string(error);
        return PyObject_CallFunction(ssl_error_type, "is", 1, text ? text : "TLS failure");
    }
    if (code == OSSL_ERROR_SYSCALL)  /* a memory BIO fails only at its end */
        return PyObject_CallFunction(ssl_eof_error_type, "is", 8,
                                     "EOF occurred in violation of protocol");
    return PyObject_CallFunction(ssl_error_type, "is", code, "TLS failure");
}

/* Hands a failure to the layer's `_protocol_error`. */
static int report_failure(RecordLayer *self, int result) {
    PyObject *exc = failure(self, result);
    err_clear_error();
    if (exc == NULL)
        return -1;
    PyObject *done = PyObject_CallMethodOneArg((PyObject *)self, str_protocol_error, exc);
    Py_DECREF(exc);
    if (done == NULL)
        return -1;
    Py_DECREF(done);
    return 0;
}

static PyObject *call_own(RecordLayer *self, PyObject *name) {
    return PyObject_CallMethodNoArgs((PyObject *)self, name);
}

/* Sends what TLS wrote to the output BIO (the sealed records) with one transport write. */
static PyObject *send_sealed(RecordLayer *self) {
    size_t pending = bio_ctrl_pending(self->out_bio);
    if (pending == 0)
        Py_RETURN_NONE;
    if (pending > INT_MAX)
        pending = INT_MAX;
    PyObject *sealed = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)pending);
    if (sealed == NULL)
        return NULL;
    int count = bio_read(self->out_bio, PyBytes_AS_STRING(sealed), (int)pending);
    if (count <= 0) {
        err_clear_error();
        Py_DECREF(sealed);
        Py_RETURN_NONE;
    }
    if ((size_t)count < pending && _PyBytes_Resize(&sealed, count) < 0)
        return NULL;
    PyObject *raw = self->raw;
    if (raw == NULL || raw == Py_None) {
        Py_DECREF(sealed);
        Py_RETURN_NONE;
    }
    Py_INCREF(raw);
    PyObject *done = PyObject_CallMethodOneArg(raw, str_write, sealed);
    Py_DECREF(raw);
    Py_DECREF(sealed);
    return done;
}

/* Reads the records in hand and hands each to the connection, as the Python layer does. */
static PyObject *read_records(RecordLayer *self) {
    char buffer[RECORD_SIZE];
    while (!self->reading_paused && !self->closing && self->app != NULL && self->app != Py_None) {
        err_clear_error();
        int count = ssl_read(self->ssl, buffer, RECORD_SIZE);
        if (count <= 0) {
            int code = ssl_get_error(self->ssl, count);
            if (code == OSSL_ERROR_WANT_READ) {
                err_clear_error();
                break;  /* the rest of a record is still to come */
            }
            if (code == OSSL_ERROR_ZERO_RETURN) {  /* the client's close_notify */
                err_clear_error();
                return call_own(self, str_end_of_stream);
            }
            if (report_failure(self, count) < 0)
                return NULL;
            Py_RETURN_NONE;
        }
        PyObject *data = PyBytes_FromStringAndSize(buffer, count);
        if (data == NULL)
            return NULL;
        PyObject *app = self->app;
        Py_INCREF(app);
        PyObject *done = PyObject_CallMethodOneArg(app, str_data_received, data);
        Py_DECREF(app);
        Py_DECREF(data);
        if (done == NULL)
            return NULL;
        Py_DECREF(done);
        if (self->ssl == NULL || bio_ctrl_pending(self->in_bio) == 0)
            break;  /* all read, without the failing read that would say so */
    }
    if (self->ssl == NULL)
        Py_RETURN_NONE;
    return send_sealed(self);  /* what TLS answers by itself (a key update) */
}

typedef int (*ChunkWriter)(RecordLayer *, const char *, int);

static int to_input_bio(RecordLayer *self, const char *bytes, int count) {
    return bio_write(self->in_bio, bytes, count);
}

static int to_ssl(RecordLayer *self, const char *bytes, int count) {
    err_clear_error();
    return ssl_write(self->ssl, bytes, count);
}

/* Hands all of `data` to `writer`, a chunk at a time (each call takes an int's worth at most).
 * Returns 1 once all went, 0 with the failed call's result in `*failed`, -1 with an exception
 * set when `data` has no buffer. */
static int write_all(RecordLayer *self, PyObject *data, ChunkWriter writer, int *failed) {
    Py_buffer view;
    if (PyObject_GetBuffer(data, &view, PyBUF_SIMPLE) < 0)
        return -1;
    const char *bytes = view.buf;
    Py_ssize_t left = view.len;
    int outcome = 1;
    while (left > 0) {
        int written = writer(self, bytes, left > INT_MAX / 2 ? INT_MAX / 2 : (int)left);
        if (written <= 0) {
            *failed = written;
            outcome = 0;
            break;
        }
        bytes += written;
        left -= written;
    }
    PyBuffer_Release(&view);
    return outcome;
}

static PyObject *RecordLayer_data_received(RecordLayer *self, PyObject *data) {
    if (self->ssl == NULL)
        return PyObject_CallMethodOneArg((PyObject *)self, str_data_received_python, data);
    int failed = 0;
    int outcome = write_all(self, data, to_input_bio, &failed);
    if (outcome < 0)
        return NULL;
    if (outcome == 0) {  /* a memory BIO refuses only when memory runs out */
        err_clear_error();
        return PyErr_NoMemory();
    }
    pace(self);
    return read_records(self);
}

static PyObject *RecordLayer_read_records(RecordLayer *self, PyObject *Py_UNUSED(ignored)) {
    if (self->ssl == NULL)
        return call_own(self, str_read_records_python);
    return read_records(self);
}

static PyObject *RecordLayer_write(RecordLayer *self, PyObject *data) {
    if (self->closing)
        Py_RETURN_NONE;
    if (self->ssl == NULL)
        return PyObject_CallMethodOneArg((PyObject *)self, str_write_python, data);
    int failed = 0;
    int outcome = write_all(self, data, to_ssl, &failed);
    if (outcome < 0)
        return NULL;
    if (outcome == 0) {
        if (report_failure(self, failed) < 0)
            return NULL;
        Py_RETURN_NONE;
    }
    return send_sealed(self);
}

static PyObject *RecordLayer_release_record_buffers(RecordLayer *self,
                                                    PyObject *Py_UNUSED(ignored)) {
    if (self->ssl == NULL || !self->keeping_buffers)
        Py_RETURN_FALSE;
    keep_buffers(self, 0);
    self->streak = 0;
    /* Refused (0) while a record is half read or a write half sent: then the mode frees them
     * once it is done. */
    return PyBool_FromLong(ssl_free_buffers(self->ssl));
}

static PyObject *RecordLayer_keeping_record_buffers(RecordLayer *self,
                                                    void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->keeping_buffers);
}

static void unbind(RecordLayer *self) {
    self->ssl = NULL;
    self->in_bio = self->out_bio = NULL;
    self->keeping_buffers = 0;
    self->streak = 0;
    Py_CLEAR(self->sslobj);
    Py_CLEAR(self->incoming);
    Py_CLEAR(self->outgoing);
}

static PyObject *RecordLayer_bind_records(RecordLayer *self, PyObject *const *args,
                                          Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "_bind_records(sslobj, incoming, outgoing)");
        return NULL;
    }
    PyObject *sslobj = args[0], *incoming = args[1], *outgoing = args[2];
    if (!library_bound || Py_TYPE(sslobj) != sslobject_type || Py_TYPE(incoming) != memorybio_type
        || Py_TYPE(outgoing) != memorybio_type)
        Py_RETURN_FALSE;
    /* The object's context pointer must be the context Python reports for it before its SSL
     * pointer, next to it, is used at all. */
    PyObject *context = PyObject_GetAttr(sslobj, str_context);
    if (context == NULL)
        return NULL;
    int layout_agrees = PyObject_TypeCheck(context, sslcontext_type)
                        && ((CPythonSslObject *)sslobj)->ctx == context;
    Py_DECREF(context);
    if (!layout_agrees)
        Py_RETURN_FALSE;
    SSL *ssl = ((CPythonSslObject *)sslobj)->ssl;
    BIO *in_bio = ((CPythonMemoryBio *)incoming)->bio;
    BIO *out_bio = ((CPythonMemoryBio *)outgoing)->bio;
    if (ssl == NULL || in_bio == NULL || out_bio == NULL
        || ssl_get_ssl_ctx(ssl) != ((CPythonSslContext *)context)->ctx
        || ssl_get_rbio(ssl) != in_bio || ssl_get_wbio(ssl) != out_bio)
        Py_RETURN_FALSE;
    unbind(self);
    Py_INCREF(sslobj);
    Py_INCREF(incoming);
    Py_INCREF(outgoing);
    self->sslobj = sslobj;
    self->incoming = incoming;
    self->outgoing = outgoing;
    self->ssl = ssl;
    self->in_bio = in_bio;
    self->out_bio = out_bio;
    self->last_record_ms = coarse_now_ms();
    Py_RETURN_TRUE;
}

static PyObject *RecordLayer_records_bound(RecordLayer *self, void *Py_UNUSED(closure)) {
    return PyBool_FromLong(self->ssl != NULL);
}

static int RecordLayer_traverse(RecordLayer *self, visitproc visit, void *arg) {
    Py_VISIT(self->app);
    Py_VISIT(self->raw);
    Py_VISIT(self->sslobj);
    Py_VISIT(self->incoming);
    Py_VISIT(self->outgoing);
    return 0;
}

static int RecordLayer_clear(RecordLayer *self) {
    Py_CLEAR(self->app);
    Py_CLEAR(self->raw);
    unbind(self);
    return 0;
}

/* A static base type: the subclass's deallocator and traverser deal with its own type. */
static void RecordLayer_dealloc(RecordLayer *self) {
    PyObject_GC_UnTrack(self);
    RecordLayer_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef RecordLayer_methods[] = {
    {"data_received", (PyCFunction)RecordLayer_data_received, METH_O,
     "The TCP transport's data: decrypted and handed to the connection."},
    {"_read_records", (PyCFunction)RecordLayer_read_records, METH_NOARGS,
     "Read the records in hand and hand them to the connection."},
    {"write", (PyCFunction)RecordLayer_write, METH_O,
     "The connection's data: encrypted and written to the TCP transport."},
    {"_bind_records", (PyCFunction)(void (*)(void))RecordLayer_bind_records, METH_FASTCALL,
     "Take the record path in C for this SSLObject and its two memory BIOs; False if refused."},
    {"release_record_buffers", (PyCFunction)RecordLayer_release_record_buffers, METH_NOARGS,
     "Hand back the record buffers a busy connection kept; True if they were freed now."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef RecordLayer_members[] = {
    {"_app", T_OBJECT, offsetof(RecordLayer, app), 0, NULL},
    {"_raw", T_OBJECT, offsetof(RecordLayer, raw), 0, NULL},
    {"_closing", T_BOOL, offsetof(RecordLayer, closing), 0, NULL},
    {"_app_reading_paused", T_BOOL, offsetof(RecordLayer, reading_paused), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef RecordLayer_getset[] = {
    {"_records_bound", (getter)RecordLayer_records_bound, NULL,
     "Whether the records go through C.", NULL},
    {"keeping_record_buffers", (getter)RecordLayer_keeping_record_buffers, NULL,
     "Whether this busy connection keeps its record buffers between records.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RecordLayerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "protocol._tls_records.RecordLayer",
    .tp_doc = "The record path of a TLS layer (see protocol.tls.TlsLayer).",
    .tp_basicsize = sizeof(RecordLayer),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = PyType_GenericNew,
    .tp_traverse = (traverseproc)RecordLayer_traverse,
    .tp_clear = (inquiry)RecordLayer_clear,
    .tp_dealloc = (destructor)RecordLayer_dealloc,
    .tp_methods = RecordLayer_methods,
    .tp_members = RecordLayer_members,
    .tp_getset = RecordLayer_getset,
};

#define LOOK_UP(handle, target, name)                         \
    do {                                                      \
        *(void **)(&target) = dlsym(handle, name);            \
        if (target == NULL)                                   \
            return 0;                                         \
    } while (0)

static int look_up_library(void *handle) {
    LOOK_UP(handle, ssl_read, "SSL_read");
    LOOK_UP(handle, ssl_write, "SSL_write");
    LOOK_UP(handle, ssl_get_error, "SSL_get_error");
    LOOK_UP(handle, ssl_get_rbio, "SSL_get_rbio");
    LOOK_UP(handle, ssl_get_wbio, "SSL_get_wbio");
    LOOK_UP(handle, ssl_get_ssl_ctx, "SSL_get_SSL_CTX");
    LOOK_UP(handle, ssl_ctrl, "SSL_ctrl");
    LOOK_UP(handle, ssl_free_buffers, "SSL_free_buffers");
    LOOK_UP(handle, bio_write, "BIO_write");
    LOOK_UP(handle, bio_read, "BIO_read");
    LOOK_UP(handle, bio_ctrl_pending, "BIO_ctrl_pending");
    LOOK_UP(handle, err_clear_error, "ERR_clear_error");
    LOOK_UP(handle, err_peek_last_error, "ERR_peek_last_error");
    LOOK_UP(handle, err_reason_error_string, "ERR_reason_error_string");
    return 1;
}

static PyObject *bind_library(PyObject *Py_UNUSED(module), PyObject *args) {
    const char *path;
    unsigned long expected_version;
    PyObject *error, *eof_error, *object_type, *bio_type, *context_type;
    if (!PyArg_ParseTuple(args, "skOOO!O!O!:bind_library", &path, &expected_version, &error,
                          &eof_error, &PyType_Type, &object_type, &PyType_Type, &bio_type,
                          &PyType_Type, &context_type))
        return NULL;
    if (library_bound)
        Py_RETURN_TRUE;
    /* Only the library the `_ssl` module has already loaded: never a second OpenSSL. */
    void *handle = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (handle == NULL)
        Py_RETURN_FALSE;
    unsigned long (*version)(void);
    *(void **)(&version) = dlsym(handle, "OpenSSL_version_num");
    if (version == NULL || version() != expected_version || expected_version < 0x30000000UL
        || !look_up_library(handle))
        Py_RETURN_FALSE;
    Py_INCREF(error);
    Py_INCREF(eof_error);
    Py_INCREF(object_type);
    Py_INCREF(bio_type);
    Py_INCREF(context_type);
    ssl_error_type = error;
    ssl_eof_error_type = eof_error;
    sslobject_type = (PyTypeObject *)object_type;
    memorybio_type = (PyTypeObject *)bio_type;
    sslcontext_type = (PyTypeObject *)context_type;
    library_bound = 1;
    Py_RETURN_TRUE;
}

static PyMethodDef module_methods[] = {
    {"bind_library", bind_library, METH_VARARGS,
     "Look up OpenSSL in the _ssl module's library; False where it cannot be used."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "protocol._tls_records",
    "The TLS layer's record path in C (see protocol.tls).", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

#define INTERN(target, text)                              \
    do {                                                  \
        if ((target = PyUnicode_InternFromString(text)) == NULL) \
            return NULL;                                  \
    } while (0)

PyMODINIT_FUNC PyInit__tls_records(void) {
    INTERN(str_data_received, "data_received");
    INTERN(str_protocol_error, "_protocol_error");
    INTERN(str_end_of_stream, "_end_of_stream");
    INTERN(str_write, "write");
    INTERN(str_data_received_python, "_data_received_python");
    INTERN(str_read_records_python, "_read_records_python");
    INTERN(str_write_python, "_write_python");
    INTERN(str_context, "context");
    if (PyType_Ready(&RecordLayerType) < 0)
        return NULL;
    PyObject *created = PyModule_Create(&module);
    if (created == NULL)
        return NULL;
    Py_INCREF(&RecordLayerType);
    if (PyModule_AddObject(created, "RecordLayer", (PyObject *)&RecordLayerType) < 0) {
        Py_DECREF(&RecordLayerType);
        Py_DECREF(created);
        return NULL;
    }
    return created;
}
