"""A process drives the node's adapter itself: the card's frames go to it and come from it.

Some protocols bypass the kernel entirely once it has set them up -- SP AM's process
owns the TB2's FIFOs and talks to the adapter without the operating system (SP-A18).
On a real node the adapter is a device model in the node process, so "owning the card"
means: every frame the node's transport brings for that card goes to the process, and
every frame the process sends goes out on the transport. The process runs the card's
device model, its driver and the protocol module itself (a small kernel of its own,
`libdp._attach`), exactly as the node would.

`Passthrough` is the export a protocol module's open file returns for that
(``export_to``): two frame rings in memory files with eventfd doorbells, node -> process
and process -> node, and the node's `DevicePort` diverted to the first while the file is
open. A frame that failed its CRC on the way (the fault injector) is dropped and counted
here, as the card's receiver would. Closing the file gives the card back to the node.
"""
from __future__ import annotations

import os

from kernelsim.media._shmring import ShmRing, ring_bytes

__all__ = ["Passthrough", "PASSTHROUGH_SLOTS", "PASSTHROUGH_SLOT_BYTES"]

PASSTHROUGH_SLOTS = 256
PASSTHROUGH_SLOT_BYTES = 8192


class _Ring:
    def __init__(self, name: str):
        self.mem = os.memfd_create(name, os.MFD_CLOEXEC)
        self.bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        os.ftruncate(self.mem, ring_bytes(PASSTHROUGH_SLOTS, PASSTHROUGH_SLOT_BYTES))
        self.ring = ShmRing.over_fd(self.mem, self.bell, True, PASSTHROUGH_SLOTS, PASSTHROUGH_SLOT_BYTES)

    def close(self):
        self.ring.close()
        os.close(self.mem)
        os.close(self.bell)


class Passthrough:
    """The export of a file whose process drives `port`'s card (see the module's essay)."""

    def __init__(self, owner, port):
        if port is None or not hasattr(port, "divert"):
            raise OSError(95, "this card is not on a real transport: nothing to hand over")
        if port.divert is not None:
            raise OSError(16, "another process drives this card already")
        self.owner = owner
        self.port = port
        self.to_user = _Ring("dp-card-rx")
        self.from_user = _Ring("dp-card-tx")
        self._buf = bytearray(PASSTHROUGH_SLOT_BYTES)
        self._view = memoryview(self._buf)
        self.rx_frames = self.tx_frames = self.rx_dropped = self.crc_dropped = self.tx_dropped = 0
        port.divert = self._divert
        owner.server.add_source(self)

    # -- what the process is given ---------------------------------------------------------

    def user_fd(self) -> int:
        return self.to_user.bell

    def describe(self):
        return ({"passthrough": {"slots": PASSTHROUGH_SLOTS, "slot_bytes": PASSTHROUGH_SLOT_BYTES}},
                [os.dup(self.to_user.mem), os.dup(self.to_user.bell), os.dup(self.from_user.mem),
                 os.dup(self.from_user.bell)])

    def ring_op(self, payload: bytes) -> None:
        raise OSError(22, "a card handed over has no ring operations")

    # -- frames ------------------------------------------------------------------------------

    def _divert(self, frame, crc_ok: bool) -> None:
        if not crc_ok:
            self.crc_dropped += 1               # the receiver's CRC check, done here for the card
        elif self.to_user.ring.send(frame):
            self.rx_frames += 1
        else:
            self.rx_dropped += 1                # the process is not taking frames: lost, as on a wire

    def poll(self) -> int:
        """Frames the process sent go out on the node's transport."""
        ring, buf, view, send = self.from_user.ring, self._buf, self._view, self.port.transport.send
        n = 0
        while True:
            k = ring.recv_into(buf)
            if k < 0:
                return n
            n += 1
            if send(view[:k]):
                self.tx_frames += 1
            else:
                self.tx_dropped += 1

    def fileno(self) -> int:
        return self.from_user.bell

    def prepare_to_sleep(self) -> bool:
        return self.from_user.ring.prepare_to_sleep()

    def cancel_sleep(self) -> None:
        self.from_user.ring.cancel_sleep()

    def drain(self) -> None:
        self.from_user.ring.drain()

    def stats(self) -> dict:
        return {"rx_frames": self.rx_frames, "rx_dropped": self.rx_dropped, "rx_crc_dropped": self.crc_dropped,
                "tx_frames": self.tx_frames, "tx_dropped": self.tx_dropped}

    def close(self) -> None:
        """Give the card back to the node (idempotent)."""
        if self.to_user is None:
            return
        if self.port.divert == self._divert:
            self.port.divert = None
        self.owner.server.remove_source(self)
        self.to_user.close()
        self.from_user.close()
        self.to_user = self.from_user = None
