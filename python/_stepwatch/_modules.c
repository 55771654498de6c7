/*
 * _modules.c — per-module time and memory of a PyTorch model (Profiler(modules=True),
 * stepwatch/_modules.py installs it): the forward and backward of each nn.Module, self and
 * cumulative, and which module ran out of memory.
 *
 * Forward. ModulesHook("call") replaces nn.Module.__call__: one C call per module call. In a
 * step that is not sampled it only calls through. In a sampled one (every k-th step after the
 * warm-up, decided at the outermost module call; decide_sampling says which) it times the
 * call on a stack of running modules: a module's cumulative time is its call's, its self time
 * that minus its submodules' calls. The hooks' own work around a call (naming, node hooks,
 * the allocator) is taken off the modules it ran inside (timed_call). torch's
 * global module hooks were the other way in; any of them sends every module call of every
 * step down torch's slow hook path (about 3 us per call), and adding and removing them per
 * sampled step would make torch.compile's guards recompile.
 *
 * Backward, through the autograd graph, without changing it. After a sampled forward, the
 * nodes that made the module's output tensors (their grad_fn, taken then) get a pre-hook: it
 * fires when the engine is about to run that node, the module's backward begins. The nodes
 * of its inputs get one too: it fires when the gradient of an input is complete, after every
 * node of the module ran; the module's backward ends there at the latest. An input used
 * elsewhere too (a residual, q/k/v projections of one tensor) completes late, so a module
 * also ends when the backward of a module that is not one of its ancestors begins (the
 * engine runs one module's nodes, then the next one's). Modules still open when
 * torch.autograd.backward returns end then (the first layer: its input needs no gradient).
 * Why node pre-hooks rather than register_full_backward_hook: full backward hooks wrap the
 * module's inputs and outputs in an autograd Function, and an in-place op on them (ReLU
 * (inplace=True) after a Linear) then raises; node pre-hooks add nothing to the graph, and a
 * node taken at the forward's end stays the module's own even when the tensor is later
 * modified in place. Under no_grad there is no node: forward times only.
 *
 * Several modules may share a node (a model whose output is its last layer's): one NodeHook
 * per node holds them all, outermost begun first, inner ones ended first.
 *
 * GPU time. When the profiler times the device (Profiler(device_time=True)), each timed call
 * is also an interval of the device timing (sw_device_interval_begin/end: GPU events on the
 * step's stream from the phases' pool, src/device/device_intervals.c), nested as the calls
 * are; the sums come back at the next flush (the GPU reached them by then, or later: never
 * waited for) into the rows' device columns. The host times stay host times.
 *
 * Out of memory. When torch.OutOfMemoryError (or a RuntimeError saying "CUDA out of memory"
 * or CUBLAS_STATUS_ALLOC_FAILED) leaves a module's __call__ (in any step, sampled or not),
 * the innermost module it passes is named; in the backward, the innermost module running
 * (sampled steps only: other steps have no backward hooks). stepwatch/_oom.py (through
 * _oom.c) writes the stderr line and the run-file notes, oom_module, oom_phase and the
 * allocator's figures, and marks the exception named: the modules it leaves next, and the
 * traceback attribution that names it in runs without modules=, say nothing more. The
 * exception goes on unchanged (fetched and restored, traceback included; C adds no frame).
 *
 * Everything runs with the GIL held (the autograd engine takes it for Python hooks).
 */
#include "_stepwatch.h"

#include <stdlib.h>
#include <string.h>
#include <structmember.h>

#define MAX_DEPTH 256 /* nested modules timed; deeper calls are only called through */
#define MAX_NODE_INPUTS 8
/* Modules timed (a mixture of experts has tens of thousands: 128 experts x 3 layers x 60
 * blocks); the table the profiler keeps folds those past SW_MAX_MODULES rows into one
 * (sw_set_modules). Past this, a module is only called through: its time stays its
 * parent's self time. */
#define MAX_TIMED (16 * SW_MAX_MODULES)

/* How the outermost forward running is hooked (decide_sampling) */
enum { NOT_HOOKED, SAMPLED, WARMUP };

typedef struct {
    uint32_t index; /* into entries */
    int record;     /* 0: a warm-up step's call, timed but kept out of the table */
    uint64_t t0, child_ns;
    uint64_t ovh0; /* the measuring's own time so far (overhead_ns) when it began */
    int64_t mem0;
    uint64_t device; /* its interval on the GPU (a token), 0: not timed there */
} frame;

/* A call's time less the measuring's own inside it (the hooks of the calls it made, from
 * fwd_overhead or bwd_overhead: what the clock read at its begin, ovh0, and now). */
static uint64_t net_ns(const frame *f, uint64_t now, uint64_t overhead_now) {
    uint64_t gross = now > f->t0 ? now - f->t0 : 0, ovh = overhead_now - f->ovh0;
    return gross > ovh ? gross - ovh : 0;
}

typedef struct {
    PyObject *module; /* strong: its address names it for the run */
    PyObject *path, *kind;
    uint32_t parent; /* the module it was first called from; UINT32_MAX for a root */
    sw_module_row row;
} entry;

