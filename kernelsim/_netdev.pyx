# cython: language_level=3, annotation_typing=False
"""The kernel's network-device interface (Linux's ``struct net_device``, reduced).

A driver fills in the three data-path operations; protocols (DP, and the protocol
modules) register a handler per link-level protocol number. The transmit side is
split so that a protocol can build its frame *directly in the buffer of the next
transmit descriptor* (DP-C03): reserve a buffer, write the frame there, commit.

Every frame passes through a device's interrupt pin and its protocol hand-off, so the
device's common part is a Cython class; a driver subclasses it in Python or Cython.
"""
from __future__ import annotations

import errno

from kernelsim._irq cimport IrqController, drive_line
from kernelsim._waits cimport WaitQueue
from kernelsim._path cimport RxHandler, step_any
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.dict cimport PyDict_Next

__all__ = ["NetDevice", "PciDevice"]


def _no_time():
    """A path that takes no time and leaves none owed."""
    return 0.0
    yield  # pragma: no cover


class PciDevice:
    """A device model sitting on a node's PCI bus, waiting for a driver to bind."""

    vendor_id = 0
    device_id = 0

    def __init__(self):
        self.driver = None


# `hand_over`'s last protocol number as a Python int (an EtherType is above 256: an
# allocation per frame otherwise).
cdef object _proto_key = None
cdef unsigned int _proto_val = 0


cdef object _key_of(dict table, unsigned int proto):
    """`proto` as `table`'s own key object where it has one: a lookup with it matches by
    identity, where another int object of the same value is compared as well."""
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    while PyDict_Next(table, &pos, &key, &value):
        if type(<object> key) is int and <object> key == proto:
            return <object> key
    return proto


