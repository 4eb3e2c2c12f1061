/* The system calls of the C I/O twin (fastredlock._io_c): monotonic time, non-blocking connect.
   Plain C, included by _io_c.pyx. */
#ifndef FASTREDLOCK_IO_C_SYS_H
#define FASTREDLOCK_IO_C_SYS_H

#include <sys/types.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <netdb.h>
#include <poll.h>
#include <fcntl.h>
#include <unistd.h>
#include <errno.h>
#include <string.h>
#include <stddef.h>
#include <time.h>

#ifndef MSG_NOSIGNAL  /* macOS: SO_NOSIGPIPE is set on the socket instead */
#define MSG_NOSIGNAL 0
#endif

/* The monotonic clock of time.monotonic(), in seconds, computed as CPython does. */
static double frl_now(void) {
    struct timespec ts;
#if defined(__APPLE__) && defined(CLOCK_UPTIME_RAW)
    clock_gettime(CLOCK_UPTIME_RAW, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (double)((long long)ts.tv_sec * 1000000000LL + (long long)ts.tv_nsec) / 1e9;
}

/* Non-blocking, close-on-exec, no SIGPIPE; TCP_NODELAY for TCP. 0, or -1 with *err. */
static int frl_prepare(int fd, int tcp, int *err) {
    int flags, one = 1;
    if (tcp && setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) < 0) goto fail;
#ifdef SO_NOSIGPIPE
    if (setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one) < 0) goto fail;
#endif
    flags = fcntl(fd, F_GETFD);
    if (flags < 0 || fcntl(fd, F_SETFD, flags | FD_CLOEXEC) < 0) goto fail;
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) goto fail;
    return 0;
fail:
    *err = errno;
    return -1;
}

/* Start a non-blocking connect to host:port (first getaddrinfo result) or to the Unix socket
   path. Returns the fd (*connecting = 1 while the connect is in progress), or -1 with
   *err = errno, -2 with *err = a getaddrinfo error code, -3 if the Unix path is too long. */
static int frl_connect(const char *host, const char *port, const char *path, Py_ssize_t path_len,
                       int *connecting, int *err) {
    int fd, rc, e;
    *connecting = 0;
    *err = 0;
    if (path != NULL) {
        struct sockaddr_un sa;
        socklen_t salen;
        if ((size_t)path_len > sizeof(sa.sun_path)) return -3;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        memcpy(sa.sun_path, path, (size_t)path_len);
        salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + (size_t)path_len);
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0) { *err = errno; return -1; }
        if (frl_prepare(fd, 0, err) < 0) { close(fd); return -1; }
        rc = connect(fd, (struct sockaddr *)&sa, salen);
    } else {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_protocol = IPPROTO_TCP;
        rc = getaddrinfo(host, port, &hints, &res);
        if (rc != 0) {
#ifdef EAI_SYSTEM
            if (rc == EAI_SYSTEM) { *err = errno; return -1; }
#endif
            *err = rc;
            return -2;
        }
        fd = socket(res->ai_family, SOCK_STREAM, 0);
        if (fd < 0) { *err = errno; freeaddrinfo(res); return -1; }
        if (frl_prepare(fd, 1, err) < 0) { close(fd); freeaddrinfo(res); return -1; }
        rc = connect(fd, res->ai_addr, res->ai_addrlen);
        e = errno;
        freeaddrinfo(res);
        errno = e;
    }
    if (rc == 0) return fd;
    e = errno;
    if (e == EINPROGRESS || e == EAGAIN || e == EWOULDBLOCK || e == EINTR) {
        *connecting = 1;
        return fd;
    }
    close(fd);
    *err = e;
    return -1;
}

/* EAGAIN and EWOULDBLOCK are the same value on some systems, different on others. */
static int frl_would_block(int e) {
    return e == EAGAIN || e == EWOULDBLOCK;
}

/* The outcome of a finished non-blocking connect: 0 or an errno. */
static int frl_sock_error(int fd) {
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) return errno;
    return err;
}

#endif