typedef struct ModulesObject {
    PyObject_HEAD ProfilerObject *owner;
    PyObject *tensor_type;   /* torch.Tensor */
    PyObject *resolve;       /* resolve(module, parent module or None) -> (path, class name) */
    PyObject *allocated;     /* torch.cuda.memory_allocated, or None (no CUDA allocator) */
    PyObject *sizes;         /* sizes(modules list) -> [(param, grad, optimizer) bytes] */
    PyObject *index_of;      /* module -> int index */
    PyObject *module_list;   /* modules, by index (for sizes) */
    PyObject *node_hooks;    /* node -> NodeHook, during one outermost sampled forward */
    PyObject *register_name; /* "register_prehook" */
    PyObject *grad_fn_name;  /* "grad_fn" */
    entry *entries;
    uint32_t nentries, cap;
    uint32_t every;
    uint32_t warmup; /* steps (or outermost calls) before the first one recorded, >= 1 */
    int active;
    int sampling;             /* the outermost forward running is hooked: SAMPLED or WARMUP */
    int64_t last_key;         /* the step (or outermost call) last hooked */
    uint64_t outer_calls;     /* outermost calls outside any step */
    uint64_t sampled;         /* steps sampled (recorded) */
    uint64_t flushed_at;      /* sampled count at the last flush */
    int sizes_read;           /* sizes() answered once: close() keeps the run's figures */
    uint64_t fwd_overhead;    /* time the forward hooks spent around timed calls, in all */
    uint64_t bwd_overhead;    /* time the node hooks spent, in all */
    sw_device_timing *device; /* the profiler's device timing in this sampled step, or NULL */
    uint64_t device_calls;    /* calls timed on the GPU so far */
    int dirty;
    frame fwd[MAX_DEPTH];
    uint32_t fdepth, fskipped; /* timed frames; calls past MAX_DEPTH */
    frame bwd[MAX_DEPTH];
    uint32_t bdepth;
} ModulesObject;

typedef struct {
    PyObject_HEAD ModulesObject *modules;
    int record; /* made in a sampled step (not a warm-up one): its modules' times count */
    uint32_t *starts, *ends;
    uint32_t nstarts, nends, cap_starts, cap_ends;
} NodeHookObject;

typedef struct {
    PyObject_HEAD ModulesObject *modules;
    PyObject *func;
    int backward; /* 0: nn.Module.__call__; 1: torch.autograd.backward */
    PyObject *dict, *weakrefs;
    vectorcallfunc vectorcall;
} ModulesHookObject;

static PyTypeObject *node_hook_type(ModulesObject *m) {
    module_state *st = sw_py_state_of_type(Py_TYPE(m));
    return st ? st->node_hook_type : NULL;
}

/* ---- modules: an index per module, named once ------------------------------------------- */

/* The index of module, made on its first call (parent: the module running then, or
 * UINT32_MAX). UINT32_MAX when it cannot be named (the error is cleared: never raise). */
static uint32_t index_of(ModulesObject *m, PyObject *module, uint32_t parent) {
    PyObject *found = PyDict_GetItemWithError(m->index_of, module);
    if (found)
        return (uint32_t)PyLong_AsUnsignedLong(found);
    if (PyErr_Occurred() || m->nentries >= MAX_TIMED)
        goto fail;
    if (m->nentries == m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 64;
        entry *e = realloc(m->entries, cap * sizeof *e);
        if (e == NULL)
            goto fail;
        m->entries = e;
        m->cap = cap;
    }
    PyObject *parent_module = parent == UINT32_MAX ? Py_None : m->entries[parent].module;
    PyObject *named = PyObject_CallFunctionObjArgs(m->resolve, module, parent_module, NULL);
    PyObject *path, *kind;
    if (named == NULL || !PyArg_ParseTuple(named, "UU", &path, &kind)) {
        Py_XDECREF(named);
        goto fail;
    }
    uint32_t i = m->nentries;
    PyObject *key = PyLong_FromUnsignedLong(i);
    if (key == NULL || PyDict_SetItem(m->index_of, module, key) < 0 ||
        PyList_Append(m->module_list, module) < 0) {
        Py_XDECREF(key);
        Py_DECREF(named);
        goto fail;
    }
    Py_DECREF(key);
    entry *e = &m->entries[i];
    memset(e, 0, sizeof *e);
    e->module = Py_NewRef(module);
    e->path = Py_NewRef(path);
    e->kind = Py_NewRef(kind);
    e->parent = parent;
    e->row.activation_bytes = e->row.param_bytes = e->row.grad_bytes = e->row.optimizer_bytes = -1;
    Py_DECREF(named);
    m->nentries++;
    return i;
fail:
    PyErr_Clear();
    return UINT32_MAX;
}

static int64_t allocated_now(ModulesObject *m) {
    if (m->allocated == Py_None)
        return -1;
    PyObject *r = PyObject_CallNoArgs(m->allocated);
    int64_t v = r ? PyLong_AsLongLong(r) : -1;
    Py_XDECREF(r);
    if (PyErr_Occurred())
        PyErr_Clear(), v = -1;
    return v;
}

