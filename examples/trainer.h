/*
 * trainer.h — the example's processing functions for the stepwatch engine: one training
 * step (forward, loss, backward, optimizer, zero_grad, each marked in the profiler) and one
 * validation step, with the running loss and accuracy of the current epoch.
 */
#ifndef SW_EXAMPLE_TRAINER_H
#define SW_EXAMPLE_TRAINER_H

#include "mlp.h"
#include "stepwatch.h"

#define TRAINER_MAX_EPOCHS 256

typedef struct trainer {
    mlp model;
    int adam; /* 1: Adam, 0: SGD with momentum 0.9 */
    float lr;
    /* the current epoch, reset by trainer_epoch_done */
    double train_loss_sum, valid_loss_sum;
    long train_seen, valid_seen, train_correct, valid_correct;
    /* per finished epoch: mean training loss, validation loss and accuracy */
    int epochs;
    double train_loss[TRAINER_MAX_EPOCHS], valid_loss[TRAINER_MAX_EPOCHS];
    double valid_acc[TRAINER_MAX_EPOCHS];
    double first_batch_loss; /* loss of the very first training batch (-1 before) */
} trainer;

/* sizes as for mlp_init. 0 or a negative code. */
int trainer_init(trainer *t, const int *sizes, int nsizes, int max_batch, int adam, float lr,
                 uint64_t seed);
void trainer_free(trainer *t);
/* sw_process_fn: user is the trainer, batch a struct batch (dataset.h). */
int trainer_train_step(sw_engine *e, void *batch, uint32_t batch_size, void *user);
int trainer_valid_step(sw_engine *e, void *batch, uint32_t batch_size, void *user);
/* Close the epoch's running figures into the per-epoch arrays (an EPOCH_COMPLETED handler
 * calls it). */
void trainer_epoch_done(trainer *t);

#endif
