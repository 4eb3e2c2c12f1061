/* rttproxy.c: a loopback TCP proxy that holds every chunk it forwards for a fixed time, each way,
 * so that local masters answer with a chosen network round trip (see benchmarks/README.md, the
 * round-trip scenario). Built and driven by fastredlock.bench.rtt.
 *
 *   rttproxy -d DELAY_US host:port [host:port ...]
 *
 * listens on one free 127.0.0.1 port per target (loopback targets only) and prints one JSON line:
 * {"ports": [...], ...}. Every chunk read from either side of a connection is stamped with the time
 * it reached the proxy's socket (the kernel's receive timestamp) and written to the other side once
 * DELAY_US have passed since that stamp: a hold per chunk,
 * not a pause per loop turn, so a round trip through the proxy takes at least 2 x DELAY_US on top of
 * the loopback one, and chunks read together leave together. Order is kept: the delay is the same
 * for every chunk, so one FIFO of all chunks is also ordered by due time. A close is passed on in
 * order like data.
 *
 * One thread, no busy waiting: epoll_pwait2 (nanosecond timeouts) sleeps until the next chunk is
 * due, or, on kernels without it, epoll_wait on a timerfd armed for that time; the timer slack is
 * set to 1 ns so the kernel does not round wake-ups up by its default 50 us, and the timer is set
 * a little early by how late wake-ups have been coming (see lead_ns): a chunk still never leaves
 * before it is due.
 *
 * Standard input is the control channel: a line "stats" prints one JSON line about the time since
 * the previous "stats" (chunks and bytes forwarded, the hold times' p50 / p99 / max in us, the
 * proxy's own user and system CPU seconds, wake-ups, the current lead); end of input ends the
 * proxy, so it never outlives the process that started it.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#ifndef SYS_epoll_pwait2
#define SYS_epoll_pwait2 441
#endif

#define MAX_TARGETS 64
#define READ_SIZE 65536
#define MAX_EVENTS 64
#define HIST_US 100000 /* hold-time histogram: 1 us buckets up to 100 ms, then one overflow bucket */

enum kind { K_LISTEN, K_SIDE, K_CONTROL, K_TIMER, K_NESTED };

struct tag {
    enum kind kind; /* first member of everything registered with epoll */
};

struct listener {
    struct tag t;
    int fd, port;
    struct sockaddr_in target;
};

struct pair;

struct side {
    struct tag t;
    int fd;
    int idx;           /* 0: the client's socket, 1: the master's */
    struct pair *p;
    int watched;       /* in the epoll set (out of it when it wants nothing: no EPOLLHUP spin) */
    int counted;       /* counted in n_want_out */
    int reading;       /* EPOLLIN wanted: the peer has not closed yet */
    int want_out;      /* EPOLLOUT wanted: bytes wait in out, or the connect is in progress */
    int close_after;   /* a close was released for this side: close the pair once out is empty */
    char *out;         /* bytes released to this socket that it has not taken yet */
    size_t out_len, out_cap;
};

struct pair {
    struct side s[2];
    int refs;          /* chunks in flight that point here, plus one while the pair is open */
    int open;
    int connecting;    /* the master side's connect is in progress */
    struct pair *next_dead;
};

struct chunk {
    struct chunk *next;
    struct pair *p;
    int to;                  /* index of the side the bytes go to */
    uint64_t arrived, due;   /* CLOCK_MONOTONIC ns */
    uint32_t len;            /* 0: the other side closed; pass the close on */
    char data[];
};

/* Two epoll sets: `ep` holds the connections' sockets and `epb`, which holds the listeners, the
 * control input and the timerfd. While a chunk is in flight the proxy sleeps on `epb` alone: it has
 * to wake for that chunk before the delay is over anyway, and what arrived meanwhile (stamped by
 * the kernel) is read then, in time, instead of costing a wake-up of its own. */
