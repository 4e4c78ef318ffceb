"""The EPOS communication pipeline on the Myrinet driver (EP-A01..A20, EP-C01..C08).

EPOS moves a long message between two hosts by cutting it into packets that flow
through five stages at once (EP-C03): (1) the sender's CPU copies the packet into a
pinned, physically contiguous buffer; (2) the NI's host DMA engine brings it into
SRAM; (3) the send DMA engine puts it on the network and the receiving NI's receive
engine takes it in (3.1 and 3.2, one stage with a per-hop delay between, EP-A10);
(4) the receiving NI's host DMA engine moves it into a pinned host ring; (5) the
receiving CPU copies it out to the user's buffer. Each stage is a resource that serves
one packet at a time, in order: packet n enters stage i when packet n-1 has left it
(EP-C04). Here every stage *is* the resource that does the work in the model -- the
host CPU, the NI's host DMA engine, the send engine and the network, the receiving
NI's engines, the receiving CPU -- so the stage times follow from the machine:

    stage 1 and 5:  epos.beta1_s + P / mem.copy_rate_Bps       on the host CPU
    stage 2 and 4:  pci.dma_setup_s + P / pci.dma_rate_Bps     on the NI's host DMA engine
    stage 3:        send set-up + P / link rate, then the hop delays, cut through

each the linear cost beta_i + P*tau_i of EP-C05, with P counted in bytes. Packets are
bounded by the NI's SRAM buffers, the send ring and the receive ring: when a stage
falls behind, the ones before it wait (flow control, never loss).

Messages shorter than ``epos.pio_threshold_bytes`` (256, EP-A19) skip the pipeline:
the sender writes the packet into SRAM by PIO in 32-byte write-combined bursts and no
DMA is programmed on the sending side (EP-C08).

The packet length is either fixed or *adaptive*: P_optimal = sqrt(L (b1+b2+b3) /
(2 (t1+t2))) (EP-C07, from Eq. 7), applied -- as EPOS did -- through ranges of message
length computed once: a message whose P_optimal lies between sqrt(2) P/2 and sqrt(2) P
travels in packets of P, P a power of two up to what an SRAM buffer holds. The b and t
of the choice are the profile's ``epos.beta*`` / ``epos.tau*`` (on the Athlon, EPOS's
own regression, Table 1, with KB = 1024); the model's stages run at the machine's rates
above. On the Athlon they differ where N3 says Table 1 is inconsistent: the
network stage runs at the 160 MB/s link (EP-A08), not at Table 1's tau3.

Bulk packets travel as DP's Myrinet packets with link protocol ``BULK_PROTO`` and a
16-byte header -- message id, offset, total length, source node -- and land in the
driver's bulk ring, which the receiver polls (memory-based notification, FM-C06).
"""
from __future__ import annotations

import bisect
import errno
import math
import struct

from kernelsim import WouldBlock, run_blocking, run_blocking_sync
from nic_drivers.myrinet.firmware import BULK_PROTO, CB_BULK_CONS, DESC_PIO, MYRI_TYPE_DP, ROUTE_MAX, TRAILER_FULL

__all__ = ["BulkEngine", "PacketSizeTable", "parse_pipeline", "run_op", "run_op_sync", "BULK_HDR"]

BULK_HDR = 16
_HDR = struct.Struct(">IIIHH")          # message id, offset, total, source node, flags
MAX_MESSAGE = 64 << 20          # a bulk message is at most 64 MiB (a header cannot make us allocate more)
MAX_PARTIAL = 16                 # messages being reassembled at once; the oldest goes first
MASK32 = 0xFFFFFFFF


class PacketSizeTable:
    """Packet length by message length, precomputed from the linear stage costs (EP-C07).

    Between consecutive powers of two P and 2P the best choice switches where
    P_optimal(L) = sqrt(2) P, i.e. at L = 4 (t1+t2) P^2 / (b1+b2+b3) -- where Eq. 7's
    message times for P and 2P are equal.
    """

    def __init__(self, beta_sum: float, tau_sum: float, p_min: int, p_max: int):
        if beta_sum <= 0 or tau_sum <= 0:
            raise ValueError("the pipeline's cost model needs positive beta and tau")
        self.beta_sum = beta_sum
        self.tau_sum = tau_sum
        self.sizes = []
        p = 1 << max(0, int(p_min - 1).bit_length())
        while p <= p_max:
            self.sizes.append(p)
            p <<= 1
        if not self.sizes:
            raise ValueError(f"no power-of-two packet size between {p_min} and {p_max}")
        self.bounds = [4 * tau_sum * s * s / beta_sum for s in self.sizes[:-1]]

    def p_optimal(self, length: int) -> float:
        return math.sqrt(length * self.beta_sum / (2 * self.tau_sum))

    def choose(self, length: int) -> int:
        return self.sizes[bisect.bisect_right(self.bounds, length)]

    def ranges(self) -> list[dict]:
        lows = [0.0] + self.bounds
        highs = self.bounds + [math.inf]
        return [{"from_bytes": lo, "below_bytes": hi, "packet_bytes": s} for lo, hi, s in zip(lows, highs, self.sizes)]


