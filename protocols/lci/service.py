"""The kernel's part of LCI: the board, the pinned memory, the interrupt, one system call.

At ``insmod`` the service takes the LANai board from DP's driver (whose control
program it replaces with LCI's, ``firmware/``), pins the host memory LCI's NI DMAs
into -- receive buffers (few enough to stay in the L2 cache: LCI-C26), the
send-completion queue, the status word, the SDMA packet queue (LCI-C06), RCPY's
anonymous pages (LCI-C19) -- writes the control block and starts the NI. It offers
``lci_open``, which gives the calling process the NI and the library state (one
process per node: NI access is unprotected, LCI-A54); an open endpoint holds a module
reference, so ``rmmod lci`` is EBUSY while one lives.

Interrupts (LCI-C09): the NI's polling watchdog raises the board's RX interrupt only
when the host has not polled in time; the interrupt path acknowledges it and sends
the process its "signal": its waiting call wakes and polls. What was delivered while
no process had the endpoint open stays queued for the next one.
"""
from __future__ import annotations

import errno

from kernelsim import OpenFile

from nic_drivers.myrinet import _model as hw
from protocols.lci._wire import HDR_BYTES
from protocols.lci.costs import LciCosts, derive_window
from protocols.lci.firmware import LciFirmware, RELIABILITY_CODES, TRANSFER_CODES
from protocols.lci.firmware import layout as L
from protocols.lci.host import HostLib

__all__ = ["LciService", "LciEndpoint", "lci_routes"]


def lci_routes(netdev):
    """The routes LCI's NI sends by: what the mapper loaded into the board, or -- on a
    real transport, where no mapper ran -- the driver's one-crossbar table (driver.pyx)."""
    return netdev.dev.route_table or netdev.routes


class LciEndpoint(OpenFile):
    """The LCI process's handle on its node's NI (a file descriptor)."""

    kind = "LCI endpoint"

    def __init__(self, svc, proc):
        super().__init__(proc.node)
        self.svc = svc
        self.proc = proc
        self.lib = svc.lib
        self.closed = False
        self.fd = -1

    def export_to(self, owner):
        """Real nodes: the LCI process drives the NI itself (LCI-A54: user-level access), so
        the node hands it the board's frames (`kernelsim.daemon.Passthrough`); its own copy
        of this module runs LCI there (see `libdp._attach`). ENOTSUP on a modeled fabric."""
        from kernelsim.daemon import Passthrough
        export = Passthrough(owner, self.svc.dev.port)
        self.svc.dev.pio_write32(L.CB_ACCEPT, 0)        # the frames are the process's now
        return export

    def release(self, proc) -> None:
        if self.closed:
            return
        self.closed = True
        lib = self.lib
        lib.upcall = None
        lib.interrupts = False
        self.svc.dev.pio_write32(L.CB_IRQ, 0)
        self.svc.endpoint_closed(self)

    def __repr__(self):
        return f"LCI endpoint of pid {self.proc.pid} on node {self.node.nid}"


