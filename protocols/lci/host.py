"""LCI's host library: the user-level half that talks to the NI (LCI-C02, C05, C06, C08).

Everything here runs in the one LCI process of a node (LCI-A54: NI access is
unprotected, one process per node), as *paths*: generators yielding the CPU seconds
their work takes (``kernelsim._cpu``). The user API (``libdp.lci``) submits them; a
path that cannot go on -- no free NI send buffer, a closed window, nothing arrived --
raises `WouldBlock` with this library's event queue, which the NI's DMAs into host
memory, its interrupts and the library's own timers wake.

**Send** (Fig. 2 steps 1-3). Take a free NI send buffer (the NI's send completions,
a queue in host memory, say which are free again); get the data to the NI the
variant's way -- SDMA: copy it into this buffer's slot of the host-resident packet
queue, since the application may change its data after the call returns (LCI-C06),
and let the NI fetch it; PIO: write it into the NI send buffer with write-combined
stores (LCI-C15); RCPY: nothing, the NI fetches it from the user's pages through its
TLB, or on an HTLB miss the host writes it by PIO (LCI-C18) -- then write the send
descriptor (one write-combined burst).

**Receive** (steps 5-7, LCI-C08). The host gave the NI its free receive buffers in
order, so it knows which one fills next and polls its last word; a full buffer goes to
the client's upcall, then back to the NI -- unless the upcall keeps the packet, which
the client releases later, in any order.

**I-hrx** (LCI-C12). The go-back-N protocol runs here: each data packet gets a
sequence number, a time stamp from the CPU's time-stamp counter and a piggybacked
acknowledgement; it stays in its NI send buffer until acknowledged (retransmission
posts the same buffer again: no copy). The receiving host drops out-of-sequence
packets, acknowledges after half a window or when its per-sender delayed-ack timer
runs out. Timers are checked at every poll; a process that waits arms a timer that
wakes it when the next one falls due (the OS timer signal the paper falls back to).
"""
from __future__ import annotations

import errno
import struct
from collections import deque

from kernelsim import SpinnerQueue, WaitQueue, WouldBlock

from nic_drivers.myrinet import _model as hw
from protocols.lci import _wire as W
from protocols.lci._hostrx import HostRx, Packet
from protocols.lci._window import BEHIND, EXPECTED, RxWindow, TxWindow
from protocols.lci.firmware import layout as L
from protocols.lci.hostmcast import HostMulticast
from protocols.lci.memory import PAGE, Htlb, UserBuffer, UserMemory

__all__ = ["HostLib", "Packet", "RcpyHandle", "STAT_KEYS"]

MASK32 = 0xFFFFFFFF
DESC_WRITE = 24                # bytes of a send descriptor the host writes (one WC burst)
_DESC = struct.Struct("<6I")
_CMD = struct.Struct("<3I")

MC_KINDS = (W.K_MCAST, W.K_FA_REQ, W.K_FA_REPLY)
STAT_KEYS = ("sent", "sent_bytes", "received", "received_bytes", "upcalls", "kept", "released", "polls",
             "empty_polls", "completions", "send_waits", "acks_sent", "acks_received", "retransmitted",
             "timeouts", "delayed_acks", "duplicates", "out_of_order", "dropped_after_close", "htlb_hits",
             "htlb_misses", "rcpy_transfers", "rcpy_packets", "rcpy_miss_notices", "interrupts",
             "signals", "copies", "copied_bytes")


