/* The TLS data path of the C I/O twin (fastredlock._io_c): OpenSSL called from C on the SSL object
   that Python's ssl module set up (ssl.SSLObject over two memory BIOs: context, verification,
   host name and handshake all done by Python, see _tls.py).

   Why not link OpenSSL: the SSL object belongs to the OpenSSL that Python's _ssl module loaded, and
   only that library may touch it. So the few functions needed are looked up in _ssl's own library
   (dlopen of _ssl's file with RTLD_NOLOAD, then dlsym, which searches its dependencies too): no
   headers, no link-time dependency, never a second OpenSSL. Where anything is missing (a Python
   with _ssl built in, another layout of its objects), frl_tls_load fails and every TLS link stays
   on the Python path, which is slower but complete.

   Once a link's handshake is done, a round's write is SSL_write into the memory BIO, BIO_read of
   the records, one send(); a read is recv(), BIO_write, SSL_read until OpenSSL wants more (so no
   decrypted byte stays buffered above the socket). Plain C, included by _io_c.pyx. */
#ifndef FASTREDLOCK_TLS_C_H
#define FASTREDLOCK_TLS_C_H

#include <Python.h>
#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

#define FRL_SSL_ERROR_WANT_READ 2
#define FRL_SSL_ERROR_WANT_WRITE 3
#define FRL_SSL_ERROR_ZERO_RETURN 6

static struct {
    int loaded;
    int (*SSL_write)(void *ssl, const void *buf, int num);
    int (*SSL_read)(void *ssl, void *buf, int num);
    int (*SSL_get_error)(const void *ssl, int ret);
    void *(*SSL_get_rbio)(const void *ssl);
    void *(*SSL_get_wbio)(const void *ssl);
    int (*BIO_write)(void *bio, const void *buf, int len);
    int (*BIO_read)(void *bio, void *buf, int len);
    size_t (*BIO_ctrl_pending)(void *bio);
    unsigned long (*ERR_get_error)(void);
    const char *(*ERR_reason_error_string)(unsigned long e);
    void (*ERR_clear_error)(void);
} frl_ossl;

/* CPython's _ssl objects, as laid out since 3.7 (checked at run time: see frl_tls_ssl). */
typedef struct { PyObject_HEAD PyObject *Socket; void *ssl; } frl_PySSLSocket;
typedef struct { PyObject_HEAD void *bio; } frl_PyMemoryBIO;

/* Look the functions up in the OpenSSL of _ssl (its file's path). 1 when all were found. */
static int frl_tls_load(const char *ssl_module_path) {
    void *h;
    if (frl_ossl.loaded) return frl_ossl.loaded > 0;
    frl_ossl.loaded = -1;
    h = ssl_module_path ? dlopen(ssl_module_path, RTLD_NOW | RTLD_NOLOAD) : NULL;
    if (h == NULL) return 0;
#define FRL_SYM(name) if ((*(void **)&frl_ossl.name = dlsym(h, #name)) == NULL) return 0;
    FRL_SYM(SSL_write) FRL_SYM(SSL_read) FRL_SYM(SSL_get_error) FRL_SYM(SSL_get_rbio)
    FRL_SYM(SSL_get_wbio) FRL_SYM(BIO_write) FRL_SYM(BIO_read) FRL_SYM(BIO_ctrl_pending)
    FRL_SYM(ERR_get_error) FRL_SYM(ERR_reason_error_string) FRL_SYM(ERR_clear_error)
#undef FRL_SYM
    frl_ossl.loaded = 1;
    return 1;
}

/* The SSL* of an ssl.SSLObject's _sslobj whose BIOs are the two _ssl.MemoryBIO given, or NULL
   when the layout is not the expected one (then the link stays on the Python path). */
static void *frl_tls_ssl(PyObject *sslobj, PyObject *incoming, PyObject *outgoing,
                         void **rbio, void **wbio) {
    void *ssl;
    if (frl_ossl.loaded <= 0) return NULL;
    ssl = ((frl_PySSLSocket *)sslobj)->ssl;
    *rbio = ((frl_PyMemoryBIO *)incoming)->bio;
    *wbio = ((frl_PyMemoryBIO *)outgoing)->bio;
    if (ssl == NULL || frl_ossl.SSL_get_rbio(ssl) != *rbio || frl_ossl.SSL_get_wbio(ssl) != *wbio)
        return NULL;
    return ssl;
}

/* Encrypt p[:n] (all of it: the BIO is memory) and move the records into *buf (grown as needed,
   *cap its size). Returns the records' length, or -1 (then *why is OpenSSL's reason). */
static Py_ssize_t frl_tls_encrypt(void *ssl, void *wbio, const char *p, Py_ssize_t n,
                                  char **buf, Py_ssize_t *cap, const char **why) {
    int w;
    size_t pending;
    char *grown;
    *why = NULL;
    if (n > 0x7fffffff) { *why = "write too large"; return -1; }
    frl_ossl.ERR_clear_error();
    w = frl_ossl.SSL_write(ssl, p, (int)n);
    if (w != (int)n) {
        *why = frl_ossl.ERR_reason_error_string(frl_ossl.ERR_get_error());
        if (*why == NULL) *why = "SSL_write failed";
        return -1;
    }
    pending = frl_ossl.BIO_ctrl_pending(wbio);
    if ((Py_ssize_t)pending > *cap) {
        grown = (char *)PyMem_Realloc(*buf, pending);
        if (grown == NULL) { *why = "out of memory"; return -1; }
        *buf = grown;
        *cap = (Py_ssize_t)pending;
    }
    return pending ? frl_ossl.BIO_read(wbio, *buf, (int)pending) : 0;
}

/* Hand ciphertext c[:n] to OpenSSL. 0, or -1 (out of memory in the BIO). */
static int frl_tls_feed(void *rbio, const char *c, Py_ssize_t n) {
    return n == 0 || frl_ossl.BIO_write(rbio, c, (int)n) == (int)n ? 0 : -1;
}

/* Decrypt into out[:cap]: the number of plaintext bytes (0: OpenSSL wants more ciphertext, or the
   buffer is full: call again after using them), -1 with *why on an error, -2 on close_notify. */
static Py_ssize_t frl_tls_decrypt(void *ssl, char *out, Py_ssize_t cap, const char **why) {
    Py_ssize_t got = 0;
    int r, e;
    *why = NULL;
    frl_ossl.ERR_clear_error();
    while (got < cap) {
        r = frl_ossl.SSL_read(ssl, out + got, (int)(cap - got > 0x7fffffff ? 0x7fffffff : cap - got));
        if (r > 0) { got += r; continue; }
        e = frl_ossl.SSL_get_error(ssl, r);
        if (e == FRL_SSL_ERROR_WANT_READ || e == FRL_SSL_ERROR_WANT_WRITE) break;
        if (got) break;  /* the error comes again on the next call, after these bytes */
        if (e == FRL_SSL_ERROR_ZERO_RETURN) return -2;
        *why = frl_ossl.ERR_reason_error_string(frl_ossl.ERR_get_error());
        if (*why == NULL) *why = "SSL_read failed";
        return -1;
    }
    return got;
}

/* Ciphertext OpenSSL wrote while reading (a key update's answer): how many bytes wait. */
static Py_ssize_t frl_tls_backlog(void *wbio) {
    return (Py_ssize_t)frl_ossl.BIO_ctrl_pending(wbio);
}

#endif
