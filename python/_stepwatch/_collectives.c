/*
 * _collectives.c — Collectives: the per-call path of stepwatch.collectives in C.
 *
 * stepwatch/collectives.py wraps every torch.distributed collective with a small Python
 * function (so torch.compile still sees a Python function it can trace through) that hands
 * the call to Collectives.call(): call the original, time it as collective:<op>, add its
 * bytes to comm:<op>:bytes and, for a call done when it returns (CPU tensors), one sample
 * of its size class's algbw and busbw. Async work is kept by address until its wait(),
 * which is timed as collective:<op>:wait and gives the bandwidth from the issue to the
 * wait's end. Python keeps what is rare: a process group not seen before (its size and the
 * note, note_group), the byte rules' tables and the patching.
 *
 * A call makes no Python object of its own: the pending works are a C table keyed by the
 * work's address, the groups' sizes a small cache by the group's address, and Work.wait is
 * CollectiveWait, a C callable that binds like a method, so a wait runs no Python frame.
 * stepwatch's own cross-rank rounds are made quiet by their code (collectives_quiet, from
 * stepwatch/distributed.py): nothing per call tells them apart.
 *
 * Nothing here raises into the user's collective: a figure that cannot be read is dropped.
 */
#include "_stepwatch.h"

#include <string.h>
#include <structmember.h>

#define MAX_OPS 32         /* ops with actions and counters (C10D_OPS and FUNCTIONAL_OPS) */
#define MAX_SITES 64       /* wrapped functions: an op name may have two (c10d, functional) */
#define CLASSES 65         /* size classes: the bit length of the bytes, 0..64 */
#define MAX_PENDING 4096   /* async works not waited for yet (get_future, dropped works) */
#define PENDING_SLOTS 8192 /* the pending table's slots: a power of 2, twice MAX_PENDING */
#define GROUP_SLOTS 64     /* the groups' size cache: a power of 2 */
#define MAX_NAME 64        /* an op's name in UTF-8, for its counters' names */

/* nccl-tests' bus bandwidth kinds (collectives.py's _ALL_REDUCE, _GATHER, _ONE, _NONE). */
enum { KIND_NONE, KIND_ALL_REDUCE, KIND_GATHER, KIND_ONE };

/* Where a wrapped function's tensors are, and how its bytes and group are read. */
enum { BYTES_ARG, BYTES_NONE, BYTES_P2P_LIST };

/* A timed call is running on this thread: a collective it calls is its own (the deprecated
 * names calling the new ones, batch_isend_irecv's isends), and quiet() sets it too. One
 * flag per thread, as Python's threading.local was. */
static _Thread_local int inside;

typedef struct {
    PyObject *name;       /* the op's name, "all_reduce" */
    char cname[MAX_NAME]; /* the same in UTF-8: its counters are named without Python */
    sw_id action;         /* collective:<op> */
    sw_id wait;           /* collective:<op>:wait */
    sw_id bytes;          /* comm:<op>:bytes */
    int kind;             /* its bus bandwidth factor */
    uint64_t total;       /* bytes moved so far */
    sw_id algbw[CLASSES]; /* per size class, SW_ID_NONE until the class is seen */
    sw_id busbw[CLASSES];
} coll_op;

typedef struct {
    int op;               /* index into ops */
    int bytes_rule;       /* BYTES_* */
    Py_ssize_t bytes_pos; /* the argument with the tensors, by position ... */
    PyObject *bytes_kw;   /* ... or keyword (NULL: none) */
    Py_ssize_t group_pos; /* the group by position (-1: keyword only) */
    int functional;       /* a functional collective: its result is the pending tensor */
    int gathers;          /* a functional all-gather: its output is n times its input */
} coll_site;

/* An async call's work (or functional result tensor) waiting for its wait(). The key is the
 * object's address, as id() is: never dereferenced, so no reference is held. */
typedef struct {
    const void *key; /* NULL: a free slot */
    int op;
    long n; /* the group's size */
    uint64_t bytes;
    uint64_t issued; /* the call's start */
} coll_pending;

/* A group's size by its address (and whether a functional collective named it): a cache in
 * front of note_group, which remembers every group and notes the new ones. */
