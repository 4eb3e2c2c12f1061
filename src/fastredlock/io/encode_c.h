/* RESP encoding straight from argument bytes (fastredlock._encode_c). Plain C. */
#ifndef FASTREDLOCK_ENCODE_C_H
#define FASTREDLOCK_ENCODE_C_H
#include <string.h>
#include <Python.h>
/* "00" "01" ... "99": two decimal digits at once. */
static const char frl_digits2[201] =
    "0001020304050607080910111213141516171819202122232425262728293031323334353637383940414243444546474849"
    "5051525354555657585960616263646566676869707172737475767778798081828384858687888990919293949596979899";

/* Decimal digits of v (may be negative) at p; returns the length (at most 20). The lengths and
   counts of RESP are almost always below 1000: written without a loop; larger numbers (a TTL in
   milliseconds) two digits per division. */
static inline Py_ssize_t frl_fmt_ll(char *p, long long v) {
    char tmp[24];
    Py_ssize_t n = 24, len = 0;
    unsigned long long u;
    unsigned int r;
    if (v >= 0 && v < 1000) {
        unsigned int w = (unsigned int)v;
        if (w < 10) { p[0] = (char)('0' + w); return 1; }
        if (w < 100) { p[0] = frl_digits2[2 * w]; p[1] = frl_digits2[2 * w + 1]; return 2; }
        r = w % 100;
        p[0] = (char)('0' + w / 100); p[1] = frl_digits2[2 * r]; p[2] = frl_digits2[2 * r + 1];
        return 3;
    }
    if (v < 0) { p[len++] = '-'; u = 0ULL - (unsigned long long)v; }
    else u = (unsigned long long)v;
    while (u >= 100) {
        r = (unsigned int)(u % 100);
        u /= 100;
        n -= 2; tmp[n] = frl_digits2[2 * r]; tmp[n + 1] = frl_digits2[2 * r + 1];
    }
    if (u >= 10) { n -= 2; tmp[n] = frl_digits2[2 * u]; tmp[n + 1] = frl_digits2[2 * u + 1]; }
    else tmp[--n] = (char)('0' + u);
    while (n < 24) p[len++] = tmp[n++];
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
