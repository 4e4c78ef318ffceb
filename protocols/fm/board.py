"""FM's driver for the LANai board: the pinned region, the control program, the PIO path.

At ``insmod fm`` (net=myrinet) the kernel takes the node's LANai board for FM -- DP and
DP's Myrinet driver step aside, see ``protocols/fm/__init__.py`` -- and this driver:

* pins the receive region once, at load (FM-A05): ``max_hosts`` packet slots for each of
  ``contexts`` contexts, with each context's send-done word and credit words beside it;
* loads FM's control program into the board's firmware slot (``lcp.FmLcp``), writes its
  control block (notification mode, host id), and starts it;
* runs the PIO micro-benchmark on the node's own modeled bus and keeps its choice of
  pacing chunk (FM-A17), reporting it in the kernel log and ``modinfo fm``;
* at ``fm_open``, fills a context's entry in the LCP's table and hands the context its
  `transports.NetPort`.

The host side of the data path lives here too, shared by the contexts of the node:
`pio` writes into SRAM through the bus model (and the pacer), `pio_word` writes a word
the LCP watches -- it sees it when the write has drained across the bridge -- and
`read_time` is one CPU read of a LANai word across PCI.
"""
from __future__ import annotations

import errno

from nic_drivers.myrinet import _model as hw
from protocols.fm import pacing
from protocols.fm.lcp import (CB_HOST, CB_NOTIFY, CB_TX_WAIT, CTX_BASE, CTX_BYTES, CX_ACTIVE, CX_CREDIT_ADDR,
                              CX_CREDIT_HOSTS, CX_INSTANCE, CX_PROGRAM, CX_RING, CX_SEND_BASE, CX_SEND_PROD,
                              CX_SEND_SLOTS, CX_SLOT_BYTES, CX_SLOTS, CX_TXDONE_ADDR, MAX_INSTANCES, SLOT_BYTES,
                              FmLcp)
from protocols.fm.transports import NetPort

__all__ = ["FmBoard"]

PACKET_BYTES = 2080             # FM-A04: what the pacer's benchmark PIOs, one full packet


