/*
 * live_server.c — the live report's HTTP server (live_server.h) on libmicrohttpd, a
 * well-kept HTTP library (GNU, in Debian): it parses the requests, so this file only decides
 * what to answer. Chosen over civetweb because Debian packages it (libmicrohttpd-dev), it has
 * an option for every limit wanted here, and responses can be shared between connections.
 *
 * Two threads, neither of them the training's (the server runs in the `stepwatch` process,
 * never in the program it watches): the refresher builds the page, the data and the metrics
 * from the run file every REFRESH_MS (live_content.c) and swaps them in as three shared,
 * reference-counted responses; libmicrohttpd's own thread answers every connection from the
 * current ones, so a request costs no reading of the run file. Safe by default:
 *   - it listens on 127.0.0.1 unless told; anywhere else every path needs "/TOKEN/" first,
 *     a random 128-bit token printed once in the URL;
 *   - it answers exactly three paths to GET and HEAD (404 and 405 to anything else) and
 *     opens no file by a request's say;
 *   - bounded: CONNECTIONS at once, PER_IP of them from one address, REQUEST_MEMORY bytes
 *     for a request's headers (more: 431, closed), TIMEOUT_S of silence and it is closed.
 */
#include "live_server.h"

#include "common.h"
#include "live_content.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#ifdef SW_HAVE_MICROHTTPD
#include <microhttpd.h>

#define REFRESH_MS 2000
#define CONNECTIONS 48
#define PER_IP 12
#define REQUEST_MEMORY (16 * 1024)
#define TIMEOUT_S 10
#define BACKLOG 64

enum { DOC_PAGE = 0, DOC_DATA, DOC_METRICS, NDOCS };
static const char *const doc_paths[NDOCS] = {"", "data.json", "metrics"};
static const char *const doc_types[NDOCS] = {"text/html; charset=utf-8", "application/json",
                                             "text/plain; version=0.0.4; charset=utf-8"};

struct swcli_server {
    struct MHD_Daemon *daemon;
    int listen_fd;
    char prefix[40]; /* "/" or "/TOKEN/" */
    swcli_live_source source;
    char source_path[PATH_MAX];
    char pattern[PATH_MAX + 8];
    char scratch_dir[PATH_MAX], scratch[PATH_MAX + 16];
    int follow;
    pthread_t refresher;
    int refresher_started;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stopping, finished;              /* under lock */
    struct MHD_Response *current[NDOCS]; /* under lock; NULL before the first build */
    struct MHD_Response *not_found, *not_allowed, *unavailable;
};

/* ---- the answers ---- */

static struct MHD_Response *fixed_response(const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r) {
        MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
        MHD_add_response_header(r, "Cache-Control", "no-store");
    }
    return r;
}

/* The document a path names (after the prefix), or -1. */
static int doc_of(const swcli_server *s, const char *url) {
    size_t n = strlen(s->prefix);
    if (strncmp(url, s->prefix, n) != 0)
        return -1;
    for (int k = 0; k < NDOCS; k++)
        if (strcmp(url + n, doc_paths[k]) == 0)
            return k;
    return -1;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **state) {
    (void)version;
    (void)upload;
    (void)upload_size;
    (void)state;
    swcli_server *s = cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return MHD_queue_response(c, MHD_HTTP_METHOD_NOT_ALLOWED, s->not_allowed);
    int doc = doc_of(s, url);
    if (doc < 0)
        return MHD_queue_response(c, MHD_HTTP_NOT_FOUND, s->not_found);
    /* Held while queueing: the refresher never frees a response being handed out. */
    pthread_mutex_lock(&s->lock);
    struct MHD_Response *r = s->current[doc];
    enum MHD_Result rc = r ? MHD_queue_response(c, MHD_HTTP_OK, r)
                           : MHD_queue_response(c, MHD_HTTP_SERVICE_UNAVAILABLE, s->unavailable);
    pthread_mutex_unlock(&s->lock);
    return rc;
}

/* The path stays as the client sent it, %-escapes included: the three paths need none, so
 * "/%00" or "/%2e%2e/" are nothing this server has (404), never a name decoded into one. */
static size_t no_unescape(void *cls, struct MHD_Connection *c, char *s) {
    (void)cls;
    (void)c;
    return strlen(s);
}