def parse_pipeline(spec) -> int | None:
    """``"adaptive"`` -> None; ``"fixed:N"`` or an int -> N (EINVAL for anything else)."""
    if spec is None or spec == "adaptive":
        return None
    if isinstance(spec, int) and not isinstance(spec, bool):
        n = spec
    elif isinstance(spec, str) and spec.startswith("fixed:"):
        try:
            n = int(spec[6:], 0)
        except ValueError:
            raise OSError(errno.EINVAL, f"pipeline {spec!r}: fixed:N takes a byte count") from None
    else:
        raise OSError(errno.EINVAL, f"pipeline must be 'adaptive' or 'fixed:N', not {spec!r}")
    if n < 1:
        raise OSError(errno.EINVAL, f"pipeline packet size must be positive, not {n}")
    return n


class BulkEngine:
    """The host half of the pipeline, bound to one Myrinet net device."""

    def __init__(self, dev):
        self.dev = dev
        node = dev.node
        p = node.profile
        self.node = node
        self.beta1 = p["epos.beta1_s"]
        self.copy_rate = p["mem.copy_rate_Bps"]
        self.pio_threshold = int(p["epos.pio_threshold_bytes"])
        self.max_packet = dev.dev.buffer_bytes - ROUTE_MAX - 4 - BULK_HDR - 4
        self.table = PacketSizeTable(p["epos.beta1_s"] + p["epos.beta2_s"] + p["epos.beta3_s"],
                                     p["epos.tau1_s_per_B"] + p["epos.tau2_s_per_B"],
                                     max(1, self.pio_threshold), self.max_packet)
        self.next_id = 1
        self.partial: dict = {}
        self.stage1_bytes = self.stage5_bytes = 0
        self.stage1_s = self.stage5_s = 0.0
        self.packets_sent = self.packets_received = 0
        self.pio_messages = self.pipelined_messages = 0
        self.messages_received = 0
        self.rx_malformed = 0
        self.rx_evicted = 0

    def packet_size(self, length: int, pipeline="adaptive") -> int:
        """The packet length a message of `length` bytes travels in (its whole length by PIO)."""
        if length < self.pio_threshold:
            return max(length, 0)
        fixed = parse_pipeline(pipeline)
        if fixed is None:
            return min(self.table.choose(length), length)
        if fixed > self.max_packet:
            raise OSError(errno.EINVAL, f"packet of {fixed} bytes exceeds the NI buffer ({self.max_packet} bytes of data)")
        return min(fixed, length)

    def send_op(self, dst: int, data, pipeline="adaptive") -> "_SendOp":
        if isinstance(data, int):
            data = bytes(data)
        data = memoryview(bytes(data))
        if len(data) > MAX_MESSAGE:
            raise OSError(errno.EMSGSIZE, f"bulk message of {len(data)} bytes exceeds {MAX_MESSAGE}")
        route = self.dev.route(dst)
        op = _SendOp(self, route, data, self.packet_size(len(data), pipeline), self.next_id)
        self.next_id = (self.next_id + 1) & MASK32
        return op

    def recv_op(self) -> "_RecvOp":
        return _RecvOp(self)

    def stats(self) -> dict:
        return {"stage1": {"bytes": self.stage1_bytes, "busy_us": self.stage1_s * 1e6},
                "stage5": {"bytes": self.stage5_bytes, "busy_us": self.stage5_s * 1e6},
                "packets_sent": self.packets_sent, "packets_received": self.packets_received,
                "pio_messages": self.pio_messages, "pipelined_messages": self.pipelined_messages,
                "messages_received": self.messages_received, "rx_malformed": self.rx_malformed,
                "rx_evicted": self.rx_evicted, "partial": len(self.partial),
                "max_packet_bytes": self.max_packet, "ranges": self.table.ranges()}


