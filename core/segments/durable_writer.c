/* Tier-1 writes made durable by native threads, which never take the GIL.

A Python worker thread needs the GIL to pick up a job and again when its pwritev+fsync
returns; while the event loop runs Python it waits for the switch interval each time. Under
load those waits were most of a group commit's round trip (2,000 small Produce requests/s on
2 cores: 0.33-0.41 ms per write job, of which the write and fdatasync took 0.08 ms).

`submit(fd, buffers, position, wake_fd)` takes a buffer view of each buffer (holding the
objects alive), queues the write and returns a `Write`. A pool thread writes the buffers at
`position` and makes them durable (pwritev2 with RWF_DSYNC, else pwritev then fsync), then
bumps the eventfd `wake_fd` (a duplicate of it, so the caller may close its own at once).
`Write.done` says whether it finished; `Write.result()` releases the views and returns the
seconds the write took, or raises the OSError it met. The caller must not drop a Write
before it is done: its views are then leaked rather than released under the thread.
*/
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef IOV_MAX
#define IOV_MAX 1024
#endif

#define MAX_THREADS 32 /* writes to different files at once; more wait their turn */

typedef struct Job {
    struct Job *next;
    int fd;
    int wake_fd; /* the job's own duplicate, closed by the thread once bumped */
    off_t position;
    Py_ssize_t count;
    struct iovec *iov;
    int error;          /* errno, 0 on success; set before `done` */
    int64_t elapsed_ns; /* set before `done` */
    int done;           /* written last, with release order */
} Job;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wanted = PTHREAD_COND_INITIALIZER;
static Job *head, *tail;
static int queued, idle, threads;
static int dsync_writes = 1; /* cleared once the kernel refuses RWF_DSYNC */

/* Write iov (modified in place as it advances) at pos and make it durable; an errno or 0. */
static int write_durably(int fd, struct iovec *iov, Py_ssize_t count, off_t pos)
{
    Py_ssize_t first = 0;
#ifdef RWF_DSYNC
    if (__atomic_load_n(&dsync_writes, __ATOMIC_RELAXED) && count <= IOV_MAX) {
        size_t total = 0;
        for (Py_ssize_t i = 0; i < count; i++)
            total += iov[i].iov_len;
        ssize_t n;
        do
            n = pwritev2(fd, iov, (int)count, pos, RWF_DSYNC);
        while (n < 0 && errno == EINTR);
        if (n >= 0 && (size_t)n == total)
            return 0;
        if (n < 0) {
            if (errno != EOPNOTSUPP && errno != EINVAL && errno != ENOSYS)
                return errno;
            __atomic_store_n(&dsync_writes, 0, __ATOMIC_RELAXED);
            n = 0;
        }
        /* a short write: the rest below, without the flag, then an fsync */
        size_t skip = (size_t)n;
        pos += n;
        while (first < count && skip >= iov[first].iov_len)
            skip -= iov[first++].iov_len;
        if (first < count) {
            iov[first].iov_base = (char *)iov[first].iov_base + skip;
            iov[first].iov_len -= skip;
        }
    }
#endif
    while (first < count) {
        int chunk = count - first > IOV_MAX ? IOV_MAX : (int)(count - first);
        ssize_t n = pwritev(fd, iov + first, chunk, pos);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (n == 0)
            return EIO;
        pos += n;
        size_t skip = (size_t)n;
        while (first < count && skip >= iov[first].iov_len)
            skip -= iov[first++].iov_len;
        if (first < count) {
            iov[first].iov_base = (char *)iov[first].iov_base + skip;
            iov[first].iov_len -= skip;
        }
    }
    if (fsync(fd) < 0)
        return errno;
    return 0;
}

static void run_job(Job *job)
{
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int error = write_durably(job->fd, job->iov, job->count, job->position);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int wake = job->wake_fd; /* the job may be freed as soon as `done` is seen */
    job->error = error;
    job->elapsed_ns = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    __atomic_store_n(&job->done, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    while (write(wake, &one, sizeof one) < 0 && errno == EINTR) {
    }
    close(wake);
}

static void *worker(void *unused)
{
    (void)unused;
    pthread_mutex_lock(&lock);
    for (;;) {
        while (head == NULL) {
            idle++;
            pthread_cond_wait(&wanted, &lock);
            idle--;
        }
        Job *job = head;
        head = job->next;
        if (head == NULL)
            tail = NULL;
        queued--;
        pthread_mutex_unlock(&lock);
        run_job(job);
        pthread_mutex_lock(&lock);
    }
    return NULL;
}

/* With the lock held: queue the job, and start a thread when none is free for it. */
static int enqueue(Job *job)
{
    job->next = NULL;
    if (tail != NULL)
        tail->next = job;
    else
        head = job;
    tail = job;
    queued++;
    if (queued > idle && threads < MAX_THREADS) {
        pthread_t thread;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 * 1024);
        int failed = pthread_create(&thread, &attr, worker, NULL);
        pthread_attr_destroy(&attr);
        if (failed) {
            if (threads == 0) { /* nobody would ever run it */
                head = tail = NULL;
                queued = 0;
                return failed;
            }
        } else {
            threads++;
        }
    }
    pthread_cond_signal(&wanted);
    return 0;
}

/* A child of fork() has none of the threads: it starts afresh. */
static void after_fork_in_child(void)
{
    pthread_mutex_init(&lock, NULL);
    pthread_cond_init(&wanted, NULL);
    head = tail = NULL;
    queued = idle = threads = 0;
}