/* ---- the refresher ---- */

static struct MHD_Response *doc_response(int doc, char *text, size_t len, const char *state) {
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(r, "Content-Type", doc_types[doc]);
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer"); /* the token stays here */
    MHD_add_response_header(r, "X-Stepwatch-Run", state);
    return r;
}

/* Build the documents once and swap them in; a build that fails keeps the last ones. The
 * state built, or -1 after a failure. */
static int refresh(swcli_server *s, int finished) {
    swcli_live_docs d;
    if (swcli_live_build(&s->source, &d) != 0)
        return -1;
    if (s->follow && d.state == SWCLI_RUN_COMPLETE && !finished)
        d.state = SWCLI_RUN_RUNNING; /* a rank completed; the program goes on */
    if (s->follow && finished && d.state == SWCLI_RUN_RUNNING)
        d.state = SWCLI_RUN_COMPLETE; /* the program ended without completing its file */
    const char *state = swcli_run_state_name(d.state);
    char *texts[NDOCS] = {d.page, d.data, d.metrics};
    size_t lens[NDOCS] = {d.page_len, d.data_len, d.metrics_len};
    struct MHD_Response *fresh[NDOCS], *old[NDOCS];
    int ok = 1;
    for (int k = 0; k < NDOCS; k++)
        ok &= (fresh[k] = doc_response(k, texts[k], lens[k], state)) != NULL;
    if (!ok) {
        for (int k = 0; k < NDOCS; k++)
            if (fresh[k])
                MHD_destroy_response(fresh[k]);
        return -1;
    }
    pthread_mutex_lock(&s->lock);
    for (int k = 0; k < NDOCS; k++) {
        old[k] = s->current[k];
        s->current[k] = fresh[k];
    }
    pthread_mutex_unlock(&s->lock);
    for (int k = 0; k < NDOCS; k++)
        if (old[k])
            MHD_destroy_response(old[k]); /* freed once the connections sending it are done */
    return (int)d.state;
}

static void *refresher_main(void *arg) {
    swcli_server *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->lock);
        int finished = s->finished, stopping = s->stopping;
        pthread_mutex_unlock(&s->lock);
        if (stopping)
            break;
        uint64_t started = sw_now_ns();
        int state = refresh(s, finished);
        uint64_t took_ns = sw_now_ns() - started;
        if (state == SWCLI_RUN_COMPLETE && (finished || !s->follow))
            break; /* the final report stays up */
        /* Every REFRESH_MS, or twice the time a build takes if longer: a huge run's rebuilds
         * take at most a third of one core. */
        uint64_t wait_ns = (uint64_t)REFRESH_MS * 1000000u;
        wait_ns = 2 * took_ns > wait_ns ? 2 * took_ns : wait_ns;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        uint64_t at = (uint64_t)until.tv_nsec + wait_ns;
        until.tv_sec += (time_t)(at / 1000000000u);
        until.tv_nsec = (long)(at % 1000000000u);
        pthread_mutex_lock(&s->lock);
        while (!s->stopping && s->finished == finished &&
               pthread_cond_timedwait(&s->wake, &s->lock, &until) == 0) {
        }
        pthread_mutex_unlock(&s->lock);
    }
    return NULL;
}

/* ---- listening ---- */

static int is_loopback(const struct sockaddr *a) {
    if (a->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    return a->sa_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)a)->sin6_addr);
}

/* A listening socket on bind:port; -1 after printing why. *loopback: only local clients. */
static int listen_on(const char *bind_addr, int port, int *loopback, int *bound_port) {
    char service[16];
    snprintf(service, sizeof service, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *list = NULL;
    int gai = getaddrinfo(bind_addr, service, &hints, &list);
    if (gai != 0) {
        swcli_error("serve: cannot listen on %s: %s", bind_addr, gai_strerror(gai));
        return -1;
    }
    int fd = -1, err = 0;
    for (struct addrinfo *a = list; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
        int one = 1;
        if (fd >= 0 && (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
                        bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, BACKLOG) != 0)) {
            err = errno;
            close(fd);
            fd = -1;
        }
        if (fd >= 0)
            *loopback = is_loopback(a->ai_addr);
    }
    freeaddrinfo(list);
    if (fd < 0) {
        swcli_error("serve: cannot listen on %s port %d: %s", bind_addr, port, strerror(err));
        return -1;
    }
    struct sockaddr_storage at;
    socklen_t len = sizeof at;
    getsockname(fd, (struct sockaddr *)&at, &len);
    *bound_port = ntohs(at.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&at)->sin6_port
                                                 : ((struct sockaddr_in *)&at)->sin_port);
    return fd;
}