class _SendOp:
    """One message on its way out; `path()` continues where a WouldBlock left it."""

    def __init__(self, eng, route, data, packet, msg_id):
        self.eng = eng
        self.route = route
        self.data = data
        self.total = len(data)
        self.packet = packet
        self.msg_id = msg_id
        self.off = 0
        self.started = False
        self.pio = self.total < eng.pio_threshold
        self.head = route + MYRI_TYPE_DP.to_bytes(2, "big") + BULK_PROTO.to_bytes(2, "big")

    @property
    def done(self) -> bool:
        return self.started and self.off >= self.total

    def path(self):
        eng = self.eng
        dev = eng.dev
        mem = dev.node.mem
        r = len(self.route)
        lead = ROUTE_MAX - r
        while not self.done:
            entry = dev._reserve(1, dev.bulk_tx_space)   # a poller: no interrupt
            n = min(self.packet, self.total - self.off) if self.total else 0
            hdr = _HDR.pack(self.msg_id, self.off, self.total, eng.node.nid & 0xFFFF, 0)
            owed, dev._owed = dev._owed, 0.0
            if self.pio:
                frame = self.head + hdr + self.data[self.off:self.off + n]
                yield owed + dev.c_desc + dev.dev.pio_time(len(frame)) + dev.desc_pio_s
                dev.dev.pio_write(dev.fw.send_buffer(entry) + lead, frame)
                dev._post(entry, DESC_PIO | len(frame), 0, lead)
                dev.tx_pio += 1
            else:
                # Stage 1: the copy into the pinned buffer; posting the descriptor is part
                # of the stage's per-packet cost (EP-A12: synchronisation included).
                t = eng.beta1 + n / eng.copy_rate
                yield owed + t
                buf = dev.tx_bufs[entry]
                mem.write(buf + lead, self.head + hdr)
                mem.write(buf + ROUTE_MAX + 4 + BULK_HDR, self.data[self.off:self.off + n])
                eng.stage1_bytes += n
                eng.stage1_s += t
                dev._post(entry, r + 4 + BULK_HDR + n, buf + lead, lead)
                dev.tx_dma += 1
            if not self.started:
                self.started = True
                if self.pio:
                    eng.pio_messages += 1
                else:
                    eng.pipelined_messages += 1
            self.off += n
            eng.packets_sent += 1
        return self.total


class _RecvOp:
    """Waits for the next complete bulk message: (source node, bytes)."""

    def __init__(self, eng):
        self.eng = eng
        self.result = None

    def path(self):
        eng = self.eng
        dev = eng.dev
        mem = dev.node.mem
        c = dev.c
        pending = c.mem_miss                     # the poll that saw the flag: a cache miss
        while True:
            yield pending
            pending = 0.0
            end = dev.bulk_ring + (dev.cur_bulk % dev.nbulk + 1) * dev.slot_bytes
            w = mem.rd32(end - 4)
            if not w & TRAILER_FULL:
                raise WouldBlock(dev.bulk_rx_space, "no bulk packet yet")
            n = w & 0xFFFF
            start = end - 4 - n
            ok = 4 + BULK_HDR <= n <= dev.slot_bytes - 4
            if ok:
                msg_id, off, total, src, _flags = _HDR.unpack_from(mem.view, start + 4)
                size = n - 4 - BULK_HDR
                ok = total <= MAX_MESSAGE and off + size <= total
            t = 0.0
            done = None
            if ok:
                key = (src, msg_id)
                part = eng.partial.get(key)
                if part is None:
                    if len(eng.partial) >= MAX_PARTIAL:       # a sender that never finished
                        del eng.partial[next(iter(eng.partial))]
                        eng.rx_evicted += 1
                    part = eng.partial[key] = [bytearray(total), 0]
                # Stage 5: the copy out of the pinned ring into the user's buffer.
                t = eng.beta1 + size / eng.copy_rate
                part[0][off:off + size] = mem.view[start + 4 + BULK_HDR:start + 4 + BULK_HDR + size]
                part[1] += size
                eng.stage5_bytes += size
                eng.stage5_s += t
                eng.packets_received += 1
                if part[1] >= total:
                    del eng.partial[key]
                    eng.messages_received += 1
                    done = (src, bytes(part[0]))
            else:
                eng.rx_malformed += 1
            yield t + c.pci_write
            mem.wr32(end - 4, 0)
            dev.cur_bulk += 1
            dev.dev.pio_write32(CB_BULK_CONS, dev.cur_bulk & MASK32)
            if done is not None:
                return done


# -- running resumable operations from a process ---------------------------------------


def run_op_sync(node, op):
    """Run `op` as the calling process, blocking; modeled time moves as needed."""
    return run_blocking_sync(node, lambda first: op.path())


async def run_op(node, op):
    """Run `op` as the calling trio task's process (resumable: each try continues it)."""
    return await run_blocking(node, lambda first: op.path())


# -- the benchmark ------------------------------------------------------------------------


def bulk_device(node):
    """The node's Myrinet net device that carries the pipeline."""
    for dev in node.netdevs.values():
        if getattr(dev, "kind", None) == "myrinet" and getattr(dev, "bulk", None) is not None:
            return dev
    raise OSError(errno.ENODEV, f"node {node.nid}: no Myrinet device with bulk transfers")
