/*
 * mlp.c — forward, softmax cross-entropy, backward, SGD and Adam for mlp.h.
 * Layer l maps act[l] (batch x in) to act[l+1] (batch x out): z = act[l] W^T + b, with W
 * stored out x in; ReLU on every layer but the last.
 */
#include "mlp.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t mlp_rand(uint64_t *s) {
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static float mlp_gauss(uint64_t *s) {
    /* Box-Muller from two uniforms in (0, 1]. */
    double u1 = ((double)(mlp_rand(s) >> 11) + 1.0) / 9007199254740993.0;
    double u2 = (double)(mlp_rand(s) >> 11) / 9007199254740992.0;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

int mlp_init(mlp *m, const int *sizes, int nsizes, int max_batch, uint64_t seed) {
    memset(m, 0, sizeof *m);
    if (!sizes || nsizes < 2 || nsizes > MLP_MAX_LAYERS + 1 || max_batch <= 0)
        return -1;
    int widest = 0;
    for (int i = 0; i < nsizes; i++) {
        if (sizes[i] <= 0)
            return -1;
        m->sizes[i] = sizes[i];
        if (sizes[i] > widest)
            widest = sizes[i];
    }
    m->nlayers = nsizes - 1;
    m->max_batch = max_batch;
    for (int l = 0; l < m->nlayers; l++) {
        m->w_off[l] = m->nparams;
        m->nparams += (size_t)sizes[l] * (size_t)sizes[l + 1];
        m->b_off[l] = m->nparams;
        m->nparams += (size_t)sizes[l + 1];
    }
    m->params = calloc(m->nparams, sizeof(float));
    m->grads = calloc(m->nparams, sizeof(float));
    m->m = calloc(m->nparams, sizeof(float));
    m->v = calloc(m->nparams, sizeof(float));
    m->delta = calloc((size_t)max_batch * (size_t)widest, sizeof(float));
    m->delta_prev = calloc((size_t)max_batch * (size_t)widest, sizeof(float));
    int ok = m->params && m->grads && m->m && m->v && m->delta && m->delta_prev;
    for (int l = 0; l <= m->nlayers && ok; l++) {
        m->act[l] = calloc((size_t)max_batch * (size_t)sizes[l], sizeof(float));
        ok = m->act[l] != NULL;
    }
    if (!ok) {
        mlp_free(m);
        return -2;
    }
    uint64_t s = seed ? seed : 0x9E3779B97F4A7C15ull;
    for (int l = 0; l < m->nlayers; l++) {
        float scale = sqrtf(2.0f / (float)sizes[l]); /* He initialization for ReLU */
        size_t n = (size_t)sizes[l] * (size_t)sizes[l + 1];
        for (size_t i = 0; i < n; i++)
            m->params[m->w_off[l] + i] = scale * mlp_gauss(&s);
    }
    return 0;
}

void mlp_free(mlp *m) {
    if (!m)
        return;
    free(m->params);
    free(m->grads);
    free(m->m);
    free(m->v);
    free(m->delta);
    free(m->delta_prev);
    for (int l = 0; l <= MLP_MAX_LAYERS; l++)
        free(m->act[l]);
    memset(m, 0, sizeof *m);
}

void mlp_forward(mlp *m, const float *x, int batch) {
    memcpy(m->act[0], x, (size_t)batch * (size_t)m->sizes[0] * sizeof(float));
    for (int l = 0; l < m->nlayers; l++) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        const float *w = m->params + m->w_off[l];
        const float *b = m->params + m->b_off[l];
        int relu = l + 1 < m->nlayers;
        for (int r = 0; r < batch; r++) {
            const float *a = m->act[l] + (size_t)r * in;
            float *z = m->act[l + 1] + (size_t)r * out;
            for (int o = 0; o < out; o++) {
                const float *wo = w + (size_t)o * in;
                float sum = b[o];
                for (int i = 0; i < in; i++)
                    sum += wo[i] * a[i];
                z[o] = relu && sum < 0 ? 0 : sum;
            }
        }
    }
}