static int ep, epb, tfd = -1, use_pwait2 = 1, n_want_out;
static uint64_t delay_ns, armed_at;
/* How early the timer is set: a running estimate of the 25th percentile of how late the kernel
 * wakes us (tens of microseconds in a VM, even with 1 ns slack). Waking that much before a chunk
 * is due cuts how late it leaves in most cases; a chunk never leaves before it is due (woken too
 * early, the proxy sleeps again until the due time itself). */
static double lead_ns;
static struct chunk *head, *tail;
static struct pair *dead; /* freed after the batch of events that may still point at them */
static char rbuf[READ_SIZE];
static struct tag control_tag = {K_CONTROL}, timer_tag = {K_TIMER}, nested_tag = {K_NESTED};

/* the window since the last "stats" */
static uint32_t hist[HIST_US + 1];
static uint64_t n_chunks, n_bytes, n_wakeups, n_accepts, hold_max_ns;
static struct rusage ru_last;

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    fprintf(stderr, "rttproxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void watch_on(int efd, int op, int fd, uint32_t events, void *ptr) {
    struct epoll_event ev;
    memset(&ev, 0, sizeof ev);
    ev.events = events;
    ev.data.ptr = ptr;
    if (epoll_ctl(efd, op, fd, &ev) != 0 && op != EPOLL_CTL_DEL)
        die("epoll_ctl");
}

static void watch(int op, int fd, uint32_t events, void *ptr) {
    watch_on(ep, op, fd, events, ptr);
}

static void rewatch(struct side *s) {
    uint32_t ev = (s->reading ? EPOLLIN : 0) | (s->want_out ? EPOLLOUT : 0);
    if (s->want_out != s->counted) { /* a socket waiting to be writable: sleep on every socket */
        n_want_out += s->want_out ? 1 : -1;
        s->counted = s->want_out;
    }
    if (ev == 0) {
        if (s->watched)
            watch(EPOLL_CTL_DEL, s->fd, 0, s);
        s->watched = 0;
        return;
    }
    watch(s->watched ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, s->fd, ev, s);
    s->watched = 1;
}

static void unref(struct pair *p) {
    if (--p->refs == 0) {
        p->next_dead = dead;
        dead = p;
    }
}

static void close_pair(struct pair *p) {
    if (!p->open)
        return;
    p->open = 0;
    for (int i = 0; i < 2; i++) {
        n_want_out -= p->s[i].counted;
        close(p->s[i].fd); /* also leaves the epoll set */
        free(p->s[i].out);
        p->s[i].out = NULL;
    }
    unref(p);
}

static void keep(struct side *s, const char *data, size_t len) {
    if (s->out_len + len > s->out_cap) {
        size_t cap = s->out_cap ? s->out_cap : 4096;
        while (cap < s->out_len + len)
            cap *= 2;
        char *b = realloc(s->out, cap);
        if (b == NULL)
            die("realloc");
        s->out = b;
        s->out_cap = cap;
    }
    memcpy(s->out + s->out_len, data, len);
    s->out_len += len;
    if (!s->want_out) {
        s->want_out = 1;
        rewatch(s);
    }
}

/* Write what waits in s->out; close the pair when a released close finds it empty. */
static void flush(struct side *s) {
    struct pair *p = s->p;
    while (s->out_len > 0) {
        ssize_t w = send(s->fd, s->out, s->out_len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EAGAIN || errno == EINTR)
                return;
            close_pair(p);
            return;
        }
        memmove(s->out, s->out + w, s->out_len - (size_t)w);
        s->out_len -= (size_t)w;
    }
    if (s->want_out) {
        s->want_out = 0;
        rewatch(s);
    }
    if (s->close_after)
        close_pair(p);
}

