cdef struct DmHeader:
    int dst_ep
    int src_nid
    int src_ep
    int mtype
    int length

cdef int dm_parse(const unsigned char* p, Py_ssize_t avail, DmHeader* h) noexcept nogil
cdef void dm_build(unsigned char* p, int dst_ep, int src_nid, int src_ep, int mtype, int length) noexcept nogil
