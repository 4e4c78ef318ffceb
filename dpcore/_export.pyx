# cython: language_level=3, boundscheck=False, wraparound=False
"""DP's half of real nodes: an endpoint as its owner's process sees it.

When a process attached to a real node opens an endpoint (`kernelsim.daemon`), the node
asks the endpoint what to show it (``Endpoint.export_to``), and DP answers with:

* the Token Buffer Pool's memory file, **read-only** -- the process reads messages in
  place from the kernel's slots and cannot write them (its mapping faults);
* a **delivery ring** (`kernelsim.daemon.EventRing`): for every message the interrupt
  path deposits, the node takes the slot on the owner's behalf and appends ``(slot,
  length, source node, source endpoint)``; the ring's eventfd is the process's fd for the
  endpoint, readable exactly while messages wait. DP's ``dp_read`` is then user-level
  work, as DP-C02 describes: look at the ring, copy (or view) the slot, hand the slot back;
* slots come back through the endpoint's submission ring as ``release`` operations
  (`ring_op`), checked against the slots this export holds -- a process can only give
  back what it was given.

A slot stays out of the pool from its delivery until its release, so the ring can never
hold more records than the pool has slots, and a process that does not read fills its
pool and its messages are dropped and counted, as DP says. The generic ``read()`` system
call consumes from the same ring on the blocked process's behalf (`read_path`), so
``read`` and ``dp_read`` on one endpoint see one stream of messages in order.

Delivery and release run once per message in the node, so they are C: the endpoint's
deposit calls ``deliver`` by C (`RingExport`), each record goes to the ring by C
(``EventRing.post``), the slots the owner holds are a byte per pool slot, and the gate
drain hands a release entry over still in its buffer (``ring_op_raw``).
"""
import errno
import os

from kernelsim import WouldBlock
from kernelsim.daemon import event_ring_bytes
from kernelsim.daemon._rings cimport EventRing, RingExport
from dpcore._services cimport Endpoint
from dpcore._tbp cimport TokenBufferPool

__all__ = ["EndpointExport", "OP_RELEASE"]

OP_RELEASE = 1          # ring operation: u8 op, then u32 slot numbers (little-endian)
DEF _OP_RELEASE = 1


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


cdef class EndpointExport(RingExport):

    def __init__(self, Endpoint e, owner):
        region = e.tbp.region
        if not hasattr(region, "readonly_fd"):
            raise OSError(errno.EOPNOTSUPP, "this node's Token Buffer Pools are not in shareable memory")
        self.e = e
        self.tbp = e.tbp
        self.owner = owner
        slots = _pow2(e.tbp.nslots)
        self._memfd = os.memfd_create(f"dp-ep{e.ep}-deliveries", os.MFD_CLOEXEC)
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            os.ftruncate(self._memfd, event_ring_bytes(slots))
            self.ring = EventRing(self._memfd, self._efd, slots)
        except BaseException:
            os.close(self._memfd)
            os.close(self._efd)
            raise
        self._held = bytearray(e.tbp.nslots)
        self.nheld = 0
        self.bad_releases = 0
        self.delivered = 0
        e.export = self
        self.deliver()                  # anything deposited before the export was made

    # -- what the owner is given -----------------------------------------------------------

    def user_fd(self) -> int:
        return self._efd

    def describe(self):
        tbp = self.tbp
        info = {"ep": self.e.ep, "slots": tbp.nslots, "slot_bytes": tbp.slot_bytes,
                "max_message": self.e.dp.max_message}
        return info, [tbp.region.readonly_fd(), os.dup(self._memfd)]

    @property
    def held(self):
        """The slots the owner holds (delivered, not yet given back)."""
        return {i for i in range(self._held.shape[0]) if self._held[i]}

    # -- the kernel's side -----------------------------------------------------------------

    cdef int deliver(self) except -1:
        """Every message queued in the pool goes to the owner's ring (called on deposit)."""
        cdef Endpoint e = self.e
        cdef TokenBufferPool tbp = self.tbp
        cdef unsigned char[::1] held = self._held
        cdef int slot
        if self.ring is None:                   # closed: the endpoint is going away
            return 0
        while tbp.count:
            slot = tbp.take()
            e.took()
            held[slot] = 1
            self.nheld += 1
            # never full: at most one record per held slot
            self.ring.post(slot, tbp._len[slot], tbp._src_nid[slot], tbp._src_ep[slot])
            self.delivered += 1
        return 0

    cdef int ring_op_raw(self, const unsigned char* p, Py_ssize_t n) except -1:
        cdef unsigned char[::1] held = self._held
        cdef Py_ssize_t i
        cdef unsigned int slot
        if n < 1 or p[0] != _OP_RELEASE or (n - 1) % 4:
            raise OSError(errno.EINVAL, "malformed endpoint ring operation")
        for i in range(1, n, 4):
            slot = p[i] | (<unsigned int> p[i + 1] << 8) | (<unsigned int> p[i + 2] << 16) | (<unsigned int> p[i + 3] << 24)
            if slot < <unsigned int> held.shape[0] and held[slot]:
                held[slot] = 0
                self.nheld -= 1
                self.tbp.release(slot)
            else:
                self.bad_releases += 1
                raise OSError(errno.EINVAL, f"slot {slot} is not held by this endpoint's owner")
        return 0

    def read_path(self, nbytes: int):
        """The generic read(): the next delivered message, copied, its slot given back."""
        e = self.e
        if self.ring is None:
            raise OSError(errno.EBADF, f"endpoint {e.ep} is closed")
        rec = self.ring.pop()
        if rec is None:
            yield e.dp.c_read
            raise WouldBlock(e.readers, f"no message on endpoint {e.ep}")
        slot, n = rec[0], rec[1]
        if not self._holds(slot):               # the ring is the owner's memory: never trust it
            raise OSError(errno.EIO, f"endpoint {e.ep}: delivery ring names slot {slot}, not one delivered")
        data = self.tbp.copy_out(slot, nbytes)
        yield e.dp.c_read + e.dp.costs.copy(min(n, nbytes))
        self._held[slot] = 0
        self.nheld -= 1
        self.tbp.release(slot)
        return data

    cdef bint _holds(self, object slot):
        return 0 <= slot < self._held.shape[0] and self._held[slot]

    def close(self) -> None:
        """The endpoint is closed: forget the held slots (the pool goes with it)."""
        if self.ring is not None:
            self.ring.close()
            self.ring = None
            os.close(self._memfd)
            os.close(self._efd)
            self._held = bytearray(self._held.shape[0])
            self.nheld = 0

    def stats(self) -> dict:
        return {"delivered": self.delivered, "held_by_owner": self.nheld, "bad_releases": self.bad_releases}