cdef class NetDevice(IrqHandler):
    # A driver sets these (class attributes of its subclass):
    link_header_bytes = 0       # bytes the driver's link header takes at the buffer start
    max_payload = 0             # largest protocol payload one frame carries
    kind = "link"               # "ether", "atm", "myrinet", "tb2": which NART address applies

    def __cinit__(self, *args, **kwargs):
        self.irq_line = -1

    def __init__(self, node, name: str, hwaddr):
        self.node = node
        self.name = name
        self.hwaddr = hwaddr
        self.protocols: dict = {}
        self.tx_space = WaitQueue(node.engine)
        self.rx_frames = 0
        self.rx_bytes = 0
        self.rx_dropped_proto = 0
        self.rx_errors = 0
        self.tx_frames = 0
        self.tx_bytes = 0
        self.tx_busy = 0
        self._allocs = []
        self._irq = node.irq

    # -- what a driver takes in open() and gives back in stop() ---------------------------

    def alloc(self, nbytes: int, align: int = 16) -> int:
        """Physical memory for rings and buffers, given back by `release_resources`."""
        a = self.node.mem.alloc(nbytes, align)
        self._allocs.append(a)
        return a

    def take_irq(self) -> None:
        """A free interrupt line for this device, its handler the driver's `interrupt_path`."""
        self.irq_line = self.node.irq.free_line()
        self.node.irq.request_irq(self.irq_line, self, self.name)     # its irq_path: interrupt_path

    def set_irq(self, level) -> None:
        """The device's interrupt pin (device models call this as their IRQ sink)."""
        self.drive_irq(level)

    cdef int drive_irq(self, bint level, bint last=False) except -1:
        # `last`: see IrqController.set_level
        if self.irq_line >= 0:
            drive_line(self._irq, self.irq_line, level, last)
        return 0

    def release_resources(self) -> None:
        """Give back the IRQ line and every allocation, newest first (idempotent)."""
        if self.irq_line >= 0:
            self.node.irq.set_level(self.irq_line, False)
            self.node.irq.free_irq(self.irq_line, self.name)
            self.irq_line = -1
        while self._allocs:
            self.node.mem.release(self._allocs.pop())

    # -- protocol registration -------------------------------------------------------

    def add_protocol(self, proto: int, handler) -> None:
        if proto in self.protocols:
            raise OSError(errno.EEXIST, f"{self.name}: protocol {proto:#x} already has a handler")
        self.protocols[proto] = handler

    def remove_protocol(self, proto: int) -> None:
        self.protocols.pop(proto, None)

    # -- transmit: DP's per-frame calls, and their Python-level names ---------------------
    #
    # A driver (a `cdef class`) implements the three C calls; the Python-level methods are
    # the same operations for Python callers and tests, here once for every driver.

    def tx_reserve(self) -> int:
        """Physical address of the next free transmit buffer; WouldBlock when none."""
        return self.tx_buffer()

    def write_link_header(self, Py_ssize_t addr, dst_hw, int proto) -> None:
        self.tx_header(addr, dst_hw, proto)

    def tx_commit_path(self, Py_ssize_t payload_bytes, double pending=0.0):
        """Hand the reserved buffer (link header + `payload_bytes`) to the device: its path.

        `pending` is the caller's CPU time not yet yielded (it built the frame)."""
        return self.tx_commit(payload_bytes, pending)

    cdef Py_ssize_t tx_buffer(self) except -1:
        """`tx_reserve`: the next free transmit buffer's physical address."""
        raise NotImplementedError(f"{type(self).__name__} does not transmit")

    cdef Py_ssize_t tx_header(self, Py_ssize_t addr, object dst_hw, int proto) except -1:
        """`write_link_header` at `addr`; returns where the protocol's payload starts."""
        raise NotImplementedError(f"{type(self).__name__} does not transmit")

    cdef object tx_commit(self, Py_ssize_t payload_bytes, double pending):
        """`tx_commit_path`: the path that hands the reserved buffer to the device."""
        raise NotImplementedError(f"{type(self).__name__} does not transmit")

    # -- receive: drivers call this from their interrupt path ----------------------------

    def deliver_path(self, int proto, Py_ssize_t addr, Py_ssize_t length):
        """Hand a received frame's payload to its protocol; returns CPU time not yet yielded.

        A protocol handler is a path ``handler(dev, addr, length)`` returning the time it
        spent after its last effect visible beyond this CPU (usually all of it). This is
        the handler's own path, not a path around it (one generator less per frame); the
        counts are taken when the caller starts it, as a wrapping path would.
        """
        handler = self.protocols.get(proto)
        if handler is None:
            self.rx_dropped_proto += 1
            return _no_time()
        self.rx_frames += 1
        self.rx_bytes += length
        return handler(self, addr, length)

    cdef int hand_over(self, unsigned int proto, Py_ssize_t addr, Py_ssize_t length, double* cost,
                       PyObject** cont) except -1:
        """`deliver_path` for a driver's C receive path: 0 with the CPU time the protocol
        spent in ``cost[0]`` (no protocol, or an `RxHandler` that did all its work at
        once), or 1 with a new reference to the path to run in ``cont[0]``."""
        global _proto_key, _proto_val
        if proto != _proto_val or _proto_key is None:   # the EtherType as a dict key: the last one made, again
            _proto_key = _key_of(self.protocols, proto)
            _proto_val = proto
        handler = self.protocols.get(_proto_key)
        if handler is None:
            self.rx_dropped_proto += 1
            cost[0] = 0.0
            return 0
        self.rx_frames += 1
        self.rx_bytes += length
        if isinstance(handler, RxHandler):
            return (<RxHandler> handler).rx(self, addr, length, cost, cont)
        path = handler(self, addr, length)
        Py_INCREF(path)
        cont[0] = <PyObject*> path
        return 1

    def stats(self) -> dict:
        return {"rx_frames": self.rx_frames, "rx_bytes": self.rx_bytes, "rx_errors": self.rx_errors,
                "rx_dropped_unknown_protocol": self.rx_dropped_proto, "tx_frames": self.tx_frames,
                "tx_bytes": self.tx_bytes, "tx_ring_full": self.tx_busy}


cdef class RxWalk(Path):
    """A driver's receive walk (the 21140's descriptor walk, Myrinet's ring walk): the
    frame hand-off the walks share; each driver's subclass holds its own ring states."""

    cdef int give_frame(self, NetDevice nd, unsigned int proto, Py_ssize_t addr, Py_ssize_t length) except -1:
        """Hand a good frame to its protocol (`NetDevice.hand_over`). 0: it is done with
        it, the CPU time it spent in `pending`; 1: its path runs now -- `step_proto`."""
        cdef PyObject* path = NULL
        if nd.hand_over(proto, addr, length, &self.pending, &path):
            self.proto_path = <object> path
            Py_XDECREF(path)
            return 1
        return 0

    cdef int step_proto(self, double* cost) except -1:
        """Step the protocol's path. 1: it yielded `cost[0]`; 0: it returned, and what it
        returned (the CPU time still owed) is in `pending`."""
        cdef PyObject* res = NULL
        if step_any(self.proto_path, cost, &res):
            return 1
        self.proto_path = None
        self.pending = <object> res
        Py_XDECREF(res)
        return 0