typedef struct {
    const void *key; /* NULL: empty */
    int functional;
    long n;
} coll_group;

typedef struct {
    PyObject_HEAD ProfilerObject *owner; /* strong reference; owner->p NULL once closed */
    PyObject *note_group;  /* note_group(group, functional) -> n, for a group not cached */
    PyObject *tensor_type; /* torch.Tensor */
    PyObject *s_nbytes, *s_is_cpu, *s_elem, *s_tensor, *s_group; /* names */
    int stopped; /* uninstall(): call through, record nothing */
    int nops, nsites;
    int npending;
    coll_pending *pending; /* PENDING_SLOTS of them, open addressing (linear probing) */
    coll_group groups[GROUP_SLOTS];
    coll_op ops[MAX_OPS];
    coll_site sites[MAX_SITES];
} CollectivesObject;

/* CollectiveWait: Work.wait in the class, calling its original through Collectives. */
typedef struct {
    PyObject_HEAD CollectivesObject *calls;
    PyObject *original; /* Work.wait as the class had it */
    PyObject *func;     /* what is called: pybind's function inside original's instancemethod */
    vectorcallfunc vectorcall;
} WaitObject;

static double bus_factor(int kind, long n) {
    if (n <= 1)
        return 1.0;
    if (kind == KIND_ALL_REDUCE)
        return 2.0 * (double)(n - 1) / (double)n;
    if (kind == KIND_GATHER)
        return (double)(n - 1) / (double)n;
    return 1.0;
}

/* The counter comm:<op>:<class>:<what>, named as collectives.size_class names the class. */
static sw_id class_counter(sw_profiler *p, const coll_op *op, int k, const char *what) {
    static const char *const units[] = {"GiB", "MiB", "KiB"};
    static const int shifts[] = {30, 20, 10};
    int bit = k > 0 ? k - 1 : 0;
    char cls[32];
    snprintf(cls, sizeof cls, "%lluB", 1ULL << bit);
    for (int u = 0; u < 3; u++)
        if (bit >= shifts[u]) {
            snprintf(cls, sizeof cls, "%llu%s", 1ULL << (bit - shifts[u]), units[u]);
            break;
        }
    char name[160];
    snprintf(name, sizeof name, "comm:%s:%s:%s", op->cname, cls, what);
    return sw_counter_id(p, name);
}

/* One bandwidth sample of op: nbytes moved in ns on a group of n ranks (bytes/ns = GB/s). */
static void bandwidth(sw_profiler *p, coll_op *op, uint64_t nbytes, long n, uint64_t ns) {
    if (nbytes == 0 || ns == 0)
        return;
    int k = 64 - __builtin_clzll(nbytes); /* bit length */
    if (op->algbw[k] == SW_ID_NONE) {
        op->algbw[k] = class_counter(p, op, k, "algbw");
        op->busbw[k] = class_counter(p, op, k, "busbw");
    }
    double algbw = (double)nbytes / (double)ns;
    if (op->algbw[k] != SW_ID_NONE)
        sw_counter(p, op->algbw[k], algbw);
    if (op->busbw[k] != SW_ID_NONE)
        sw_counter(p, op->busbw[k], algbw * bus_factor(op->kind, n));
}

/* ---- the pending works: a table keyed by address -------------------------------------------- */

static size_t slot_of(const void *key, size_t slots) {
    uint64_t h = (uint64_t)(uintptr_t)key * 0x9E3779B97F4A7C15ULL; /* Fibonacci hashing */
    return (size_t)(h >> 40) & (slots - 1);
}

/* Keep (or replace) entry->key's entry; a table of works never waited for is emptied when
 * full, as the dict it replaces was. */
static void pending_put(CollectivesObject *self, const coll_pending *entry) {
    if (self->npending >= MAX_PENDING) {
        memset(self->pending, 0, PENDING_SLOTS * sizeof *self->pending);
        self->npending = 0;
    }
    size_t mask = PENDING_SLOTS - 1, i = slot_of(entry->key, PENDING_SLOTS);
    while (self->pending[i].key != NULL && self->pending[i].key != entry->key)
        i = (i + 1) & mask;
    if (self->pending[i].key == NULL)
        self->npending++;
    self->pending[i] = *entry;
}

