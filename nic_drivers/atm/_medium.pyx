# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The ATM medium of the model: OC-3c fibers and a cell switch.

A fiber direction (`CellPort`) is a serial line that carries one 53-byte cell per cell
time (424 bits at the cell rate: 2.83 us at 149.76 Mb/s, the STS-3c payload of the
155.52 Mb/s line -- HW-ATM). The cell's last bit reaches the far end one
propagation delay after it left; that is the receive event at the sink. Cells on one
fiber arrive in the order they were sent, so in the common case (no fault injection)
a fiber keeps the cells in flight in a small ring of raw bytes and schedules one event
per cell with no Python object per cell. When fault injection is on, every cell passes
through the cluster's shared `FaultInjector` on every fiber it crosses: it may be lost,
duplicated, held back (so later cells overtake it) or have one bit flipped -- in which
case nothing here marks it: the receiver must catch it by the header's HEC or the
AAL5 CRC-32, as real hardware must.

Two topologies:

* `CellLink`: two adapters back to back on a fiber pair (the DP paper measured its
  Fast Ethernet figures back to back; for ATM this is the 2-node default). No switch
  rewrites the header, so the VPI/VCI a sender puts in a cell is the one the receiver
  sees.
* `CellSwitch`: N adapters, each on its own fiber pair to one output-buffered switch.
  The switch checks each cell's HEC (a header it cannot trust is dropped: it would be
  switched to the wrong place), looks up (input port, VPI/VCI) in its translation
  table, rewrites the header with the outgoing VPI/VCI and a new HEC, and after a
  fixed fabric latency queues the cell on the output fiber; a cell that finds the
  output buffer full is dropped and counted. VC translation is what lets every
  ordered pair of nodes have its own VC end to end while each node is reached on the
  same VCI by all its peers: cells of different senders to one receiver never share
  a VCI on the receiver's fiber, so AAL5 reassembly (which has no source field) never
  interleaves two PDUs.
