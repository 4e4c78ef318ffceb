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
"""
from __future__ import annotations

import errno
import os
import struct

from kernelsim import WouldBlock
from kernelsim.daemon import EventRing, event_ring_bytes

__all__ = ["EndpointExport", "OP_RELEASE"]

OP_RELEASE = 1          # ring operation: u8 op, then u32 slot numbers
_U32 = struct.Struct("<I")


def _pow2(n: int) -> int:
    p = 1
    while p < n:
        p <<= 1
    return p


class EndpointExport:
    __slots__ = ("e", "owner", "ring", "_memfd", "_efd", "held", "bad_releases", "delivered")

    def __init__(self, e, owner):
        region = e.tbp.region
        if not hasattr(region, "readonly_fd"):
            raise OSError(errno.EOPNOTSUPP, "this node's Token Buffer Pools are not in shareable memory")
        self.e = e
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
        self.held: set[int] = set()
        self.bad_releases = 0
        self.delivered = 0
        e.export = self
        self.deliver()                  # anything deposited before the export was made

    # -- what the owner is given -----------------------------------------------------------

    def user_fd(self) -> int:
        return self._efd

    def describe(self):
        tbp = self.e.tbp
        info = {"ep": self.e.ep, "slots": tbp.nslots, "slot_bytes": tbp.slot_bytes,
                "max_message": self.e.dp.max_message}
        return info, [tbp.region.readonly_fd(), os.dup(self._memfd)]

    # -- the kernel's side -----------------------------------------------------------------

    def deliver(self) -> None:
        """Every message queued in the pool goes to the owner's ring (called on deposit)."""
        e = self.e
        tbp = e.tbp
        while tbp.count:
            slot = tbp.take()
            n = tbp.length(slot)
            nid, ep = tbp.source(slot)
            e.took()
            self.held.add(slot)
            self.ring.post(slot, n, nid, ep)    # never full: at most one record per held slot
            self.delivered += 1

    def ring_op(self, payload: bytes) -> None:
        if not payload or payload[0] != OP_RELEASE or (len(payload) - 1) % 4:
            raise OSError(errno.EINVAL, "malformed endpoint ring operation")
        tbp = self.e.tbp
        for (slot,) in _U32.iter_unpack(payload[1:]):
            if slot in self.held:
                self.held.discard(slot)
                tbp.release(slot)
            else:
                self.bad_releases += 1
                raise OSError(errno.EINVAL, f"slot {slot} is not held by this endpoint's owner")

    def read_path(self, nbytes: int):
        """The generic read(): the next delivered message, copied, its slot given back."""
        e = self.e
        rec = self.ring.pop()
        if rec is None:
            yield e.dp.c_read
            raise WouldBlock(e.readers, f"no message on endpoint {e.ep}")
        slot, n = rec[0], rec[1]
        if slot not in self.held:               # the ring is the owner's memory: never trust it
            raise OSError(errno.EIO, f"endpoint {e.ep}: delivery ring names slot {slot}, not one delivered")
        data = e.tbp.copy_out(slot, nbytes)
        yield e.dp.c_read + e.dp.costs.copy(min(n, nbytes))
        self.held.discard(slot)
        e.tbp.release(slot)
        return data

    def close(self) -> None:
        """The endpoint is closed: forget the held slots (the pool goes with it)."""
        if self.ring is not None:
            self.ring.close()
            self.ring = None
            os.close(self._memfd)
            os.close(self._efd)
            self.held.clear()

    def stats(self) -> dict:
        return {"delivered": self.delivered, "held_by_owner": len(self.held), "bad_releases": self.bad_releases}
