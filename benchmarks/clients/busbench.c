/*
 * busbench: the benchmark clients, plain C on libdbus. One binary, one mode per measurement;
 * every mode prints one JSON object on stdout. Times are CLOCK_MONOTONIC.
 *
 *   busbench latency    --address BUS [--dest NAME] [--method gca|ats|devinfo] [-n N] [--warmup W] [--client ID] [--scope S]
 *   busbench throughput --address BUS [--dest NAME] [--inflight 128] [-n N] [--warmup W]
 *   busbench signout    --address BUS [--dest NAME] -k K [--procs P] [--rounds R] [--warmup W]
 *                       [--username U] [--password P]        (service must be signed in)
 *   busbench hold       --address BUS [--dest NAME] -k K     (K connections, each one GetCurrentAccount
 *                                                             and an AccountChanged match; until stdin closes)
 *   busbench firstcall  --address BUS [--dest NAME] -- COMMAND ARGS...   (start it, time to first reply)
 *   busbench sizes      --address BUS [--dest NAME]          (reply sizes in bytes)
 */
#define _GNU_SOURCE
#include <dbus/dbus.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define IFACE "io.shareddevice.Broker1"
#define PATH  "/io/shareddevice/Broker1"

static const char *address, *dest = IFACE, *method = "gca", *client = "mail-app", *scope = "User.Read";
static const char *username = "alice@contoso.example", *password = "alice-Demo-Passw0rd";
static long n = 10000, warmup = 1000, inflight = 128, K = 1, procs = 0, rounds = 20;

static double now_us(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static void die(const char *what, DBusError *e) { fprintf(stderr, "busbench: %s: %s\n", what, e && e->message ? e->message : "failed"); exit(1); }

static DBusConnection *connect_bus(void) {
    DBusError e; dbus_error_init(&e);
    DBusConnection *c = dbus_connection_open_private(address, &e);
    if (!c) die("connect", &e);
    if (!dbus_bus_register(c, &e)) die("register", &e);
    dbus_connection_set_exit_on_disconnect(c, FALSE);
    return c;
}

static DBusMessage *new_call(const char *member) { return dbus_message_new_method_call(dest, PATH, IFACE, member); }

static DBusMessage *make_call(const char *which) {
    DBusMessage *m; DBusMessageIter it, arr, dict;
    if (!strcmp(which, "gca")) {
        m = new_call("GetCurrentAccount");
        dbus_message_append_args(m, DBUS_TYPE_STRING, &client, DBUS_TYPE_INVALID);
    } else if (!strcmp(which, "ats") || !strcmp(which, "ats-refresh")) {
        const char *empty = "";
        m = new_call("AcquireTokenSilent");
        dbus_message_iter_init_append(m, &it);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &client);
        dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "s", &arr);
        dbus_message_iter_append_basic(&arr, DBUS_TYPE_STRING, &scope);
        dbus_message_iter_close_container(&it, &arr);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &empty);
        dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
        if (!strcmp(which, "ats-refresh")) {
            DBusMessageIter entry, var; const char *key = "forceRefresh"; dbus_bool_t yes = TRUE;
            dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
            dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &key);
            dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "b", &var);
            dbus_message_iter_append_basic(&var, DBUS_TYPE_BOOLEAN, &yes);
            dbus_message_iter_close_container(&entry, &var);
            dbus_message_iter_close_container(&dict, &entry);
        }
        dbus_message_iter_close_container(&it, &dict);
    } else if (!strcmp(which, "devinfo")) {
        m = new_call("GetDeviceInformation");
    } else if (!strcmp(which, "signout")) {
        const char *empty = "";
        m = new_call("SignOut");
        dbus_message_iter_init_append(m, &it);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &client);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &empty);
        dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
        dbus_message_iter_close_container(&it, &dict);
    } else if (!strcmp(which, "signin")) {
        m = new_call("SignInWithPassword");
        dbus_message_iter_init_append(m, &it);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &client);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &username);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &password);
        dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "s", &arr);
        dbus_message_iter_append_basic(&arr, DBUS_TYPE_STRING, &scope);
        dbus_message_iter_close_container(&it, &arr);
    } else { fprintf(stderr, "busbench: unknown method %s\n", which); exit(2); }
    return m;
}

static DBusMessage *call(DBusConnection *c, const char *which, int timeout_ms) {
    DBusError e; dbus_error_init(&e);
    DBusMessage *m = make_call(which);
    DBusMessage *r = dbus_connection_send_with_reply_and_block(c, m, timeout_ms, &e);
    dbus_message_unref(m);
    if (!r) die(which, &e);
    return r;
}

static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }
static double pct(double *v, long count, double p) { long i = (long)(p * (count - 1) + 0.5); return v[i]; }