/* A chunk is due: hand its bytes (or its close) to the destination socket. */
static void release(struct chunk *c, uint64_t now) {
    struct pair *p = c->p;
    if (p->open) {
        struct side *s = &p->s[c->to];
        uint64_t hold = now - c->arrived;
        hist[hold / 1000 < HIST_US ? hold / 1000 : HIST_US]++;
        if (hold > hold_max_ns)
            hold_max_ns = hold;
        n_chunks++;
        n_bytes += c->len;
        if (c->len == 0) {
            s->close_after = 1;
            if (s->out_len == 0 && !p->connecting)
                close_pair(p);
        } else if (s->out_len > 0 || p->connecting) {
            keep(s, c->data, c->len);
        } else {
            ssize_t w = send(s->fd, c->data, c->len, MSG_NOSIGNAL);
            if (w < 0 && errno != EAGAIN && errno != EINTR)
                close_pair(p);
            else if ((size_t)(w < 0 ? 0 : w) < c->len)
                keep(s, c->data + (w < 0 ? 0 : w), c->len - (size_t)(w < 0 ? 0 : w));
        }
    }
    unref(p);
    free(c);
}

static void enqueue(struct pair *p, int to, const char *data, size_t len, uint64_t arrived) {
    struct chunk *c = malloc(sizeof *c + len);
    if (c == NULL)
        die("malloc");
    c->next = NULL;
    c->p = p;
    c->to = to;
    c->arrived = arrived;
    c->due = arrived + delay_ns;
    c->len = (uint32_t)len;
    memcpy(c->data, data, len);
    p->refs++;
    if (tail)
        tail->next = c;
    else
        head = c;
    tail = c;
}

/* When the bytes just read arrived: the kernel's receive time (SO_TIMESTAMPNS, the latest of the
 * segments read, so no byte is held less than the delay), moved onto the monotonic clock; the time
 * of the read if there is none. The time the proxy took to wake up for them is then part of their
 * hold instead of being added to it. */
static uint64_t arrival(struct msghdr *msg, uint64_t mono) {
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec kt, rt;
            memcpy(&kt, CMSG_DATA(c), sizeof kt);
            clock_gettime(CLOCK_REALTIME, &rt);
            int64_t waited = (int64_t)(rt.tv_sec - kt.tv_sec) * 1000000000ll + (rt.tv_nsec - kt.tv_nsec);
            if (waited > 0 && (uint64_t)waited < mono && waited < 1000000000ll)
                return mono - (uint64_t)waited;
            return mono; /* the wall clock stepped: trust only the monotonic one */
        }
    }
    return mono;
}

static void readable(struct side *s) {
    struct pair *p = s->p;
    char ctrl[CMSG_SPACE(sizeof(struct timespec)) + 64];
    struct iovec iov = {rbuf, sizeof rbuf};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = ctrl;
    msg.msg_controllen = sizeof ctrl;
    ssize_t got = recvmsg(s->fd, &msg, 0);
    uint64_t t = now_ns();
    if (got < 0 && (errno == EAGAIN || errno == EINTR))
        return;
    if (got > 0)
        t = arrival(&msg, t);
    if (got <= 0) { /* end of stream or an error: the close goes the same way as the data */
        s->reading = 0;
        rewatch(s);
        enqueue(p, 1 - s->idx, NULL, 0, t);
        return;
    }
    enqueue(p, 1 - s->idx, rbuf, (size_t)got, t);
}

static void writable(struct side *s) {
    struct pair *p = s->p;
    if (p->connecting && s->idx == 1) {
        int err = 0;
        socklen_t len = sizeof err;
        getsockopt(s->fd, SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
            close_pair(p);
            return;
        }
        p->connecting = 0;
        if (s->out_len == 0) {
            s->want_out = 0;
            rewatch(s);
        }
        struct side *c = &p->s[0];
        if (c->close_after && c->out_len == 0) { /* a close released while connecting */
            close_pair(p);
            return;
        }
    }
    flush(s);
}