/* "/" on the loopback, else "/TOKEN/" with 128 random bits. 0, or -1. */
static int make_prefix(swcli_server *s, int loopback) {
    if (loopback) {
        strcpy(s->prefix, "/");
        return 0;
    }
    unsigned char bits[16];
    if (getrandom(bits, sizeof bits, 0) != (ssize_t)sizeof bits) {
        swcli_error("serve: no random bytes for the access token: %s", strerror(errno));
        return -1;
    }
    char *o = s->prefix;
    *o++ = '/';
    for (size_t i = 0; i < sizeof bits; i++)
        o += sprintf(o, "%02x", bits[i]);
    strcpy(o, "/");
    return 0;
}

static void print_url(const swcli_server *s, const char *bind_addr, int port, int loopback) {
    char host[256];
    if (strcmp(bind_addr, "0.0.0.0") == 0 || strcmp(bind_addr, "::") == 0) {
        if (gethostname(host, sizeof host) != 0)
            strcpy(host, "localhost");
        host[sizeof host - 1] = '\0';
    } else {
        snprintf(host, sizeof host, strchr(bind_addr, ':') ? "[%s]" : "%s", bind_addr);
    }
    fprintf(stderr, "stepwatch: serving the live report at http://%s:%d%s\n", host, port,
            s->prefix);
    fprintf(stderr,
            "stepwatch: (beside the page: data.json, its data, and metrics, Prometheus' "
            "text%s)\n",
            loopback ? "" : "; keep the URL to yourself: its token is the only key");
    fflush(stderr);
}

/* ---- start and stop ---- */

static int prepare_source(swcli_server *s, const swcli_server_options *o) {
    struct stat st;
    snprintf(s->source_path, sizeof s->source_path, "%s", o->source);
    s->source.path = s->source_path;
    s->source.not_before = o->not_before;
    if (o->pattern)
        snprintf(s->pattern, sizeof s->pattern, "%s", o->pattern);
    else if (stat(o->source, &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(s->pattern, sizeof s->pattern, "%s/*.db", o->source);
    else
        return 0; /* one run file */
    s->source.pattern = s->pattern;
    const char *tmp = getenv("TMPDIR");
    snprintf(s->scratch_dir, sizeof s->scratch_dir, "%s/stepwatch-serve-XXXXXX",
             tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(s->scratch_dir)) {
        swcli_error("serve: cannot make a scratch directory: %s", strerror(errno));
        s->scratch_dir[0] = '\0';
        return -1;
    }
    snprintf(s->scratch, sizeof s->scratch, "%s/merged.db", s->scratch_dir);
    s->source.scratch = s->scratch;
    return 0;
}

int swcli_server_start(const swcli_server_options *o, swcli_server **out) {
    *out = NULL;
    swcli_server *s = calloc(1, sizeof *s);
    if (!s) {
        swcli_error("out of memory");
        return -1;
    }
    s->listen_fd = -1;
    s->follow = o->follow;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->wake, NULL);
    const char *bind_addr = o->bind ? o->bind : "127.0.0.1";
    int loopback = 1, port = 0;
    int ok = prepare_source(s, o) == 0 &&
             (s->listen_fd = listen_on(bind_addr, o->port, &loopback, &port)) >= 0 &&
             make_prefix(s, loopback) == 0;
    s->not_found = fixed_response("not found: this server answers the live report's page, "
                                  "data.json and metrics only\n");
    s->not_allowed = fixed_response("method not allowed: GET or HEAD only\n");
    s->unavailable = fixed_response("the run file cannot be read yet; try again\n");
    ok = ok && s->not_found && s->not_allowed && s->unavailable;
    /* The server's threads start with every signal blocked, so Ctrl-C and SIGTERM reach the
     * command's own thread (swcli_server_wait), never kill it in the middle of an answer. */
    sigset_t all, before;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &before);
    if (ok)
        s->daemon = MHD_start_daemon(
            MHD_USE_AUTO_INTERNAL_THREAD, 0, NULL, NULL, answer, s, MHD_OPTION_LISTEN_SOCKET,
            s->listen_fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONNECTIONS,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PER_IP,
            MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)REQUEST_MEMORY,
            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)TIMEOUT_S, MHD_OPTION_UNESCAPE_CALLBACK,
            no_unescape, NULL, MHD_OPTION_END);
    if (ok && !s->daemon)
        swcli_error("serve: libmicrohttpd would not start on %s port %d", bind_addr, port);
    if (s->daemon)
        s->listen_fd = -1; /* the daemon's now: MHD_stop_daemon closes it */
    ok = ok && s->daemon;
    if (ok) {
        refresh(s, 0); /* the first documents before the URL is given */
        s->refresher_started = pthread_create(&s->refresher, NULL, refresher_main, s) == 0;
        ok = s->refresher_started;
    }
    pthread_sigmask(SIG_SETMASK, &before, NULL);
    if (!ok) {
        swcli_server_stop(s);
        return -1;
    }
    print_url(s, bind_addr, port, loopback);
    *out = s;
    return 0;
}

