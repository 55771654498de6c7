/*
 * trainer.c — one batch through the MLP, timed part by part with SW_SCOPE: the profiler
 * then reports forward, loss, backward, optimizer and zero_grad per step, with samples/s.
 */
#include "trainer.h"

#include "dataset.h"

#include <string.h>

int trainer_init(trainer *t, const int *sizes, int nsizes, int max_batch, int adam, float lr,
                 uint64_t seed) {
    memset(t, 0, sizeof *t);
    t->adam = adam;
    t->lr = lr;
    t->first_batch_loss = -1;
    int rc = mlp_init(&t->model, sizes, nsizes, max_batch, seed);
    if (rc == -1)
        return SW_EINVAL;
    return rc < 0 ? SW_ENOMEM : 0;
}

void trainer_free(trainer *t) {
    if (t)
        mlp_free(&t->model);
}

int trainer_train_step(sw_engine *e, void *data, uint32_t batch_size, void *user) {
    trainer *t = user;
    const batch *b = data;
    sw_profiler *p = sw_engine_profiler(e);
    if (!b || b->n <= 0 || b->n > t->model.max_batch)
        return SW_EINVAL;
    float loss = 0;
    int correct = 0;
    SW_SCOPE(p, "forward") {
        mlp_forward(&t->model, b->x, b->n);
    }
    SW_SCOPE(p, "loss") {
        loss = mlp_loss(&t->model, b->y, b->n, &correct);
    }
    SW_SCOPE(p, "backward") {
        mlp_backward(&t->model, b->y, b->n);
    }
    SW_SCOPE(p, "optimizer") {
        if (t->adam)
            mlp_adam(&t->model, t->lr, 0.9f, 0.999f, 1e-8f);
        else
            mlp_sgd(&t->model, t->lr, 0.9f);
    }
    SW_SCOPE(p, "zero_grad") {
        mlp_zero_grad(&t->model);
    }
    if (t->first_batch_loss < 0)
        t->first_batch_loss = loss;
    t->train_loss_sum += (double)loss * b->n;
    t->train_seen += b->n;
    t->train_correct += correct;
    sw_engine_set_output(e, loss);
    return 0;
}

int trainer_valid_step(sw_engine *e, void *data, uint32_t batch_size, void *user) {
    trainer *t = user;
    const batch *b = data;
    sw_profiler *p = sw_engine_profiler(e);
    if (!b || b->n <= 0 || b->n > t->model.max_batch)
        return SW_EINVAL;
    float loss = 0;
    int correct = 0;
    SW_SCOPE(p, "forward") {
        mlp_forward(&t->model, b->x, b->n);
    }
    SW_SCOPE(p, "loss") {
        loss = mlp_loss(&t->model, b->y, b->n, &correct);
    }
    t->valid_loss_sum += (double)loss * b->n;
    t->valid_seen += b->n;
    t->valid_correct += correct;
    sw_engine_set_output(e, loss);
    return 0;
}

void trainer_epoch_done(trainer *t) {
    if (t->epochs < TRAINER_MAX_EPOCHS) {
        int k = t->epochs++;
        t->train_loss[k] = t->train_seen ? t->train_loss_sum / t->train_seen : 0;
        t->valid_loss[k] = t->valid_seen ? t->valid_loss_sum / t->valid_seen : 0;
        t->valid_acc[k] = t->valid_seen ? (double)t->valid_correct / t->valid_seen : 0;
    }
    t->train_loss_sum = t->valid_loss_sum = 0;
    t->train_seen = t->valid_seen = t->train_correct = t->valid_correct = 0;
}