def _lines(n: int, line: int = 64) -> int:
    """Bytes of cache lines `n` bytes occupy."""
    return max(line, -(-n // line) * line)


class RcpyHandle:
    """An RCPY in progress: done when every page transfer has left the sending NI."""

    __slots__ = ("dest", "nbytes", "outstanding", "posted", "total", "pieces")

    def __init__(self, dest, nbytes):
        self.dest = dest
        self.nbytes = nbytes
        self.outstanding = 0
        self.posted = 0
        self.total = 0
        self.pieces = None

    @property
    def done(self) -> bool:
        return self.posted == self.total and self.outstanding == 0

    def __repr__(self):
        return f"<RCPY of {self.nbytes} B to node {self.dest}: {'done' if self.done else 'in flight'}>"


class HostPeer:
    """I-hrx state about one other node (made on first contact)."""

    __slots__ = ("nid", "tx", "rx", "ack_due", "retx_due")

    def __init__(self, nid, window):
        self.nid = nid
        self.tx = TxWindow(window)
        self.rx = RxWindow()
        self.ack_due = None             # delayed-ack deadline, or None
        self.retx_due = None


class HostLib(HostRx):
    """The LCI library state of the node's LCI process (kept by the service across opens).

    Its receive path (poll, the small steps a poll runs, `Packet`) is `HostRx`, in
    Cython (_hostrx.pyx); the rest is here."""

    def __init__(self, svc):
        node = svc.node
        self.svc = svc
        self.node = node
        self.engine = node.engine
        self.mem = node.mem
        self.dev = svc.dev
        self.fw = svc.fw
        self.c = svc.costs
        self.variant = svc.variant
        self.mtu = svc.variant.mtu
        self.reliability = svc.variant.reliability
        self.transfer = svc.variant.transfer
        self.window = svc.window
        self.half = max(1, self.window // 2)
        self.events = SpinnerQueue(node.engine)     # a modeled poll_until is a spinner of it
        # A process asleep in wait() is not polling: a DMA into its memory does not wake
        # it, only the watchdog's interrupt (or one of the library's own timers) does.
        self.sleepers = WaitQueue(node.engine)
        self.hdr = W.Header()
        self.vm = UserMemory(node.mem)
        self.htlb = Htlb()
        self.st = dict.fromkeys(STAT_KEYS, 0)
        self.malformed = dict.fromkeys(W.REASONS[1:] + ("bad_source", "unknown_kind", "bad_rcpy_address"), 0)
        self.upcall = None
        self.owed = 0.0                 # CPU time of work done outside a path (copies in upcalls)
        self.interrupts = False
        self.signalled = False          # the watchdog's interrupt came: the next wake is a signal
        self.want_completion = False    # a call waits for a send completion
        self.peers: dict[int, HostPeer] = {}
        self.timed: set[int] = set()    # I-hrx peers with a timer running
        self._timer = -1
        self.stalled_since = None
        self.aborted = None
        self.scratch = None
        self.pio_desc = self.dev.pio_time(DESC_WRITE)
        self.pio_word = self.dev.pio_time(4)
        self.mc = HostMulticast(self)   # multicast and fetch-and-add (hostmcast.py)
        self.realtime = not node.modeled

    def setup(self, rx_bufs, slot, cpl_ring, nsd, status, sendq, anon) -> None:
        """The memory the service allocated; give the NI every receive buffer and anonymous page."""
        self.rx_bufs = rx_bufs
        self.slot = slot
        self._rx_setup()                # the C values a poll reads (_hostrx.pyx)
        self.rx_queue_bytes = len(rx_bufs) * slot
        self.cpl_ring = cpl_ring
        self.nsd = nsd
        self.status = status
        self.sendq = sendq              # SDMA: the host-resident packet queue, one slot per send buffer
        self.sendq_bytes = self.fw.nsend * self.mtu
        self.given = deque()
        self.free_prod = 0
        for a in rx_bufs:
            self._give(a)
        self.anon_given = deque()
        self.anon_prod = 0
        for a in anon:
            self._give_anon(a)
        self.send_free = deque(range(self.fw.nsend))
        self.desc = [None] * nsd
        self.sd_prod = 0
        self.cpl_cons = 0
        self.cmd_prod = 0
        self.polled = 0

    # -- small steps (no modeled time of their own: the callers charge it) ---------------------

    def _give_anon(self, addr: int) -> None:
        fw = self.fw
        self.dev.pio_write32(fw.lay["anon_base"] + 4 * (self.anon_prod % fw.nanon), addr | L.FREE_VALID)
        self.anon_prod += 1
        self.anon_given.append(addr)

    def peer(self, nid: int) -> HostPeer:
        p = self.peers.get(nid)
        if p is None:
            p = self.peers[nid] = HostPeer(nid, self.window)
        return p

    def check_dest(self, dest) -> None:
        if not isinstance(dest, int) or isinstance(dest, bool):
            raise OSError(errno.EINVAL, f"destination node must be an int, not {dest!r}")
        if dest == self.node.nid:
            raise OSError(errno.EINVAL, "LCI sends to other nodes only (no loopback)")
        if dest not in self.fw.routes:
            raise OSError(errno.EHOSTUNREACH, f"node {dest} is not on this node's Myrinet")

    # -- send descriptors and completions ------------------------------------------------------

    def _reclaim(self) -> int:
        """Take the NI's send completions (a queue in host memory); the count taken."""
        n = 0
        mem = self.mem
        while True:
            a = self.cpl_ring + 4 * (self.cpl_cons % self.nsd)
            w = mem.rd32(a)
            if not w & L.CPL_VALID:
                return n
            mem.wr32(a, 0)
            self.cpl_cons += 1
            n += 1
            i = w & 0xFFFF
            entry = self.desc[i]
            self.desc[i] = None
            if entry is None:
                continue
            kind, buf, token = entry
            if kind in (L.SD_SEND, L.SD_RCPY, L.SD_MCAST) and (self.reliability != "host" or kind == L.SD_RCPY):
                self.send_free.append(buf)
            if token is not None:
                token.outstanding -= 1
        return n

    def reclaim_path(self):
        """Read the completion queue: a miss on its first word, then the records."""
        yield self.c.mem_miss
        n = self._reclaim()
        self.st["completions"] += n
        if n:
            yield self.c.h_reclaim * n
        return n

    def _need(self, buffers: int = 1, descs: int = 1):
        """Room for `descs` descriptors and `buffers` send buffers, reclaiming if short."""
        if len(self.send_free) < buffers or self.desc[(self.sd_prod + descs - 1) % self.nsd] is not None:
            yield from self.reclaim_path()
            if len(self.send_free) < buffers or self.desc[(self.sd_prod + descs - 1) % self.nsd] is not None:
                self.want_completion = True
                return False
        self.want_completion = False
        return True

    def _post(self, kind, flags, length, dest, buf, addr=0, aux=0, seq_ack=0, mapping=0, token=None):
        """Write descriptor words and valid bit into the next ring slot (charged by the caller)."""
        i = self.sd_prod % self.nsd
        self.sd_prod += 1
        self.desc[i] = (kind, buf, token)
        w0 = L.SD_VALID | (kind << 24) | (flags << 16) | length
        self.dev.pio_write(L.SD_BASE + i * L.SD_BYTES,
                           _DESC.pack(w0, (dest << 16) | buf, addr & MASK32, aux & MASK32, seq_ack, mapping))

    # -- send ------------------------------------------------------------------------------------

    def send_path(self, dest: int, data, since=None, wire: int = 0, aux: int = 0):
        """One packet of at most an MTU to `dest` (the API checked its arguments); `wire`
        and `aux`: a packet kind other than DATA and its header word (hostmcast.py)."""
        c = self.c
        self.check_abort()
        yield (0.5 * c.h_send if since is not None else c.h_send) + self._take_owed()
        hrx = self.reliability == "host"
        if hrx:
            yield from self._hrx_service()
            p = self.peer(dest)
            if not p.tx.open():
                yield from self.poll_path()          # acknowledgements come in through the queue
                if not p.tx.open():
                    self.st["send_waits"] += 1
                    raise WouldBlock(self.events, "LCI send window closed")
        ok = yield from self._need()
        if not ok and hrx:
            # I-hrx frees send buffers on acknowledgements, which come in through the
            # receive queue: take them, and look again (else no event would wake us).
            yield from self.poll_path()
            ok = yield from self._need()
        if not ok:
            # A sender that waits for a send buffer polls meanwhile (its upcalls run inside
            # send): the buffers come back only as the peers' NIs take our packets, and
            # theirs only as we take theirs -- two nodes sending to each other with full
            # receive queues would otherwise wait for each other forever.
            self.st["send_waits"] += 1
            self._stall_check()
            yield from self.poll_path()
            raise WouldBlock(self.events, "LCI: no free NI send buffer")
        self.stalled_since = None
        buf = self.send_free.popleft()
        n = len(data) if not isinstance(data, tuple) else data[2]
        flags = wire << L.SDF_WIRE_SHIFT
        addr = mapping = 0
        if self.transfer == "pio":
            yield self.dev.pio_time(n)
            self.dev.pio_write(self.fw.tx[buf].buf + self.fw.unicast.payload_off, self._bytes(data))
            flags |= L.SDF_PIO
        elif self.transfer == "sdma":
            q = self.sendq + buf * self.mtu
            # The queue's slots are reused in turn: what stays cached is the lines touched.
            yield c.copy(n, self.fw.nsend * _lines(n) + self._source_bytes(data))
            self.mem.write(q, self._bytes(data))
            addr = q
        else:
            vaddr = self._user_vaddr(data, buf)
            rflags, mapping = yield from self._rcpy_source(buf, vaddr, n)
            flags |= rflags
            addr = vaddr
        seq_ack = 0
        if hrx:
            yield c.h_seq_send
            p = self.peer(dest)
            seq = p.tx.push(buf, self.engine.now)
            seq_ack = (seq << 16) | self._ack_going(p)
            self._arm_retx(p)
        yield self.pio_desc
        self._post(L.SD_SEND, flags, n, dest, buf, addr, aux, seq_ack, mapping)
        self.st["sent"] += 1
        self.st["sent_bytes"] += n
        return n

    def _bytes(self, data) -> bytes:
        if isinstance(data, tuple):
            ub, off, n = data
            return ub.read(off, n)
        return data

    def _source_bytes(self, data) -> int:
        return data[0].size if isinstance(data, tuple) else len(data)

    def _user_vaddr(self, data, buf: int) -> int:
        """RCPY transfers read user memory. Bytes given by value are the message as the
        application built it in its own message buffers -- one per NI send buffer, since
        the NI reads them after the call returns, until the send completes."""
        if isinstance(data, tuple):
            ub, off, n = data
            return ub.vaddr + off
        if self.scratch is None:
            self.scratch = self.vm.alloc(self.fw.nsend * self.mtu)
        self.scratch.write(buf * self.mtu, data)
        return self.scratch.vaddr + buf * self.mtu

    def _rcpy_source(self, buf, vaddr, n):
        """HTLB lookup of the source; on a miss (or a piece crossing a page) pin the page and
        write the data by PIO, with the new mapping for the NI (LCI-C18). (flags, mapping)."""
        c = self.c
        yield c.h_htlb
        vpage = vaddr // PAGE
        if (vaddr + max(n, 1) - 1) // PAGE == vpage and self.htlb.lookup(vpage):
            self.st["htlb_hits"] += 1
            return 0, 0
        self.st["htlb_misses"] += 1
        yield c.pin_s + self.dev.pio_time(n)
        self.vm.pinned.add(vpage)
        self.dev.pio_write(self.fw.tx[buf].buf + self.fw.unicast.payload_off, self.vm.read(vaddr, n))
        page = self.vm.phys(vpage * PAGE)
        # The NI installs the mapping when it reaches this descriptor, after every earlier
        # hit on the entry's old page (LCI-C18); descriptors are taken in order, so any later
        # transfer from this page finds it: the HTLB holds it from now on.
        self.htlb.set(vpage, page)
        return L.SDF_PIO | L.SDF_MISS, page

    def _stall_check(self) -> None:
        """Without retransmission nothing brings back a credit a lost packet took: a sender
        that gets no completion for `lci.stall_s` reports the broken assumption."""
        if self.reliability != "none":
            return
        now = self.engine.now
        if self.stalled_since is None:
            self.stalled_since = now
        elif now - self.stalled_since >= self.c.stall_s:
            # Sticky, as an NI abort: every later call (and close's drain) stops too.
            self.aborted = (f"no send completed for {(now - self.stalled_since) * 1e3:.1f} ms: a packet (or its "
                            "credit) was lost; LCI without retransmission assumes a reliable network (LCI-C03); "
                            "load lci with reliability=ni or host")
            raise OSError(errno.EIO, f"LCI {self.variant.name}: {self.aborted}")

    # -- RCPY ----------------------------------------------------------------------------------

    def rcpy_start(self, dest, src: UserBuffer, src_off: int, dst_vaddr: int, nbytes: int) -> RcpyHandle:
        if self.transfer != "rcpy":
            raise OSError(errno.EOPNOTSUPP, f"rcpy needs transfer=rcpy (variant I-rcpy), not {self.variant.name}")
        self.check_dest(dest)
        if not isinstance(src, UserBuffer) or src.vm is not self.vm:
            raise OSError(errno.EFAULT, "the source of an rcpy is a buffer of this process (lci.alloc)")
        for what, v in (("source offset", src_off), ("destination address", dst_vaddr), ("length", nbytes)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise OSError(errno.EINVAL, f"rcpy {what} must be a non-negative int, not {v!r}")
        src._span(src_off, nbytes)
        if (src.vaddr + src_off) % 4 or dst_vaddr % 4 or nbytes % 4:
            raise OSError(errno.EINVAL, "rcpy moves 4-byte aligned data between 4-byte aligned addresses (LCI-A44)")
        if dst_vaddr + nbytes > MASK32:
            raise OSError(errno.EFAULT, f"destination {dst_vaddr:#x}+{nbytes} is beyond a 32-bit address space")
        h = RcpyHandle(dest, nbytes)
        pieces = []
        s, d, left = src.vaddr + src_off, dst_vaddr, nbytes
        while left > 0:
            # Page transfers of at most a page (LCI-A43) at both ends, each in MTU packets.
            k = min(left, PAGE - s % PAGE, PAGE - d % PAGE, self.mtu)
            pieces.append((s, d, k))
            s, d, left = s + k, d + k, left - k
        h.total = len(pieces)
        h.pieces = deque(pieces)
        self.st["rcpy_transfers"] += 1
        return h

    def rcpy_path(self, h: RcpyHandle, since=None):
        """Post the page-transfer packets of an RCPY (WouldBlock when out of buffers)."""
        c = self.c
        self.check_abort()
        if since is None:
            yield c.h_send
        pieces = h.pieces
        while pieces:
            ok = yield from self._need()
            if not ok:
                self.st["send_waits"] += 1
                self._stall_check()
                yield from self.poll_path()          # as send does: see there
                raise WouldBlock(self.events, "LCI: no free NI send buffer")
            self.stalled_since = None
            s, d, k = pieces.popleft()
            buf = self.send_free.popleft()
            flags, mapping = yield from self._rcpy_source(buf, s, k)
            yield self.pio_desc
            h.outstanding += 1
            h.posted += 1
            self._post(L.SD_RCPY, flags, k, h.dest, buf, s, d, 0, mapping, h)
            self.st["rcpy_packets"] += 1
        return h

    def rcpy_wait_path(self, h: RcpyHandle, since=None):
        self.check_abort()
        if not h.done:
            yield from self.reclaim_path()
        if not h.done:
            self._stall_check()
            self.want_completion = True
            raise WouldBlock(self.events, "LCI: rcpy in flight")
        self.want_completion = False
        return True

    # -- receive ---------------------------------------------------------------------------------

    def release_path(self, pkt: Packet):
        if not isinstance(pkt, Packet) or pkt.lib is not self:
            raise OSError(errno.EINVAL, f"not a packet of this LCI endpoint: {pkt!r}")
        if not pkt.live:
            raise OSError(errno.EINVAL, "packet already released")
        pkt.live = False
        yield from self._release_path(pkt.addr)

    def _rcpy_miss(self, hdr):
        """A receive-side miss (LCI-C19): the data is in the next anonymous page; copy it
        to its destination, pin that page, fix both TLBs, give the page back."""
        c = self.c
        self.st["rcpy_miss_notices"] += 1
        anon = self.anon_given.popleft()
        n, vaddr = hdr.length, hdr.aux
        if not self.vm.mapped(vaddr, n):
            self.malformed["bad_rcpy_address"] += 1
        else:
            yield c.copy(n, n + PAGE)
            i = 0
            for p, k in self.vm.pieces(vaddr, n):
                self.mem.move(p, anon + i, k)
                i += k
            vpage = vaddr // PAGE
            page = self.vm.phys(vpage * PAGE)
            yield c.pin_s + c.h_htlb + self.dev.pio_time(L.NTLB_CMD_BYTES)
            self.vm.pinned.add(vpage)
            self.htlb.set(vpage, page)
            cmd = self.fw.lay["cmd_base"] + (self.cmd_prod % L.NTLB_CMDS) * L.NTLB_CMD_BYTES
            self.cmd_prod += 1
            self.dev.pio_write(cmd, _CMD.pack(L.SD_VALID | L.NTLB_CMD_UPDATE, vpage, page))
        yield self.pio_word
        self._give_anon(anon)

    # -- I-hrx: the go-back-N protocol on the host ----------------------------------------------

    def _ack_going(self, p: HostPeer) -> int:
        """Any packet to `p` acknowledges: its delayed-ack timer stops."""
        p.ack_due = None
        return p.rx.acked()

    def _arm_retx(self, p: HostPeer) -> None:
        if p.retx_due is None and p.tx.outstanding():
            p.retx_due = p.tx.oldest_stamp() + self.c.rto(p.tx)
            self.timed.add(p.nid)

    def _hrx_receive(self, hdr):
        """Sequence check and acknowledgements of one packet; True: deliver it."""
        c = self.c
        yield c.h_seq_recv
        p = self.peer(hdr.src)
        if hdr.flags & W.F_HAS_ACK:
            freed = p.tx.ack(hdr.ack)
            if freed:
                yield c.h_ack
                self.send_free.extend(freed)
                p.retx_due = None
                self._arm_retx(p)
        if hdr.kind == W.K_ACK:
            self.st["acks_received"] += 1
            return False
        w = p.rx.where(hdr.seq)
        if w == EXPECTED:
            p.rx.accept()
            if p.rx.owed >= self.half:
                yield from self._send_ack(p)
            elif p.ack_due is None:
                p.ack_due = self.engine.now + self.c.delayed_ack_s
                self.timed.add(p.nid)
            return True
        if w == BEHIND:
            self.st["duplicates"] += 1
            yield from self._send_ack(p)             # our acknowledgement went missing
        else:
            self.st["out_of_order"] += 1
        return False

    def _send_ack(self, p: HostPeer):
        ok = yield from self._need(buffers=0)
        if not ok:
            p.ack_due = self.engine.now              # retried at the next poll
            self.timed.add(p.nid)
            return
        yield self.c.h_seq_send + self.pio_desc
        self._post(L.SD_ACK, 0, 0, p.nid, 0, seq_ack=self._ack_going(p))
        self.st["acks_sent"] += 1

    def _hrx_service(self):
        """The timers, checked against the time-stamp counter at every poll and send."""
        if not self.timed:
            return
        now = self.engine.now
        for nid in list(self.timed):
            p = self.peers[nid]
            if p.ack_due is not None and p.ack_due <= now:
                if p.rx.owed:
                    self.st["delayed_acks"] += 1
                    yield from self._send_ack(p)
                else:
                    p.ack_due = None
            if p.retx_due is not None and p.retx_due <= now:
                p.retx_due = None
                stale = p.tx.stale(now, self.c.rto(p.tx))
                resent = 0
                for j in stale:
                    ok = yield from self._need(buffers=0)
                    if not ok:
                        break
                    yield self.c.h_seq_send + self.pio_desc
                    p.tx.restamp(j, now)
                    buf = p.tx.token(j)
                    self._post(L.SD_RETX, 0, 0, nid, buf, seq_ack=(p.tx.seq_at(j) << 16) | self._ack_going(p))
                    resent += 1
                if resent:
                    self.st["timeouts"] += 1
                    self.st["retransmitted"] += resent
                    p.tx.expiries += 1                 # the next time-out is twice as long (costs.py)
                elif stale:
                    p.retx_due = now                   # no descriptor free: at the next poll
                self._arm_retx(p)
            if p.ack_due is None and p.retx_due is None:
                self.timed.discard(nid)

    def next_deadline(self):
        """When a host timer falls due (a waiting process is woken then), or None."""
        due = None
        for nid in self.timed:
            p = self.peers[nid]
            for t in (p.ack_due, p.retx_due):
                if t is not None and (due is None or t < due):
                    due = t
        if self.realtime and self.reliability == "ni" and self.outstanding():
            due = self.engine.now         # real time: keep polling while the NI may have to resend
        if self.reliability == "none" and self.stalled_since is not None:
            t = self.stalled_since + self.c.stall_s
            due = t if due is None or t < due else due
        return due

    # -- waiting ------------------------------------------------------------------------------------

    def _timer_fired(self, _):
        self._timer = -1
        self.events.wake()
        self.sleepers.wake()

    def set_interrupts_path(self, on: bool):
        yield self.pio_word
        self.interrupts = bool(on)
        self.dev.pio_write32(L.CB_POLLED, self.polled & MASK32)
        self.dev.pio_write32(L.CB_IRQ, 1 if on else 0)

    def peer_gone(self) -> bool:
        """Has a peer acknowledged nothing through ``lci.retx_give_up`` time-outs in a row?"""
        give_up = self.c.retx_give_up
        return any(p.tx.expiries >= give_up for p in self.peers.values())

    def outstanding(self) -> int:
        """Descriptors the NI has not completed, plus I-hrx packets unacknowledged."""
        busy = sum(1 for d in self.desc if d is not None) + len(self.mc.queue)
        return busy + sum(p.tx.outstanding() for p in self.peers.values())

    def stats(self) -> dict:
        out = dict(self.st)
        out["malformed"] = dict(self.malformed)
        out["multicast"] = dict(self.mc.st, forward_queue=len(self.mc.queue))
        out.update(variant=self.variant.name, free_send_buffers=len(self.send_free),
                   receive_queue=len(self.given), outstanding=self.outstanding())
        return out