static int mode_latency(void) {
    DBusConnection *c = connect_bus();
    double *v = malloc(sizeof(double) * n), sum = 0;
    for (long i = 0; i < warmup; i++) dbus_message_unref(call(c, method, 25000));
    for (long i = 0; i < n; i++) {
        double t0 = now_us();
        DBusMessage *r = call(c, method, 25000);
        v[i] = now_us() - t0;
        dbus_message_unref(r);
        sum += v[i];
    }
    qsort(v, n, sizeof *v, cmp);
    printf("{\"mode\":\"latency\",\"method\":\"%s\",\"n\":%ld,\"p50_us\":%.2f,\"p90_us\":%.2f,\"p99_us\":%.2f,\"mean_us\":%.2f,\"min_us\":%.2f,\"max_us\":%.2f}\n",
           method, n, pct(v, n, .5), pct(v, n, .9), pct(v, n, .99), sum / n, v[0], v[n - 1]);
    return 0;
}

/* Pipelined: keep `inflight` calls outstanding with dbus_connection_send, count replies. */
static double pipelined(DBusConnection *c, long total) {
    long sent = 0, done = 0, out = 0;
    double t0 = now_us();
    while (done < total) {
        while (out < inflight && sent < total) {
            DBusMessage *m = make_call(method);
            if (!dbus_connection_send(c, m, NULL)) { fprintf(stderr, "busbench: out of memory\n"); exit(1); }
            dbus_message_unref(m); sent++; out++;
        }
        if (!dbus_connection_read_write(c, -1)) { fprintf(stderr, "busbench: disconnected\n"); exit(1); }
        DBusMessage *r;
        while ((r = dbus_connection_pop_message(c))) {
            int t = dbus_message_get_type(r);
            if (t == DBUS_MESSAGE_TYPE_ERROR) { fprintf(stderr, "busbench: error reply %s\n", dbus_message_get_error_name(r)); exit(1); }
            if (t == DBUS_MESSAGE_TYPE_METHOD_RETURN) { done++; out--; }
            dbus_message_unref(r);
        }
    }
    return now_us() - t0;
}

static int mode_throughput(void) {
    DBusConnection *c = connect_bus();
    pipelined(c, warmup);
    double us = pipelined(c, n);
    printf("{\"mode\":\"throughput\",\"method\":\"%s\",\"n\":%ld,\"inflight\":%ld,\"seconds\":%.4f,\"calls_per_s\":%.1f}\n",
           method, n, inflight, us / 1e6, n / (us / 1e6));
    return 0;
}

/* ---- subscribers ---- */
/* Shared with the subscriber processes. `signed_out`/`signed_in`: signals received by all of them;
 * the one that completes a round's K writes a byte to `wake`, so that the driver sleeps in poll()
 * until then instead of polling the counters: a driver that woke every few microseconds would take
 * CPU from the subscribers it is timing. */
typedef struct { atomic_long ready, stop, signed_out, signed_in; } shm_head_t;
static shm_head_t *head; static double *stamps; static atomic_long *outs, *ins;
static int wake[2] = {-1, -1};

static void counted(atomic_long *total) {
    if ((atomic_fetch_add(total, 1) + 1) % K == 0 && wake[1] >= 0) {
        char byte = 1;
        (void)!write(wake[1], &byte, 1);
    }
}

static const char *reason_of(DBusMessage *m) {
    DBusMessageIter it; const char *reason = NULL;
    if (!dbus_message_iter_init(m, &it)) return NULL;
    dbus_message_iter_next(&it); dbus_message_iter_next(&it);
    if (dbus_message_iter_get_arg_type(&it) == DBUS_TYPE_STRING) dbus_message_iter_get_basic(&it, &reason);
    return reason;
}

static void handle_queued(DBusConnection *c, long idx) {
    DBusMessage *m;
    while ((m = dbus_connection_pop_message(c))) {
        if (dbus_message_is_signal(m, IFACE, "AccountChanged")) {
            double t = now_us();
            const char *reason = reason_of(m);
            if (reason && !strcmp(reason, "signed-out")) {
                long r = atomic_load(&outs[idx]);
                if (r < rounds + warmup) stamps[idx * (rounds + warmup) + r] = t;
                atomic_store(&outs[idx], r + 1);
                if (head) counted(&head->signed_out);
            } else if (reason && !strcmp(reason, "signed-in")) {
                atomic_fetch_add(&ins[idx], 1);
                if (head) counted(&head->signed_in);
            }
        }
        dbus_message_unref(m);
    }
}