/* ---- pushing the table to the profiler (its snapshots, the run file, the reports) --------- */

static void set_note_u64(sw_profiler *p, const char *key, uint64_t v) {
    char text[32];
    snprintf(text, sizeof text, "%llu", (unsigned long long)v);
    sw_set_note(p, key, text);
}

/* The parameter, gradient and optimizer-state bytes of every module (sizes(), Python: they
 * change rarely, so only now and then: the first sampled steps and every 16th after). Read
 * while training runs, never at close: by then a script's main() has returned, its optimizer
 * is gone and zero_grad dropped the gradients, and the run file would keep 0 B. */
static void refresh_sizes(ModulesObject *m) {
    PyObject *r = PyObject_CallOneArg(m->sizes, m->module_list);
    if (r == NULL || !PyList_Check(r)) {
        Py_XDECREF(r);
        PyErr_Clear();
        return;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(r) && i < (Py_ssize_t)m->nentries; i++) {
        long long param, grad, optim;
        if (!PyArg_ParseTuple(PyList_GET_ITEM(r, i), "LLL", &param, &grad, &optim)) {
            PyErr_Clear();
            continue;
        }
        m->entries[i].row.param_bytes = param;
        m->entries[i].row.grad_bytes = grad;
        m->entries[i].row.optimizer_bytes = optim;
    }
    Py_DECREF(r);
    m->sizes_read = 1;
}

/* The GPU times resolved since the last flush into the rows (tag 2i: module i's forward,
 * 2i + 1: its backward). */
static void take_device_times(ModulesObject *m, sw_profiler *p) {
    sw_device_timing *t = sw_device_timing_of(p);
    size_t n = 2 * (size_t)m->nentries;
    sw_device_interval_sum *sums = t ? calloc(n, sizeof *sums) : NULL;
    if (sums == NULL)
        return;
    if (sw_device_intervals_take(t, sums, n) > 0) {
        for (uint32_t i = 0; i < m->nentries; i++) {
            sw_module_row *row = &m->entries[i].row;
            row->device_forward_calls += sums[2 * i].count;
            row->device_forward_ns += sums[2 * i].ns;
            row->device_forward_self_ns += sums[2 * i].self_ns;
            row->device_backward_calls += sums[2 * i + 1].count;
            row->device_backward_ns += sums[2 * i + 1].ns;
            row->device_backward_self_ns += sums[2 * i + 1].self_ns;
            m->device_calls += sums[2 * i].count + sums[2 * i + 1].count;
        }
    }
    free(sums);
}

static void flush(ModulesObject *m, int sizes) {
    sw_profiler *p = m->owner->p;
    if (p == NULL || m->nentries == 0)
        return;
    if (sizes)
        refresh_sizes(m);
    take_device_times(m, p);
    sw_module_row *rows = calloc(m->nentries, sizeof *rows);
    if (rows == NULL)
        return;
    for (uint32_t i = 0; i < m->nentries; i++) {
        rows[i] = m->entries[i].row;
        rows[i].path = PyUnicode_AsUTF8(m->entries[i].path);
        rows[i].kind = PyUnicode_AsUTF8(m->entries[i].kind);
        if (rows[i].path == NULL || rows[i].kind == NULL) {
            PyErr_Clear();
            rows[i].path = rows[i].kind = "?";
        }
    }
    sw_set_modules(p, rows, m->nentries);
    free(rows);
    set_note_u64(p, "modules_every", m->every);
    set_note_u64(p, "modules_sampled_steps", m->sampled);
    set_note_u64(p, "modules_warmup_steps", m->warmup);
    sw_set_note(p, "modules_clock", m->device_calls ? "host+device" : "host");
    m->flushed_at = m->sampled;
    m->dirty = 0;
}

/* After a sampled step's forward or backward: the table goes to the profiler, and the sizes
 * are read again in the first 3 sampled steps and every 16th one after. */
static void maybe_flush(ModulesObject *m) {
    if (!m->dirty)
        return;
    flush(m, m->sampled <= 3 || m->sampled % 16 == 0 || m->flushed_at == 0);
}

/* ---- out of memory ------------------------------------------------------------------------ */

/* Name module index (UINT32_MAX: unknown; module, when not NULL, is looked up then) as where
 * the pending exception happened, when it is an out-of-memory error no one named yet
 * (_oom.c: stepwatch/_oom.py writes the stderr line and the notes, and marks it named, so
 * the modules it leaves next say nothing). The exception stays pending, untouched. */
static void name_oom(ModulesObject *m, uint32_t index, PyObject *module, const char *phase) {
    if (!PyErr_ExceptionMatches(PyExc_RuntimeError)) /* every OOM error is one */
        return;
    sw_py_aside aside;
    sw_py_set_aside(&aside);
    PyObject *exc = sw_py_aside_exception(&aside);
    if (sw_py_oom_unnamed(exc)) {
        if (index == UINT32_MAX && module != NULL)
            index = index_of(m, module, UINT32_MAX);
        sw_py_oom_report(m->owner, exc, index == UINT32_MAX ? NULL : m->entries[index].path, phase);
        flush(m, 0);
    }
    sw_py_put_back(&aside); /* drops what the report left set */
}

