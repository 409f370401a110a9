/* fsync threads that never take the interpreter lock.
 *
 * A Python thread running `os.fsync` takes the interpreter lock back after every system call
 * and to hand its result to the event loop; each time the event loop holds it, the two
 * threads trade it through futexes and context switches (about a dozen futex calls per
 * fsync). Each of these is a plain POSIX thread: it takes a job (a descriptor of its own, a
 * path and the (device, inode) the path should still name), fsyncs it, checks the path,
 * closes the descriptor, queues the outcome and adds one to an eventfd that the event loop
 * watches. The loop then collects the outcomes with `completed()`.
 *
 *   worker = FsyncWorker(threads)                    # threads share the queue
 *   token = worker.submit(fd, path, device, inode)   # fd is the worker's from now on
 *   worker.fileno()                                  # readable when outcomes wait
 *   worker.completed()                               # [(token, errno, path_still_names_it)]
 *   worker.close()                                   # finishes the queued jobs, then stops
 *
 * Each job runs on one of the threads: with several threads, jobs for different files (the
 * group log's partitions) are fsynced at once, and outcomes may arrive out of submission order.
 */
#define _GNU_SOURCE /* pthread_setname_np */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_THREADS 16

typedef struct Job {
    struct Job *next;
    long long token;
    int fd;
    char *path; /* NULL: no path to check */
    unsigned long long device;
    unsigned long long inode;
    int error;  /* errno of the fsync (or of the path's stat), 0 when it succeeded */
    int named;  /* the path still names the file (1 when no path was given) */
} Job;

typedef struct {
    PyObject_HEAD
    pthread_mutex_t lock;
    pthread_cond_t wake;
    pthread_t threads[MAX_THREADS];
    int thread_count; /* started and not yet joined */
    int stopping;
    int event_fd;
    long long next_token;
    Job *queued_head, *queued_tail;
    Job *done_head, *done_tail;
} FsyncWorker;

static void run_job(Job *job) {
    int rc;
    do {
        rc = fsync(job->fd);
    } while (rc != 0 && errno == EINTR);
    job->error = rc == 0 ? 0 : errno;
    job->named = 1;
    if (job->error == 0 && job->path != NULL) {
        struct stat st;
        if (stat(job->path, &st) != 0) {
            if (errno == ENOENT || errno == ENOTDIR) {
                job->named = 0;
            } else {
                job->error = errno;
            }
        } else {
            job->named = (unsigned long long)st.st_dev == job->device &&
                         (unsigned long long)st.st_ino == job->inode;
        }
    }
    close(job->fd);
    job->fd = -1;
}

/* Appends `job` to the list from `head` to `tail` (the caller holds the lock). */
static void append_job(Job **head, Job **tail, Job *job) {
    job->next = NULL;
    if (*tail != NULL) {
        (*tail)->next = job;
    } else {
        *head = job;
    }
    *tail = job;
}

static void *worker_main(void *arg) {
    FsyncWorker *self = (FsyncWorker *)arg;
    for (;;) {
        pthread_mutex_lock(&self->lock);
        while (self->queued_head == NULL && !self->stopping) {
            pthread_cond_wait(&self->wake, &self->lock);
        }
        Job *job = self->queued_head;
        if (job == NULL) { /* stopping, and nothing left to do */
            pthread_mutex_unlock(&self->lock);
            return NULL;
        }
        self->queued_head = job->next;
        if (self->queued_head == NULL) {
            self->queued_tail = NULL;
        }
        pthread_mutex_unlock(&self->lock);

        run_job(job);

        pthread_mutex_lock(&self->lock);
        append_job(&self->done_head, &self->done_tail, job);
        pthread_mutex_unlock(&self->lock);
        uint64_t one = 1;
        ssize_t written;
        do {
            written = write(self->event_fd, &one, sizeof one);
        } while (written < 0 && errno == EINTR);
    }
}

static void free_jobs(Job *job) {
    while (job != NULL) {
        Job *next = job->next;
        if (job->fd >= 0) {
            close(job->fd);
        }
        free(job->path);
        free(job);
        job = next;
    }
}

static void stop_threads(FsyncWorker *self);

