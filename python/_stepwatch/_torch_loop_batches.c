/*
 * _torch_loop_batches.c — the batches stepwatch.torch's Loop holds until a forward consumes them.
 *
 * A batch belongs to the step that consumes it, not to the step running when it was
 * fetched, nor to the grad mode at fetch time: accelerate's and Lightning's loaders read one
 * batch ahead, the Hugging Face Trainer draws all of an update's micro-batches before its
 * first forward, and its evaluation loop fetches with grad on and runs the forward under
 * no_grad. Each DataLoader batch (and each loader's start-up: its iterator made, which starts
 * the worker processes) is held here; the forward that is given it takes it, and its data
 * wait and samples go to that forward's step (docs/python.md, "How steps are found").
 *
 * Which forward takes which batch: the one called with the batch's first array-like as one
 * of its arguments (or an item of a tuple, list or dict argument: model(**inputs)), by
 * identity, held by a weak reference: a batch freed before its forward (the Trainer under
 * DDP gives the forward copies) matches nothing, not the new object at its old address. A
 * forward called with the batch moved to another device or transformed takes, once per
 * fetch or backward, the oldest batch of each loader whose batches are never given as
 * fetched.
 *
 * The batch's copy to the device (h2d_copy, category data) is held with it: a Tensor.to or
 * .cuda (or the batch object's own .to) called outside the model while a fetched batch waits
 * for its forward is the copy of the oldest such batch (accelerate's loader copies a batch
 * after reading the next one ahead; the Trainer draws an update's micro-batches, then copies
 * each before its forward): _torch_loop_hooks.c, hook_copy. It is recorded with the batch, as one
 * span from its first copy's start as long as all its copies took (a copy of x, another of y,
 * never the work between them).
 */
#include "_torch_loop.h"

#include <string.h>

/* Record a held batch (or loader start-up): in the open step, which consumed it (in_step),
 * or in no step. It leaves the queue: its key goes. */
static void record_batch(LoopObject *loop, sw_profiler *p, queued_batch *b, int in_step) {
    Py_CLEAR(b->key);
    if (b->startup) {
        if (loop->loader_startup != SW_ID_NONE)
            sw_record(p, loop->loader_startup, b->start, b->end);
        return;
    }
    sw_record(p, loop->data, b->start, b->end);
    if (b->copy_ns != 0 && loop->copy != SW_ID_NONE)
        sw_record(p, loop->copy, b->copy_start, b->copy_start + b->copy_ns);
    loop->saw_batch = 1;
    if (!in_step || loop->kind == NO_STEP)
        return;
    loop->step_fetches++;
    loop->step_samples += b->batch_size;
    sw_step_set_batch_size(p, loop->step_samples);
}

void sw_py_loop_enqueue(LoopObject *loop, sw_profiler *p, const queued_batch *b) {
    if (loop->nqueued == MAX_QUEUED) { /* never consumed: the oldest goes, in no step */
        record_batch(loop, p, &loop->queue[0], 0);
        memmove(loop->queue, loop->queue + 1, (MAX_QUEUED - 1) * sizeof loop->queue[0]);
        loop->nqueued--;
    }
    loop->queue[loop->nqueued++] = *b;
}

/* The oldest held batch (not a loader's start-up): its index, or -1. */
static int oldest_batch(const LoopObject *loop) {
    for (int i = 0; i < loop->nqueued; i++)
        if (!loop->queue[i].startup)
            return i;
    return -1;
}

int sw_py_loop_batch_held(const LoopObject *loop) {
    return oldest_batch(loop) >= 0;
}

int sw_py_loop_copied(LoopObject *loop, uint64_t start, uint64_t end) {
    int i = oldest_batch(loop);
    if (i < 0)
        return 0;
    queued_batch *b = &loop->queue[i];
    if (b->copy_ns == 0)
        b->copy_start = start;
    b->copy_ns += end > start ? end - start : 1;
    return 1;
}