/* Take key's entry out into *out: 1, or 0 when key is not pending. The entries after it in
 * its run move back into the hole (linear probing's deletion: no tombstones pile up). */
static int pending_take(CollectivesObject *self, const void *key, coll_pending *out) {
    size_t mask = PENDING_SLOTS - 1, i = slot_of(key, PENDING_SLOTS);
    while (self->pending[i].key != key) {
        if (self->pending[i].key == NULL)
            return 0;
        i = (i + 1) & mask;
    }
    *out = self->pending[i];
    self->npending--;
    for (size_t j = (i + 1) & mask; self->pending[j].key != NULL; j = (j + 1) & mask) {
        size_t home = slot_of(self->pending[j].key, PENDING_SLOTS);
        if (((j - home) & mask) >= ((j - i) & mask)) { /* its home is not in (i, j]: move */
            self->pending[i] = self->pending[j];
            i = j;
        }
    }
    self->pending[i].key = NULL;
    return 1;
}

/* ---- reading a call's arguments ------------------------------------------------------------ */

/* The argument at pos (-1: none) or named kw (NULL: none) of a call (borrowed), or NULL. */
static PyObject *argument(PyObject *args, PyObject *kwargs, Py_ssize_t pos, PyObject *kw) {
    if (pos >= 0 && pos < PyTuple_GET_SIZE(args))
        return PyTuple_GET_ITEM(args, pos);
    if (kw && kwargs && PyDict_Check(kwargs)) {
        PyObject *v = PyDict_GetItemWithError(kwargs, kw);
        if (v == NULL)
            PyErr_Clear();
        return v;
    }
    return NULL;
}

/* The bytes of a tensor or a list/tuple of them (0 for anything else). */
static uint64_t nbytes_of(CollectivesObject *self, PyObject *x) {
    if (x == NULL)
        return 0;
    if (PyList_Check(x) || PyTuple_Check(x)) {
        uint64_t sum = 0;
        Py_ssize_t n = PySequence_Fast_GET_SIZE(x);
        for (Py_ssize_t i = 0; i < n; i++)
            sum += nbytes_of(self, PySequence_Fast_ITEMS(x)[i]);
        return sum;
    }
    if (!PyObject_TypeCheck(x, (PyTypeObject *)self->tensor_type))
        return 0;
    PyObject *v = PyObject_GetAttr(x, self->s_nbytes);
    uint64_t b = v ? PyLong_AsUnsignedLongLong(v) : 0;
    Py_XDECREF(v);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return b;
}

/* Whether x (a tensor or a list of them) is on the CPU: a call on it ends before it returns
 * (gloo), so its host time is the collective's; a CUDA one returns once queued. */
static int on_cpu(CollectivesObject *self, PyObject *x) {
    if (x && (PyList_Check(x) || PyTuple_Check(x)))
        x = PySequence_Fast_GET_SIZE(x) ? PySequence_Fast_ITEMS(x)[0] : NULL;
    if (x == NULL || !PyObject_TypeCheck(x, (PyTypeObject *)self->tensor_type))
        return 1;
    PyObject *v = PyObject_GetAttr(x, self->s_is_cpu);
    int cpu = v ? PyObject_IsTrue(v) : 1;
    Py_XDECREF(v);
    if (cpu < 0 || PyErr_Occurred()) {
        PyErr_Clear();
        cpu = 1;
    }
    return cpu;
}

/* n of a group: cached by address, asked of Python (note_group: it remembers every group
 * and notes a new one) when not cached; 1 when it cannot be told. */
static long group_size(CollectivesObject *self, PyObject *group, int functional) {
    coll_group *g = &self->groups[slot_of((char *)group + functional, GROUP_SLOTS)];
    if (g->key == group && g->functional == functional)
        return g->n;
    PyObject *got = PyObject_CallFunction(self->note_group, "Oi", group, functional);
    long size = got ? PyLong_AsLong(got) : -1;
    Py_XDECREF(got);
    if (size < 1 || PyErr_Occurred()) { /* asked again next time */
        PyErr_Clear();
        return 1;
    }
    *g = (coll_group){.key = group, .functional = functional, .n = size};
    return size;
}

/* ---- recording a call ---------------------------------------------------------------------- */

