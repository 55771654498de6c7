/*
 * test_mlp.c — the example MLP is a real model: its gradients match finite differences, and
 * trained on the engine (SGD and Adam) over the generated data its loss falls substantially
 * and its validation accuracy rises well above chance.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "dataset.h"
#include "mlp.h"
#include "trainer.h"
#include "stepwatch.h"

#include <math.h>
#include <string.h>

static void test_gradients_match_finite_differences(void **state) {
    const int sizes[] = {6, 5, 4, 3};
    mlp m;
    assert_int_equal(mlp_init(&m, sizes, 4, 4, 7), 0);
    float x[4 * 6];
    for (int i = 0; i < 24; i++)
        x[i] = (float)sin(i * 0.7) + 0.5f;
    const uint8_t y[4] = {0, 2, 1, 2};
    mlp_zero_grad(&m);
    mlp_forward(&m, x, 4);
    mlp_loss(&m, y, 4, NULL);
    mlp_backward(&m, y, 4);
    int checked = 0;
    for (size_t i = 0; i < m.nparams; i += 3) {
        float keep = m.params[i];
        const float h = 1e-2f;
        m.params[i] = keep + h;
        mlp_forward(&m, x, 4);
        double up = mlp_loss(&m, y, 4, NULL);
        m.params[i] = keep - h;
        mlp_forward(&m, x, 4);
        double down = mlp_loss(&m, y, 4, NULL);
        m.params[i] = keep;
        double numeric = (up - down) / (2 * h);
        double analytic = m.grads[i];
        double scale = fmax(1e-2, fabs(numeric) + fabs(analytic));
        if (fabs(numeric - analytic) / scale > 0.05)
            fail_msg("parameter %zu: analytic %g, numeric %g", i, analytic, numeric);
        checked++;
    }
    assert_true(checked > 20);
    mlp_free(&m);
    mlp bad;
    assert_int_equal(mlp_init(&bad, sizes, 1, 4, 7), -1); /* one size: no layer */
    const int zero[] = {6, 0, 3};
    assert_int_equal(mlp_init(&bad, zero, 3, 4, 7), -1);
}

static int record_epoch(sw_engine *e, sw_event ev, void *user) {
    trainer_epoch_done(user);
    return 0;
}

/* Train on generated data through the engine; returns the trainer's figures. */
static void train(int adam, float lr, trainer *t) {
    dataset tr, va;
    assert_int_equal(dataset_generate(&tr, 2000, 10, 11, 12), 0);
    assert_int_equal(dataset_generate(&va, 500, 10, 11, 13), 0);
    const int sizes[] = {784, 64, 10};
    assert_int_equal(trainer_init(t, sizes, 3, 32, adam, lr, 5), 0);
    loader tl, vl;
    assert_int_equal(loader_init(&tl, &tr, 32, 1, 0, 1), 0);
    assert_int_equal(loader_init(&vl, &va, 32, 0, 0, 1), 0);
    sw_engine_options eo = SW_ENGINE_OPTIONS_INIT;
    eo.max_epochs = 3;
    sw_engine *e = NULL;
    assert_int_equal(sw_engine_new(&eo, &e), 0);
    sw_data_source ts = {sizeof(sw_data_source), loader_next, loader_reset, &tl,
                         loader_length(&tl)};
    sw_data_source vs = {sizeof(sw_data_source), loader_next, loader_reset, &vl, -1};
    sw_engine_set_train(e, &ts, trainer_train_step, t);
    sw_engine_set_valid(e, &vs, trainer_valid_step, t);
    sw_engine_on(e, SW_EVENT_EPOCH_COMPLETED, "record", record_epoch, t, 1);
    assert_int_equal(sw_engine_run(e), 0);

    /* The step's parts were marked in the profiler. */
    sw_snapshot *s = NULL;
    assert_int_equal(sw_snapshot_take(sw_engine_profiler(e), &s), 0);
    const char *parts[] = {"data", "forward", "loss", "backward", "optimizer", "zero_grad"};
    for (int i = 0; i < 6; i++) {
        const sw_row *r = sw_snapshot_find(s, parts[i], "train");
        assert_non_null(r);
        assert_int_equal(r->stats.count + r->warmup.count, 3 * loader_length(&tl));
    }
    assert_non_null(sw_snapshot_find(s, "forward", "valid"));
    assert_null(sw_snapshot_find(s, "backward", "valid"));
    sw_snapshot_free(s);
    sw_engine_free(e);
    loader_free(&tl);
    loader_free(&vl);
    dataset_free(&tr);
    dataset_free(&va);
}

static void check_learned(const trainer *t, const char *name) {
    assert_int_equal(t->epochs, 3);
    print_message("%s: first batch loss %.3f, epoch losses %.3f %.3f %.3f, valid accuracy %.1f%%\n",
                  name, t->first_batch_loss, t->train_loss[0], t->train_loss[1], t->train_loss[2],
                  100 * t->valid_acc[2]);
    /* Chance is ln(10) = 2.30 and 10 %: the loss must fall to under a quarter. */
    assert_true(t->first_batch_loss > 1.5);
    assert_true(t->train_loss[2] < 0.25 * t->first_batch_loss);
    assert_true(t->train_loss[2] < t->train_loss[0]);
    assert_true(t->valid_acc[2] > 0.8);
}

static void test_sgd_learns(void **state) {
    trainer t;
    train(0, 0.05f, &t);
    check_learned(&t, "SGD");
    trainer_free(&t);
}

static void test_adam_learns(void **state) {
    trainer t;
    train(1, 1e-3f, &t);
    check_learned(&t, "Adam");
    trainer_free(&t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gradients_match_finite_differences),
        cmocka_unit_test(test_sgd_learns),
        cmocka_unit_test(test_adam_learns),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