"""
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy

from kernelsim._engine cimport Engine, EventTarget
from kernelsim.media.faults import FaultInjector

DEF CELL = 53

cdef enum:
    EV_ARRIVE = 0           # the ring's oldest cell reaches the sink
    EV_ARRIVE_FAULTED = 1   # a cell the fault injector passed on (its own bytes, maybe late or changed)

cdef unsigned char _crc8_tab[256]


cdef void _init_crc8() noexcept:
    cdef int i, k
    cdef unsigned int c
    for i in range(256):
        c = i
        for k in range(8):
            c = ((c << 1) ^ 0x07) if c & 0x80 else (c << 1)
            c &= 0xFF
        _crc8_tab[i] = <unsigned char> c


_init_crc8()


cdef inline unsigned char _hec(const unsigned char* h) noexcept nogil:
    cdef unsigned char c = 0
    cdef int i
    for i in range(4):
        c = _crc8_tab[c ^ h[i]]
    return c ^ 0x55


cdef class CellSink:
    cdef int rx_cell(self, const unsigned char* cell) except -1:
        return 0


cdef CellSink _sink_of(device):
    """Where cells for `device` go: the device itself or its `cell_input` (an adapter)."""
    return device if isinstance(device, CellSink) else device.cell_input


cdef class CellPort:
    def __cinit__(self, Engine engine, double cell_s, double prop_s, faults):
        self.engine = engine
        self.cell_s = cell_s
        self.prop_s = prop_s
        self.faults = faults
        self.faulty = bool(faults.active)
        self.sink = None
        self.free_at = 0.0
        self.cap = 64
        self.ring = <unsigned char*> malloc(self.cap * CELL)
        if self.ring == NULL:
            raise MemoryError()
        self.head = 0
        self.count = 0

    def __dealloc__(self):
        free(self.ring)

    cdef int _push(self, const unsigned char* cell) except -1:
        cdef Py_ssize_t i, n
        cdef unsigned char* grown
        if self.count == self.cap:
            # Unroll the ring into a buffer twice the size (cells in flight only grow
            # behind a congested switch output; a fiber alone holds a handful).
            grown = <unsigned char*> malloc(2 * self.cap * CELL)
            if grown == NULL:
                raise MemoryError()
            n = self.cap - self.head
            memcpy(grown, self.ring + self.head * CELL, n * CELL)
            memcpy(grown + n * CELL, self.ring, self.head * CELL)
            free(self.ring)
            self.ring = grown
            self.head = 0
            self.cap *= 2
        i = (self.head + self.count) % self.cap
        memcpy(self.ring + i * CELL, cell, CELL)
        self.count += 1
        return 0

    cdef double send_cell(self, const unsigned char* cell, double t) except -1.0:
        """Put one cell on the fiber no earlier than `t`; return when its last bit left."""
        cdef double start = t if t > self.free_at else self.free_at
        cdef double end = start + self.cell_s
        cdef double arrive = end + self.prop_s
        self.free_at = end
        self.cells += 1
        self.busy_s += self.cell_s
        if not self.faulty:
            self._push(cell)
            self.engine.post(arrive, self, EV_ARRIVE, None)
        else:
            # The injector's verdict on the CRC is not passed on: the receiver checks.
            for data, delay, _ok in self.faults.apply((<const char*> cell)[:CELL]):
                self.engine.post(arrive + delay, self, EV_ARRIVE_FAULTED, data)
        return end

    cdef int on_event(self, int what, object arg) except -1:
        """A cell's arrival at the sink (bound once: no bound method per cell)."""
        cdef unsigned char cell[CELL]
        cdef bytes data
        if what == EV_ARRIVE_FAULTED:
            data = arg
            if self.sink is not None and len(data) == CELL:
                self.sink.rx_cell(<const unsigned char*> <const char*> data)
            return 0
        memcpy(cell, self.ring + self.head * CELL, CELL)
        self.head = (self.head + 1) % self.cap
        self.count -= 1
        if self.sink is not None:
            self.sink.rx_cell(cell)
        return 0

    def transmit_cell(self, const unsigned char[::1] cell, double t):
        """Python-level send of one 53-byte cell (tests, tools); returns the end time."""
        if cell.shape[0] != CELL:
            raise ValueError("an ATM cell is 53 bytes")
        return self.send_cell(&cell[0], t)

    def stats(self):
        return {"cells": self.cells, "busy_us": self.busy_s * 1e6, "in_flight": self.count}


def _cell_time(profile):
    return CELL * 8.0 / profile["link.cell_rate_bps"]


cdef class CellLink:
    """Two adapters back to back on one fiber pair."""
    cdef readonly object faults
    cdef readonly tuple ends

    def __cinit__(self, Engine engine, profile, rng=None):
        self.faults = FaultInjector(profile, rng)
        cell_s = _cell_time(profile)
        prop = profile["link.propagation_s"]
        self.ends = (CellPort(engine, cell_s, prop, self.faults), CellPort(engine, cell_s, prop, self.faults))

    def attach(self, int side, device):
        """`device` transmits on fiber `side` and receives from the other one."""
        cdef CellPort out = self.ends[side]
        cdef CellPort back = self.ends[1 - side]
        device.port = out
        back.sink = _sink_of(device)
        return out

    def stats(self):
        return {"topology": "back-to-back", "a_to_b": self.ends[0].stats(), "b_to_a": self.ends[1].stats(),
                "faults": self.faults.stats()}


cdef class CellSwitch


cdef class _SwitchInput(CellSink):
    cdef CellSwitch switch
    cdef int port

    cdef int rx_cell(self, const unsigned char* cell) except -1:
        return self.switch._switch_cell(self.port, cell)