static void subscriber_process(long first, long count, int call_first, int hold_stdin) {
    DBusConnection **cs = calloc(count, sizeof *cs);
    struct pollfd *pfd = calloc(count + 1, sizeof *pfd);
    for (long i = 0; i < count; i++) {
        DBusError e; dbus_error_init(&e);
        cs[i] = connect_bus();
        char match[512];
        snprintf(match, sizeof match, "type='signal',sender='%s',interface='" IFACE "',member='AccountChanged',path='" PATH "'", dest);
        dbus_bus_add_match(cs[i], match, &e);
        if (dbus_error_is_set(&e)) die("AddMatch", &e);
        if (call_first) dbus_message_unref(call(cs[i], "gca", 25000));
        int fd; dbus_connection_get_unix_fd(cs[i], &fd);
        pfd[i].fd = fd; pfd[i].events = POLLIN;
        if (head) atomic_fetch_add(&head->ready, 1);
    }
    if (hold_stdin) { pfd[count].fd = 0; pfd[count].events = POLLIN; printf("{\"mode\":\"hold\",\"connections\":%ld}\n", count); fflush(stdout); }
    for (;;) {
        for (long i = 0; i < count; i++) handle_queued(cs[i], first + i);
        if (head && atomic_load(&head->stop)) break;
        int k = poll(pfd, count + (hold_stdin ? 1 : 0), head ? 100 : -1);
        if (k < 0 && errno != EINTR) break;
        if (hold_stdin && pfd[count].revents) { char buf[64]; if (read(0, buf, sizeof buf) <= 0) break; }
        for (long i = 0; i < count; i++)
            if (pfd[i].revents) {
                if (!dbus_connection_read_write(cs[i], 0)) { pfd[i].fd = -1; continue; }
            }
    }
    exit(0);
}

/* Sleeps until `total` reaches `target` (a subscriber writes to `wake` when a round's K are in). */
static int wait_total(atomic_long *total, long target, double timeout_us) {
    double until = now_us() + timeout_us;
    for (;;) {
        if (atomic_load(total) >= target) return 1;
        double left = until - now_us();
        if (left <= 0) return 0;
        struct pollfd p = {.fd = wake[0], .events = POLLIN};
        if (poll(&p, 1, (int)(left / 1000) + 1) > 0) { char buf[64]; while (read(wake[0], buf, sizeof buf) > 0) {} }
    }
}

static int mode_signout(void) {
    long total = rounds + warmup;
    if (procs <= 0) procs = K < 10 ? K : 10;
    size_t bytes = sizeof(shm_head_t) + sizeof(double) * K * total + 2 * sizeof(atomic_long) * K;
    char *shm = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    head = (shm_head_t *)shm; stamps = (double *)(shm + sizeof *head);
    outs = (atomic_long *)(stamps + K * total); ins = outs + K;
    if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) { perror("busbench: pipe"); return 1; }
    pid_t *pids = calloc(procs, sizeof *pids);
    for (long p = 0, first = 0; p < procs; p++) {
        long count = K / procs + (p < K % procs);
        pid_t pid = fork();
        if (pid == 0) subscriber_process(first, count, 0, 0);
        pids[p] = pid; first += count;
    }
    double until = now_us() + 120e6;
    while (atomic_load(&head->ready) < K) { if (now_us() > until) { fprintf(stderr, "busbench: subscribers not ready\n"); return 1; } usleep(1000); }
    DBusConnection *c = connect_bus();
    double *lat = malloc(sizeof(double) * total), *reply = malloc(sizeof(double) * total);
    double *first_in = malloc(sizeof(double) * total);
    usleep(50000);
    int ok = 1;
    for (long r = 0; r < total && ok; r++) {
        double t0 = now_us();
        dbus_message_unref(call(c, "signout", 25000));
        reply[r] = now_us() - t0;
        if (!wait_total(&head->signed_out, K * (r + 1), 20e6)) { fprintf(stderr, "busbench: round %ld: not every subscriber got signed-out\n", r); ok = 0; break; }
        double last = 0, first = 1e300;
        for (long i = 0; i < K; i++) {
            double t = stamps[i * total + r];
            if (t > last) last = t;
            if (t < first) first = t;
        }
        lat[r] = last - t0;
        first_in[r] = first - t0;
        dbus_message_unref(call(c, "signin", 25000));
        if (!wait_total(&head->signed_in, K * (r + 1), 20e6)) { fprintf(stderr, "busbench: round %ld: not every subscriber got signed-in\n", r); ok = 0; break; }
        usleep(5000);
    }
    atomic_store(&head->stop, 1);
    for (long p = 0; p < procs; p++) waitpid(pids[p], NULL, 0);
    if (!ok) return 1;
    double *v = lat + warmup; qsort(v, rounds, sizeof *v, cmp);
    double *w = reply + warmup; qsort(w, rounds, sizeof *w, cmp);
    double *f = first_in + warmup; qsort(f, rounds, sizeof *f, cmp);
    /* first_p50_us: to the first subscriber, the service's own part; the rest is the bus's delivery. */
    printf("{\"mode\":\"signout\",\"k\":%ld,\"procs\":%ld,\"rounds\":%ld,\"p50_us\":%.2f,\"max_us\":%.2f,\"min_us\":%.2f,\"reply_p50_us\":%.2f,"
           "\"first_p50_us\":%.2f,\"samples_us\":[",
           K, procs, rounds, pct(v, rounds, .5), v[rounds - 1], v[0], pct(w, rounds, .5), pct(f, rounds, .5));
    for (long i = 0; i < rounds; i++) printf("%s%.1f", i ? "," : "", v[i]);
    printf("]}\n");
    return 0;
}