/* The bytes, whether on the CPU, and the group (new reference) of batch_isend_irecv's P2POps:
 * their tensors, the first one's group. */
static uint64_t p2p_list(CollectivesObject *self, PyObject *list, int *cpu, PyObject **group) {
    uint64_t nb = 0;
    if (list == NULL || !(PyList_Check(list) || PyTuple_Check(list)))
        return 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(list);
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PySequence_Fast_ITEMS(list)[i];
        PyObject *t = PyObject_GetAttr(item, self->s_tensor);
        if (t == NULL) {
            PyErr_Clear();
            continue;
        }
        nb += nbytes_of(self, t);
        if (i == 0) {
            *cpu = on_cpu(self, t);
            *group = PyObject_GetAttr(item, self->s_group);
            PyErr_Clear();
        }
        Py_DECREF(t);
    }
    return nb;
}

/* Keep an async call's work (or functional result tensor) for its wait's figures. */
static void keep_pending(CollectivesObject *self, const coll_site *s, PyObject *result, uint64_t nb,
                         long n, uint64_t t0) {
    if (PyList_Check(result)) { /* batch_isend_irecv: its last work ends the batch */
        Py_ssize_t len = PyList_GET_SIZE(result);
        if (len == 0)
            return;
        result = PyList_GET_ITEM(result, len - 1);
    }
    const void *key = result;
    if (s->functional) { /* an AsyncCollectiveTensor: wait_tensor gets its elem */
        PyObject *elem = PyObject_GetAttr(result, self->s_elem);
        if (elem == NULL)
            PyErr_Clear();
        else
            key = elem;
        Py_XDECREF(elem); /* only its address is kept: the key is never dereferenced */
    }
    coll_pending entry = {.key = key, .op = s->op, .n = n, .bytes = nb, .issued = t0};
    pending_put(self, &entry);
}

/* The figures of one timed call of site: its span, bytes, and bandwidth or pending wait. */
static void record_call(CollectivesObject *self, const coll_site *s, PyObject *args,
                        PyObject *kwargs, PyObject *result, uint64_t t0, uint64_t t1) {
    sw_profiler *p = self->owner->p;
    if (p == NULL)
        return;
    coll_op *op = &self->ops[s->op];
    int cpu = 1;
    uint64_t nb = 0;
    PyObject *group = NULL; /* new reference */
    if (s->bytes_rule == BYTES_P2P_LIST) {
        nb = p2p_list(self, argument(args, kwargs, 0, NULL), &cpu, &group);
    } else {
        if (s->bytes_rule == BYTES_ARG) {
            PyObject *tensors = argument(args, kwargs, s->bytes_pos, s->bytes_kw);
            nb = nbytes_of(self, tensors);
            cpu = nb == 0 || on_cpu(self, tensors); /* no bytes: nothing below reads it */
        }
        group = Py_XNewRef(argument(args, kwargs, s->group_pos, self->s_group));
    }
    long n = group_size(self, group ? group : Py_None, s->functional);
    Py_XDECREF(group);
    if (s->gathers)
        nb *= (uint64_t)n;
    sw_record(p, op->action, t0, t1);
    if (nb) {
        op->total += nb;
        if (op->bytes == SW_ID_NONE) {
            char name[128];
            snprintf(name, sizeof name, "comm:%s:bytes", op->cname);
            op->bytes = sw_counter_id(p, name);
        }
        if (op->bytes != SW_ID_NONE)
            sw_counter(p, op->bytes, (double)op->total);
    }
    if (!cpu) /* queued on a GPU stream: the host saw the launch, not the transfer */
        return;
    PyObject *pending = result;
    if (s->functional)
        pending = PyList_Check(result) ||
                          PyObject_TypeCheck(result, (PyTypeObject *)self->tensor_type)
                      ? result
                      : Py_None;
    if (pending == Py_None) /* done when the call returned: timed to its end */
        bandwidth(p, op, nb, n, t1 - t0);
    else if (nb)
        keep_pending(self, s, pending, nb, n, t0);
}

/* original(*args, **kwargs); kwargs may be NULL or empty. */
static PyObject *call_through(PyObject *original, PyObject *args, PyObject *kwargs) {
    if (kwargs && PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) == 0)
        kwargs = NULL;
    return PyObject_Call(original, args, kwargs);
}