/* ---- backward: the stack of modules whose backward runs ----------------------------------- */

/* A module's backward ends at now: its time less the node hooks' own inside it. */
static void bwd_pop(ModulesObject *m, uint64_t now) {
    frame *f = &m->bwd[--m->bdepth];
    if (f->device)
        sw_device_interval_end(m->device, f->device);
    uint64_t total = net_ns(f, now, m->bwd_overhead);
    if (m->bdepth > 0)
        m->bwd[m->bdepth - 1].child_ns += total;
    if (!f->record)
        return;
    sw_module_row *row = &m->entries[f->index].row;
    row->backward_calls++;
    row->backward_ns += total;
    row->backward_self_ns += total > f->child_ns ? total - f->child_ns : 0;
    m->dirty = 1;
}

static void bwd_close_all(ModulesObject *m, uint64_t now) {
    while (m->bdepth > 0)
        bwd_pop(m, now);
}

static int bwd_open_at(ModulesObject *m, uint32_t index) {
    for (uint32_t k = m->bdepth; k > 0; k--)
        if (m->bwd[k - 1].index == index)
            return (int)(k - 1);
    return -1;
}

static int is_ancestor(ModulesObject *m, uint32_t a, uint32_t of) {
    for (uint32_t i = m->entries[of].parent, n = 0; i != UINT32_MAX && n < MAX_DEPTH;
         i = m->entries[i].parent, n++)
        if (i == a)
            return 1;
    return 0;
}

static void bwd_begin(ModulesObject *m, uint32_t index, uint64_t now, int record) {
    if (bwd_open_at(m, index) >= 0)
        return;
    /* The modules running that are not its ancestors are done: the engine moved on. */
    while (m->bdepth > 0 && !is_ancestor(m, m->bwd[m->bdepth - 1].index, index))
        bwd_pop(m, now);
    if (m->bdepth == MAX_DEPTH)
        return;
    uint64_t parent = m->bdepth ? m->bwd[m->bdepth - 1].device : 0;
    m->bwd[m->bdepth++] = (frame){
        .index = index,
        .record = record,
        .t0 = now,
        .ovh0 = m->bwd_overhead,
        .device = m->device ? sw_device_interval_begin(m->device, parent, 2 * index + 1) : 0};
}

static void bwd_end(ModulesObject *m, uint32_t index, uint64_t now) {
    int k = bwd_open_at(m, index);
    while (k >= 0 && m->bdepth > (uint32_t)k)
        bwd_pop(m, now);
}

/* ---- NodeHook: the pre-hook on one autograd node ------------------------------------------ */

/* The modules ending and beginning at this node; the hook's own time from now on is the
 * measuring's (bwd_overhead), taken off every module whose backward it falls in. */
static PyObject *NodeHook_call(NodeHookObject *self, PyObject *args, PyObject *kwargs) {
    ModulesObject *m = self->modules;
    if (m == NULL || !m->active)
        Py_RETURN_NONE;
    uint64_t now = sw_now_ns();
    for (uint32_t i = 0; i < self->nends; i++)
        bwd_end(m, self->ends[i], now);
    for (uint32_t i = self->nstarts; i > 0; i--) /* registered inner first: outer begins first */
        bwd_begin(m, self->starts[i - 1], now, self->record);
    m->bwd_overhead += sw_now_ns() - now;
    Py_RETURN_NONE;
}

static int add_index(uint32_t **list, uint32_t *n, uint32_t *cap, uint32_t index) {
    for (uint32_t i = 0; i < *n; i++)
        if ((*list)[i] == index)
            return 0;
    if (*n == *cap) {
        uint32_t c = *cap ? *cap * 2 : 4;
        uint32_t *l = realloc(*list, c * sizeof *l);
        if (l == NULL)
            return -1;
        *list = l;
        *cap = c;
    }
    (*list)[(*n)++] = index;
    return 0;
}

/* The NodeHook of node, registered on it the first time. Borrowed; NULL (cleared) on error. */
static NodeHookObject *node_hook(ModulesObject *m, PyObject *node) {
    PyObject *found = PyDict_GetItemWithError(m->node_hooks, node);
    if (found)
        return (NodeHookObject *)found;
    PyTypeObject *tp = node_hook_type(m);
    NodeHookObject *h = tp ? PyObject_GC_New(NodeHookObject, tp) : NULL;
    if (h == NULL) {
        PyErr_Clear();
        return NULL;
    }
    h->modules = (ModulesObject *)Py_NewRef(m);
    h->record = m->sampling == SAMPLED;
    h->starts = h->ends = NULL;
    h->nstarts = h->nends = h->cap_starts = h->cap_ends = 0;
    PyObject_GC_Track(h);
    PyObject *handle = PyObject_CallMethodOneArg(node, m->register_name, (PyObject *)h);
    int ok = handle != NULL && PyDict_SetItem(m->node_hooks, node, (PyObject *)h) == 0;
    Py_XDECREF(handle);
    Py_DECREF(h); /* the node and the dict hold it */
    if (!ok) {
        PyErr_Clear();
        return NULL;
    }
    return h;
}

