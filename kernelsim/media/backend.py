"""The backend adapter between a device model and a real transport.

A device model transmits through a *port* (``transmit(frame, t) -> (start, end)``)
and receives by having ``rx_frame(frame, crc_ok)`` called. Modeled media time each
frame; this adapter hands frames to a real transport (a shared-memory ring, a UDP
socket) at once and, when the node polls, feeds what the transport has to the device.
"""
from __future__ import annotations

__all__ = ["DevicePort"]


class DevicePort:
    def __init__(self, transport):
        self.transport = transport
        self.device = None
        self._buf = bytearray(transport.max_frame)
        self._view = memoryview(self._buf)
        self.tx_frames = 0
        self.tx_dropped = 0
        self.rx_frames = 0
        self.settle = None      # the node's engine run: each frame is handled before the next

    def attach(self, device) -> None:
        self.device = device
        device.port = self

    def transmit(self, frame, t: float):
        if self.transport.send(frame):
            self.tx_frames += 1
        else:
            self.tx_dropped += 1          # transport full: lost, as on a congested wire
        return t, t

    def poll(self) -> int:
        """Feed what the transport holds to the device, one frame at a time.

        Each frame is handled -- DMA, interrupt, driver, protocol -- before the next is
        taken, as frames that arrive microseconds apart on a wire would be; a transport
        burst therefore never overruns the receive ring unseen.
        """
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

    def fileno(self) -> int:
        return self.transport.fileno()

    def prepare_to_sleep(self) -> bool:
        return self.transport.prepare_to_sleep()

    def drain(self) -> None:
        self.transport.drain()

    def stats(self) -> dict:
        return {"tx_frames": self.tx_frames, "tx_dropped": self.tx_dropped, "transport": self.transport.stats()}