typedef struct {
    PyObject_HEAD Job *job;
    Py_buffer *views;
    Py_ssize_t nviews;
} WriteObject;

static void release_views(WriteObject *self)
{
    for (Py_ssize_t i = 0; i < self->nviews; i++)
        PyBuffer_Release(&self->views[i]);
    PyMem_Free(self->views);
    self->views = NULL;
    self->nviews = 0;
}

static int write_done(WriteObject *self)
{
    return self->job == NULL || __atomic_load_n(&self->job->done, __ATOMIC_ACQUIRE);
}

static void Write_dealloc(WriteObject *self)
{
    if (write_done(self)) {
        release_views(self);
        if (self->job != NULL) {
            PyMem_RawFree(self->job->iov);
            PyMem_RawFree(self->job);
        }
    } /* else: still in a thread's hands, which may read the buffers: leaked */
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Write_get_done(WriteObject *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(write_done(self));
}

static PyObject *Write_result(WriteObject *self, PyObject *unused)
{
    (void)unused;
    if (self->job == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "the write's result was taken already");
        return NULL;
    }
    if (!write_done(self)) {
        PyErr_SetString(PyExc_RuntimeError, "the write is not done");
        return NULL;
    }
    Job *job = self->job;
    self->job = NULL;
    release_views(self);
    int error = job->error;
    double seconds = (double)job->elapsed_ns / 1e9;
    PyMem_RawFree(job->iov);
    PyMem_RawFree(job);
    if (error) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return PyFloat_FromDouble(seconds);
}

static PyGetSetDef Write_getset[] = {
    {"done", (getter)Write_get_done, NULL, "Whether the write finished (or failed).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef Write_methods[] = {
    {"result", (PyCFunction)Write_result, METH_NOARGS,
     "Once done: the seconds the write took, or the OSError it met (once only)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject WriteType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "core.segments._durable_writer.Write",
    .tp_basicsize = sizeof(WriteObject),
    .tp_dealloc = (destructor)Write_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A durable write queued for a native thread.",
    .tp_methods = Write_methods,
    .tp_getset = Write_getset,
};

static PyObject *submit(PyObject *module, PyObject *args)
{
    (void)module;
    int fd, wake_fd;
    long long position;
    PyObject *buffers;
    if (!PyArg_ParseTuple(args, "iOLi:submit", &fd, &buffers, &position, &wake_fd))
        return NULL;
    if (position < 0) {
        PyErr_SetString(PyExc_ValueError, "negative position");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(buffers, "buffers must be a sequence");
    if (seq == NULL)
        return NULL;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(seq);
    WriteObject *self = PyObject_New(WriteObject, &WriteType);
    if (self == NULL) {
        Py_DECREF(seq);
        return NULL;
    }
    self->job = NULL;
    self->nviews = 0;
    self->views = PyMem_New(Py_buffer, count > 0 ? count : 1);
    Job *job = PyMem_RawCalloc(1, sizeof(Job));
    struct iovec *iov = PyMem_RawMalloc(sizeof(struct iovec) * (count > 0 ? count : 1));
    if (self->views == NULL || job == NULL || iov == NULL) {
        PyMem_RawFree(job);
        PyMem_RawFree(iov);
        Py_DECREF(seq);
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(seq, i), &self->views[i], PyBUF_SIMPLE)) {
            PyMem_RawFree(job);
            PyMem_RawFree(iov);
            Py_DECREF(seq);
            Py_DECREF(self);
            return NULL;
        }
        self->nviews = i + 1;
        iov[i].iov_base = self->views[i].buf;
        iov[i].iov_len = (size_t)self->views[i].len;
    }
    Py_DECREF(seq);
    job->fd = fd;
    job->position = (off_t)position;
    job->count = count;
    job->iov = iov;
    job->wake_fd = dup(wake_fd);
    if (job->wake_fd < 0) {
        PyMem_RawFree(job);
        PyMem_RawFree(iov);
        Py_DECREF(self);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    pthread_mutex_lock(&lock);
    int failed = enqueue(job);
    pthread_mutex_unlock(&lock);
    if (failed) {
        close(job->wake_fd);
        PyMem_RawFree(job);
        PyMem_RawFree(iov);
        Py_DECREF(self);
        errno = failed;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->job = job;
    return (PyObject *)self;
}

static PyObject *thread_count(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    pthread_mutex_lock(&lock);
    int n = threads;
    pthread_mutex_unlock(&lock);
    return PyLong_FromLong(n);
}

static PyMethodDef module_methods[] = {
    {"submit", submit, METH_VARARGS,
     "submit(fd, buffers, position, wake_fd) -> Write: write the buffers at position and "
     "make them durable in a native thread, then bump the eventfd wake_fd."},
    {"thread_count", thread_count, METH_NOARGS, "How many native writer threads exist."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "core.segments._durable_writer",
    .m_doc = "Tier-1 writes made durable by native threads that never take the GIL.",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__durable_writer(void)
{
    if (PyType_Ready(&WriteType) < 0)
        return NULL;
    static int registered;
    if (!registered) {
        pthread_atfork(NULL, NULL, after_fork_in_child);
        registered = 1;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL)
        return NULL;
    Py_INCREF(&WriteType);
    if (PyModule_AddObject(module, "Write", (PyObject *)&WriteType) < 0) {
        Py_DECREF(&WriteType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
