/* timer.c — sw_timer: an elapsed-time counter that can pause, resume and average per step. */
#include "stepwatch.h"

void sw_timer_init(sw_timer *t, int average) {
    t->average = average;
    sw_timer_reset(t);
}

void sw_timer_reset(sw_timer *t) {
    t->elapsed_ns = 0;
    t->steps = 0;
    t->running = 1;
    t->started_ns = sw_now_ns();
}

void sw_timer_pause(sw_timer *t) {
    if (!t->running)
        return;
    t->elapsed_ns += sw_now_ns() - t->started_ns;
    t->running = 0;
}

void sw_timer_resume(sw_timer *t) {
    if (t->running)
        return;
    t->running = 1;
    t->started_ns = sw_now_ns();
}

void sw_timer_step(sw_timer *t) {
    t->steps++;
}

double sw_timer_value(const sw_timer *t) {
    uint64_t total = t->elapsed_ns;
    if (t->running)
        total += sw_now_ns() - t->started_ns;
    double denominator = 1.0;
    if (t->average && t->steps > 1)
        denominator = (double)t->steps;
    return (double)total / 1e9 / denominator;
}
