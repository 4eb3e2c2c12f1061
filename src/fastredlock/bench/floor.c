/* floor.c: the syscalls of a Redlock lock+unlock cycle and nothing else, as a C floor for the
 * benchmarks (see benchmarks/README.md).
 *
 * One non-blocking TCP_NODELAY connection per master (loopback only). A cycle writes
 * `SET key token NX PX ttl` to every master (one send each), poll(2)s until every master's reply
 * is in (one recv per master when they come together), counts the quorum, then writes the
 * project's owner-checked release (`EVALSHA <RELEASE> 1 key token`; with -b K >= 2, K pipelined
 * SETs in one send per master and one `EVALSHA <RELEASE_MANY> K keys... tokens...`, as
 * fastredlock's release_many does) and reads every reply. No retries, no validity maths, no
 * allocation in the loop: whatever a client does beyond this is its own cost.
 *
 * -W (not waiting for the release): the release is written and not waited for; each master's
 * answer to it is read in front of its answer to the next cycle's SET (one round trip per cycle,
 * the protocol floor of a pipelined release). A release that deleted fewer keys than were set is
 * still counted ("unreleased"), one cycle later; the last one is read before the report.
 *
 *   floor -n CYCLES -m host:port[,host:port...] -r release.lua [-R release_many.lua]
 *         [-b BATCH] [-t TTL_MS] [-d SECONDS] [-w WARMUP] [-W]
 *
 * prints one JSON line. The scripts are loaded with SCRIPT LOAD at start (their SHA comes back
 * from the masters); benchmarks/_floor.py writes them from fastredlock._scripts and builds this
 * file with `cc -O2`. The same source built with -shared is driven through ctypes by the
 * pytest-benchmark case (floor_open / floor_cycle / floor_close).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MAX_MASTERS 16
#define MAX_BATCH 1024
#define IN_SIZE 65536
#define IO_TIMEOUT_MS 2000

enum phase { PH_LOAD, PH_SET, PH_DEL, PH_DEL_MANY };

struct conn {
    int fd;
    size_t len;       /* bytes waiting in buf */
    int owed;         /* replies still owed this round */
    int seen;         /* replies read this round: reply k belongs to key k */
    int behind;       /* -W: release replies owed ahead of this round's (one per unwaited release) */
    char buf[IN_SIZE];
};

struct floor {
    int n, batch, ttl_ms, quorum;
    struct conn conns[MAX_MASTERS];
    char sha[41], sha_many[41];
    char prefix[34];                /* 32 random hex digits and ':', like fastredlock's tokens */
    unsigned long long count;
    char keys[MAX_BATCH][48], tokens[MAX_BATCH][64];
    int key_len[MAX_BATCH], token_len[MAX_BATCH];
    int votes[MAX_BATCH];
    long released;                  /* release replies that said "deleted" this cycle */
    int nowait;                     /* -W: releases are not waited for (their replies read later) */
    long set_behind;                /* -W: keys set by the cycle whose release is not read yet */
    char *out;                      /* request buffer, sized once */
    size_t out_cap, out_len;
    long sends, recvs, polls;
    char err[256];
};

static int fail(struct floor *f, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->err, sizeof f->err, fmt, ap);
    va_end(ap);
    return -1;
}

/* ---- RESP out: requests are built in f->out once per round ---- */

static void put(struct floor *f, const char *s, size_t n) {
    memcpy(f->out + f->out_len, s, n);
    f->out_len += n;
}

static void put_bulk(struct floor *f, const char *s, size_t n) {
    f->out_len += (size_t)sprintf(f->out + f->out_len, "$%zu\r\n", n);
    put(f, s, n);
    put(f, "\r\n", 2);
}

static void put_array(struct floor *f, long items) {
    f->out_len += (size_t)sprintf(f->out + f->out_len, "*%ld\r\n", items);
}

/* ---- RESP in: one reply at b[0..len) ----
 * Returns its size (0: not all there yet; -1: not a reply this client expects). *kind is its
 * first byte, *num the integer or bulk length, *body the bulk data or the line after the kind. */
