"""Modeled Fast Ethernet: a full-duplex cable between two NICs (back to back).

Per frame on the wire (HW-ETH): preamble and start delimiter,
the frame padded to the 64-byte minimum, the FCS, then the inter-frame gap before the
next frame may start. The last bit reaches the far end one propagation delay after it
left. Each direction is its own wire (full duplex), so no collisions.
"""
from __future__ import annotations

from kernelsim.media.faults import FaultInjector

__all__ = ["EtherLink", "EtherPort"]


class EtherPort:
    """One end of the cable: what a NIC's transmitter drives."""

    __slots__ = ("link", "peer", "device", "free_at", "frames", "bytes", "busy_s")

    def __init__(self, link: "EtherLink"):
        self.link = link
        self.peer: EtherPort | None = None
        self.device = None            # the receiving device model at this end
        self.free_at = 0.0
        self.frames = 0
        self.bytes = 0
        self.busy_s = 0.0

    def transmit(self, frame: bytes, t: float) -> tuple[float, float]:
        """Put `frame` (without FCS) on the wire no earlier than `t`; return (start, end)."""
        link = self.link
        on_wire = link.preamble + max(len(frame) + link.fcs, link.min_frame)
        start = t if t > self.free_at else self.free_at
        end = start + on_wire * link.byte_s
        self.free_at = end + link.ifg * link.byte_s
        self.frames += 1
        self.bytes += len(frame)
        self.busy_s += end - start
        arrive = end + link.prop_s
        if link.faults.active:
            for data, delay, ok in link.faults.apply(frame):
                link.engine.at(arrive + delay, self.peer._arrive, (data, ok))
        else:
            link.engine.at(arrive, self.peer._arrive, (frame, True))
        return start, end

    def _arrive(self, item) -> None:
        if self.device is not None:
            self.device.rx_frame(item[0], item[1])

    def stats(self) -> dict:
        return {"frames": self.frames, "bytes": self.bytes, "busy_us": self.busy_s * 1e6}


class EtherLink:
    def __init__(self, engine, profile, rng=None):
        self.engine = engine
        self.faults = FaultInjector(profile, rng)
        self.byte_s = 8.0 / profile["link.rate_bps"]
        self.preamble = profile["link.preamble_bytes"]
        self.ifg = profile["link.ifg_bytes"]
        self.min_frame = profile["link.min_frame_bytes"]
        self.fcs = profile["link.fcs_bytes"]
        self.prop_s = profile["link.propagation_s"]
        a, b = EtherPort(self), EtherPort(self)
        a.peer, b.peer = b, a
        self.ends = (a, b)

    def attach(self, side: int, device) -> EtherPort:
        port = self.ends[side]
        port.device = device
        device.port = port
        return port

    def stats(self) -> dict:
        return {"a_to_b": self.ends[0].stats(), "b_to_a": self.ends[1].stats(), "faults": self.faults.stats()}
