# cython: language_level=3
"""C-level declarations of the user side of an attached endpoint (libdp._endpoint_rings)."""
from libc.stdint cimport uint32_t
from kernelsim.media._shmring cimport ShmRing
from kernelsim.daemon._rings cimport CrowdedCore, EventRing


cdef class Spinner:
    cdef readonly double cap        # the most a wait polls before it sleeps (s)
    cdef readonly int misses        # consecutive waits that outlasted the cap
    cdef CrowdedCore crowding       # late yields: no polling for a while on a crowded core

    cdef double limit_s(self) noexcept
    cdef void waited_s(self, double seconds) noexcept
    cpdef bint yielded(self, double before, double after) noexcept


cdef class EndpointRings:
    cdef ShmRing gate               # the endpoint's submission ring (the call gate)
    cdef EventRing deliveries       # its delivery ring
    cdef Py_buffer _pool            # the Token Buffer Pool, mapped read-only
    cdef bint _have_pool
    cdef Py_buffer _err             # the mapping that holds the file's error word
    cdef bint _have_err
    cdef uint32_t* err_word
    cdef readonly int fd, ep
    cdef readonly Py_ssize_t slot_bytes, max_message, pool_bytes
    cdef bytes write_head           # the dp_write gate entry's head
    cdef public bint targeted       # dp_target has been called
    cdef unsigned char* entry       # the release gate entry being batched
    cdef Py_ssize_t n_releases, release_cap, per_entry
    cdef int sleep_waitset, sleep_sock # read_wait sleeps on these (`sleep_on`), or -1: it does not
    cdef Spinner spinner            # how long a wait polls first (the process's, shared by its endpoints)

    cpdef int check_error(self) except -1
    cpdef Py_ssize_t write(self, data) except -2
    cpdef object take(self)
    cdef int _check_slot(self, Py_ssize_t slot, Py_ssize_t n) except -1
    cpdef object read(self, Py_ssize_t nbytes)
    cdef object _poll_read(self, Py_ssize_t nbytes, double start)
    cpdef object poll_read(self, Py_ssize_t nbytes)
    cpdef object read_sleeping(self, Py_ssize_t nbytes, int waitset_fd, int sock_fd)
    cpdef object read_wait(self, Py_ssize_t nbytes)
    cpdef bytes copy_out(self, Py_ssize_t slot, Py_ssize_t n, Py_ssize_t nbytes)
    cpdef int release(self, Py_ssize_t slot) except -1
    cpdef int flush_releases(self) except -1