class LciService:
    def __init__(self, kernel, netdev, variant, params: dict):
        self.node = kernel
        self.netdev = netdev
        self.dev = netdev.dev
        self.variant = variant
        self.params = dict(params)
        self.costs = LciCosts(kernel)
        c = self.costs
        p = kernel.profile
        self.window = params["window"] or derive_window(p, variant.mtu)     # one rule for every variant (costs.py)
        self.pool = int(p["lci.rx_pool_bytes"]) // variant.mtu
        if self.pool < 2:
            raise OSError(errno.EINVAL, f"lci: lci.rx_pool_bytes holds fewer than two {variant.mtu}-byte buffers")
        self.fw = LciFirmware(c, variant, self.window, self.pool, lci_routes(netdev))
        self.fw.realtime = not kernel.modeled
        # On a real transport the LCI process may be another OS process that drives the
        # board itself (LciEndpoint.export_to): this NI takes packets only while the
        # endpoint is open here, and never while its frames are handed over.
        self.real = hasattr(getattr(self.dev, "port", None), "divert")
        self.lib = None
        self.endpoint = None
        self.opened = 0
        self.irq_line = -1
        self._allocs: list[int] = []
        self.interrupts = 0

    # -- load / unload (the module's init and the undo log) -------------------------------------

    def start(self) -> None:
        node, dev, fw, c = self.node, self.dev, self.fw, self.costs
        dev.load_firmware(fw)                           # ENOMEM if the layout does not fit SRAM
        try:
            slot = (HDR_BYTES + self.variant.mtu + 4 + 63) // 64 * 64     # header, payload, length word
            rx = [self._alloc(slot, 64) for _ in range(c.host_rx_buffers)]
            cpl = self._alloc(4 * fw.nsd, 64)
            status = self._alloc(64, 64)
            sendq = self._alloc(fw.nsend * self.variant.mtu, 64) if self.variant.transfer == "sdma" else 0
            anon = [self._alloc(L.PAGE, L.PAGE) for _ in range(fw.nanon)]
            for a in [cpl, status] + rx:
                node.mem.write(a, bytes(4 * fw.nsd if a == cpl else (64 if a == status else slot)))
        except MemoryError:
            self.stop()
            raise OSError(errno.ENOMEM, "lci: no host memory to pin for the queues") from None
        self.irq_line = node.irq.free_line()
        node.irq.request_irq(self.irq_line, self.interrupt_path, "lci")
        dev.irq_sink = self._irq
        dev.host_write_sink = self._host_write
        w = dev.pio_write32
        v = self.variant
        for off, value in ((L.CB_CONFIG, RELIABILITY_CODES.index(v.reliability)
                            | TRANSFER_CODES.index(v.transfer) << 4 | (v.mtu >> 10) << 8),
                           (L.CB_CPL_RING, cpl), (L.CB_CPL_SLOTS, fw.nsd), (L.CB_STATUS, status),
                           (L.CB_WATCHDOG_NS, int(round(c.watchdog_s * 1e9))), (L.CB_WINDOW, self.window),
                           (L.CB_IRQ, 0), (L.CB_POLLED, 0), (L.CB_RETX_NS, int(round(c.retx_timeout_s * 1e9))),
                           (L.CB_DACK_NS, int(round(c.delayed_ack_s * 1e9))), (L.CB_NSEND, fw.nsend),
                           (L.CB_NFREE, fw.nfree), (L.CB_NANON, fw.nanon), (L.CB_HOST_SLOT, slot),
                           (L.CB_ACCEPT, 0 if self.real else 1)):
            w(off, value)
        self.lib = HostLib(self)
        dev.csr_write(hw.REG_EIMR, hw.ISR_RX | hw.ISR_ERR)
        dev.csr_write(hw.REG_CTRL, hw.CTRL_RUN)
        self.lib.setup(rx, slot, cpl, fw.nsd, status, sendq, anon)

    def _alloc(self, n: int, align: int) -> int:
        a = self.node.mem.alloc(n, align)
        self._allocs.append(a)
        return a

    def stop(self) -> None:
        """Halt LCI's control program and give back what it held (idempotent)."""
        dev, node = self.dev, self.node
        dev.csr_write(hw.REG_CTRL, 0)
        dev.csr_write(hw.REG_EIMR, 0)
        dev.irq_sink = None
        dev.host_write_sink = None
        if dev.firmware is self.fw:
            dev.unload_firmware()
        if self.irq_line >= 0:
            node.irq.set_level(self.irq_line, False)
            node.irq.free_irq(self.irq_line, "lci")
            self.irq_line = -1
        if self.lib is not None:
            self.lib.vm.release_all()
        while self._allocs:
            node.mem.release(self._allocs.pop())

    # -- lci_open ---------------------------------------------------------------------------------

    def sys_open(self, proc):
        """lci_open(): the NI and LCI's library state for the calling process, as an fd."""
        yield self.node.costs.cycles(self.params["open_cycles"])
        if self.endpoint is not None:
            raise OSError(errno.EBUSY, f"node {self.node.nid}: process {self.endpoint.proc.pid} already has LCI's "
                                       "NI (one user process per node, LCI-A54)")
        ep = LciEndpoint(self, proc)
        self.endpoint = ep
        self.opened += 1
        self.node.modules.module_get("lci")
        ep.fd = proc.fds.install(ep)
        self.dev.pio_write32(L.CB_ACCEPT, 1)
        return ep.fd

    def endpoint_closed(self, ep) -> None:
        if self.endpoint is ep:
            self.endpoint = None
            if self.real:
                self.dev.pio_write32(L.CB_ACCEPT, 0)
            self.node.modules.module_put("lci")

    # -- the board's interrupt and DMA notices -------------------------------------------------------

    def _irq(self, level: bool) -> None:
        if self.irq_line >= 0:
            self.node.irq.set_level(self.irq_line, level)

    def interrupt_path(self, pending: float = 0.0):
        """The watchdog's interrupt: acknowledge it, signal the process (LCI-C09)."""
        c = self.node.costs
        yield pending + c.pci_read
        isr = self.dev.csr_read(hw.REG_ISR) & (hw.ISR_RX | hw.ISR_ERR)
        if not isr:
            return 0.0
        yield c.pci_write
        self.dev.csr_write(hw.REG_ISR, isr)
        self.interrupts += 1
        if self.lib is not None:
            self.lib.st["interrupts"] += 1
            self.lib.signalled = True
            self.lib.events.wake()
            self.lib.sleepers.wake()
        return 0.0

    def _host_write(self, addr: int, n: int) -> None:
        """The NI DMA'd into host memory: a polling process notices it now."""
        if self.lib is not None:
            self.lib.events.wake()

    def stats(self) -> dict:
        out = {"variant": self.variant.name, "window": self.window, "rx_pool": self.pool,
               "endpoint_open": self.endpoint is not None, "endpoints_opened": self.opened,
               "interrupts": self.interrupts, "firmware": self.fw.stats()}
        if self.lib is not None:
            out["host"] = self.lib.stats()
        return out

