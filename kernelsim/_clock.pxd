cdef class RunnableCounter:
    cdef public long long runnable
    cdef public bint live