float mlp_loss(mlp *m, const uint8_t *labels, int batch, int *correct) {
    int classes = m->sizes[m->nlayers];
    double loss = 0;
    int right = 0;
    for (int r = 0; r < batch; r++) {
        float *p = m->act[m->nlayers] + (size_t)r * classes;
        int best = 0;
        float mx = p[0];
        for (int c = 1; c < classes; c++)
            if (p[c] > mx) {
                mx = p[c];
                best = c;
            }
        right += best == labels[r];
        double sum = 0;
        for (int c = 0; c < classes; c++) {
            p[c] = expf(p[c] - mx); /* shifted by the max: no overflow */
            sum += p[c];
        }
        for (int c = 0; c < classes; c++)
            p[c] = (float)(p[c] / sum);
        loss -= log(p[labels[r]] > 1e-30f ? p[labels[r]] : 1e-30f);
    }
    if (correct)
        *correct = right;
    return (float)(loss / batch);
}

void mlp_backward(mlp *m, const uint8_t *labels, int batch) {
    int classes = m->sizes[m->nlayers];
    /* d(mean loss)/d(logits) = (p - onehot) / batch */
    for (int r = 0; r < batch; r++)
        for (int c = 0; c < classes; c++) {
            float p = m->act[m->nlayers][(size_t)r * classes + c];
            m->delta[(size_t)r * classes + c] = (p - (c == labels[r] ? 1.0f : 0.0f)) / batch;
        }
    for (int l = m->nlayers - 1; l >= 0; l--) {
        int in = m->sizes[l], out = m->sizes[l + 1];
        const float *w = m->params + m->w_off[l];
        float *gw = m->grads + m->w_off[l];
        float *gb = m->grads + m->b_off[l];
        for (int r = 0; r < batch; r++) {
            const float *d = m->delta + (size_t)r * out;
            const float *a = m->act[l] + (size_t)r * in;
            for (int o = 0; o < out; o++) {
                float g = d[o];
                if (g == 0)
                    continue; /* dead ReLU units: nothing to add */
                float *gwo = gw + (size_t)o * in;
                for (int i = 0; i < in; i++)
                    gwo[i] += g * a[i];
                gb[o] += g;
            }
        }
        if (l == 0)
            break; /* no gradient needed for the input */
        /* delta_prev = delta W, masked by the ReLU of layer l's output (act[l] > 0). */
        memset(m->delta_prev, 0, (size_t)batch * (size_t)in * sizeof(float));
        for (int r = 0; r < batch; r++) {
            const float *d = m->delta + (size_t)r * out;
            float *dp = m->delta_prev + (size_t)r * in;
            for (int o = 0; o < out; o++) {
                float g = d[o];
                if (g == 0)
                    continue;
                const float *wo = w + (size_t)o * in;
                for (int i = 0; i < in; i++)
                    dp[i] += g * wo[i];
            }
            const float *a = m->act[l] + (size_t)r * in;
            for (int i = 0; i < in; i++)
                if (a[i] <= 0)
                    dp[i] = 0;
        }
        float *t = m->delta;
        m->delta = m->delta_prev;
        m->delta_prev = t;
    }
}

void mlp_zero_grad(mlp *m) {
    memset(m->grads, 0, m->nparams * sizeof(float));
}

void mlp_sgd(mlp *m, float lr, float momentum) {
    for (size_t i = 0; i < m->nparams; i++) {
        m->m[i] = momentum * m->m[i] + m->grads[i];
        m->params[i] -= lr * m->m[i];
    }
}

void mlp_adam(mlp *m, float lr, float beta1, float beta2, float eps) {
    m->adam_t++;
    float c1 = 1.0f - powf(beta1, (float)m->adam_t);
    float c2 = 1.0f - powf(beta2, (float)m->adam_t);
    for (size_t i = 0; i < m->nparams; i++) {
        float g = m->grads[i];
        m->m[i] = beta1 * m->m[i] + (1 - beta1) * g;
        m->v[i] = beta2 * m->v[i] + (1 - beta2) * g * g;
        float mh = m->m[i] / c1, vh = m->v[i] / c2;
        m->params[i] -= lr * mh / (sqrtf(vh) + eps);
    }
}