/* call(site, original, args, kwargs): original(*args, **kwargs), timed and counted. */
static PyObject *Collectives_call(CollectivesObject *self, PyObject *const *argv,
                                  Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "call(site, original, args: tuple, kwargs)");
        return NULL;
    }
    PyObject *original = argv[1], *args = argv[2], *kwargs = argv[3];
    long site = PyLong_AsLong(argv[0]);
    if (site < 0 || site >= self->nsites || self->stopped || inside) {
        PyErr_Clear();
        return call_through(original, args, kwargs);
    }
    int before = inside;
    inside = 1; /* the collectives it calls are its own: not recorded */
    uint64_t t0 = sw_now_ns();
    PyObject *result = call_through(original, args, kwargs);
    uint64_t t1 = sw_now_ns();
    inside = before;
    if (result == NULL)
        return NULL;
    record_call(self, &self->sites[site], args, kwargs, result, t0, t1);
    PyErr_Clear(); /* never fail the user's collective for a figure */
    return result;
}

/* original(args..., **kwargs): by kwnames (vectorcall) or the dict kwargs (NULL: none). */
static PyObject *call_stack(PyObject *original, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames, PyObject *kwargs) {
    if (kwnames != NULL || kwargs == NULL)
        return PyObject_Vectorcall(original, args, nargsf, kwnames);
    return PyObject_VectorcallDict(original, args, PyVectorcall_NARGS(nargsf), kwargs);
}

/* original(waited, rest...): timed as collective:<op>:wait, with the bandwidth from the
 * call's issue to the wait's end, when a timed call left waited (args[0]) pending. */
static PyObject *timed_wait(CollectivesObject *self, PyObject *original, PyObject *const *args,
                            size_t nargsf, PyObject *kwnames, PyObject *kwargs) {
    coll_pending entry;
    if (self->stopped || inside || self->npending == 0 || PyVectorcall_NARGS(nargsf) < 1 ||
        !pending_take(self, args[0], &entry))
        return call_stack(original, args, nargsf, kwnames, kwargs);
    uint64_t t0 = sw_now_ns();
    PyObject *result = call_stack(original, args, nargsf, kwnames, kwargs);
    uint64_t t1 = sw_now_ns();
    sw_profiler *p = self->owner->p; /* the core's calls leave Python's error state alone */
    if (p && entry.op >= 0 && entry.op < self->nops) {
        sw_record(p, self->ops[entry.op].wait, t0, t1);
        if (t1 > entry.issued)
            bandwidth(p, &self->ops[entry.op], entry.bytes, entry.n, t1 - entry.issued);
    }
    return result;
}

#define WAIT_STACK 8 /* wait()'s arguments passed on from the C stack, up to this many */

/* wait(original, obj, args, kwargs): original(obj, *args, **kwargs), the work's (or the
 * functional result's) wait timed when a timed call left it pending. */
static PyObject *Collectives_wait(CollectivesObject *self, PyObject *const *argv,
                                  Py_ssize_t nargs) {
    if (nargs != 4 || !PyTuple_Check(argv[2])) {
        PyErr_SetString(PyExc_TypeError, "wait(original, obj, args: tuple, kwargs)");
        return NULL;
    }
    PyObject *original = argv[0], *rest = argv[2], *kwargs = argv[3];
    if (kwargs == Py_None || (PyDict_Check(kwargs) && PyDict_GET_SIZE(kwargs) == 0))
        kwargs = NULL;
    else if (!PyDict_Check(kwargs)) {
        PyErr_SetString(PyExc_TypeError, "wait: kwargs must be a dict");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(rest);
    if (n + 1 > WAIT_STACK) { /* never in torch: wait(timeout) at most */
        PyObject *args = PyTuple_New(n + 1);
        if (args == NULL)
            return NULL;
        PyTuple_SET_ITEM(args, 0, Py_NewRef(argv[1]));
        for (Py_ssize_t i = 0; i < n; i++)
            PyTuple_SET_ITEM(args, i + 1, Py_NewRef(PyTuple_GET_ITEM(rest, i)));
        PyObject *r = timed_wait(self, original, &PyTuple_GET_ITEM(args, 0), (size_t)(n + 1), NULL,
                                 kwargs);
        Py_DECREF(args);
        return r;
    }
    PyObject *stack[WAIT_STACK];
    stack[0] = argv[1];
    for (Py_ssize_t i = 0; i < n; i++)
        stack[i + 1] = PyTuple_GET_ITEM(rest, i);
    return timed_wait(self, original, stack, (size_t)(n + 1), NULL, kwargs);
}

static PyObject *Wait_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                 PyObject *kwnames) {
    WaitObject *w = (WaitObject *)callable;
    return timed_wait(w->calls, w->func, args, nargsf, kwnames, NULL);
}

