/* RESP encoding straight from argument bytes (fastredlock._encode_c). Plain C. */
#ifndef FASTREDLOCK_ENCODE_C_H
#define FASTREDLOCK_ENCODE_C_H
#include <string.h>
#include <Python.h>
/* Decimal digits of v (may be negative) at p; returns the length (at most 20). The lengths and
   counts of RESP are almost always below 1000: written without a division. */
static inline Py_ssize_t frl_fmt_ll(char *p, long long v) {
    char tmp[24];
    Py_ssize_t n = 0, len = 0;
    unsigned long long u;
    if (v >= 0 && v < 1000) {
        unsigned int w = (unsigned int)v;
        if (w < 10) { p[0] = (char)('0' + w); return 1; }
        if (w < 100) { p[0] = (char)('0' + w / 10); p[1] = (char)('0' + w % 10); return 2; }
        p[0] = (char)('0' + w / 100); p[1] = (char)('0' + (w / 10) % 10); p[2] = (char)('0' + w % 10);
        return 3;
    }
    u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
    do { tmp[n++] = (char)('0' + (int)(u % 10)); u /= 10; } while (u);
    if (v < 0) p[len++] = '-';
    while (n) p[len++] = tmp[--n];
    return len;
}

/* Bytes needed to encode nargs bulk strings (plus the array header). */
static Py_ssize_t frl_encoded_size(int nargs, const Py_ssize_t *lens) {
    Py_ssize_t size = 1 + 20 + 2;
    int i;
    for (i = 0; i < nargs; i++) size += 1 + 20 + 2 + lens[i] + 2;
    return size;
}

/* Encode the header of a RESP array of argc bulk strings and the first nargs of them at out
   (sized by frl_encoded_size); returns the length. nargs == argc encodes a whole command. */
static Py_ssize_t frl_encode(char *out, int argc, int nargs, const char *const *argv,
                             const Py_ssize_t *lens) {
    char *p = out;
    int i;
    *p++ = '*';
    p += frl_fmt_ll(p, argc);
    *p++ = '\r'; *p++ = '\n';
    for (i = 0; i < nargs; i++) {
        *p++ = '$';
        p += frl_fmt_ll(p, (long long)lens[i]);
        *p++ = '\r'; *p++ = '\n';
        memcpy(p, argv[i], (size_t)lens[i]);
        p += lens[i];
        *p++ = '\r'; *p++ = '\n';
    }
    return (Py_ssize_t)(p - out);
}

/* Length of the array header and the first nargs bulk strings, as frl_encode writes them. */
static Py_ssize_t frl_head_len(int argc, int nargs, const Py_ssize_t *lens) {
    char tmp[24];
    Py_ssize_t size = 1 + frl_fmt_ll(tmp, argc) + 2;
    int i;
    for (i = 0; i < nargs; i++) size += 1 + frl_fmt_ll(tmp, (long long)lens[i]) + 2 + lens[i] + 2;
    return size;
}

#endif
