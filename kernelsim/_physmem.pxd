cdef class PhysMem:
    cdef readonly unsigned char[::1] buf
    cdef readonly Py_ssize_t size
    cdef Py_ssize_t _top
    cdef dict _free
    cdef dict _live
    cdef readonly object view

    cpdef unsigned int rd32(self, Py_ssize_t addr)
    cpdef wr32(self, Py_ssize_t addr, unsigned int value)
    cpdef write(self, Py_ssize_t addr, const unsigned char[::1] src)
    cpdef bytes read(self, Py_ssize_t addr, Py_ssize_t n)
    cpdef move(self, Py_ssize_t dst, Py_ssize_t src, Py_ssize_t n)
    cpdef unsigned int rd16be(self, Py_ssize_t addr)
