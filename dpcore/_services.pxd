from kernelsim._physmem cimport PhysMem
from kernelsim._node cimport OpenFile
from dpcore._tbp cimport TokenBufferPool
from kernelsim._path cimport RxHandler
from kernelsim.daemon._rings cimport RingExport


cdef class Nart:
    cdef dict _map
    cdef dict _hosts
    cdef object _devs
    cdef int _last_nid                  # the last NID `route` resolved, and its entry
    cdef tuple _last
    cdef object _resolve(self, object nid)
    cpdef add(self, int nid, object dev, object hwaddr)
    cpdef remove(self, int nid)
    cpdef tuple lookup(self, object nid)
    cdef tuple route(self, int nid)


cdef class DirectedPoint:
    cdef public object node
    cdef public object costs
    cdef PhysMem mem
    cdef public int nid
    cdef public double c_open, c_xmit, c_mdr, c_read
    cdef double copy_base, copy_rate
    cdef public int tbp_slots
    cdef public int max_message
    cdef public Nart nart
    cdef readonly dict endpoints          # ep -> Endpoint: sys_open adds, Endpoint.release takes out
    cdef object rx_ep                     # the Endpoint the MDR delivered to last, until released
    cdef public list netdevs
    cdef public dict types
    cdef public long long rx_malformed, rx_no_endpoint, rx_unknown_type, local_deliveries
    cdef public dict closed_totals
    cdef public list closed_endpoints
    cdef public RxHandler mdr
    cdef readonly object read_path_fn     # read_path bound once: what dp_read runs, per call

    cdef inline double copy_cost(self, Py_ssize_t n):
        return self.copy_base + n / self.copy_rate


cdef class Mdr(RxHandler):
    cdef DirectedPoint dp


cdef class Endpoint(OpenFile):
    cdef public TokenBufferPool tbp
    cdef public DirectedPoint dp
    cdef public object proc
    cdef public int ep
    cdef object _target                 # `target`: (nid, ep) once dp_target named it, else None
    cdef int _to_nid, _to_ep            # the same as C ints, when `_to_ints` (the transmit path's)
    cdef bint _to_ints
    cdef public object tokens
    cdef public long long sent, received
    cdef public RingExport export     # a real node's owner's view (dpcore._export), or None

    # C calls only (cdef: a Python subclass of a cpdef method's class makes every call look
    # the name up in the instance first, for an override)
    cdef int took(self) except -1
    cdef int deposited(self) except -1
