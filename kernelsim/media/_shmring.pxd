# cython: language_level=3
"""C-level declarations of the shared-memory frame ring.

Other Cython modules may ``cimport`` :class:`ShmRing` and call the
``noexcept nogil`` raw methods directly, which never touch a Python object:

    from kernelsim.media._shmring cimport ShmRing, RING_OK, RING_FULL

Return codes of the raw methods are the ``RING_*`` constants below.
"""

from libc.stdint cimport uint32_t, uint64_t

# Return codes of ShmRing.send_raw / ShmRing.recv_raw
cdef enum:
    RING_OK = 1           # send_raw: frame published
    RING_FULL = 0         # send_raw: ring full, frame dropped (dropped_full += 1)
    RING_EMPTY = -1       # recv_raw: nothing pending
    RING_TOO_LARGE = -2   # send_raw: frame longer than max_frame
    RING_BUF_SMALL = -3   # recv_raw: buffer too small, frame left in the ring
    RING_CLOSED = -4      # either: the ring was closed in this process
    RING_CORRUPT = -5     # recv_raw: slot length field is impossible


cdef class ShmRing:
    cdef object _shm            # multiprocessing.shared_memory.SharedMemory
    cdef object _name           # str, without the leading '/'
    cdef object _bell_path      # str, path of the doorbell FIFO
    cdef Py_buffer _view        # buffer export of _shm.buf held while mapped
    cdef bint _have_view
    cdef bint _creator          # True in the process that created the segment
    cdef bint _tracked          # registered with multiprocessing's resource tracker
    cdef unsigned char* _base   # header (dp_ring_hdr) at offset 0
    cdef unsigned char* _data   # first slot
    cdef uint64_t _mask         # slots - 1
    cdef uint32_t _nslots
    cdef uint32_t _slot_bytes
    cdef uint32_t _max_frame    # slot_bytes - 4
    cdef int _bell_fd           # doorbell FIFO, O_RDWR | O_NONBLOCK, -1 when closed
    cdef bint _bell_eventfd     # the doorbell is an eventfd (rings made over a file descriptor)

    # Hot-path primitives (no Python objects, no GIL needed).
    cdef int send_raw(self, const unsigned char* data, size_t n) noexcept nogil
    cdef int _publish(self, const unsigned char* data, size_t n, bint wake) noexcept nogil
    cdef int _publish2(self, const unsigned char* data, size_t n, const unsigned char* more, size_t m,
                       bint wake) noexcept nogil
    cdef Py_ssize_t recv_raw(self, unsigned char* buf, size_t cap) noexcept nogil
    cdef bint pending_raw(self) noexcept nogil
    cdef int prepare_to_sleep_raw(self) noexcept nogil
    cdef void cancel_sleep_raw(self) noexcept nogil
    cdef void _ring_doorbell(self) noexcept nogil
    cdef void _release(self)
    cdef _map(self, object shm, bint init, uint32_t slots, uint32_t slot_bytes, object bell_path)
    cdef _open_bell(self)


# One frame from an AF_PACKET socket into `buf` (at most `cap` bytes), without blocking and
# without Python objects: its length (larger than `cap`: truncated, the rest lost), -1 if
# none is queued, -2 if it was this host's own transmission (PACKET_OUTGOING), -3 on an
# error (its errno in err[0]). `packet_recv_into` is the same for Python callers.
cdef Py_ssize_t packet_recv_raw(int fd, void* buf, Py_ssize_t cap, int* err) noexcept nogil
# One whole frame out of an AF_PACKET socket, without blocking: its length, or -1 with the
# errno in err[0] (EAGAIN/ENOBUFS: the queue is full and the frame lost).
cdef Py_ssize_t packet_send_raw(int fd, const void* buf, Py_ssize_t n, int* err) noexcept nogil


# The receive ring an AF_PACKET socket shares with the kernel (PACKET_RX_RING, TPACKET_V2;
# made by `packet_rx_ring`): `recv_raw` answers as `packet_recv_raw` does, without a system call.
cdef class PacketRxRing:
    cdef unsigned char* _base           # the mapped ring, NULL once closed
    cdef Py_ssize_t _frame_size, _frames, _head

    cdef void _unmap(self) noexcept
    cdef Py_ssize_t recv_raw(self, void* buf, Py_ssize_t cap) noexcept nogil
    cpdef bint pending(self)