static PyObject *worker_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {"threads", NULL};
    int threads = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|i:FsyncWorker", keywords, &threads)) {
        return NULL;
    }
    if (threads < 1 || threads > MAX_THREADS) {
        PyErr_Format(PyExc_ValueError, "threads must be 1 to %d", MAX_THREADS);
        return NULL;
    }
    FsyncWorker *self = (FsyncWorker *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->event_fd = -1;
    pthread_mutex_init(&self->lock, NULL);
    pthread_cond_init(&self->wake, NULL);
    self->event_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->event_fd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    /* The threads start with every signal blocked, as libuv's do: a signal for the process
     * (SIGTERM, SIGINT) is then always taken by the interpreter's threads. */
    sigset_t all, previous;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &previous);
    int rc = 0;
    for (int i = 0; i < threads && rc == 0; i++) {
        rc = pthread_create(&self->threads[i], NULL, worker_main, self);
        if (rc == 0) {
            self->thread_count++;
            /* What top -H and /proc show; set here, so that it is set on return. */
            pthread_setname_np(self->threads[i], "group-log-fsync");
        }
    }
    pthread_sigmask(SIG_SETMASK, &previous, NULL);
    if (rc != 0) {
        stop_threads(self);
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static void stop_threads(FsyncWorker *self) {
    if (self->thread_count == 0) {
        return;
    }
    pthread_mutex_lock(&self->lock);
    self->stopping = 1;
    pthread_cond_broadcast(&self->wake);
    pthread_mutex_unlock(&self->lock);
    int count = self->thread_count;
    Py_BEGIN_ALLOW_THREADS
    for (int i = 0; i < count; i++) {
        pthread_join(self->threads[i], NULL);
    }
    Py_END_ALLOW_THREADS
    self->thread_count = 0;
}

static void worker_dealloc(FsyncWorker *self) {
    stop_threads(self);
    free_jobs(self->queued_head);
    free_jobs(self->done_head);
    if (self->event_fd >= 0) {
        close(self->event_fd);
    }
    pthread_cond_destroy(&self->wake);
    pthread_mutex_destroy(&self->lock);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *worker_submit(FsyncWorker *self, PyObject *args) {
    int fd;
    PyObject *path;
    unsigned long long device, inode;
    if (!PyArg_ParseTuple(args, "iOKK:submit", &fd, &path, &device, &inode)) {
        return NULL;
    }
    if (self->thread_count == 0 || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "the fsync worker is closed");
        return NULL;
    }
    Job *job = calloc(1, sizeof *job);
    if (job == NULL) {
        return PyErr_NoMemory();
    }
    if (path != Py_None) {
        char *bytes;
        Py_ssize_t size;
        if (PyBytes_AsStringAndSize(path, &bytes, &size) < 0) {
            free(job);
            return NULL;
        }
        job->path = malloc((size_t)size + 1);
        if (job->path == NULL) {
            free(job);
            return PyErr_NoMemory();
        }
        memcpy(job->path, bytes, (size_t)size + 1);
    }
    job->fd = fd;
    job->device = device;
    job->inode = inode;
    pthread_mutex_lock(&self->lock);
    job->token = ++self->next_token;
    append_job(&self->queued_head, &self->queued_tail, job);
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->lock);
    return PyLong_FromLongLong(job->token);
}

static PyObject *worker_completed(FsyncWorker *self, PyObject *Py_UNUSED(ignored)) {
    uint64_t count;
    /* Nonblocking: EAGAIN when nothing was signalled since the last call. */
    while (read(self->event_fd, &count, sizeof count) < 0 && errno == EINTR) {
    }
    pthread_mutex_lock(&self->lock);
    Job *done = self->done_head;
    self->done_head = self->done_tail = NULL;
    pthread_mutex_unlock(&self->lock);
    PyObject *outcomes = PyList_New(0);
    if (outcomes == NULL) {
        free_jobs(done);
        return NULL;
    }
    for (Job *job = done; job != NULL; job = job->next) {
        PyObject *item = Py_BuildValue("(LiO)", job->token, job->error,
                                       job->named ? Py_True : Py_False);
        if (item == NULL || PyList_Append(outcomes, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(outcomes);
            free_jobs(done);
            return NULL;
        }
        Py_DECREF(item);
    }
    free_jobs(done);
    return outcomes;
}

static PyObject *worker_fileno(FsyncWorker *self, PyObject *Py_UNUSED(ignored)) {
    return PyLong_FromLong(self->event_fd);
}

static PyObject *worker_close(FsyncWorker *self, PyObject *Py_UNUSED(ignored)) {
    stop_threads(self);
    Py_RETURN_NONE;
}

static PyMethodDef worker_methods[] = {
    {"submit", (PyCFunction)worker_submit, METH_VARARGS,
     "submit(fd, path, device, inode) -> token: fsync fd (then close it) and check that path "
     "(bytes, or None for no check) still names (device, inode)."},
    {"completed", (PyCFunction)worker_completed, METH_NOARGS,
     "completed() -> [(token, errno, named)]: the outcomes since the last call, in order."},
    {"fileno", (PyCFunction)worker_fileno, METH_NOARGS,
     "fileno() -> the eventfd that is readable while outcomes wait."},
    {"close", (PyCFunction)worker_close, METH_NOARGS,
     "close(): run the jobs already submitted, then stop the threads."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject FsyncWorkerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "storage._fsync_worker.FsyncWorker",
    .tp_basicsize = sizeof(FsyncWorker),
    .tp_dealloc = (destructor)worker_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "FsyncWorker(threads=1): POSIX threads that fsync descriptors without the "
              "interpreter lock.",
    .tp_methods = worker_methods,
    .tp_new = worker_new,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "storage._fsync_worker",
    "fsync off the interpreter lock (see FsyncWorker).", -1, NULL,
};

PyMODINIT_FUNC PyInit__fsync_worker(void) {
    if (PyType_Ready(&FsyncWorkerType) < 0) {
        return NULL;
    }
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) {
        return NULL;
    }
    Py_INCREF(&FsyncWorkerType);
    if (PyModule_AddObject(m, "FsyncWorker", (PyObject *)&FsyncWorkerType) < 0) {
        Py_DECREF(&FsyncWorkerType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
