# cython: language_level=3
"""What AM's calls accept: handler indexes, 32-bit words, byte counts, remote ranges.

Every misuse is an OSError with the errno a UNIX programmer expects, raised at the
caller before anything is queued. Cython: every request and reply runs them.
"""
import errno

from cpython.bytes cimport PyBytes_FromStringAndSize

from protocols.am import _wire as W

__all__ = ["MAX_HANDLERS", "U32", "handler_index", "word", "pack_words", "check_count", "check_remote"]

MAX_HANDLERS = 256
U32 = 0xFFFFFFFF


cpdef int handler_index(object h) except -1:
    if exact_int_in(h, 0, C_MAX_HANDLERS - 1):
        return h
    if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < MAX_HANDLERS:
        raise OSError(errno.EINVAL, f"handler index must be 0..{MAX_HANDLERS - 1}, not {h!r}")
    return h


cpdef object word(object a):
    """An argument word: an unsigned 32-bit value (SP-A34), as a handler receives it."""
    if exact_int_in(a, 0, C_U32):
        return a
    if not isinstance(a, int) or isinstance(a, bool) or not 0 <= a <= U32:
        raise OSError(errno.EINVAL, f"an AM argument is an unsigned 32-bit word (0..{U32}), not {a!r}")
    return a


cpdef bytes pack_words(object args):
    """The argument words as they travel: big-endian u32s."""
    cdef Py_ssize_t n = len(args), i
    cdef unsigned char b[16]
    cdef unsigned int v
    if n > W.MAX_WORDS:
        raise OSError(errno.EINVAL, f"an AM message carries at most {W.MAX_WORDS} words (SP-A34), not {n}")
    for i in range(n):
        v = word(args[i])
        b[4 * i] = (v >> 24) & 0xFF
        b[4 * i + 1] = (v >> 16) & 0xFF
        b[4 * i + 2] = (v >> 8) & 0xFF
        b[4 * i + 3] = v & 0xFF
    return PyBytes_FromStringAndSize(<char*> b, 4 * n)


cpdef check_count(object n):
    if exact_int_in(n, 0, 0x7FFFFFFFFFFFFFFF):
        return
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise OSError(errno.EINVAL, f"byte count must be a non-negative int, not {n!r}")


cpdef check_remote(object raddr, object nbytes):
    if exact_int_in(raddr, 0, C_U32) and exact_int_in(nbytes, 0, C_U32) and \
            <long long> raddr + <long long> nbytes <= C_U32:
        return
    if not isinstance(raddr, int) or isinstance(raddr, bool) or raddr < 0 or raddr + nbytes > U32:
        raise OSError(errno.EFAULT, f"remote address {raddr!r}+{nbytes} cannot name target memory")