/* Set *flag (finished or stopping) under the lock and wake the refresher. */
static void tell(swcli_server *s, int *flag) {
    pthread_mutex_lock(&s->lock);
    *flag = 1;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&s->lock);
}

void swcli_server_finish(swcli_server *s) {
    if (s)
        tell(s, &s->finished);
}

void swcli_server_stop(swcli_server *s) {
    if (!s)
        return;
    tell(s, &s->stopping);
    if (s->refresher_started)
        pthread_join(s->refresher, NULL);
    if (s->daemon)
        MHD_stop_daemon(s->daemon);
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    struct MHD_Response *fixed[] = {s->not_found, s->not_allowed, s->unavailable};
    for (int k = 0; k < NDOCS; k++)
        if (s->current[k])
            MHD_destroy_response(s->current[k]);
    for (size_t k = 0; k < sizeof fixed / sizeof *fixed; k++)
        if (fixed[k])
            MHD_destroy_response(fixed[k]);
    if (s->scratch_dir[0]) {
        unlink(s->scratch);
        char side[PATH_MAX + 32];
        snprintf(side, sizeof side, "%s-wal", s->scratch);
        unlink(side);
        snprintf(side, sizeof side, "%s-shm", s->scratch);
        unlink(side);
        rmdir(s->scratch_dir);
    }
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void swcli_server_wait(double seconds) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGINT, SIG_DFL); /* an ignored signal would never arrive */
    signal(SIGTERM, SIG_DFL);
    struct timespec end;
    clock_gettime(CLOCK_MONOTONIC, &end);
    end.tv_sec += (time_t)seconds;
    end.tv_nsec += (long)((seconds - (double)(time_t)seconds) * 1e9);
    for (;;) {
        struct timespec now, left = {0, 0};
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (seconds >= 0) {
            double s = (double)(end.tv_sec - now.tv_sec) + (end.tv_nsec - now.tv_nsec) / 1e9;
            if (s <= 0)
                return;
            left.tv_sec = (time_t)s;
            left.tv_nsec = (long)((s - (double)left.tv_sec) * 1e9);
        }
        int got = seconds >= 0 ? sigtimedwait(&stop, NULL, &left) : sigwaitinfo(&stop, NULL);
        if (got == SIGINT || got == SIGTERM)
            return;
    }
}

#else /* built without libmicrohttpd */

int swcli_server_start(const swcli_server_options *o, swcli_server **out) {
    (void)o;
    *out = NULL;
    swcli_error("serve: this stepwatch was built without libmicrohttpd, which the live report's "
                "server needs (Debian: apt-get install libmicrohttpd-dev, then rebuild)");
    return -1;
}

void swcli_server_finish(swcli_server *s) {
    (void)s;
}

void swcli_server_stop(swcli_server *s) {
    (void)s;
}

void swcli_server_wait(double seconds) {
    (void)seconds;
}

#endif