cdef class CellSwitch:
    """An output-buffered cell switch with VC translation, one fiber pair per port."""
    cdef Engine engine
    cdef readonly object faults
    cdef readonly int nports
    cdef readonly list up, down
    cdef list _inputs
    cdef int* table                 # [in_port * 4096 + vci] -> (out_port << 16) | out_vci, or -1
    cdef double latency_s
    cdef int buffer_cells
    cdef readonly long long cells_switched, hec_errors, no_route, overflow

    def __cinit__(self, Engine engine, profile, int nports, rng=None):
        cdef int i
        self.engine = engine
        self.nports = nports
        self.faults = FaultInjector(profile, rng)
        cell_s = _cell_time(profile)
        prop = profile["link.propagation_s"]
        self.latency_s = profile["switch.cell_latency_s"]
        self.buffer_cells = profile["switch.port_buffer_cells"]
        self.up, self.down, self._inputs = [], [], []
        self.table = <int*> malloc(nports * 4096 * sizeof(int))
        if self.table == NULL:
            raise MemoryError()
        for i in range(nports * 4096):
            self.table[i] = -1
        for i in range(nports):
            inp = _SwitchInput()
            (<_SwitchInput> inp).switch = self
            (<_SwitchInput> inp).port = i
            self._inputs.append(inp)
            up = CellPort(engine, cell_s, prop, self.faults)
            (<CellPort> up).sink = inp
            self.up.append(up)
            self.down.append(CellPort(engine, cell_s, prop, self.faults))

    def __dealloc__(self):
        free(self.table)

    def attach(self, int port, device):
        device.port = self.up[port]
        (<CellPort> self.down[port]).sink = _sink_of(device)
        return self.up[port]

    def add_vc(self, int in_port, int in_vci, int out_port, int out_vci):
        """Provision one direction of a permanent VC (VPI 0) through the switch."""
        if not (0 <= in_port < self.nports and 0 <= out_port < self.nports):
            raise ValueError("no such switch port")
        if not (0 <= in_vci < 4096 and 0 <= out_vci < 4096):
            raise ValueError("the switch translates VCIs 0..4095 of VPI 0")
        self.table[in_port * 4096 + in_vci] = (out_port << 16) | out_vci

    cdef int _switch_cell(self, int port, const unsigned char* cell) except -1:
        cdef unsigned char out[CELL]
        cdef unsigned int hdr, vpi, vci
        cdef int route, oport
        cdef double ready
        cdef CellPort dst
        if _hec(cell) != cell[4]:
            self.hec_errors += 1
            return 0
        hdr = (<unsigned int> cell[0] << 24) | (<unsigned int> cell[1] << 16) | (<unsigned int> cell[2] << 8) | cell[3]
        vpi = (hdr >> 20) & 0xFF
        vci = (hdr >> 4) & 0xFFFF
        route = self.table[port * 4096 + vci] if vpi == 0 and vci < 4096 else -1
        if route < 0:
            self.no_route += 1
            return 0
        oport = route >> 16
        dst = self.down[oport]
        ready = self.engine.now + self.latency_s
        if dst.free_at - ready > self.buffer_cells * dst.cell_s:
            self.overflow += 1
            return 0
        memcpy(out, cell, CELL)
        hdr = (hdr & 0xF000000F) | ((<unsigned int> (route & 0xFFFF)) << 4)   # VPI 0, new VCI
        out[0] = (hdr >> 24) & 0xFF
        out[1] = (hdr >> 16) & 0xFF
        out[2] = (hdr >> 8) & 0xFF
        out[3] = hdr & 0xFF
        out[4] = _hec(out)
        self.cells_switched += 1
        dst.send_cell(out, ready)
        return 0

    def stats(self):
        return {"topology": f"switch ({self.nports} ports)", "cells_switched": self.cells_switched,
                "hec_errors": self.hec_errors, "no_route": self.no_route, "output_overflow": self.overflow,
                "up": [p.stats() for p in self.up], "down": [p.stats() for p in self.down],
                "faults": self.faults.stats()}
