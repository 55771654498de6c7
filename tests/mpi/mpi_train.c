/*
 * mpi_train.c — a data-parallel training loop under MPI for the cross-rank tests: every
 * rank fetches a batch, runs forward and backward, all-reduces its gradients with
 * MPI_Allreduce and steps. One rank can be made slow by a known delay in its data (DATA_RANK)
 * or its forward (COMPUTE_RANK), DELAY_MS each step; KILL_RANK kills itself (SIGKILL) after
 * the last step, before the final round. Rank 0 writes the final cross-rank view as JSON to
 * DIR/view.json; every rank its run file DIR/run-{rank}.db, then DIR/done-{rank} (empty) once
 * stepwatch is done, before MPI_Finalize: with a rank dead, OpenMPI's MPI_Finalize can wait
 * for it forever (its closing fence), which the test must not mistake for stepwatch's. The
 * loop times its own data and forward per steady step too (DIR/own-{rank}, "data_ns
 * forward_ns", the means): a loaded machine stretches the sleeps, and the test holds
 * stepwatch's blame to what the loop itself measured.
 *
 *   mpirun -np 4 mpi_train DIR        (STEPS, WARMUP, AGGREGATE_EVERY, TIMEOUT_S too)
 */
#include <stepwatch/mpi.h>

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int env_int(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? atoi(v) : fallback;
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Some arithmetic standing for a layer's work. */
static void work(float *v, int n) {
    for (int i = 0; i < n; i++)
        v[i] = v[i] * 0.999f + 0.001f * (float)i;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    const char *dir = argc > 1 ? argv[1] : ".";
    int steps = env_int("STEPS", 10), delay = env_int("DELAY_MS", 40);
    char run_file[512], view[512];
    snprintf(run_file, sizeof run_file, "%s/run-{rank}.db", dir);
    snprintf(view, sizeof view, "%s/view.json", dir);
    sw_profiler *p = NULL;
    sw_options opts = {.size = sizeof(sw_options),
                       .name = "mpi_train",
                       .run_file = run_file,
                       .warmup_steps = (uint32_t)env_int("WARMUP", 2)};
    if (sw_profiler_new(&opts, &p) != 0)
        return 1;
    FILE *out = rank == 0 ? fopen(view, "w") : NULL;
    sw_mpi_options mo = {.size = sizeof(sw_mpi_options),
                         .aggregate_every = (uint32_t)env_int("AGGREGATE_EVERY", 0),
                         .timeout_s = env_int("TIMEOUT_S", 30),
                         .format = SW_FORMAT_JSON,
                         .out = out};
    int rc = sw_mpi_attach(p, &mo);
    if (rc != 0) {
        fprintf(stderr, "sw_mpi_attach: %s\n", sw_strerror(rc));
        return 1;
    }
    enum { N = 1 << 14 };
    static float weights[N], grads[N];
    int warmup = (int)opts.warmup_steps;
    uint64_t own_data = 0, own_forward = 0; /* the loop's own clock, steady steps */
    sw_phase_begin(p, SW_PHASE_TRAIN);
    for (int step = 0; step < steps; step++) {
        sw_step_begin(p, 32);
        uint64_t t0 = now_ns();
        SW_SCOPE(p, "data") {
            if (rank == env_int("DATA_RANK", -1))
                sleep_ms(delay);
        }
        uint64_t t1 = now_ns();
        SW_SCOPE(p, "forward") {
            work(weights, N);
            if (rank == env_int("COMPUTE_RANK", -1))
                sleep_ms(delay);
        }
        if (step >= warmup) {
            own_data += t1 - t0;
            own_forward += now_ns() - t1;
        }
        SW_SCOPE(p, "backward") {
            work(grads, N);
            MPI_Allreduce(MPI_IN_PLACE, grads, N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        }
        SW_SCOPE(p, "optimizer") {
            work(weights, N);
        }
        sw_step_end(p);
    }
    sw_phase_end(p, SW_PHASE_TRAIN);
    if (rank == env_int("KILL_RANK", -1))
        raise(SIGKILL);
    sw_profiler_free(p); /* the final round */
    if (out)
        fclose(out);
    char own[512];
    snprintf(own, sizeof own, "%s/own-%d", dir, rank);
    FILE *mine = fopen(own, "w");
    if (mine && steps > warmup) {
        fprintf(mine, "%llu %llu\n", (unsigned long long)(own_data / (uint64_t)(steps - warmup)),
                (unsigned long long)(own_forward / (uint64_t)(steps - warmup)));
    }
    if (mine)
        fclose(mine);
    char done[512];
    snprintf(done, sizeof done, "%s/done-%d", dir, rank);
    FILE *marker = fopen(done, "w");
    if (marker)
        fclose(marker);
    MPI_Finalize();
    return 0;
}