static int mode_firstcall(char **cmd) {
    DBusConnection *c = connect_bus();
    double t0 = now_us();
    pid_t pid = fork();
    if (pid == 0) {
        int nul = open("/dev/null", O_RDWR); dup2(nul, 1); dup2(nul, 2);
        execvp(cmd[0], cmd); _exit(127);
    }
    for (;;) {
        DBusError e; dbus_error_init(&e);
        DBusMessage *m = make_call("gca");
        DBusMessage *r = dbus_connection_send_with_reply_and_block(c, m, 30000, &e);
        dbus_message_unref(m);
        if (r) { dbus_message_unref(r); break; }
        if (!dbus_error_has_name(&e, DBUS_ERROR_SERVICE_UNKNOWN) && !dbus_error_has_name(&e, DBUS_ERROR_NAME_HAS_NO_OWNER)) die("first call", &e);
        dbus_error_free(&e);
        int status; if (waitpid(pid, &status, WNOHANG) == pid) { fprintf(stderr, "busbench: the service exited\n"); return 1; }
        usleep(200);
    }
    printf("{\"mode\":\"firstcall\",\"ms\":%.3f,\"pid\":%d}\n", (now_us() - t0) / 1e3, (int)pid);
    return 0;
}

static int mode_sizes(void) {
    DBusConnection *c = connect_bus();
    const char *which[] = {"gca", "ats", "devinfo"};
    printf("{\"mode\":\"sizes\"");
    for (int i = 0; i < 3; i++) {
        DBusMessage *r = call(c, which[i], 25000); char *buf; int len;
        dbus_message_marshal(r, &buf, &len);
        printf(",\"%s_bytes\":%d", which[i], len);
        dbus_free(buf); dbus_message_unref(r);
    }
    printf("}\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: busbench latency|throughput|signout|hold|firstcall|sizes [options]\n"); return 2; }
    const char *mode = argv[1]; char **rest = NULL;
    address = getenv("DBUS_SESSION_BUS_ADDRESS");
    for (int i = 2; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--")) { rest = argv + i + 1; break; }
        if (!v) { fprintf(stderr, "busbench: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--address")) address = v;
        else if (!strcmp(a, "--dest")) dest = v;
        else if (!strcmp(a, "--method")) method = v;
        else if (!strcmp(a, "--client")) client = v;
        else if (!strcmp(a, "--scope")) scope = v;
        else if (!strcmp(a, "--username")) username = v;
        else if (!strcmp(a, "--password")) password = v;
        else if (!strcmp(a, "-n")) n = atol(v);
        else if (!strcmp(a, "--warmup")) warmup = atol(v);
        else if (!strcmp(a, "--inflight")) inflight = atol(v);
        else if (!strcmp(a, "-k")) K = atol(v);
        else if (!strcmp(a, "--procs")) procs = atol(v);
        else if (!strcmp(a, "--rounds")) rounds = atol(v);
        else { fprintf(stderr, "busbench: unknown option %s\n", a); return 2; }
        i++;
    }
    if (!address) { fprintf(stderr, "busbench: no --address and no DBUS_SESSION_BUS_ADDRESS\n"); return 2; }
    signal(SIGPIPE, SIG_IGN);
    if (!strcmp(mode, "latency")) return mode_latency();
    if (!strcmp(mode, "throughput")) return mode_throughput();
    if (!strcmp(mode, "signout")) return mode_signout();
    if (!strcmp(mode, "hold")) subscriber_process(0, K, 1, 1);
    if (!strcmp(mode, "firstcall")) { if (!rest || !rest[0]) { fprintf(stderr, "busbench: firstcall needs -- COMMAND\n"); return 2; } return mode_firstcall(rest); }
    if (!strcmp(mode, "sizes")) return mode_sizes();
    fprintf(stderr, "busbench: unknown mode %s\n", mode); return 2;
}