static void accept_one(struct listener *l) {
    int one = 1;
    int cfd = accept4(l->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (cfd < 0)
        return;
    int mfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (mfd < 0) {
        close(cfd);
        return;
    }
    setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(mfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(cfd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    setsockopt(mfd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    int r = connect(mfd, (struct sockaddr *)&l->target, sizeof l->target);
    if (r != 0 && errno != EINPROGRESS) {
        close(cfd);
        close(mfd);
        return;
    }
    struct pair *p = calloc(1, sizeof *p);
    if (p == NULL)
        die("calloc");
    p->refs = 1;
    p->open = 1;
    p->connecting = r != 0;
    for (int i = 0; i < 2; i++) {
        p->s[i].t.kind = K_SIDE;
        p->s[i].fd = i == 0 ? cfd : mfd;
        p->s[i].idx = i;
        p->s[i].p = p;
        p->s[i].reading = 1;
        p->s[i].want_out = i == 1 && p->connecting;
        rewatch(&p->s[i]);
    }
    n_accepts++;
}

static double secs(struct timeval a, struct timeval b) {
    return (double)(b.tv_sec - a.tv_sec) + (double)(b.tv_usec - a.tv_usec) * 1e-6;
}

static long hist_pct(double q) {
    uint64_t rank = (uint64_t)(q / 100.0 * (double)n_chunks + 0.5), seen = 0;
    if (rank < 1)
        rank = 1;
    for (long i = 0; i <= HIST_US; i++) {
        seen += hist[i];
        if (seen >= rank)
            return i;
    }
    return HIST_US;
}

static void stats(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("{\"chunks\": %llu, \"bytes\": %llu, \"hold_p50_us\": %ld, \"hold_p99_us\": %ld, "
           "\"hold_max_us\": %.1f, \"user_s\": %.6f, \"sys_s\": %.6f, \"wakeups\": %llu, \"accepts\": %llu, "
           "\"lead_us\": %.1f}\n",
           (unsigned long long)n_chunks, (unsigned long long)n_bytes, n_chunks ? hist_pct(50) : 0L,
           n_chunks ? hist_pct(99) : 0L, (double)hold_max_ns / 1000.0, secs(ru_last.ru_utime, ru.ru_utime),
           secs(ru_last.ru_stime, ru.ru_stime), (unsigned long long)n_wakeups, (unsigned long long)n_accepts,
           lead_ns / 1000.0);
    fflush(stdout);
    memset(hist, 0, sizeof hist);
    n_chunks = n_bytes = n_wakeups = n_accepts = hold_max_ns = 0;
    ru_last = ru;
}

static void control(void) {
    static char line[256];
    static size_t len;
    ssize_t got = read(0, line + len, sizeof line - 1 - len);
    if (got <= 0)
        exit(0); /* whoever started us is gone, or closed our input: stop */
    len += (size_t)got;
    char *nl;
    while ((nl = memchr(line, '\n', len)) != NULL) {
        *nl = '\0';
        if (strcmp(line, "stats") == 0)
            stats();
        len -= (size_t)(nl + 1 - line);
        memmove(line, nl + 1, len);
    }
    if (len == sizeof line - 1)
        len = 0;
}

/* When to wake for the next due chunk (0: nothing is in flight): `lead_ns` before it is due,
 * unless that has passed already (then at the due time). */
static uint64_t wake_time(uint64_t now) {
    if (head == NULL)
        return 0;
    uint64_t lead = (uint64_t)lead_ns;
    if (lead > delay_ns / 4)
        lead = delay_ns / 4;
    return head->due - lead > now ? head->due - lead : head->due;
}

/* A wake-up by the timer alone: how late it came moves the lead (a quantile estimate, q = 0.25). */
static void learn_lateness(uint64_t target, uint64_t now) {
    const double q = 0.25, step = 1000.0;
    double late = (double)(now - target);
    lead_ns += late < lead_ns ? -step * (1 - q) : step * q;
    if (lead_ns < 0)
        lead_ns = 0;
    if (lead_ns > 50000)
        lead_ns = 50000;
}

/* Sleep on `efd` until an event or `target` (0: no timeout). */
static int wait_events(int efd, struct epoll_event *evs, uint64_t now, uint64_t target) {
    if (use_pwait2) {
        struct timespec ts, *tp = NULL;
        if (target) {
            uint64_t left = target > now ? target - now : 0;
            ts.tv_sec = (time_t)(left / 1000000000ull);
            ts.tv_nsec = (long)(left % 1000000000ull);
            tp = &ts;
        }
        int n = (int)syscall(SYS_epoll_pwait2, efd, evs, MAX_EVENTS, tp, NULL, (size_t)8);
        if (n >= 0 || errno != ENOSYS)
            return n;
        use_pwait2 = 0; /* an older kernel: a timerfd instead */
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (tfd < 0)
            die("timerfd_create");
        watch_on(epb, EPOLL_CTL_ADD, tfd, EPOLLIN, &timer_tag);
    }
    if (target && target != armed_at) {
        struct itimerspec its;
        memset(&its, 0, sizeof its);
        its.it_value.tv_sec = (time_t)(target / 1000000000ull);
        its.it_value.tv_nsec = (long)(target % 1000000000ull);
        timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
        armed_at = target;
    }
    return epoll_wait(efd, evs, MAX_EVENTS, -1);
}

static void dispatch(struct epoll_event *evs, int k) {
    for (int i = 0; i < k; i++) {
        struct tag *t = evs[i].data.ptr;
        switch (t->kind) {
        case K_LISTEN:
            accept_one((struct listener *)t);
            break;
        case K_CONTROL:
            control();
            break;
        case K_TIMER: {
            uint64_t ticks;
            if (read(tfd, &ticks, sizeof ticks) < 0) { /* nothing: woken for a due chunk */ }
            break;
        }
        case K_NESTED: {
            struct epoll_event more[MAX_EVENTS];
            dispatch(more, epoll_wait(epb, more, MAX_EVENTS, 0));
            break;
        }
        case K_SIDE: {
            struct side *s = (struct side *)t;
            if (!s->p->open)
                break; /* closed by an earlier event of this batch */
            if (evs[i].events & EPOLLOUT)
                writable(s);
            if (s->p->open && s->reading && (evs[i].events & (EPOLLIN | EPOLLHUP | EPOLLERR)))
                readable(s);
            break;
        }
        }
    }
}

static int loopback_target(const char *spec, struct sockaddr_in *sa) {
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (colon == NULL || (size_t)(colon - spec) >= sizeof host)
        return -1;
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    if (strcmp(host, "localhost") == 0)
        strcpy(host, "127.0.0.1");
    memset(sa, 0, sizeof *sa);
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)atoi(colon + 1));
    if (inet_pton(AF_INET, host, &sa->sin_addr) != 1 || sa->sin_port == 0)
        return -1;
    return ((ntohl(sa->sin_addr.s_addr) >> 24) == 127) ? 0 : -2;
}

int main(int argc, char **argv) {
    static struct listener listeners[MAX_TARGETS];
    int n = 0, opt;
    long delay_us = -1;

    int force_timerfd = 0;

    while ((opt = getopt(argc, argv, "d:T")) != -1) {
        if (opt == 'd')
            delay_us = atol(optarg);
        else if (opt == 'T')
            force_timerfd = 1; /* what kernels before 5.11 get: for tests */
        else
            goto usage;
    }
    if (delay_us < 0 || optind >= argc || argc - optind > MAX_TARGETS)
        goto usage;
    delay_ns = (uint64_t)delay_us * 1000ull;
    signal(SIGPIPE, SIG_IGN);
    prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0); /* wake at the due time, not up to 50 us after it */
    ep = epoll_create1(EPOLL_CLOEXEC);
    epb = epoll_create1(EPOLL_CLOEXEC);
    if (ep < 0 || epb < 0)
        die("epoll_create1");
    watch(EPOLL_CTL_ADD, epb, EPOLLIN, &nested_tag);
    for (int i = optind; i < argc; i++, n++) {
        struct listener *l = &listeners[n];
        int r = loopback_target(argv[i], &l->target);
        if (r < 0) {
            fprintf(stderr, "rttproxy: %s %s\n", r == -2 ? "refusing (loopback targets only):" : "expected ipv4:port, got",
                    argv[i]);
            return 2;
        }
        struct sockaddr_in me;
        socklen_t len = sizeof me;
        memset(&me, 0, sizeof me);
        me.sin_family = AF_INET;
        me.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        l->t.kind = K_LISTEN;
        l->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (l->fd < 0 || bind(l->fd, (struct sockaddr *)&me, sizeof me) != 0 || listen(l->fd, 128) != 0
            || getsockname(l->fd, (struct sockaddr *)&me, &len) != 0)
            die("listen");
        l->port = ntohs(me.sin_port);
        watch_on(epb, EPOLL_CTL_ADD, l->fd, EPOLLIN, l);
    }
    watch_on(epb, EPOLL_CTL_ADD, 0, EPOLLIN, &control_tag);
    getrusage(RUSAGE_SELF, &ru_last);

    struct epoll_event probe;
    use_pwait2 = syscall(SYS_epoll_pwait2, ep, &probe, 1, &(struct timespec){0, 0}, NULL, (size_t)8) >= 0
                 || errno != ENOSYS;
    if (force_timerfd || !use_pwait2) {
        use_pwait2 = 0;
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (tfd < 0)
            die("timerfd_create");
        watch_on(epb, EPOLL_CTL_ADD, tfd, EPOLLIN, &timer_tag);
    }
    printf("{\"pid\": %d, \"delay_us\": %ld, \"wait\": \"%s\", \"ports\": [", (int)getpid(), delay_us,
           use_pwait2 ? "epoll_pwait2" : "timerfd");
    for (int i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", listeners[i].port);
    printf("]}\n");
    fflush(stdout);

    struct epoll_event evs[MAX_EVENTS];
    uint64_t now = now_ns();
    for (;;) {
        uint64_t target = wake_time(now);
        /* A chunk in flight: the wake-up for it comes before anything that arrives from now on is
         * due (target <= its due <= now + delay), so arrivals wait for it (unless a socket must be
         * watched for room to write). */
        int quiet = head != NULL && n_want_out == 0;
        int k = wait_events(quiet ? epb : ep, evs, now, target);
        if (k < 0 && errno != EINTR)
            die("epoll_wait");
        n_wakeups++;
        int by_timer = target != 0 && (k == 0 || (k == 1 && (evs[0].data.ptr == &timer_tag
                                                             || (!quiet && evs[0].data.ptr == &nested_tag))));
        dispatch(evs, k < 0 ? 0 : k);
        if (quiet) /* what arrived while we slept on epb alone */
            dispatch(evs, epoll_wait(ep, evs, MAX_EVENTS, 0));
        now = now_ns();
        if (by_timer && now >= target)
            learn_lateness(target, now);
        /* the clock is read again after each release: writing one takes about as long as the
         * client took between its writes to the masters, so a burst leaves in one wake-up */
        while (head && (head->due <= now || (head->due <= (now = now_ns())))) {
            struct chunk *c = head;
            head = c->next;
            if (head == NULL)
                tail = NULL;
            release(c, now);
        }
        while (dead) {
            struct pair *p = dead;
            dead = p->next_dead;
            free(p);
        }
    }
usage:
    fprintf(stderr, "usage: rttproxy -d DELAY_US [-T] host:port [host:port ...]   (loopback targets only;\n"
                    "       -T: a timerfd instead of epoll_pwait2's timeout)\n");
    return 2;
}