/* waiter(original) -> a CollectiveWait: Work.wait's replacement, original(work, ...) timed
 * as wait() is, with no Python frame between. */
static PyObject *Collectives_waiter(CollectivesObject *self, PyObject *original) {
    if (!PyCallable_Check(original)) {
        PyErr_SetString(PyExc_TypeError, "waiter(original): original must be callable");
        return NULL;
    }
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    WaitObject *w = PyObject_GC_New(WaitObject, st->collective_wait_type);
    if (w == NULL)
        return NULL;
    w->calls = (CollectivesObject *)Py_NewRef(self);
    w->original = Py_NewRef(original);
    /* pybind11 puts a method in the class as an instancemethod: calling the function inside
     * is what binding it and calling the bound method does, without the bound method */
    w->func = Py_NewRef(PyInstanceMethod_Check(original) ? PyInstanceMethod_GET_FUNCTION(original)
                                                         : original);
    w->vectorcall = Wait_vectorcall;
    PyObject_GC_Track(w);
    /* in the class as pybind11 has its methods, an instancemethod: what torch.compile knows
     * (it calls a CollectiveWait there without its work) */
    PyObject *method = PyInstanceMethod_New((PyObject *)w);
    Py_DECREF(w);
    return method;
}

/* ---- the ops and sites Python declares ----------------------------------------------------- */

/* op(name, kind) -> its index: collective:<name> and collective:<name>:wait, made once. */
static PyObject *Collectives_op(CollectivesObject *self, PyObject *const *argv, Py_ssize_t nargs) {
    int kind;
    if (nargs != 2 || !PyUnicode_Check(argv[0]) || (kind = (int)PyLong_AsLong(argv[1])) < 0 ||
        kind > KIND_ONE) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "op(name: str, kind: int 0..3)");
        return NULL;
    }
    for (int i = 0; i < self->nops; i++)
        if (PyUnicode_Compare(self->ops[i].name, argv[0]) == 0)
            return PyLong_FromLong(i);
    if (self->nops >= MAX_OPS)
        return PyErr_Format(PyExc_ValueError, "op: more than %d ops", MAX_OPS);
    Py_ssize_t len;
    const char *utf8 = PyUnicode_AsUTF8AndSize(argv[0], &len);
    if (utf8 == NULL)
        return NULL;
    if (len >= MAX_NAME)
        return PyErr_Format(PyExc_ValueError, "op: a name of %d bytes or more", MAX_NAME);
    PyObject *names[2] = {PyUnicode_FromFormat("collective:%U", argv[0]),
                          PyUnicode_FromFormat("collective:%U:wait", argv[0])};
    PyObject *made[2] = {NULL, NULL};
    for (int i = 0; i < 2; i++)
        made[i] = names[i] ? PyObject_CallMethod((PyObject *)self->owner, "action", "O", names[i])
                           : NULL;
    Py_XDECREF(names[0]);
    Py_XDECREF(names[1]);
    PyObject *action = made[0], *wait = made[1];
    if (action == NULL || wait == NULL) {
        Py_XDECREF(action);
        Py_XDECREF(wait);
        return NULL;
    }
    coll_op *op = &self->ops[self->nops];
    memset(op, 0, sizeof *op);
    op->name = Py_NewRef(argv[0]);
    memcpy(op->cname, utf8, (size_t)len + 1);
    op->action = ((ActionObject *)action)->id;
    op->wait = ((ActionObject *)wait)->id;
    op->bytes = SW_ID_NONE;
    op->kind = kind;
    for (int k = 0; k < CLASSES; k++)
        op->algbw[k] = op->busbw[k] = SW_ID_NONE;
    Py_DECREF(action);
    Py_DECREF(wait);
    return PyLong_FromLong(self->nops++);
}

