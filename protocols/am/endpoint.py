"""One SP AM endpoint: the library state of the one process per node that drives the TB2.

Everything here runs on the host, in the user process, at user level: the AM library
of the paper is a user library over the memory-mapped FIFOs (SP-A18, SP-C02), and
the adapter runs IBM's standard firmware unchanged. The kernel's part (``service.py``)
is only to give this process the card and to pin its memory segments.

Work is written as *paths* (generators yielding CPU seconds, see ``kernelsim._cpu``).
The user API (``libdp.am``) submits them for the process; a path that cannot finish
yet -- a full window, a transfer still in flight, nothing arrived -- raises
`WouldBlock` with this endpoint's event queue, and the caller waits there, as a
program spinning in ``am_poll`` would. Its spin is not simulated poll by poll: when
it resumes, the polls it would have made are counted (they are the keep-alive's
clock, SP-C08) and the poll that notices the event is charged half a poll on average.

Costs, from the paper's per-call figures less what the FIFO layer charges (see
``costs.py``): AM's header work is paid before the packet's length is stored (the
critical path of a round trip); its retransmission copy and bookkeeping after.
"""
from __future__ import annotations

import bisect
import errno
import inspect
from collections import deque

from kernelsim import OpenFile, WaitQueue, WouldBlock

from nic_drivers.tb2 import _model as hw
from protocols.am import _engine as E

__all__ = ["AmEndpoint", "Segment", "Token", "Transfer", "HandlerRuleError", "AM_PROTO", "MAX_HANDLERS"]

AM_PROTO = 0x414D            # "AM": the link-level protocol id in the TB2 header
MAX_HANDLERS = 256
U32 = 0xFFFFFFFF


class HandlerRuleError(OSError):
    """A call a handler may not make (GAM 1.1: handlers reply, they never request or
    poll), or a reply outside the rules (outside its handler, twice, from a reply)."""


class Segment:
    """Pinned memory of an endpoint that remote stores and gets may name."""

    __slots__ = ("ep", "addr", "size", "live")

    def __init__(self, ep, addr: int, size: int):
        self.ep = ep
        self.addr = addr
        self.size = size
        self.live = True

    def _span(self, off: int, n: int) -> int:
        if not self.live:
            raise OSError(errno.EFAULT, "the segment has been released")
        if not isinstance(off, int) or not isinstance(n, int) or off < 0 or n < 0 or off + n > self.size:
            raise OSError(errno.EFAULT, f"[{off}, {off}+{n}) is outside the {self.size}-byte segment")
        return self.addr + off

    def read(self, off: int = 0, n: int | None = None) -> bytes:
        n = self.size - off if n is None else n
        return self.ep.mem.read(self._span(off, n), n)

    def write(self, off: int, data) -> None:
        data = bytes(data)
        self.ep.mem.write(self._span(off, len(data)), data)

    def __repr__(self):
        return f"<Segment {self.addr:#x}+{self.size} on node {self.ep.node.nid}>"


class Token:
    """Who sent the message a handler is running for; the handle for its reply."""

    __slots__ = ("ep", "src", "request", "live", "replied")

    def __init__(self, ep, src: int, request: bool):
        self.ep = ep
        self.src = src
        self.request = request
        self.live = True
        self.replied = False

    def reply(self, handler: int, *args) -> None:
        self.ep.reply(self, handler, args)

    def __repr__(self):
        return f"<Token from node {self.src}, {'request' if self.request else 'reply'}{'' if self.live else ', spent'}>"


class Transfer:
    """An am_store / am_store_async / am_get in progress (as its initiator sees it)."""

    __slots__ = ("kind", "dest", "nbytes", "remote", "local", "handler", "arg", "on_done", "done_arg",
                 "blocking", "done", "error")

    def __init__(self, kind, dest, nbytes, remote, local, handler, arg, on_done=None, done_arg=None, blocking=False):
        self.kind = kind
        self.dest = dest
        self.nbytes = nbytes
        self.remote = remote
        self.local = local
        self.handler = handler
        self.arg = arg
        self.on_done = on_done
        self.done_arg = done_arg
        self.blocking = blocking
        self.done = False
        self.error = None

    def __repr__(self):
        state = "failed" if self.error else "done" if self.done else "in flight"
        return f"<Transfer {self.kind} {self.nbytes} B with node {self.dest}: {state}>"


