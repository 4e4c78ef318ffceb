"""The backend adapter between a device model and a real transport.

A device model transmits through a *port* (``transmit(frame, t) -> (start, end)``)
and receives by having ``rx_frame(frame, crc_ok)`` called. Modeled media time each
frame; this adapter hands frames to a real transport (a shared-memory ring, a UDP
socket) at once and, when the node polls, feeds what the transport has to the device.

Faults on a real transport: where the transport itself cannot lose or damage frames
on request (shared memory, UDP on one host), the adapter passes every received frame
through the same seeded `FaultInjector` the modeled media use -- lost, duplicated,
corrupted (the device sees a failed CRC, as after a real wire's FCS check) or held
back so that later frames overtake it (reordering). Held frames are due at a wall
time; until then the port never lets its node sleep.
"""
from __future__ import annotations

import heapq
import time

from kernelsim.media._port cimport FramePort
from kernelsim.media.mesh cimport MeshSender

__all__ = ["DevicePort"]


cdef class PortTx(FramePort):
    """`DevicePort`'s transmit side as a C call (`FramePort.send_frame`): a frame from the
    device model to a shared-memory mesh by C calls (`MeshSender.send_c`), to any other
    transport by its ``send``."""
    cdef public object transport
    cdef public long long tx_frames, tx_dropped

    cdef int send_frame(self, object frame, double t, double* start, double* end) except -1:
        cdef bint sent
        transport = self.transport
        if isinstance(transport, MeshSender) and isinstance(frame, bytes):
            sent = (<MeshSender> transport).send_c(frame, <const unsigned char*> (<bytes> frame), len(<bytes> frame))
        else:
            sent = transport.send(frame)
        if sent:
            self.tx_frames += 1
        else:
            self.tx_dropped += 1          # transport full: lost, as on a congested wire
        start[0] = t                      # real time: the medium's (start, end) are both now
        end[0] = t
        return 0


class DevicePort(PortTx):
    def __init__(self, transport, faults=None):
        self.transport = transport
        self.device = None
        self._buf = bytearray(transport.max_frame)
        self._view = memoryview(self._buf)
        self.tx_frames = 0
        self.tx_dropped = 0
        self.rx_frames = 0
        self.settle = None      # the node's engine run: each frame is handled before the next
        self.divert = None             # frames go to this callable instead of the device (a process drives the card)
        self.faults = None
        self.faults_elsewhere = None   # faults the transport itself applies (netem), for the statistics
        self._held: list = []   # (due wall time, sequence, frame, crc_ok): frames held back
        self._held_seq = 0
        if faults is not None:
            self.inject_faults(faults)

    def inject_faults(self, faults) -> None:
        """Pass every received frame through `faults` (a FaultInjector) from now on. (Not
        ``inject``: a medium with ``inject(ni, data, token)`` is a Myrinet fabric to the NI.)"""
        self.faults = faults if faults.active else None

    def attach(self, device) -> None:
        self.device = device
        device.port = self

    def transmit(self, frame, t: float, ready: float = 0.0):
        """Send `frame` now (real time: `ready`, when a cut-through sender has the whole
        frame, has passed already); the medium's (start, end) -- both now (`send_frame`)."""
        cdef double start, end
        (<PortTx> self).send_frame(frame, t, &start, &end)
        return t, t

    def poll(self) -> int:
        """Feed what the transport holds to the device, one frame at a time.

        Each frame is handled -- DMA, interrupt, driver, protocol -- before the next is
        taken, as frames that arrive microseconds apart on a wire would be; a transport
        burst therefore never overruns the receive ring unseen.
        """
        if self.faults is not None or self._held or self.divert is not None:
            return self._poll_faulty()
        recv, view, dev, settle = self.transport.recv_into, self._view, self.device, self.settle
        n = 0
        while True:
            k = recv(self._buf)
            if k < 0:
                return n
            dev.rx_frame(view[:k], True)
            n += 1
            self.rx_frames += 1
            if settle is not None:
                settle()

    def _poll_faulty(self) -> int:
        """`poll` through the fault injector: frames held back whose time has come go
        first (they are older), then what the transport has, each as the injector says."""
        held, settle, faults = self._held, self.settle, self.faults
        rx = self.divert or self.device.rx_frame
        n = 0
        now = time.perf_counter()
        while held and held[0][0] <= now:
            _, _, frame, ok = heapq.heappop(held)
            rx(frame, ok)
            n += 1
            if settle is not None:
                settle()
        while True:
            k = self.transport.recv_into(self._buf)
            if k < 0:
                return n
            self.rx_frames += 1
            deliveries = faults.apply(bytes(self._view[:k])) if faults is not None else [(bytes(self._view[:k]), 0.0,
                                                                                              True)]
            for frame, delay, ok in deliveries:
                if delay > 0.0:
                    self._held_seq += 1
                    heapq.heappush(held, (now + delay, self._held_seq, frame, ok))
                    continue
                rx(frame, ok)
                n += 1
                if settle is not None:
                    settle()

    def fileno(self) -> int:
        return self.transport.fileno()

    def prepare_to_sleep(self) -> bool:
        if self._held:              # a held-back frame falls due without any doorbell
            return False
        return self.transport.prepare_to_sleep()

    def cancel_sleep(self) -> None:
        self.transport.cancel_sleep()

    def drain(self) -> None:
        self.transport.drain()

    def stats(self) -> dict:
        out = {"tx_frames": self.tx_frames, "tx_dropped": self.tx_dropped, "rx_frames": self.rx_frames,
               "transport": self.transport.stats()}
        if self.faults is not None:
            out["faults"] = {"applied_by": "injector", **self.faults.stats(), "held": len(self._held)}
        elif self.faults_elsewhere is not None:
            out["faults"] = dict(self.faults_elsewhere)
        return out