void sw_py_loop_consume(LoopObject *loop, sw_profiler *p, const char *take) {
    int kept = 0;
    for (int i = 0; i < loop->nqueued; i++) {
        if (take == NULL || take[i])
            record_batch(loop, p, &loop->queue[i], 1);
        else
            loop->queue[kept++] = loop->queue[i];
    }
    loop->nqueued = kept;
}

int sw_py_loop_drop(LoopObject *loop, sw_profiler *p, int finished_only) {
    int kept = 0, n = loop->nqueued;
    for (int i = 0; i < loop->nqueued; i++) {
        PyObject *ref = loop->iterators[loop->queue[i].iterator];
        if (!finished_only || ref == NULL || PyWeakref_GET_OBJECT(ref) == Py_None)
            record_batch(loop, p, &loop->queue[i], 0);
        else
            loop->queue[kept++] = loop->queue[i];
    }
    loop->nqueued = kept;
    return n - kept;
}

/* The oldest held batch whose first array-like is obj (a dataset that returns the same
 * tensor every time: its batches are consumed in order), if later than best. */
static int match_in(const LoopObject *loop, PyObject *obj, int best) {
    for (int i = 0; i < loop->nqueued; i++)
        if (!loop->queue[i].startup && loop->queue[i].key != NULL &&
            PyWeakref_GET_OBJECT(loop->queue[i].key) == obj)
            return i > best ? i : best;
    return best;
}

int sw_py_loop_matched_input(const LoopObject *loop, PyObject *const *inputs, Py_ssize_t n) {
    int best = -1;
    for (Py_ssize_t a = 0; a < n && loop->nqueued > 0; a++) {
        PyObject *arg = inputs[a];
        best = match_in(loop, arg, best);
        if (PyTuple_Check(arg) || PyList_Check(arg)) {
            Py_ssize_t size = PySequence_Fast_GET_SIZE(arg);
            for (Py_ssize_t i = 0; i < size && i < 8; i++)
                best = match_in(loop, PySequence_Fast_GET_ITEM(arg, i), best);
        } else if (PyDict_Check(arg)) {
            Py_ssize_t pos = 0;
            PyObject *key, *value;
            for (int i = 0; i < 8 && PyDict_Next(arg, &pos, &key, &value); i++)
                best = match_in(loop, value, best);
        }
    }
    return best;
}

/* Given the batch the call was given as fetched (matched >= 0): that one, the older entries
 * of its iterator (a batch skipped, the loader's start-up), and the entries of other
 * iterators fetched after it up to its iterator's next batch (zipped loaders); a batch read
 * ahead stays for the forward it is given to. Else, once per fetch or backward: the oldest
 * batch of each iterator whose batches are not given as fetched, with their start-ups. */
int sw_py_loop_take(LoopObject *loop, int matched, char *take, uint64_t *earliest) {
    memset(take, 0, MAX_QUEUED);
    *earliest = 0;
    if (matched >= 0) {
        int it = loop->queue[matched].iterator;
        loop->matched[it] = 1;
        for (int i = 0; i <= matched; i++)
            take[i] = loop->queue[i].iterator == it;
        for (int i = matched + 1; i < loop->nqueued && loop->queue[i].iterator != it; i++)
            take[i] = 1;
    } else if (loop->may_consume) {
        int seen[MAX_ITERATORS] = {0};
        for (int i = 0; i < loop->nqueued; i++) {
            const queued_batch *b = &loop->queue[i];
            if (loop->matched[b->iterator])
                continue;
            if (seen[b->iterator])
                break;
            take[i] = 1;
            seen[b->iterator] = !b->startup;
        }
    }
    int n = 0;
    for (int i = 0; i < loop->nqueued; i++)
        if (take[i]) {
            n += !loop->queue[i].startup;
            if (*earliest == 0 || loop->queue[i].start < *earliest)
                *earliest = loop->queue[i].start;
        }
    return n;
}
