# What AM's calls accept (the implementation and the errors: _checks.pyx), as C calls for
# the call paths of the endpoint chain.
from cpython.long cimport PyLong_AsLongLongAndOverflow

cdef extern from *:
    """
    #define AM_MAX_HANDLERS 256LL
    #define AM_U32 0xFFFFFFFFLL
    """
    const long long C_MAX_HANDLERS "AM_MAX_HANDLERS"   # MAX_HANDLERS and U32 (_checks.pyx), in C
    const long long C_U32 "AM_U32"


cdef inline bint exact_int_in(object v, long long lo, long long hi) noexcept:
    """`v` is an int (not a subclass: not a bool) with lo <= v <= hi -- the common case of
    every check here, decided in C; anything else takes the check's full Python test."""
    cdef int overflow
    cdef long long x
    if type(v) is not int:
        return False
    x = PyLong_AsLongLongAndOverflow(v, &overflow)     # cannot fail on an exact int
    return overflow == 0 and lo <= x <= hi

cpdef int handler_index(object h) except -1
cpdef object word(object a)
cpdef bytes pack_words(object args)
cpdef check_count(object n)
cpdef check_remote(object raddr, object nbytes)