/* The autograd node of obj when it is a tensor with one (new reference), else NULL. */
static PyObject *node_of(ModulesObject *m, PyObject *obj) {
    if (!PyObject_TypeCheck(obj, (PyTypeObject *)m->tensor_type))
        return NULL;
    PyObject *node = PyObject_GetAttr(obj, m->grad_fn_name);
    if (node == NULL) {
        PyErr_Clear();
        return NULL;
    }
    if (node == Py_None) {
        Py_DECREF(node);
        return NULL;
    }
    return node;
}

typedef struct {
    PyObject *nodes[MAX_NODE_INPUTS];
    int n;
} node_set;

static void nodes_add(ModulesObject *m, node_set *s, PyObject *obj) {
    PyObject *node = node_of(m, obj);
    if (node == NULL)
        return;
    for (int i = 0; i < s->n; i++)
        if (s->nodes[i] == node) {
            Py_DECREF(node);
            return;
        }
    if (s->n < MAX_NODE_INPUTS)
        s->nodes[s->n++] = node;
    else
        Py_DECREF(node);
}

/* The nodes of a module's output: a tensor, the tensors of a tuple or list, or a dict's
 * values (Hugging Face's ModelOutput is one), one level deep. */
static void output_nodes(ModulesObject *m, node_set *s, PyObject *out) {
    if (PyTuple_Check(out) || PyList_Check(out)) {
        Py_ssize_t n = PySequence_Fast_GET_SIZE(out);
        for (Py_ssize_t i = 0; i < n && i < 16; i++)
            nodes_add(m, s, PySequence_Fast_GET_ITEM(out, i));
    } else if (PyDict_Check(out)) {
        Py_ssize_t pos = 0;
        PyObject *key, *value;
        int i = 0;
        while (i++ < 16 && PyDict_Next(out, &pos, &key, &value))
            nodes_add(m, s, value);
    } else {
        nodes_add(m, s, out);
    }
}

static void nodes_clear(node_set *s) {
    for (int i = 0; i < s->n; i++)
        Py_DECREF(s->nodes[i]);
    s->n = 0;
}

/* After a sampled forward of module index: its backward's hooks (see the top). */
static void hook_backward(ModulesObject *m, uint32_t index, node_set *inputs, PyObject *out) {
    node_set outputs = {.n = 0};
    output_nodes(m, &outputs, out);
    int started = 0;
    for (int i = 0; i < outputs.n; i++) {
        int passthrough = 0; /* an input returned as it came: not this module's node */
        for (int k = 0; k < inputs->n; k++)
            passthrough |= outputs.nodes[i] == inputs->nodes[k];
        NodeHookObject *h = passthrough ? NULL : node_hook(m, outputs.nodes[i]);
        if (h && add_index(&h->starts, &h->nstarts, &h->cap_starts, index) == 0)
            started = 1;
    }
    for (int k = 0; started && k < inputs->n; k++) {
        NodeHookObject *h = node_hook(m, inputs->nodes[k]);
        if (h)
            add_index(&h->ends, &h->nends, &h->cap_ends, index);
    }
    nodes_clear(&outputs);
}

/* ---- ModulesHook: nn.Module.__call__ and torch.autograd.backward --------------------------- */

/* Is the outermost call beginning now in a sampled step? The first `warmup` steps are
 * warm-up (lazy initialisation: BLAS and autograd start-up, cuDNN autotuning, the modules'
 * naming): kept out of the table. Step 0 is hooked all the same (WARMUP: every module named,
 * a backward OOM named by module) but nothing it times is recorded; the steps recorded are
 * warmup, warmup + every, warmup + 2 every, ... (outside steps: the outermost calls, counted
 * alike). */
static int decide_sampling(ModulesObject *m) {
    int64_t key = m->owner->p ? sw_step_index(m->owner->p) : -1;
    if (key < 0)
        key = (int64_t)(m->outer_calls++ % ((uint64_t)INT64_MAX)) + ((int64_t)1 << 62);
    if (key == m->last_key) /* the same step: a second forward (validation, accumulation) */
        return m->sampling;
    uint64_t k = key >= ((int64_t)1 << 62) ? (uint64_t)(key - ((int64_t)1 << 62)) : (uint64_t)key;
    int how = k == 0 ? WARMUP : NOT_HOOKED;
    if (k >= m->warmup && (k - m->warmup) % m->every == 0)
        how = SAMPLED;
    if (how == NOT_HOOKED)
        return NOT_HOOKED;
    m->last_key = key;
    m->sampled += how == SAMPLED;
    return how;
}

/* One timed module call. Its time is from t0 to now, around the call alone; what the hook
 * does before t0 (naming a new module, its inputs' nodes, the allocator) and after now (the
 * allocator again, the backward's node hooks) is the measuring's: it goes into fwd_overhead,
 * and the modules running around the call (its parent, theirs) have it taken off their
 * totals and self times, so no module is charged for another's measuring. */