/* site(op, rule, bytes_pos, bytes_kw, group_pos, functional, gathers) -> its index. */
static PyObject *Collectives_site(CollectivesObject *self, PyObject *args) {
    coll_site s = {0};
    PyObject *kw;
    if (!PyArg_ParseTuple(args, "iinOnpp:site", &s.op, &s.bytes_rule, &s.bytes_pos, &kw,
                          &s.group_pos, &s.functional, &s.gathers))
        return NULL;
    if (s.op < 0 || s.op >= self->nops || s.bytes_rule < BYTES_ARG ||
        s.bytes_rule > BYTES_P2P_LIST || (kw != Py_None && !PyUnicode_Check(kw)))
        return PyErr_Format(PyExc_ValueError, "site: no such op or rule");
    if (self->nsites >= MAX_SITES)
        return PyErr_Format(PyExc_ValueError, "site: more than %d sites", MAX_SITES);
    s.bytes_kw = kw == Py_None ? NULL : Py_NewRef(kw);
    self->sites[self->nsites] = s;
    return PyLong_FromLong(self->nsites++);
}

static PyObject *Collectives_stop(CollectivesObject *self, PyObject *unused) {
    self->stopped = 1;
    Py_RETURN_NONE;
}

/* ---- the types ----------------------------------------------------------------------------- */