static long parse_one(const char *b, size_t len, char *kind, long *num, const char **body) {
    const char *eol;
    if (len < 3)
        return 0;
    eol = memchr(b, '\r', len);
    if (eol == NULL || (size_t)(eol - b) + 2 > len)
        return 0;
    *kind = b[0];
    *body = b + 1;
    *num = 0;
    switch (b[0]) {
    case '+':
    case '-':
        return eol - b + 2;
    case ':':
        *num = strtol(b + 1, NULL, 10);
        return eol - b + 2;
    case '$':
        *num = strtol(b + 1, NULL, 10);
        if (*num < 0)
            return eol - b + 2;
        *body = eol + 2;
        if ((size_t)(eol - b) + 2 + (size_t)*num + 2 > len)
            return 0;
        return eol - b + 2 + *num + 2;
    default:
        return -1;
    }
}

/* What one reply means for the round it answers. */
static int take_reply(struct floor *f, struct conn *c, enum phase ph, char kind, long num, const char *body) {
    if (c->behind > 0) {            /* -W: an earlier release's reply comes first */
        c->behind--;
        ph = f->batch == 1 ? PH_DEL : PH_DEL_MANY;
    } else {
        c->seen++;
    }
    int k = c->seen - 1;
    if (kind == '-')
        return fail(f, "master replied with an error: %.*s", (int)strcspn(body, "\r"), body);
    switch (ph) {
    case PH_LOAD:
        if (kind != '$' || num != 40)
            return fail(f, "SCRIPT LOAD: unexpected reply");
        memcpy(k == 0 ? f->sha : f->sha_many, body, 40);
        return 0;
    case PH_SET:
        if (kind == '+')
            f->votes[k]++;          /* +OK */
        else if (!(kind == '$' && num == -1))
            return fail(f, "SET NX: unexpected reply");
        return 0;
    case PH_DEL:
        if (kind != ':')
            return fail(f, "EVALSHA RELEASE: unexpected reply");
        f->released += num;
        return 0;
    case PH_DEL_MANY:
        if (kind != '$' || num != f->batch)
            return fail(f, "EVALSHA RELEASE_MANY: unexpected reply");
        for (long i = 0; i < num; i++)
            f->released += body[i] == '1';
        return 0;
    }
    return -1;
}

/* Write f->out to every master (one send each unless a socket buffer is full). */
static int send_all(struct floor *f) {
    for (int i = 0; i < f->n; i++) {
        struct conn *c = &f->conns[i];
        size_t done = 0;
        while (done < f->out_len) {     /* one send unless the socket buffer is full */
            ssize_t w = send(c->fd, f->out + done, f->out_len - done, MSG_NOSIGNAL);
            f->sends++;
            if (w > 0) {
                done += (size_t)w;
            } else if (w < 0 && errno == EAGAIN) {
                struct pollfd p = {c->fd, POLLOUT, 0};
                f->polls++;
                if (poll(&p, 1, IO_TIMEOUT_MS) <= 0)
                    return fail(f, "master %d: cannot write", i);
            } else {
                return fail(f, "master %d: send: %s", i, strerror(errno));
            }
        }
    }
    return 0;
}

/* Write f->out to every master, then poll until each has sent `replies` (and any it owes from
 * releases not waited for). */
static int round_trip(struct floor *f, int replies, enum phase ph) {
    struct pollfd pfd[MAX_MASTERS];
    int waiting = 0;

    if (send_all(f) < 0)
        return -1;
    for (int i = 0; i < f->n; i++) {
        struct conn *c = &f->conns[i];
        c->owed = replies + c->behind;
        c->seen = 0;
        waiting += c->owed > 0;
    }
    while (waiting > 0) {
        int m = 0;
        for (int i = 0; i < f->n; i++) {
            if (f->conns[i].owed > 0) {
                pfd[m].fd = f->conns[i].fd;
                pfd[m].events = POLLIN;
                pfd[m].revents = 0;
                m++;
            }
        }
        f->polls++;
        int r = poll(pfd, (nfds_t)m, IO_TIMEOUT_MS);
        if (r == 0)
            return fail(f, "no reply within %d ms", IO_TIMEOUT_MS);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return fail(f, "poll: %s", strerror(errno));
        }
        for (int j = 0, i = 0; j < m; j++) {
            if (pfd[j].revents == 0)
                continue;
            while (f->conns[i].fd != pfd[j].fd)
                i++;
            struct conn *c = &f->conns[i];
            ssize_t got = recv(c->fd, c->buf + c->len, sizeof c->buf - c->len, 0);
            f->recvs++;
            if (got == 0)
                return fail(f, "master %d closed the connection", i);
            if (got < 0) {
                if (errno == EAGAIN || errno == EINTR)
                    continue;
                return fail(f, "master %d: recv: %s", i, strerror(errno));
            }
            c->len += (size_t)got;
            size_t at = 0;
            while (c->owed > 0) {
                char kind;
                long num;
                const char *body;
                long used = parse_one(c->buf + at, c->len - at, &kind, &num, &body);
                if (used < 0)
                    return fail(f, "master %d: malformed reply", i);
                if (used == 0)
                    break;
                if (take_reply(f, c, ph, kind, num, body) < 0)
                    return -1;
                at += (size_t)used;
                if (--c->owed == 0)
                    waiting--;
            }
            if (c->owed > 0 && at == 0 && c->len == sizeof c->buf)
                return fail(f, "master %d: reply too large", i);
            memmove(c->buf, c->buf + at, c->len - at);   /* nothing left, normally */
            c->len -= at;
        }
    }
    return 0;
}