class Peer:
    """Everything this endpoint keeps about one other node: two channels each way."""

    __slots__ = ("nid", "route", "tx_req", "tx_rep", "rx_req", "rx_rep", "ctl", "gets", "in_base", "in_total",
                 "mark", "keepalives")

    def __init__(self, nid, route, req_window, rep_window, ack_div):
        self.nid = nid
        self.route = route
        self.tx_req = E.TxChannel(req_window, deque())
        self.tx_rep = E.TxChannel(rep_window, deque())
        # The receiver's explicit-ack threshold is a quarter of the *sender's* window (SP-C05).
        self.rx_req = E.RxChannel(-(-req_window // ack_div))
        self.rx_rep = E.RxChannel(-(-rep_window // ack_div))
        self.ctl = deque()            # control packets to send: (kind, flags, seq, arg)
        self.gets = deque()           # my am_gets to this node, in the order it serves them
        self.in_base = -1             # the store arriving from this node: base address, bytes so far
        self.in_total = 0
        self.mark = 0                 # poll count when its oldest unacked message last made progress
        self.keepalives = 0           # keep-alives sent since it was last heard from

    def unacked(self) -> bool:
        return bool(self.tx_req.unacked or self.tx_rep.unacked)

    def busy(self) -> bool:
        t, r = self.tx_req, self.tx_rep
        return bool(self.ctl or t.pending or r.pending or t.resend < len(t.unacked) or r.resend < len(r.unacked)
                    or self.rx_req.ack_owed or self.rx_rep.ack_owed or t.unacked or r.unacked)


class AmEndpoint(OpenFile):
    """The AM state of one process (one per node: it owns the TB2's FIFOs)."""

    kind = "AM endpoint"

    def __init__(self, service, proc, uf, params: dict):
        super().__init__(proc.node)
        node = proc.node
        self.service = service
        self.proc = proc
        self.uf = uf
        self.adapter = uf.adapter
        self.mem = node.mem
        self.engine = node.engine
        self.costs = node.costs
        self.closed = False
        self.fd = -1
        cyc = node.costs.cycles
        self.c_poll_own = cyc(params["poll_cycles"])
        self.c_dispatch = cyc(params["dispatch_cycles"])
        self.c_hdr = cyc(params["hdr_cycles"])
        self.c_word = cyc(params["word_cycles"])
        self.c_post = cyc(params["post_cycles"])
        self.c_request = cyc(params["request_cycles"])
        self.c_bulk = cyc(params["bulk_cycles"])
        self.full_poll = self.c_poll_own + uf.c_poll       # one am_poll of an empty network (SP-A35)
        self.chunk_packets = params["chunk_packets"]
        self.chunk_bytes = self.chunk_packets * E.PKT_DATA
        self.keepalive_polls = params["keepalive_polls"]
        self.max_keepalives = params["max_keepalives"]
        self.close_keepalives = 4
        self.handlers = [None] * MAX_HANDLERS
        self.hdr = E.Header()
        self.segments: list[Segment] = []        # sorted by address
        self._starts: list[int] = []
        self.peers: dict[int, Peer] = {}
        for nid, addrs in sorted(node.hosts.items()):
            hwaddr = addrs.get("tb2")
            if hwaddr is not None:
                self.peers[nid] = Peer(nid, hwaddr[2] if len(hwaddr) > 2 else 0, params["request_window"],
                                       params["reply_window"], params["ack_div"])
        self._peer_list = list(self.peers.values())
        self.events = WaitQueue(node.engine)
        self._timer = -1
        self.tx_need = 0
        self.polls = 0
        self._handler_depth = 0
        self.pending_errors: deque = deque()
        self._closing_mark = None
        self.stats_c = {k: 0 for k in STAT_KEYS}
        self.malformed = {k: 0 for k in E.MALFORMED_NAMES[1:] + ("bad_handler", "bad_proto", "bad_source")}
        uf.adapter.on_rx = self._on_rx
        uf.adapter.on_tx_space = self._on_tx_space

    def __repr__(self):
        return f"AM endpoint of pid {self.proc.pid} on node {self.node.nid}"

    # -- adapter events: wake a waiting caller ---------------------------------------------

    def _on_rx(self) -> None:
        self.events.wake()

    def _on_tx_space(self) -> None:
        if self.tx_need:
            f = self.uf.fifos
            if f.send_count - ((f.tx_next - self.adapter.tx_done) & U32) >= self.tx_need:
                self.tx_need = 0
                self.events.wake()

    def ready(self) -> bool:
        """Would the caller's very next poll find work? (Something may have arrived, or
        send-FIFO room appeared, while its last path was still busy sending: a spinning
        program sees it at once, so the caller must not wait for the next event.)"""
        f = self.uf.fifos
        if f.recv_base and self.mem.rd32(f.recv_entry(f.rx_head) + hw.H_STATUS) & hw.RX_VALID:
            return True
        if self.tx_need and f.send_count - ((f.tx_next - self.adapter.tx_done) & U32) >= self.tx_need:
            self.tx_need = 0
            return True
        return False

    def arm_timer(self) -> None:
        """Before the caller waits: wake it when a keep-alive falls due (SP-C08). The
        timeout is counted in polls; a spinning caller makes one every `full_poll`."""
        if self._timer >= 0:
            self.engine.cancel(self._timer)
            self._timer = -1
        left = None
        for peer in self._peer_list:
            if peer.unacked():
                k = self.keepalive_polls - (self.polls - peer.mark)
                left = k if left is None or k < left else left
        if left is not None:
            self._timer = self.engine.after(max(1, left) * self.full_poll, self._timer_fired, None)

    def _timer_fired(self, _arg) -> None:
        self._timer = -1
        self.events.wake()

    # -- handler table and segments ----------------------------------------------------------

    def set_handler(self, index: int, fn) -> None:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < MAX_HANDLERS:
            raise OSError(errno.EINVAL, f"handler index must be 0..{MAX_HANDLERS - 1}, not {index!r}")
        if fn is not None and (not callable(fn) or inspect.iscoroutinefunction(fn)):
            raise OSError(errno.EINVAL, "a handler is a plain function fn(token, *args) (it runs inside am_poll)")
        self.handlers[index] = fn

    def segment(self, nbytes: int) -> Segment:
        self._check_open()
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise OSError(errno.EINVAL, f"a segment has a positive size, not {nbytes!r}")
        line = self.uf.fifos.line
        try:
            addr = self.mem.alloc(nbytes, line)
        except MemoryError:
            raise OSError(errno.ENOMEM, f"no memory to pin a {nbytes}-byte segment") from None
        if addr + nbytes > U32:
            self.mem.release(addr)
            raise OSError(errno.ENOMEM, "segment beyond the 32-bit address space")
        seg = Segment(self, addr, nbytes)
        i = bisect.bisect(self._starts, addr)
        self._starts.insert(i, addr)
        self.segments.insert(i, seg)
        return seg

    def release_segment(self, seg: Segment) -> None:
        if seg.ep is not self or not seg.live:
            raise OSError(errno.EINVAL, "not a live segment of this endpoint")
        i = self.segments.index(seg)
        del self.segments[i]
        del self._starts[i]
        seg.live = False
        self.mem.release(seg.addr)

    def in_segments(self, lo: int, hi: int) -> bool:
        """[lo, hi) lies inside one segment (an empty range: at or inside one)."""
        i = bisect.bisect_right(self._starts, lo) - 1
        if i < 0 or hi < lo:
            return False
        s = self.segments[i]
        return hi <= s.addr + s.size and lo <= s.addr + s.size

    def local_range(self, buf, nbytes: int) -> int:
        """The address of a local buffer (a Segment or an address in one); EFAULT if not ours."""
        addr = buf.addr if isinstance(buf, Segment) else buf
        if isinstance(buf, Segment) and (buf.ep is not self or not buf.live):
            raise OSError(errno.EFAULT, "the segment is not a live segment of this endpoint")
        if not isinstance(addr, int) or isinstance(addr, bool) or not self.in_segments(addr, addr + nbytes):
            raise OSError(errno.EFAULT, f"local buffer {addr!r}+{nbytes} is not inside a registered segment")
        return addr

    # -- the rules handlers live by -----------------------------------------------------------

    def check_caller(self, call: str) -> None:
        self._check_open()
        if self._handler_depth:
            raise HandlerRuleError(errno.EDEADLK, f"{call} called from inside a handler: handlers may only reply "
                                                  "(Generic Active Messages 1.1; a request or a poll from a handler "
                                                  "can deadlock the network)")

    def _check_open(self) -> None:
        if self.closed:
            raise OSError(errno.EBADF, "the AM endpoint is closed")

    def peer(self, dest) -> Peer:
        if not isinstance(dest, int) or isinstance(dest, bool):
            raise OSError(errno.EINVAL, f"destination node must be an int, not {dest!r}")
        p = self.peers.get(dest)
        if p is None:
            raise OSError(errno.EHOSTUNREACH, f"node {dest} is not on this node's SP switch")
        return p

    # -- building messages (no modeled time: the paths charge it when they send) --------------

    def request_msg(self, dest: int, handler: int, args) -> tuple:
        peer = self.peer(dest)
        return peer, E.Msg(E.K_REQ, 0, _handler(handler), _pack_words(args))

    def reply(self, token: Token, handler: int, args) -> None:
        """am_reply_M: only inside a request handler, at most once (GAM 1.1)."""
        if not isinstance(token, Token) or token.ep is not self:
            raise OSError(errno.EINVAL, f"not a token of this endpoint: {token!r}")
        if not token.live:
            raise HandlerRuleError(errno.EINVAL, "am_reply with a token whose handler has returned "
                                                 "(a reply is sent from inside the request handler)")
        if not token.request:
            raise HandlerRuleError(errno.EDEADLK, "am_reply from a reply handler: replies cannot be answered "
                                                  "(Generic Active Messages 1.1)")
        if token.replied:
            raise HandlerRuleError(errno.EINVAL, "a request handler replies at most once")
        m = E.Msg(E.K_REP, 0, _handler(handler), _pack_words(args))
        self.peers[token.src].tx_rep.pending.append(m)
        token.replied = True

    def store(self, dest, src, nbytes, raddr, handler, arg, on_done=None, done_arg=None, blocking=False) -> Transfer:
        peer = self.peer(dest)
        _check_count(nbytes)
        handler = _handler(handler)
        arg = _word(arg)
        if on_done is not None and not callable(on_done):
            raise OSError(errno.EINVAL, "the completion function must be callable")
        if not isinstance(raddr, int) or isinstance(raddr, bool) or raddr < 0 or raddr + nbytes > U32:
            raise OSError(errno.EFAULT, f"remote address {raddr!r}+{nbytes} cannot name target memory")
        if isinstance(src, (bytes, bytearray, memoryview)):
            data = bytes(src)
            if len(data) < nbytes:
                raise OSError(errno.EFAULT, f"the source holds {len(data)} bytes, not {nbytes}")
            read = (lambda off, n, d=data: d[off:off + n])
            local = None
        else:
            local = self.local_range(src, nbytes)
            read = (lambda off, n, a=local, mem=self.mem: mem.read(a + off, n))
        x = Transfer("store", dest, nbytes, raddr, local, handler, arg, on_done, done_arg, blocking)
        self._chunks(peer.tx_req, E.K_STORE, handler, read, nbytes, raddr, arg, x)
        self.stats_c["stores"] += 1
        return x

    def get(self, dest, raddr, lbuf, nbytes, handler, arg, blocking=False) -> Transfer:
        peer = self.peer(dest)
        _check_count(nbytes)
        handler = _handler(handler)
        arg = _word(arg)
        if not isinstance(raddr, int) or isinstance(raddr, bool) or raddr < 0 or raddr + nbytes > U32:
            raise OSError(errno.EFAULT, f"remote address {raddr!r}+{nbytes} cannot name target memory")
        local = self.local_range(lbuf, nbytes)
        x = Transfer("get", dest, nbytes, raddr, local, handler, arg, blocking=blocking)
        m = E.Msg(E.K_GETREQ, 0, handler, _pack_words((raddr, nbytes, local)), xfer=x)
        peer.tx_req.pending.append(m)
        peer.gets.append(x)
        self.stats_c["gets"] += 1
        return x

    def _chunks(self, ch, kind, handler, read, nbytes, addr, arg, x, flags=0):
        """Cut a transfer into chunks of 36 packets (SP-C06): each one message, one
        sequence number; FIRST/LAST mark the ends so the receiver can run the handler
        once all has landed. Every non-last chunk carries the transfer's end address,
        so any one packet lets the receiver check the whole rest of the transfer."""
        cb = self.chunk_bytes
        count = max(1, -(-nbytes // cb))
        end = addr + nbytes
        for j in range(count):
            off = j * cb
            c = min(cb, nbytes - off)
            npk = max(1, -(-c // E.PKT_DATA))
            last = j == count - 1
            f = flags | (E.F_FIRST if j == 0 else 0) | (E.F_LAST if last else 0)
            ch.pending.append(E.Msg(kind, f, handler, read, npk, c - (npk - 1) * E.PKT_DATA, addr + off,
                                    arg if last else end, off, x))

    # -- paths: the calls ---------------------------------------------------------------------

    def request_path(self, peer: Peer, msg, since=None):
        """am_request_M: queue, send if the window allows, poll (every request polls)."""
        if since is None:
            peer.tx_req.pending.append(msg)
            self.stats_c["requests"] += 1
            yield from self._pump_peer(peer)
        n = yield from self.poll_path(since)
        if msg.sends == 0:
            raise WouldBlock(self.events, "AM request window full")
        return n

    def transfer_path(self, x: Transfer, since=None, wait: bool = False):
        """am_store / am_store_async / am_get: the request's bookkeeping, send what the
        window allows, poll; a blocking store waits for its last acknowledgement."""
        if since is None:
            if x.kind == "store":
                yield self.c_request                # a get's request is charged as its GETREQ leaves
            yield from self._pump_peer(self.peers[x.dest])
        n = yield from self.poll_path(since, raise_errors=not wait)
        if wait:
            if not x.done:
                raise WouldBlock(self.events, "AM store in flight")
            if x.error is not None:
                raise x.error
            self._raise_pending()
        return n

    def wait_path(self, pred, since=None):
        """Poll until `pred()` holds (a program's ``while (!flag) am_poll();``)."""
        n = yield from self.poll_path(since)
        if not pred():
            raise WouldBlock(self.events, "waiting for AM progress")
        return n

    def close_path(self, since=None):
        """Before the FIFOs go: acknowledge what we hold and wait for our own messages'
        acks -- but not for a node that has stopped answering (`close_keepalives`
        keep-alives in a row unanswered: its endpoint is gone)."""
        if since is None:
            self._closing_mark = self.polls
            for peer in self._peer_list:
                if peer.rx_req.unacked or peer.rx_rep.unacked:
                    peer.rx_req.ack_owed = True
        yield from self.poll_path(since, raise_errors=False)
        for p in self._peer_list:
            if (p.unacked() or p.tx_req.pending or p.tx_rep.pending or p.ctl) and p.keepalives < self.close_keepalives:
                raise WouldBlock(self.events, "AM endpoint draining")
        f = self.uf.fifos
        if f.outstanding():
            # Let the adapter take what we handed it, so the card is free when we go.
            yield self.costs.pci_read
            f.refresh_tx_done()
            if f.outstanding():
                self.tx_need = f.send_count
                raise WouldBlock(self.events, "AM endpoint draining the send FIFO")
        return 0

    def poll_path(self, since=None, raise_errors: bool = True):
        """am_poll: take every packet waiting (SP-C04), run their handlers, then send
        what is owed: replies, retransmissions, acks, NACKs, keep-alives."""
        self._check_open()
        uf = self.uf
        if since is not None:
            spun = int((self.engine.now - since) / self.full_poll + 1e-9) if self.full_poll > 0 else 0
            self.polls += spun
            self.stats_c["idle_polls"] += spun
            yield 0.5 * self.c_poll_own
        else:
            yield self.c_poll_own
        self.polls += 1
        self.stats_c["polls"] += 1
        limit = uf.fifos.recv_count
        n = 0
        while n < limit:
            pkt = yield from uf.poll_path(since)
            since = None
            if pkt is None:
                break
            n += 1
            yield self.c_dispatch
            yield from self._rx(pkt)
        if n == 0:
            self.stats_c["empty_polls"] += 1
        yield from self._pump_path()
        if raise_errors:
            self._raise_pending()
        return n

    def _raise_pending(self) -> None:
        if self.pending_errors:
            raise self.pending_errors.popleft()

    # -- receive ------------------------------------------------------------------------------

    def rx_packet_path(self, src: int, proto: int, user: bytes, data: bytes):
        """The receive entry point for one packet as taken from the FIFO (also what tests
        feed with arbitrary bytes: whatever it is, it is dropped and counted or handled)."""
        from nic_drivers.tb2.fifos import Packet
        yield from self._rx(Packet(src, bytes(data), proto, 0, bytes(user)))

    def _rx(self, pkt):
        st = self.stats_c
        if pkt.proto != AM_PROTO:
            self.malformed["bad_proto"] += 1
            return
        peer = self.peers.get(pkt.src)
        if peer is None:
            self.malformed["bad_source"] += 1
            return
        h = self.hdr
        bad = h.parse(pkt.user, len(pkt.data), self.chunk_packets)
        if bad:
            self.malformed[E.MALFORMED_NAMES[bad]] += 1
            return
        st["rx_packets"] += 1
        peer.keepalives = 0
        # Every packet carries both acks (SP-C05: piggybacked where possible).
        self._acked(peer, peer.tx_req, h.ack_req)
        self._acked(peer, peer.tx_rep, h.ack_rep)
        kind = h.kind
        if kind == E.K_ACK:
            st["acks_received"] += 1
            return
        if kind == E.K_NACK:
            st["nacks_received"] += 1
            ch = peer.tx_rep if h.flags & E.F_REPCH else peer.tx_req
            self._acked(peer, ch, h.seq)
            if ch.go_back(h.seq):
                st["gobacks"] += 1
            return
        if kind == E.K_KEEPALIVE:
            # Keep-alive (SP-C08): it carries the sender's next sequence numbers, so
            # whatever it sent before it and we lack is a gap: NACK what we expect
            # (it is resent from there). No gap: an ack is all it needs. Cleared
            # suppression lets a refused chunk be refused again if the first
            # refusal was lost.
            st["keepalives_received"] += 1
            gap = False
            for rx, fl, horizon in ((peer.rx_req, 0, h.addr >> 8 & 0xFF), (peer.rx_rep, E.F_REPCH, h.addr & 0xFF)):
                rx.nacked = False
                if rx.expected != horizon:
                    peer.ctl.append((E.K_NACK, fl, rx.expected, 0))
                    st["nacks_sent"] += 1
                    gap = True
            if not gap:
                peer.rx_req.ack_owed = True
            return
        if kind == E.K_REJECT:
            st["rejects_received"] += 1
            self._rejected(peer, peer.tx_rep if h.flags & E.F_REPCH else peer.tx_req, h.seq, h.arg)
            return
        repch = kind == E.K_REP or kind == E.K_GETDATA or (kind == E.K_NOP and h.flags & E.F_REPCH)
        rx = peer.rx_rep if repch else peer.rx_req
        w = rx.where(h.seq)
        if w == E.BEHIND:
            # A duplicate of what we have: our ack may have been lost; say it again.
            st["duplicates"] += 1
            rx.ack_owed = True
            return
        if w == E.AHEAD:
            # A gap: drop, and NACK once per gap (SP-C05: go back to what we expect).
            st["out_of_order"] += 1
            if not rx.nacked:
                rx.nacked = True
                peer.ctl.append((E.K_NACK, E.F_REPCH if repch else 0, rx.expected, 0))
                st["nacks_sent"] += 1
            return
        if kind == E.K_REQ or kind == E.K_REP:
            rx.advance(1)
            fn = self.handlers[h.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return
            yield from self._run_handler(peer, fn, kind == E.K_REQ, E.words(pkt.data))
        elif kind == E.K_STORE:
            yield from self._rx_store(peer, rx, h, pkt.data)
        elif kind == E.K_GETDATA:
            yield from self._rx_getdata(peer, rx, h, pkt.data)
        elif kind == E.K_GETREQ:
            raddr, nbytes, laddr = E.words(pkt.data)
            if not self.in_segments(raddr, raddr + nbytes):
                self._refuse(peer, rx, 0, h.seq)
                return
            rx.advance(1)
            st["gets_served"] += 1
            read = (lambda off, n, a=raddr, mem=self.mem: mem.read(a + off, n))
            self._chunks(peer.tx_rep, E.K_GETDATA, 0, read, nbytes, laddr, 0, None)
        else:                                     # K_NOP: a cancelled message keeps its number
            rx.advance(1)
            if not repch:
                peer.in_base = -1

    def _rx_store(self, peer, rx, h, data):
        """A packet of a store chunk: checked against our segments before a byte is
        written (the whole rest of the transfer at once), then placed by its offset."""
        st = self.stats_c
        if not self.in_segments(h.chunk_base, h.end):
            self._refuse(peer, rx, 0, h.seq)
            return
        if not self._accept_chunk_packet(rx, h, data):
            return
        rx.ack_owed = True                         # one acknowledgement per chunk (SP-A31)
        st["chunks_received"] += 1
        if h.flags & E.F_FIRST or peer.in_base < 0:
            peer.in_base = h.chunk_base
            peer.in_total = 0
        peer.in_total += h.chunk_len
        if h.flags & E.F_LAST:
            base, total = peer.in_base, peer.in_total
            peer.in_base = -1
            st["stores_received"] += 1
            st["bytes_stored"] += total
            fn = self.handlers[h.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return
            yield from self._run_handler(peer, fn, True, (base, total, h.arg))

    def _accept_chunk_packet(self, rx, h, data) -> bool:
        """Place one packet of a chunk by its offset; True once the chunk is complete."""
        r = rx.take(h.idx, h.npkts)
        if r == E.DUP:
            self.stats_c["duplicates"] += 1
            return False
        if r == E.BAD:
            self.malformed["bad_offset"] += 1
            return False
        if data:
            self.mem.write(h.addr, data)
        if r != E.COMPLETE:
            return False
        rx.advance(h.npkts)
        return True

    def _rx_getdata(self, peer, rx, h, data):
        st = self.stats_c
        g = peer.gets[0] if peer.gets else None
        if g is None or h.chunk_base < g.local or h.end > g.local + g.nbytes:
            self.malformed["bad_offset"] += 1
            return
        if not self._accept_chunk_packet(rx, h, data):
            return
        rx.ack_owed = True
        st["chunks_received"] += 1
        if h.flags & E.F_LAST:
            peer.gets.popleft()
            g.done = True
            st["gets_completed"] += 1
            fn = self.handlers[g.handler]
            if fn is None:
                self.malformed["bad_handler"] += 1
                return
            yield from self._run_handler(peer, fn, False, (g.local, g.nbytes, g.arg))

    def _refuse(self, peer, rx, flags, seq) -> None:
        """The expected message names memory we did not register: refuse it, once per
        episode, and write nothing. The sender turns it into a NOP and fails it."""
        if not rx.nacked:
            rx.nacked = True
            peer.ctl.append((E.K_REJECT, flags, seq, errno.EFAULT))
            self.stats_c["rejects_sent"] += 1

    def _run_handler(self, peer, fn, request: bool, args):
        tok = Token(self, peer.nid, request)
        self._handler_depth += 1
        try:
            fn(tok, *args)
        finally:
            self._handler_depth -= 1
            tok.live = False
        self.stats_c["handlers_run"] += 1
        if tok.replied:
            yield from self._pump_peer(peer)     # a reply leaves as the handler returns

    # -- acknowledgements, NACKs, refusals on the sending side ---------------------------------

    def _acked(self, peer, ch, cum) -> None:
        done = ch.ack(cum)
        if not done:
            return
        peer.mark = self.polls
        for m in done:
            x = m.xfer
            if x is not None and m.kind == E.K_STORE and m.flags & E.F_LAST and not x.done:
                self._finish(x)

    def _finish(self, x: Transfer) -> None:
        """A store's last chunk is acknowledged: the data has landed and the remote
        handler has run; the source may be reused. Run the completion function."""
        x.done = True
        self.stats_c["stores_completed"] += 1
        if x.on_done is not None:
            self._handler_depth += 1
            try:
                x.on_done(x.done_arg)
            finally:
                self._handler_depth -= 1

    def _rejected(self, peer, ch, seq, _err) -> None:
        """The target refused message `seq` (its memory is not in the target's segments;
        REJECT carries EFAULT, the only refusal there is): everything before it arrived;
        it and the rest of its transfer become NOPs, which keep their sequence numbers,
        and the channel goes back to resend from it."""
        self._acked(peer, ch, seq)
        if not ch.unacked or ch.unacked[0].seq != seq:
            return                                  # stale: already handled
        m = ch.unacked[0]
        x = m.xfer
        if x is None or m.kind == E.K_NOP:
            return
        for m2 in ch.unacked:
            if m2.xfer is x and m2.kind != E.K_NOP:
                ch.nop(m2)
        ch.pending = deque(m2 for m2 in ch.pending if m2.xfer is not x)
        ch.resend = 0                               # the receiver dropped everything after seq
        if x.kind == "get":
            try:
                peer.gets.remove(x)
            except ValueError:
                pass
        what = "am_store to" if x.kind == "store" else "am_get from"
        x.error = OSError(errno.EFAULT, f"{what} node {x.dest}: [{x.remote:#x}, {x.remote + x.nbytes:#x}) is "
                                        "outside the target's registered segments (nothing was written there)")
        x.done = True
        if not x.blocking:
            self.pending_errors.append(x.error)

    # -- send -----------------------------------------------------------------------------

    def _pump_path(self):
        for peer in self._peer_list:
            if peer.busy():
                ok = yield from self._pump_peer(peer)
                if not ok:
                    return False
        return True

    def _pump_peer(self, peer):
        """Send what this peer is owed, in order: control packets, the reply channel
        (resends, then new messages the window admits), the request channel, an
        explicit ack if one is still owed, a keep-alive if one is due."""
        st = self.stats_c
        while peer.ctl:
            kind, flags, seq, arg = peer.ctl[0]
            ok = yield from self._send_ctl(peer, kind, flags, seq, arg)
            if not ok:
                return False
            peer.ctl.popleft()
        for ch in (peer.tx_rep, peer.tx_req):
            while ch.resend < len(ch.unacked):
                ok = yield from self._send_msg(peer, ch, ch.unacked[ch.resend])
                if not ok:
                    return False
                ch.resend += 1
            pending = ch.pending
            while pending and ch.can_send(pending[0].npkts):
                m = pending.popleft()
                if not ch.unacked:
                    peer.mark = self.polls
                ch.assign(m)
                ok = yield from self._send_msg(peer, ch, m)
                if not ok:
                    return False
                ch.resend += 1
        if peer.rx_req.ack_owed or peer.rx_rep.ack_owed:
            ok = yield from self._send_ctl(peer, E.K_ACK, 0, 0, 0)
            if not ok:
                return False
            st["acks_sent"] += 1
        if peer.unacked() and self.polls - peer.mark >= self.keepalive_polls:
            if peer.keepalives >= self.max_keepalives:
                raise OSError(errno.ETIMEDOUT, f"node {peer.nid} has not answered {peer.keepalives} keep-alives "
                                               "(SP AM does not recover from crashes or partitions)")
            ok = yield from self._send_ctl(peer, E.K_KEEPALIVE, 0, 0, 0,
                                           (peer.tx_req.next_seq << 8) | peer.tx_rep.next_seq)
            if not ok:
                return False
            peer.mark = self.polls
            peer.keepalives += 1
            st["keepalives_sent"] += 1
        return True

    def _send_ctl(self, peer, kind, flags, seq, arg, addr=0):
        hdr = E.pack(kind | flags, 0, seq, peer.rx_req.expected, peer.rx_rep.expected, 0, 1, 0, addr, arg)
        ok = yield from self._send_packets(peer, ((hdr, b""),), self.c_hdr)
        if ok:
            peer.rx_req.acked()
            peer.rx_rep.acked()
        return ok

    def _send_msg(self, peer, ch, m):
        first = m.sends == 0
        ack_req, ack_rep = peer.rx_req.expected, peer.rx_rep.expected
        kind = m.kind
        post = 0.0
        if kind == E.K_STORE or kind == E.K_GETDATA:
            read, npk, base, off = m.data, m.npkts, m.addr, m.src_off
            pkts = []
            for i in range(npk):
                n = E.PKT_DATA if i < npk - 1 else m.tail
                hdr = E.pack(kind | m.flags, m.handler, m.seq, ack_req, ack_rep, i, npk, m.tail,
                             base + i * E.PKT_DATA, m.arg)
                pkts.append((hdr, read(off + i * E.PKT_DATA, n)))
            pre = self.c_bulk * npk
        else:
            data = m.data
            hdr = E.pack(kind | m.flags, m.handler, m.seq, ack_req, ack_rep, 0, 1, 0, 0, 0)
            pkts = ((hdr, data),)
            words = len(data) >> 2
            pre = self.c_hdr + (self.c_word * (words - 1) if words > 1 else 0.0)
            if first and kind != E.K_NOP:
                # After the length store: keep the packet for retransmission (SP-C05)
                # and do the window bookkeeping; a request does more of it (SP-A37).
                post = self.costs.copy(E.AM_HDR + len(data)) + self.c_post
                if kind != E.K_REP:
                    post += self.c_request
        ok = yield from self._send_packets(peer, pkts, pre)
        if not ok:
            return False
        peer.rx_req.acked()
        peer.rx_rep.acked()
        if not first:
            self.stats_c["retransmitted_packets"] += m.npkts
            ch.retransmitted += m.npkts
        m.sends += 1
        if post:
            yield post
        return True

    def _send_packets(self, peer, pkts, pre: float):
        """Hand packets to the adapter as ``UserFifos.bulk_send_path`` does (entries,
        their flushes, one sync, several lengths per MicroChannel store, SP-C03) but
        with AM's own header in each packet. `pre` is AM's work before the hand-over.
        False, with the caller's state untouched, when the send FIFO is full."""
        uf = self.uf
        f = uf.fifos
        if uf.closed:
            raise OSError(errno.EBADF, "the TB2 FIFOs are closed")
        k = len(pkts)
        try:
            yield from uf._room_path(k)
        except WouldBlock:
            self.tx_need = k
            self.stats_c["fifo_full"] += 1
            return False
        costs = self.costs
        first = f.tx_next % f.send_count
        dest, route = peer.nid, peer.route
        units = []
        cost = pre + f.c_sync
        for i, (hdr, data) in enumerate(pkts):
            units.append(uf._write_entry(f.send_entry(i), dest, route, AM_PROTO, hdr, data))
            n = len(data)
            cost += uf.c_send + f.flush_cost(hw.HDR_BYTES + n) + (costs.copy(n) if n else 0.0)
        for off, value, width in f.length_stores(first, units):
            yield cost + costs.pci_write
            cost = 0.0
            self.adapter.reg_write(off, value, width)
        f.tx_next = (f.tx_next + k) & U32
        uf.sent += k
        self.stats_c["packets_sent"] += k
        return True

    # -- close -------------------------------------------------------------------------------

    def release(self, proc) -> None:
        """Last close (or process exit): unmap the FIFOs, unpin the segments."""
        if self.closed:
            return
        self.closed = True
        if self._timer >= 0:
            self.engine.cancel(self._timer)
            self._timer = -1
        if not self.uf.closed:
            self.uf.close()
        for seg in list(self.segments):
            self.release_segment(seg)
        self.service.endpoint_closed(self)
        self.events.wake()

    def stats(self) -> dict:
        out = dict(self.stats_c)
        out["malformed"] = dict(self.malformed)
        out["peers"] = {p.nid: {"req_next_seq": p.tx_req.next_seq, "req_unacked": len(p.tx_req.unacked),
                                "rep_next_seq": p.tx_rep.next_seq, "rep_unacked": len(p.tx_rep.unacked),
                                "req_expected": p.rx_req.expected, "rep_expected": p.rx_rep.expected}
                        for p in self._peer_list if p.tx_req.next_seq or p.tx_rep.next_seq or p.rx_req.accepted
                        or p.rx_rep.accepted}
        out["fifos"] = self.uf.stats()
        return out


STAT_KEYS = ("requests", "stores", "gets", "polls", "empty_polls", "idle_polls", "rx_packets", "packets_sent",
             "retransmitted_packets", "gobacks", "nacks_sent", "nacks_received", "acks_sent", "acks_received",
             "keepalives_sent", "keepalives_received", "rejects_sent", "rejects_received", "duplicates",
             "out_of_order", "handlers_run", "chunks_received", "stores_received", "bytes_stored",
             "stores_completed", "gets_served", "gets_completed", "fifo_full")


def _handler(h) -> int:
    if not isinstance(h, int) or isinstance(h, bool) or not 0 <= h < MAX_HANDLERS:
        raise OSError(errno.EINVAL, f"handler index must be 0..{MAX_HANDLERS - 1}, not {h!r}")
    return h


def _word(a) -> int:
    if not isinstance(a, int) or isinstance(a, bool) or not -(1 << 31) <= a <= U32:
        raise OSError(errno.EINVAL, f"an AM argument is a 32-bit word, not {a!r}")
    return a & U32


def _pack_words(args) -> bytes:
    if len(args) > E.MAX_WORDS:
        raise OSError(errno.EINVAL, f"an AM message carries at most {E.MAX_WORDS} words (SP-A34), not {len(args)}")
    return b"".join(_word(a).to_bytes(4, "big") for a in args)


def _check_count(n) -> None:
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise OSError(errno.EINVAL, f"byte count must be a non-negative int, not {n!r}")