static PyObject *timed_call(ModulesObject *m, PyObject *func, PyObject *const *args, size_t nargsf,
                            PyObject *kwnames) {
    uint64_t enter = sw_now_ns();
    PyObject *module = args[0];
    uint32_t parent = m->fdepth ? m->fwd[m->fdepth - 1].index : UINT32_MAX;
    uint32_t index = index_of(m, module, parent);
    if (index == UINT32_MAX || m->fdepth == MAX_DEPTH) {
        m->fskipped++;
        m->fwd_overhead += sw_now_ns() - enter;
        PyObject *r = PyObject_Vectorcall(func, args, nargsf, kwnames);
        m->fskipped--;
        return r;
    }
    int record = m->sampling == SAMPLED;
    node_set inputs = {.n = 0};
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nall = nargs + (kwnames ? PyTuple_GET_SIZE(kwnames) : 0);
    for (Py_ssize_t i = 1; i < nall; i++)
        nodes_add(m, &inputs, args[i]);
    uint64_t parent_device = m->fdepth ? m->fwd[m->fdepth - 1].device : 0;
    frame *f = &m->fwd[m->fdepth++];
    *f = (frame){.index = index, .record = record, .mem0 = record ? allocated_now(m) : -1};
    if (m->device) /* its event outside its host time */
        f->device = sw_device_interval_begin(m->device, parent_device, 2 * index);
    f->ovh0 = m->fwd_overhead;
    f->t0 = sw_now_ns();
    PyObject *result = PyObject_Vectorcall(func, args, nargsf, kwnames);
    uint64_t now = sw_now_ns();
    sw_py_aside aside = {0};
    if (result == NULL) /* reading the allocator calls torch (and clears its errors) */
        sw_py_set_aside(&aside);
    f = &m->fwd[--m->fdepth];
    if (f->device)
        sw_device_interval_end(m->device, f->device);
    uint64_t total = net_ns(f, now, m->fwd_overhead);
    if (m->fdepth > 0)
        m->fwd[m->fdepth - 1].child_ns += total;
    if (record) {
        sw_module_row *row = &m->entries[index].row;
        row->forward_calls++;
        row->forward_ns += total;
        row->forward_self_ns += total > f->child_ns ? total - f->child_ns : 0;
        if (f->mem0 >= 0) {
            int64_t grown = allocated_now(m) - f->mem0;
            if (grown > row->activation_bytes)
                row->activation_bytes = grown;
        }
        m->dirty = 1;
    }
    if (result != NULL) {
        hook_backward(m, index, &inputs, result);
    } else {
        sw_py_put_back(&aside);
        name_oom(m, index, NULL, "forward");
    }
    nodes_clear(&inputs);
    uint64_t around = sw_now_ns() - enter, gross = now > f->t0 ? now - f->t0 : 0;
    m->fwd_overhead += around > gross ? around - gross : 0;
    return result;
}

static PyObject *hook_module_call(ModulesObject *m, PyObject *func, PyObject *const *args,
                                  size_t nargsf, PyObject *kwnames) {
    if (m->fdepth == 0 && m->fskipped == 0) {
        m->sampling = decide_sampling(m);
        if (m->sampling && m->bdepth > 0) /* a backward this hook did not see end */
            bwd_close_all(m, sw_now_ns());
        /* a warm-up step is not timed on the GPU: its sums would land in the table */
        m->device = m->sampling == SAMPLED ? sw_device_timing_of(m->owner->p) : NULL;
    }
    if (m->sampling) {
        PyObject *r = timed_call(m, func, args, nargsf, kwnames);
        if (m->fdepth == 0 && m->fskipped == 0) {
            sw_py_aside aside; /* the user's exception, if any, goes on */
            sw_py_set_aside(&aside);
            PyDict_Clear(m->node_hooks); /* the nodes keep their hooks */
            maybe_flush(m);
            sw_py_put_back(&aside);
        }
        return r;
    }
    /* Not sampled: only an out-of-memory error is looked at. */
    PyObject *r = PyObject_Vectorcall(func, args, nargsf, kwnames);
    if (r == NULL)
        name_oom(m, UINT32_MAX, args[0], "forward");
    return r;
}

static PyObject *hook_autograd_backward(ModulesObject *m, PyObject *func, PyObject *const *args,
                                        size_t nargsf, PyObject *kwnames) {
    PyObject *r = PyObject_Vectorcall(func, args, nargsf, kwnames);
    if (r == NULL)
        name_oom(m, m->bdepth ? m->bwd[m->bdepth - 1].index : UINT32_MAX, NULL, "backward");
    if (m->bdepth > 0) {
        sw_py_aside aside;
        sw_py_set_aside(&aside);
        bwd_close_all(m, sw_now_ns());
        maybe_flush(m);
        sw_py_put_back(&aside);
    }
    return r;
}

/* The innermost modules call through nn.Module.__call__'s hook without a frame; a call into
 * a module not sampled pays one C call. */
static PyObject *ModulesHook_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf,
                                        PyObject *kwnames) {
    ModulesHookObject *self = (ModulesHookObject *)callable;
    ModulesObject *m = self->modules;
    if (self->func == NULL || m == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "stepwatch: modules hook was cleared");
        return NULL;
    }
    if (!m->active || m->owner->p == NULL)
        return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    if (self->backward)
        return hook_autograd_backward(m, self->func, args, nargsf, kwnames);
    if (PyVectorcall_NARGS(nargsf) < 1)
        return PyObject_Vectorcall(self->func, args, nargsf, kwnames);
    return hook_module_call(m, self->func, args, nargsf, kwnames);
}

