
cpdef bint is_acquisition(int kind)
cpdef tuple classify(int kind, object reply)
cpdef str unexpected(object reply)
cpdef bits(object reply, Py_ssize_t rows)
cpdef bint is_noscript(str message)
cpdef bint is_unsupported(str message)
cpdef str what(int code, object detail)
