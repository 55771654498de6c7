/*
 * mlp.h — a multi-layer perceptron in plain C: fully connected layers with ReLU, softmax
 * cross-entropy, backpropagation, SGD (with momentum) and Adam. Float32, row-major, no
 * dependencies. Example code for the stepwatch engine, small enough to read in one go.
 */
#ifndef SW_EXAMPLE_MLP_H
#define SW_EXAMPLE_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 8

typedef struct mlp {
    int nlayers;                   /* weight layers */
    int sizes[MLP_MAX_LAYERS + 1]; /* sizes[0] inputs ... sizes[nlayers] classes */
    int max_batch;
    size_t nparams;
    float *params, *grads; /* all weights and biases, one array each */
    float *m, *v;          /* optimizer state (momentum / Adam moments) */
    size_t w_off[MLP_MAX_LAYERS], b_off[MLP_MAX_LAYERS];
    float *act[MLP_MAX_LAYERS + 1]; /* act[0] = input copy, act[nlayers] = logits/probs */
    float *delta;                   /* gradient w.r.t. one layer's outputs (scratch) */
    float *delta_prev;
    long adam_t;
} mlp;

/* xorshift64*: the small deterministic generator the examples use (state must be nonzero). */
uint64_t mlp_rand(uint64_t *state);

/* sizes[0..nsizes-1]: inputs, hidden..., classes. He-initialized from seed.
 * 0, or -1 for bad sizes, -2 when out of memory. */
int mlp_init(mlp *m, const int *sizes, int nsizes, int max_batch, uint64_t seed);
void mlp_free(mlp *m);

/* Logits for batch rows of x (batch x sizes[0]) into m->act[nlayers]. */
void mlp_forward(mlp *m, const float *x, int batch);
/* Mean softmax cross-entropy against labels after mlp_forward; turns the logits into
 * probabilities. *correct (may be NULL) gets the number of right argmax predictions. */
float mlp_loss(mlp *m, const uint8_t *labels, int batch, int *correct);
/* Accumulate the gradients of the mean loss (after mlp_loss) into m->grads. */
void mlp_backward(mlp *m, const uint8_t *labels, int batch);
void mlp_zero_grad(mlp *m);
void mlp_sgd(mlp *m, float lr, float momentum);
void mlp_adam(mlp *m, float lr, float beta1, float beta2, float eps);

#endif