class FmBoard:
    """FM on one LANai board (see the module essay)."""

    def __init__(self, node, card, params, costs):
        self.node = node
        self.engine = node.engine
        self.ni = card
        self.bus = card.bus
        self.params = params
        self.contexts = params["contexts"]
        self.max_hosts = params["max_hosts"]
        self.send_slots = params["send_slots"]
        self.notify_pci = params["notify"] == "pci"
        self.read_s = node.profile["pci.read_s"]
        self.lcp = None
        self._allocs: list[int] = []
        self._wait_bits = 0
        self.ports: dict = {}
        self.pacing = {"chunk_bytes": 0, "mbytes_per_s": None, "unpaced_mbytes_per_s": None, "source": "no bus model"}
        mem = node.mem
        try:
            self.region = self._alloc(self.contexts * self.max_hosts * SLOT_BYTES, 64)      # FM-A05
            self.words = self._alloc(self.contexts * 64, 64)
            self.credit_bytes = self.max_hosts * MAX_INSTANCES * 4
            self.credits = self._alloc(self.contexts * self.credit_bytes, 64)
        except MemoryError:
            self.release()
            raise OSError(errno.ENOMEM, f"fm: no {self.contexts * self.max_hosts * SLOT_BYTES} bytes of host memory "
                                        "to pin for the receive region (lower max_hosts or contexts)") from None
        lcp = FmLcp(costs, self.contexts, self.send_slots)
        try:
            card.load_firmware(lcp)               # EBUSY if a control program still runs; ENOMEM if it does not fit
        except BaseException:
            self.release()
            raise
        self.lcp = lcp
        card.irq_sink = None                      # FM polls: no interrupt is ever enabled
        card.host_write_sink = self._host_write
        for off in range(0, CTX_BASE + self.contexts * CTX_BYTES, 4):
            card.pio_write32(off, 0)
        card.pio_write32(CB_NOTIFY, 1 if self.notify_pci else 0)
        card.pio_write32(CB_HOST, node.nid)
        card.csr_write(hw.REG_EIMR, 0)
        card.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
        self.pacer = self._choose_pacing(params["pacing"])
        del mem

    def _alloc(self, nbytes, align):
        a = self.node.mem.alloc(nbytes, align)
        self._allocs.append(a)
        return a

    def release(self) -> None:
        """Stop the board and give back the pinned memory (rmmod, or a failed load)."""
        card = self.ni
        if self.lcp is not None:
            card.csr_write(hw.REG_CTRL, 0)
            card.csr_write(hw.REG_EIMR, 0)
            card.host_write_sink = None
            if card.firmware is self.lcp:
                card.unload_firmware()
            self.lcp = None
        while self._allocs:
            self.node.mem.release(self._allocs.pop())

    # -- pacing (FM-C13, FM-A17) --------------------------------------------------------------

    def _choose_pacing(self, setting):
        node = self.node
        if self.bus is None:
            node.log(f"fm: {node.profile.name} has no PCI bus model (chipset.* keys): PIO costs the board's "
                     "pio_time, no pacing")
            return None
        if setting == "off":
            self.pacing = {"chunk_bytes": 0, "source": "pacing=off"}
            node.log("fm: PIO pacing off (pacing=off)")
            return pacing.Pacer(self.bus)
        result = pacing.choose(self.bus, PACKET_BYTES)
        if setting == "auto":
            chunk = result["chunk_bytes"]
            source = "start-up micro-benchmark"
        else:
            chunk = int(setting)
            source = "pacing parameter"
        self.pacing = {"chunk_bytes": chunk, "mbytes_per_s": round(result["mbytes_per_s"], 2),
                       "unpaced_mbytes_per_s": round(result["unpaced_mbytes_per_s"], 2), "source": source}
        tbl = ", ".join(f"{c}:{m:.1f}" for c, m in result["table"] if c <= 512)
        node.log(f"fm: PIO micro-benchmark on the {self.bus.pwq_lines}-line posted-write queue: a {PACKET_BYTES}-byte "
                 f"packet unpaced {result['unpaced_mbytes_per_s']:.1f} MB/s; paced by chunk (bytes:MB/s) {tbl}, ...")
        if chunk:
            node.log(f"fm: PIO pacing: {chunk}-byte chunks ({source}; best {result['mbytes_per_s']:.1f} MB/s)")
        else:
            node.log(f"fm: PIO pacing: none needed ({source}: unpaced PIO is the fastest)")
        return pacing.Pacer(self.bus, chunk, result["periods"])

    # -- the host's accesses to the board ------------------------------------------------------

    def pio(self, off, data, pend):
        """PIO `data` into SRAM at `off` from this CPU (the path's time is synced first)."""
        if pend:
            yield pend
        now = self.engine.now
        n = len(data)
        if self.pacer is not None:
            done = self.pacer.post(now, off, n)
        else:
            done = now + self.ni.pio_time(n)
        self.ni.pio_write(off, data)              # the LCP looks only after the doorbell, which follows
        return done - now

    def pio_word(self, off, value, pend):
        """PIO a word the LCP watches: it sees it once the write has crossed the bridge."""
        if pend:
            yield pend
        now = self.engine.now
        if self.pacer is not None:
            done = self.pacer.post(now, off, 4)
            seen = self.bus.drained_at
        else:
            done = seen = now + self.ni.pio_time(4)
        self.engine.at(seen, self._poke, (off, value))
        return done - now

    def _poke(self, item):
        self.ni.pio_write32(item[0], item[1])

    def read_time(self) -> float:
        """CPU time of one read of a LANai word across PCI, issued now."""
        now = self.engine.now
        if self.bus is not None:
            return self.bus.read(now) - now
        return self.read_s

    def tx_wait_bits(self, k, on) -> int:
        self._wait_bits = (self._wait_bits | (1 << k)) if on else (self._wait_bits & ~(1 << k))
        return self._wait_bits

    # -- contexts ------------------------------------------------------------------------------

    def ctx_entry(self, k) -> int:
        return CTX_BASE + k * CTX_BYTES

    def open_ctx(self, k, ctx) -> NetPort:
        card = self.ni
        e = self.ctx_entry(k)
        ring = self.region + k * self.max_hosts * SLOT_BYTES
        txdone = self.words + 64 * k
        credits = self.credits + k * self.credit_bytes
        mem = self.node.mem
        mem.wr32(txdone, 0)
        mem.write(credits, bytes(self.credit_bytes))
        for i in range(0, self.max_hosts * SLOT_BYTES, SLOT_BYTES):
            mem.wr32(ring + i + SLOT_BYTES - 4, 0)
        for off, value in ((CX_SEND_PROD, 0), (CX_PROGRAM, ctx.program), (CX_INSTANCE, ctx.instance),
                           (CX_RING, ring), (CX_SLOTS, self.max_hosts), (CX_SLOT_BYTES, SLOT_BYTES),
                           (CX_TXDONE_ADDR, txdone), (CX_CREDIT_ADDR, credits), (CX_CREDIT_HOSTS, self.max_hosts),
                           (CX_SEND_BASE, self.lcp.send_slot(k, 0)), (CX_SEND_SLOTS, self.send_slots),
                           (CX_ACTIVE, 1)):
            card.pio_write32(e + off, value)
        self.lcp.activate(k)
        port = NetPort(self, k, ring, self.max_hosts, SLOT_BYTES, txdone, credits)
        self.ports[k] = (port, ctx, ring, ring + self.max_hosts * SLOT_BYTES, txdone, credits)
        return port

    def close_ctx(self, k) -> None:
        if self.lcp is not None:
            self.lcp.deactivate(k)
            self.ni.pio_write32(self.ctx_entry(k) + CX_ACTIVE, 0)
        self.ports.pop(k, None)

    def _host_write(self, addr, n) -> None:
        """The LCP's DMA wrote host memory: the context it belongs to notices (FM-C06)."""
        for port, ctx, lo, hi, txdone, credits in self.ports.values():
            if lo <= addr < hi or addr == txdone or credits <= addr < credits + self.credit_bytes:
                ctx.wake("mem")
                return

    def stats(self) -> dict:
        out = {"notify": "pci" if self.notify_pci else "memory", "pacing": dict(self.pacing),
               "region_bytes": self.contexts * self.max_hosts * SLOT_BYTES, "lcp": self.lcp.stats() if self.lcp else None}
        if self.pacer is not None:
            out["pacer"] = {"chunks_waited": self.pacer.paced, "wait_us": self.pacer.wait_s * 1e6}
        out["device"] = self.ni.stats()
        return out
