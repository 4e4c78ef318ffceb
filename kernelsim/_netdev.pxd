from cpython.ref cimport PyObject
from kernelsim._irq cimport IrqController, IrqHandler
from kernelsim._path cimport Path
from kernelsim._waits cimport WaitQueue


cdef class NetDevice(IrqHandler):
    cdef public object node
    cdef public str name
    cdef public object hwaddr
    cdef public dict protocols
    cdef public WaitQueue tx_space
    cdef public long long rx_frames, rx_bytes, rx_dropped_proto, rx_errors
    cdef public long long tx_frames, tx_bytes, tx_busy
    cdef public int irq_line
    cdef IrqController _irq
    cdef readonly list _allocs
    cdef dict __dict__                  # a driver's own state

    cdef int drive_irq(self, bint level, bint last=*) except -1     # set_irq by C (a card's IRQ sink)
    # The transmit interface as C calls: a protocol's per-frame path calls these, every
    # driver implements them, and the Python-level tx_reserve / write_link_header /
    # tx_commit_path call them.
    cdef Py_ssize_t tx_buffer(self) except -1
    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1
    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending)
    cdef int hand_over(self, unsigned int proto, Py_ssize_t addr, Py_ssize_t length, double* cost,
                       PyObject** cont) except -1


cdef class RxWalk(Path):
    # A driver's receive walk as a C state machine. What every walk does with a good frame
    # -- hand it to its protocol, then step the protocol's path if it has one -- is here once.
    cdef double pending             # CPU time spent and not yet yielded
    cdef object proto_path          # the protocol's receive path, while it runs
    cdef int give_frame(self, NetDevice nd, unsigned int proto, Py_ssize_t addr, Py_ssize_t length) except -1
    cdef int step_proto(self, double* cost) except -1