/* ---- Modules: Python's side --------------------------------------------------------------- */

static PyObject *Modules_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
    static char *kwlist[] = {"profiler",  "every", "tensor_type", "resolve",
                             "allocated", "sizes", "warmup",      NULL};
    PyObject *profiler, *tensor_type, *resolve, *allocated, *sizes;
    unsigned int every, warmup = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OIOOOO|I:Modules", kwlist, &profiler, &every,
                                     &tensor_type, &resolve, &allocated, &sizes, &warmup))
        return NULL;
    module_state *st = sw_py_state_of_type(type);
    if (st == NULL)
        return NULL;
    if (!PyObject_TypeCheck(profiler, st->profiler_type))
        return PyErr_Format(PyExc_TypeError, "Modules: profiler must be a stepwatch.Profiler");
    if (every == 0)
        return PyErr_Format(PyExc_ValueError, "Modules: every must be at least 1");
    if (warmup == 0)
        return PyErr_Format(PyExc_ValueError, "Modules: warmup must be at least 1 (step 0)");
    if (!PyType_Check(tensor_type))
        return PyErr_Format(PyExc_TypeError, "Modules: tensor_type must be a type");
    ModulesObject *m = (ModulesObject *)type->tp_alloc(type, 0);
    if (m == NULL)
        return NULL;
    m->owner = (ProfilerObject *)Py_NewRef(profiler);
    m->tensor_type = Py_NewRef(tensor_type);
    m->resolve = Py_NewRef(resolve);
    m->allocated = Py_NewRef(allocated);
    m->sizes = Py_NewRef(sizes);
    m->every = every;
    m->warmup = warmup;
    m->last_key = -1;
    m->active = 1;
    m->index_of = PyDict_New();
    m->module_list = PyList_New(0);
    m->node_hooks = PyDict_New();
    m->register_name = PyUnicode_InternFromString("register_prehook");
    m->grad_fn_name = PyUnicode_InternFromString("grad_fn");
    if (!m->index_of || !m->module_list || !m->node_hooks || !m->register_name ||
        !m->grad_fn_name) {
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

static PyObject *Modules_hook(ModulesObject *self, PyObject *args) {
    const char *kind;
    PyObject *original;
    if (!PyArg_ParseTuple(args, "sO:hook", &kind, &original))
        return NULL;
    int backward = strcmp(kind, "backward") == 0;
    if (!backward && strcmp(kind, "call") != 0)
        return PyErr_Format(PyExc_ValueError, "hook: kind must be 'call' or 'backward'");
    if (!PyCallable_Check(original))
        return PyErr_Format(PyExc_TypeError, "hook: original must be callable");
    module_state *st = sw_py_state_of_type(Py_TYPE(self));
    if (st == NULL)
        return NULL;
    ModulesHookObject *h = PyObject_GC_New(ModulesHookObject, st->modules_hook_type);
    if (h == NULL)
        return NULL;
    h->modules = (ModulesObject *)Py_NewRef(self);
    h->func = Py_NewRef(original);
    h->backward = backward;
    h->dict = h->weakrefs = NULL;
    h->vectorcall = ModulesHook_vectorcall;
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

/* flush(): the table to the profiler now, sizes read again. */
static PyObject *Modules_flush(ModulesObject *self, PyObject *unused) {
    flush(self, 1);
    Py_RETURN_NONE;
}

/* close(): a last flush; the hooks call straight through from now on. */
static PyObject *Modules_close(ModulesObject *self, PyObject *unused) {
    if (self->active) {
        bwd_close_all(self, sw_now_ns());
        flush(self, !self->sizes_read); /* the sizes of the run, not of after it */
    }
    self->active = 0;
    self->device = NULL;
    PyDict_Clear(self->node_hooks);
    Py_RETURN_NONE;
}

static PyObject *Modules_get_sampled(ModulesObject *self, void *closure) {
    return PyLong_FromUnsignedLongLong(self->sampled);
}

static PyObject *Modules_get_every(ModulesObject *self, void *closure) {
    return PyLong_FromUnsignedLong(self->every);
}

static PyObject *Modules_get_warmup(ModulesObject *self, void *closure) {
    return PyLong_FromUnsignedLong(self->warmup);
}

static int Modules_traverse(ModulesObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->owner);
    Py_VISIT(self->tensor_type);
    Py_VISIT(self->resolve);
    Py_VISIT(self->allocated);
    Py_VISIT(self->sizes);
    Py_VISIT(self->index_of);
    Py_VISIT(self->module_list);
    Py_VISIT(self->node_hooks);
    for (uint32_t i = 0; i < self->nentries; i++)
        Py_VISIT(self->entries[i].module);
    return 0;
}

static int Modules_clear(ModulesObject *self) {
    Py_CLEAR(self->owner);
    Py_CLEAR(self->tensor_type);
    Py_CLEAR(self->resolve);
    Py_CLEAR(self->allocated);
    Py_CLEAR(self->sizes);
    Py_CLEAR(self->index_of);
    Py_CLEAR(self->module_list);
    Py_CLEAR(self->node_hooks);
    Py_CLEAR(self->register_name);
    Py_CLEAR(self->grad_fn_name);
    for (uint32_t i = 0; i < self->nentries; i++) {
        Py_CLEAR(self->entries[i].module);
        Py_CLEAR(self->entries[i].path);
        Py_CLEAR(self->entries[i].kind);
    }
    free(self->entries);
    self->entries = NULL;
    self->nentries = self->cap = 0;
    self->active = 0;
    return 0;
}

static void Modules_dealloc(ModulesObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    Modules_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMethodDef Modules_methods[] = {
    {"hook", (PyCFunction)Modules_hook, METH_VARARGS,
     "hook(kind, original, /)\n--\n\n"
     "The C callable that replaces nn.Module.__call__ (kind 'call') or "
     "torch.autograd.backward ('backward'), calling original."},
    {"flush", (PyCFunction)Modules_flush, METH_NOARGS,
     "flush($self, /)\n--\n\nGive the module table to the profiler now."},
    {"close", (PyCFunction)Modules_close, METH_NOARGS,
     "close($self, /)\n--\n\nA last flush; the hooks only call through from now on."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Modules_getset[] = {
    {"sampled_steps", (getter)Modules_get_sampled, NULL, "steps sampled so far", NULL},
    {"every", (getter)Modules_get_every, NULL, "every k-th step is sampled", NULL},
    {"warmup", (getter)Modules_get_warmup, NULL, "the first steps, left out of the table", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot Modules_slots[] = {
    {Py_tp_doc, "Per-module time and memory (stepwatch/_modules.py installs its hooks)."},
    {Py_tp_new, Modules_new},
    {Py_tp_methods, Modules_methods},
    {Py_tp_getset, Modules_getset},
    {Py_tp_traverse, Modules_traverse},
    {Py_tp_clear, Modules_clear},
    {Py_tp_dealloc, Modules_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_modules_spec = {
    .name = "stepwatch.Modules",
    .basicsize = sizeof(ModulesObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = Modules_slots,
};

/* ---- NodeHook and ModulesHook types -------------------------------------------------------- */

static int NodeHook_traverse(NodeHookObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->modules);
    return 0;
}

static int NodeHook_clear(NodeHookObject *self) {
    Py_CLEAR(self->modules);
    return 0;
}

static void NodeHook_dealloc(NodeHookObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    NodeHook_clear(self);
    free(self->starts);
    free(self->ends);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyType_Slot NodeHook_slots[] = {
    {Py_tp_doc, "A pre-hook on an autograd node: module backwards begin and end there."},
    {Py_tp_call, NodeHook_call},
    {Py_tp_traverse, NodeHook_traverse},
    {Py_tp_clear, NodeHook_clear},
    {Py_tp_dealloc, NodeHook_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_node_hook_spec = {
    .name = "stepwatch.ModulesNodeHook",
    .basicsize = sizeof(NodeHookObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION,
    .slots = NodeHook_slots,
};

static int ModulesHook_traverse(ModulesHookObject *self, visitproc visit, void *arg) {
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(self->modules);
    Py_VISIT(self->func);
    Py_VISIT(self->dict);
    return 0;
}

static int ModulesHook_clear(ModulesHookObject *self) {
    Py_CLEAR(self->modules);
    Py_CLEAR(self->func);
    Py_CLEAR(self->dict);
    return 0;
}

static void ModulesHook_dealloc(ModulesHookObject *self) {
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    if (self->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)self);
    ModulesHook_clear(self);
    tp->tp_free((PyObject *)self);
    Py_DECREF(tp);
}

static PyMemberDef ModulesHook_members[] = {
    {"__dictoffset__", T_PYSSIZET, offsetof(ModulesHookObject, dict), READONLY, NULL},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(ModulesHookObject, weakrefs), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(ModulesHookObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef ModulesHook_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot ModulesHook_slots[] = {
    {Py_tp_doc, "nn.Module.__call__ or torch.autograd.backward, timed per module."},
    {Py_tp_members, ModulesHook_members},
    {Py_tp_getset, ModulesHook_getset},
    {Py_tp_call, PyVectorcall_Call},
    {Py_tp_descr_get, sw_py_bind_as_method}, /* patched onto nn.Module: gets the instance */
    {Py_tp_traverse, ModulesHook_traverse},
    {Py_tp_clear, ModulesHook_clear},
    {Py_tp_dealloc, ModulesHook_dealloc},
    {0, NULL},
};

PyType_Spec sw_py_modules_hook_spec = {
    .name = "stepwatch.ModulesHook",
    .basicsize = sizeof(ModulesHookObject),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_IMMUTABLETYPE |
             Py_TPFLAGS_DISALLOW_INSTANTIATION | Py_TPFLAGS_HAVE_VECTORCALL |
             Py_TPFLAGS_METHOD_DESCRIPTOR,
    .slots = ModulesHook_slots,
};