static PyObject *Collectives_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *keywords[] = {"profiler", "note_group", "tensor_type", NULL};
    PyObject *profiler, *note_group, *tensor_type;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Collectives", keywords, &profiler,
                                     &note_group, &tensor_type))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type) || !PyCallable_Check(note_group) ||
        !PyType_Check(tensor_type)) {
        PyErr_SetString(PyExc_TypeError, "Collectives(profiler: stepwatch.Profiler, "
                                         "note_group: callable, tensor_type: type)");
        return NULL;
    }
    CollectivesObject *self = (CollectivesObject *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->owner = (ProfilerObject *)Py_NewRef(profiler);
    self->note_group = Py_NewRef(note_group);
    self->tensor_type = Py_NewRef(tensor_type);
    self->pending = PyMem_Calloc(PENDING_SLOTS, sizeof *self->pending);
    self->s_nbytes = PyUnicode_InternFromString("nbytes");
    self->s_is_cpu = PyUnicode_InternFromString("is_cpu");
    self->s_elem = PyUnicode_InternFromString("elem");
    self->s_tensor = PyUnicode_InternFromString("tensor");
    self->s_group = PyUnicode_InternFromString("group");
    if (self->pending == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    if (!self->s_nbytes || !self->s_is_cpu || !self->s_elem || !self->s_tensor || !self->s_group) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int Collectives_traverse(CollectivesObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->note_group);
    Py_VISIT(self->tensor_type);
    return 0;
}

/* note_group is the one reference that can close a cycle (a bound method of the Python
 * recorder that holds this object). */
static int Collectives_clear(CollectivesObject *self) {
    Py_CLEAR(self->note_group);
    return 0;
}

static void Collectives_dealloc(CollectivesObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Collectives_clear(self);
    Py_CLEAR(self->owner);
    Py_CLEAR(self->tensor_type);
    PyMem_Free(self->pending);
    Py_CLEAR(self->s_nbytes);
    Py_CLEAR(self->s_is_cpu);
    Py_CLEAR(self->s_elem);
    Py_CLEAR(self->s_tensor);
    Py_CLEAR(self->s_group);
    for (int i = 0; i < self->nops; i++)
        Py_CLEAR(self->ops[i].name);
    for (int i = 0; i < self->nsites; i++)
        Py_CLEAR(self->sites[i].bytes_kw);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Collectives_methods[] = {
    {"op", (PyCFunction)(void (*)(void))Collectives_op, METH_FASTCALL,
     "op($self, name, kind, /)\n--\n\n"
     "-> the index of op name (its actions made once); kind: its bus bandwidth factor."},
    {"site", (PyCFunction)Collectives_site, METH_VARARGS,
     "site($self, op, rule, bytes_pos, bytes_kw, group_pos, functional, gathers, /)\n--\n\n"
     "-> the index of a wrapped function: where its tensors and group are."},
    {"call", (PyCFunction)(void (*)(void))Collectives_call, METH_FASTCALL,
     "call($self, site, original, args, kwargs, /)\n--\n\n"
     "original(*args, **kwargs), timed as its op with its bytes and bandwidth."},
    {"wait", (PyCFunction)(void (*)(void))Collectives_wait, METH_FASTCALL,
     "wait($self, original, obj, args, kwargs, /)\n--\n\n"
     "original(obj, *args, **kwargs), timed when a timed call left obj pending."},
    {"waiter", (PyCFunction)Collectives_waiter, METH_O,
     "waiter($self, original, /)\n--\n\n"
     "-> a C callable for a class (Work.wait) that binds like a method: original(work, ...), "
     "timed as wait() times it."},
    {"stop", (PyCFunction)Collectives_stop, METH_NOARGS,
     "stop($self, /)\n--\n\n"
     "From now on call through, recording nothing."},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef Collectives_members[] = {
    {"pending", T_INT, offsetof(CollectivesObject, npending), READONLY,
     "How many async calls' works (or tensors) are waiting for their wait()."},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Collectives_slots[] = {
    {Py_tp_doc, "Collectives(profiler, note_group, tensor_type)\n--\n\n"
                "stepwatch.collectives' per-call path in C; see "
                "python/_stepwatch/_collectives.c."},
    {Py_tp_new, Collectives_new},
    {Py_tp_methods, Collectives_methods},
    {Py_tp_members, Collectives_members},
    {Py_tp_traverse, Collectives_traverse},
    {Py_tp_clear, Collectives_clear},
    {Py_tp_dealloc, Collectives_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_collectives_spec = {
    .name = "stepwatch.Collectives",
    .basicsize = sizeof(CollectivesObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Collectives_slots,
};

static int Wait_traverse(WaitObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->calls);
    Py_VISIT(self->original);
    Py_VISIT(self->func);
    return 0;
}

static int Wait_clear(WaitObject *self) {
    Py_CLEAR(self->calls);
    Py_CLEAR(self->original);
    Py_CLEAR(self->func);
    return 0;
}

static void Wait_dealloc(WaitObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Wait_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyObject *Wait_repr(WaitObject *self) {
    return PyUnicode_FromFormat("<stepwatch collective wait of %R>",
                                self->original ? self->original : Py_None);
}

static PyMemberDef Wait_members[] = {
    {"__wrapped__", T_OBJECT, offsetof(WaitObject, original), READONLY, "The original wait."},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(WaitObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot Wait_slots[] = {
    {Py_tp_doc, "Work.wait under stepwatch.collectives (Collectives.waiter)."},
    {Py_tp_members, Wait_members},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, sw_py_bind_as_method}, /* in the class: work.wait gets the work */
    {Py_tp_repr, Wait_repr},
    {Py_tp_traverse, Wait_traverse},
    {Py_tp_clear, Wait_clear},
    {Py_tp_dealloc, Wait_dealloc},
    {0, NULL},
};

/* A method descriptor: `work.wait()` calls it with the work first, no bound method made. */
PyType_Spec sw_py_collective_wait_spec = {
    .name = "stepwatch.CollectiveWait",
    .basicsize = sizeof(WaitObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = Wait_slots,
};

/* collectives_quiet(on) -> whether it was on: while on, this thread's collectives are not
 * recorded (stepwatch.collectives.quiet: DDP's comm hook times its all-reduce itself). */
static PyObject *mod_collectives_quiet(PyObject *module, PyObject *on) {
    int flag = PyObject_IsTrue(on);
    if (flag < 0)
        return NULL;
    int before = inside;
    inside = flag;
    return PyBool_FromLong(before);
}

PyMethodDef sw_py_collectives_functions[] = {
    {"collectives_quiet", mod_collectives_quiet, METH_O,
     "collectives_quiet($module, on, /)\n--\n\n"
     "-> whether this thread's collectives were quiet; sets it to on."},
    {NULL, NULL, 0, NULL},
};