/* ---- connections ---- */

/* Connect to host:port, refusing anything that does not resolve to a loopback address. */
static int dial(struct floor *f, const char *spec) {
    char host[256], *colon;
    struct addrinfo hints, *ai = NULL;
    int fd, one = 1;

    if (strlen(spec) >= sizeof host)
        return fail(f, "address too long: %s", spec);
    strcpy(host, spec);
    colon = strrchr(host, ':');
    if (colon == NULL)
        return fail(f, "expected host:port, got %s", spec);
    *colon = '\0';
    char *h = host;
    if (h[0] == '[' && colon > h && colon[-1] == ']') {   /* [::1]:port */
        h++;
        colon[-1] = '\0';
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(h, colon + 1, &hints, &ai) != 0 || ai == NULL)
        return fail(f, "cannot resolve %s", spec);
    int loopback = 0;
    if (ai->ai_family == AF_INET) {
        const unsigned char *a = (const unsigned char *)&((struct sockaddr_in *)ai->ai_addr)->sin_addr;
        loopback = a[0] == 127;
    } else if (ai->ai_family == AF_INET6) {
        loopback = IN6_IS_ADDR_LOOPBACK(&((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr);
    }
    if (!loopback) {
        freeaddrinfo(ai);
        return fail(f, "refusing %s: only loopback addresses (127.0.0.0/8, ::1) may be targeted", spec);
    }
    fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        int e = errno;
        freeaddrinfo(ai);
        if (fd >= 0)
            close(fd);
        return fail(f, "cannot connect to %s: %s", spec, strerror(e));
    }
    freeaddrinfo(ai);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return fd;
}

void floor_close(struct floor *f) {
    if (f == NULL)
        return;
    for (int i = 0; i < f->n; i++)
        if (f->conns[i].fd >= 0)
            close(f->conns[i].fd);
    free(f->out);
    free(f);
}

/* Connect to every master and SCRIPT LOAD the release script(s). NULL on error (message in err). */
struct floor *floor_open(const char *masters, int batch, int ttl_ms, const char *release,
                         const char *release_many, char *err, int err_len) {
    struct floor *f = calloc(1, sizeof *f);
    char list[4096], *save = NULL;
    unsigned char rnd[16];

    if (f == NULL)
        return NULL;
    f->batch = batch;
    f->ttl_ms = ttl_ms;
    if (batch < 1 || batch > MAX_BATCH)
        fail(f, "batch must be 1..%d", MAX_BATCH);
    else if (ttl_ms < 1)
        fail(f, "ttl must be positive");
    else if (release == NULL || (batch >= 2 && release_many == NULL))
        fail(f, "%s needed", batch >= 2 ? "the release and release-many scripts are" : "the release script is");
    else if (strlen(masters) >= sizeof list)
        fail(f, "master list too long");
    if (f->err[0])
        goto bad;
    strcpy(list, masters);
    for (char *spec = strtok_r(list, ",", &save); spec; spec = strtok_r(NULL, ",", &save)) {
        if (f->n == MAX_MASTERS) {
            fail(f, "at most %d masters", MAX_MASTERS);
            goto bad;
        }
        f->conns[f->n].fd = -1;
        int fd = dial(f, spec);
        if (fd < 0)
            goto bad;
        f->conns[f->n++].fd = fd;
    }
    if (f->n == 0) {
        fail(f, "no masters given");
        goto bad;
    }
    f->quorum = f->n / 2 + 1;
    /* a release of MAX_BATCH keys and tokens, or a script, whichever is larger */
    f->out_cap = (size_t)MAX_BATCH * 160 + 256 + strlen(release) + (release_many ? strlen(release_many) : 0);
    f->out = malloc(f->out_cap);
    if (f->out == NULL) {
        fail(f, "out of memory");
        goto bad;
    }
    FILE *ur = fopen("/dev/urandom", "rb");
    if (ur == NULL || fread(rnd, 1, sizeof rnd, ur) != sizeof rnd) {
        if (ur)
            fclose(ur);
        fail(f, "cannot read /dev/urandom");
        goto bad;
    }
    fclose(ur);
    for (int i = 0; i < 16; i++)
        sprintf(f->prefix + 2 * i, "%02x", rnd[i]);
    f->prefix[32] = ':';
    /* SCRIPT LOAD (both scripts in one write when batching): the masters answer with the SHAs */
    f->out_len = 0;
    put_array(f, 3), put_bulk(f, "SCRIPT", 6), put_bulk(f, "LOAD", 4), put_bulk(f, release, strlen(release));
    if (batch >= 2) {
        put_array(f, 3), put_bulk(f, "SCRIPT", 6), put_bulk(f, "LOAD", 4);
        put_bulk(f, release_many, strlen(release_many));
    }
    if (round_trip(f, batch >= 2 ? 2 : 1, PH_LOAD) < 0)
        goto bad;
    f->sends = f->recvs = f->polls = 0;
    return f;
bad:
    if (err != NULL && err_len > 0)
        snprintf(err, (size_t)err_len, "%s", f->err);
    floor_close(f);
    return NULL;
}

/* The acquire round: SET NX PX of `batch` fresh keys on every master. Returns how many keys got a
 * quorum, or -1 on an I/O or protocol error (floor_error says which). */
int floor_lock(struct floor *f) {
    int b = f->batch;
    char ttl[16];
    int ttl_len = sprintf(ttl, "%d", f->ttl_ms);

    f->count++;
    f->out_len = 0;
    for (int k = 0; k < b; k++) {
        if (b == 1) {
            f->key_len[k] = sprintf(f->keys[k], "floor:%.32s:%llx", f->prefix, f->count);
            f->token_len[k] = sprintf(f->tokens[k], "%.33s%llx", f->prefix, f->count);
        } else {
            f->key_len[k] = sprintf(f->keys[k], "floor:%.32s:%llx.%x", f->prefix, f->count, k);
            f->token_len[k] = sprintf(f->tokens[k], "%.33s%llx.%x", f->prefix, f->count, k);
        }
        f->votes[k] = 0;
        put(f, "*6\r\n$3\r\nSET\r\n", 13);
        put_bulk(f, f->keys[k], (size_t)f->key_len[k]);
        put_bulk(f, f->tokens[k], (size_t)f->token_len[k]);
        put(f, "$2\r\nNX\r\n$2\r\nPX\r\n", 16);
        put_bulk(f, ttl, (size_t)ttl_len);
    }
    f->released = 0;                /* -W: the previous release's replies come in this round */
    if (round_trip(f, b, PH_SET) < 0)
        return -1;
    int held = 0;
    for (int k = 0; k < b; k++)
        held += f->votes[k] >= f->quorum;
    return held;
}

/* The release round for the keys of the last floor_lock, on every master (a key that missed its
 * quorum too: Redlock cleans up after a failed acquire). One EVALSHA RELEASE for one key, one
 * EVALSHA RELEASE_MANY for several, as fastredlock's release_many. Returns how many keys were not
 * deleted where they had been set (0 when all went well), or -1 on an error. */
int floor_unlock(struct floor *f) {
    int b = f->batch;
    long set = 0;

    f->out_len = 0;
    f->released = 0;
    if (b == 1) {
        put(f, "*5\r\n$7\r\nEVALSHA\r\n", 17);
        put_bulk(f, f->sha, 40);
        put(f, "$1\r\n1\r\n", 7);
        put_bulk(f, f->keys[0], (size_t)f->key_len[0]);
        put_bulk(f, f->tokens[0], (size_t)f->token_len[0]);
    } else {
        char nk[16];
        put_array(f, 3 + 2L * b);
        put(f, "$7\r\nEVALSHA\r\n", 13);
        put_bulk(f, f->sha_many, 40);
        put_bulk(f, nk, (size_t)sprintf(nk, "%d", b));
        for (int k = 0; k < b; k++)
            put_bulk(f, f->keys[k], (size_t)f->key_len[k]);
        for (int k = 0; k < b; k++)
            put_bulk(f, f->tokens[k], (size_t)f->token_len[k]);
    }
    for (int k = 0; k < b; k++)
        set += f->votes[k];
    if (f->nowait) {                /* write it, read its replies with the next round's */
        if (send_all(f) < 0)
            return -1;
        for (int i = 0; i < f->n; i++)
            f->conns[i].behind++;
        f->set_behind = set;
        return 0;
    }
    if (round_trip(f, 1, b == 1 ? PH_DEL : PH_DEL_MANY) < 0)
        return -1;
    return (int)(set - f->released);
}

/* -W: keys of the previous cycle's release that were set but not deleted, once its replies were
 * read (by the round just run); 0 when all went well. */
static long behind_missed(struct floor *f) {
    long missed = f->set_behind - f->released;
    f->set_behind = 0;
    f->released = 0;
    return missed;
}

/* -W: read the replies of the last release (an empty round). Returns what behind_missed does. */
long floor_settle(struct floor *f) {
    f->out_len = 0;
    int owed = 0;
    for (int i = 0; i < f->n; i++)
        owed += f->conns[i].behind;
    if (owed == 0)
        return 0;
    if (round_trip(f, 0, PH_SET) < 0)
        return -1;
    return behind_missed(f);
}

/* One lock+unlock cycle (the ctypes entry point): keys held, or -1 on an error or a lost delete. */
int floor_cycle(struct floor *f) {
    int held = floor_lock(f);
    if (held < 0)
        return -1;
    long late = f->nowait ? behind_missed(f) : 0;
    if (late != 0)
        return fail(f, "%ld key(s) not deleted by the release before", late), -1;
    int missed = floor_unlock(f);
    if (missed != 0)
        return missed < 0 ? -1 : (fail(f, "%d key(s) not deleted by the release", missed), -1);
    return held;
}

const char *floor_error(struct floor *f) { return f->err; }

/* ---- the command line ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* nearest-rank percentile of sorted values (the same rule as benchmarks/_worker.py) */
static double pct(const double *v, long n, double q) {
    long i = (long)(q / 100.0 * (double)n + 0.5 + 0.5) - 1;
    if (n == 0)
        return 0.0;
    if (i < 0)
        i = 0;
    if (i > n - 1)
        i = n - 1;
    return v[i];
}

static char *slurp(const char *path) {
    FILE *fp = fopen(path, "rb");
    char *s;
    long n;
    if (fp == NULL || fseek(fp, 0, SEEK_END) != 0 || (n = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET) != 0) {
        if (fp)
            fclose(fp);
        return NULL;
    }
    s = malloc((size_t)n + 1);
    if (s == NULL || fread(s, 1, (size_t)n, fp) != (size_t)n) {
        fclose(fp);
        free(s);
        return NULL;
    }
    fclose(fp);
    s[n] = '\0';
    return s;
}

static int usage(void) {
    fprintf(stderr, "usage: floor -n CYCLES -m host:port[,host:port...] -r release.lua [-R release_many.lua]\n"
                    "             [-b BATCH] [-t TTL_MS] [-d MAX_SECONDS] [-w WARMUP_CYCLES] [-W]\n"
                    "Loopback masters only. Prints one JSON line.\n");
    return 2;
}

int main(int argc, char **argv) {
    long cycles = 0, warmup = 100;
    int batch = 1, ttl_ms = 10000, opt;
    double max_s = 0.0;
    const char *masters = NULL, *release_path = NULL, *many_path = NULL;
    char *release = NULL, *release_many = NULL, err[256] = "";

    int nowait = 0;

    while ((opt = getopt(argc, argv, "n:m:b:t:d:w:r:R:Wh")) != -1) {
        switch (opt) {
        case 'n': cycles = atol(optarg); break;
        case 'm': masters = optarg; break;
        case 'b': batch = atoi(optarg); break;
        case 't': ttl_ms = atoi(optarg); break;
        case 'd': max_s = atof(optarg); break;
        case 'w': warmup = atol(optarg); break;
        case 'r': release_path = optarg; break;
        case 'R': many_path = optarg; break;
        case 'W': nowait = 1; break;
        default: return usage();
        }
    }
    if (cycles < 1 || masters == NULL || release_path == NULL || warmup < 0)
        return usage();
    if ((release = slurp(release_path)) == NULL) {
        fprintf(stderr, "floor: cannot read %s\n", release_path);
        return 2;
    }
    if (many_path != NULL && (release_many = slurp(many_path)) == NULL) {
        fprintf(stderr, "floor: cannot read %s\n", many_path);
        return 2;
    }
    struct floor *f = floor_open(masters, batch, ttl_ms, release, release_many, err, sizeof err);
    if (f == NULL) {
        fprintf(stderr, "floor: %s\n", err);
        return strstr(err, "refusing") ? 2 : 1;
    }
    f->nowait = nowait;
    for (long i = 0; i < warmup; i++) {
        if (floor_cycle(f) < 0) {
            fprintf(stderr, "floor: warm-up: %s\n", f->err);
            return 1;
        }
    }
    f->sends = f->recvs = f->polls = 0;

    long cap = cycles < 65536 ? cycles : 65536, done = 0, fails = 0, unreleased = 0;
    double *acq = malloc(sizeof(double) * (size_t)cap), *rel = malloc(sizeof(double) * (size_t)cap);
    double *cyc = malloc(sizeof(double) * (size_t)cap);
    struct rusage ru0, ru1;
    getrusage(RUSAGE_SELF, &ru0);
    double t0 = now_s(), deadline = max_s > 0 ? t0 + max_s : 0.0, a = t0;
    while (done < cycles) {
        if (done == cap) {
            cap *= 2;
            acq = realloc(acq, sizeof(double) * (size_t)cap);
            rel = realloc(rel, sizeof(double) * (size_t)cap);
            cyc = realloc(cyc, sizeof(double) * (size_t)cap);
        }
        if (acq == NULL || rel == NULL || cyc == NULL) {
            fprintf(stderr, "floor: out of memory\n");
            return 1;
        }
        int held = floor_lock(f);
        double b = now_s();
        if (held >= 0 && nowait)
            unreleased += behind_missed(f);
        int missed = held < 0 ? -1 : floor_unlock(f);
        double c = now_s();
        if (missed < 0) {
            fprintf(stderr, "floor: cycle %ld: %s\n", done, f->err);
            return 1;
        }
        fails += batch - held;
        unreleased += missed;
        acq[done] = b - a;
        rel[done] = c - b;
        cyc[done] = c - a;
        a = c;
        done++;
        if (deadline > 0 && c >= deadline)
            break;
    }
    double wall = a - t0;
    getrusage(RUSAGE_SELF, &ru1);
    if (nowait) {                   /* the last release's replies, outside the timing */
        long late = floor_settle(f);
        if (late < 0) {
            fprintf(stderr, "floor: last release: %s\n", f->err);
            return 1;
        }
        unreleased += late;
    }
    qsort(acq, (size_t)done, sizeof(double), cmp_double);
    qsort(rel, (size_t)done, sizeof(double), cmp_double);
    qsort(cyc, (size_t)done, sizeof(double), cmp_double);
    double user = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec)
                  + (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec) * 1e-6;
    double sys = (double)(ru1.ru_stime.tv_sec - ru0.ru_stime.tv_sec)
                 + (double)(ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec) * 1e-6;
    printf("{\"floor\": \"c\", \"nowait\": %d, \"masters\": %d, \"batch\": %d, \"ttl_ms\": %d, \"cycles\": %ld, "
           "\"locks\": %ld, \"wall_s\": %.6f, \"cycles_per_s\": %.1f, \"locks_per_s\": %.1f, "
           "\"cycle_p50_us\": %.2f, \"cycle_p99_us\": %.2f, \"acq_p50_us\": %.2f, \"acq_p99_us\": %.2f, "
           "\"rel_p50_us\": %.2f, \"rel_p99_us\": %.2f, \"user_s\": %.6f, \"sys_s\": %.6f, "
           "\"fails\": %ld, \"unreleased\": %ld, "
           "\"syscalls_per_cycle\": {\"send\": %.2f, \"recv\": %.2f, \"poll\": %.2f}}\n",
           nowait, f->n, batch, ttl_ms, done, done * batch, wall, done / wall, done * batch / wall,
           pct(cyc, done, 50) * 1e6, pct(cyc, done, 99) * 1e6, pct(acq, done, 50) * 1e6,
           pct(acq, done, 99) * 1e6, pct(rel, done, 50) * 1e6, pct(rel, done, 99) * 1e6, user, sys,
           fails, unreleased,
           (double)f->sends / done, (double)f->recvs / done, (double)f->polls / done);
    floor_close(f);
    free(acq);
    free(rel);
    free(cyc);
    free(release);
    free(release_many);
    return 0;
}
