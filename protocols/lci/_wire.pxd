cdef class Header:
    cdef public int kind, flags, src, length, credits, seq, ack
    cdef public unsigned int aux
    cpdef int parse(self, const unsigned char[::1] mem, Py_ssize_t off, Py_ssize_t n, int mtu)
    cpdef int parse_body(self, const unsigned char[::1] mem, Py_ssize_t off, Py_ssize_t n, int mtu)
    cdef int _fields(self, const unsigned char[::1] mem, Py_ssize_t h, Py_ssize_t n, int mtu)

cpdef write_header(unsigned char[::1] mem, Py_ssize_t off, int kind, int flags, int src, int length,
                   int credits, int seq, int ack, unsigned int aux)
cpdef int seq_diff(int a, int b)
