# cython: language_level=3, boundscheck=False, wraparound=False, annotation_typing=False
"""DP's services layer: endpoints, NART, MDR and the transmit path.

The whole of DP in the kernel is this layer plus the network-interface layer below it
(DP-A04): no protocol processing, one message per frame, no reliability. What
each call costs on the modeled machine is charged where the work is done, from the
node's platform profile.

Transmit (DP-C05): the call gate enters the kernel, DP looks up the target's
network address in the NART, builds the frame straight into the buffer of the next
transmit descriptor, tells the NIC, and returns -- all on the caller's CPU time.

Receive (DP-C06): the NIC's interrupt path hands each frame of DP's link
protocol to the MDR, which parses the Directed Message header, finds the endpoint
and deposits the message into its Token Buffer Pool, waking a reader.

The kernel's side is Cython (`DirectedPoint`, `Nart`: typed fields, the header codec
and the pool reached by C calls); its paths stay generators that yield CPU time, as
every kernel path does. Endpoints and tokens are what a process holds: plain classes.
"""
cimport cython
import errno
import weakref

from dpcore._codec cimport DmHeader, dm_build, dm_parse
from dpcore._tbp cimport TokenBufferPool
from kernelsim._physmem cimport PhysMem, span_check, span_ok
from kernelsim import WouldBlock
from kernelsim._node cimport KernelRoutine, OpenFile, Process
from kernelsim._path cimport Path, RxHandler
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._path cimport reuse, step_any
from kernelsim._pyiter cimport take_raised
from kernelsim._netdev cimport NetDevice
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_CheckExact, PyBytes_AS_STRING
from libc.string cimport memcpy

DEF DM_HEADER = 8

__all__ = ["DP_ETHERTYPE", "DirectedPoint", "Endpoint", "Nart", "Token"]

DP_ETHERTYPE = 0x88B5          # HW-ETH: IEEE 802 local experimental EtherType
cdef enum:
    C_DP_ETHERTYPE = 0x88B5     # the same for C calls (a module global is a dict lookup per frame)
MAX_ENDPOINT = 0xFFFF
MAX_NID = 0xFFFF               # node ids are 16-bit in the Directed Message header


cdef class Nart:
    """Network Address Resolution Table: NID -> (network device, hardware address).

    Filled from the cluster description as NIDs are first looked up: ``learn(hosts,
    devs)`` names the description (NID -> {link kind: address}) and the devices DP
    runs on, in order of preference; an entry is made the first time its NID is
    resolved, so a node of a 1024-node cluster holds entries only for the peers it
    talks to. ``add`` and ``remove`` set or drop one entry by hand.
    """

    def __cinit__(self):
        self._map = {}
        self._hosts = {}
        self._devs = ()

    def learn(self, hosts: dict, devs) -> None:
        self._hosts = hosts
        self._devs = devs
        self._last = None

    cpdef add(self, int nid, object dev, object hwaddr):
        self._map[nid] = (dev, hwaddr)
        self._last = None

    cpdef remove(self, int nid):
        self._map[nid] = ()             # gone: not learned again from the description
        self._last = None

    cdef object _resolve(self, object nid):
        entry = self._map.get(nid)
        if entry is None:
            addrs = self._hosts.get(nid) if isinstance(nid, int) else None
            if addrs:
                for dev in self._devs:
                    if dev.kind in addrs:
                        entry = self._map[nid] = (dev, addrs[dev.kind])
                        break
        return entry or None

    cpdef tuple lookup(self, object nid):
        entry = self._resolve(nid)
        if entry is None:
            raise OSError(errno.EHOSTUNREACH, f"node {nid} is not in the NART")
        return <tuple> entry

    cdef tuple route(self, int nid):
        """`lookup` of a C int NID for the transmit path, the last entry found kept (a
        sender mostly sends to one peer): no boxed NID and no dict lookup per message.
        `add` and `remove`, the only changes to an entry made, forget it."""
        if self._last is not None and nid == self._last_nid:
            return self._last
        entry = self.lookup(nid)
        self._last_nid = nid
        self._last = entry
        return entry

    def __contains__(self, nid) -> bool:
        return self._resolve(nid) is not None

    def entries(self) -> dict:
        """The entries made so far."""
        return {nid: (e[0].name, e[1]) for nid, e in sorted(self._map.items()) if e}


class Token:
    """A received message read in place: a read-only view of its TBP slot.

    Release it (or use it as a context manager) to give the slot back to the pool.
    Closing the endpoint revokes its tokens: their views are released, so memory the
    pool gave back can never be read through them.
    """

    __slots__ = ("_ep", "_slot", "_data", "source", "__weakref__")

    def __init__(self, ep: "Endpoint", slot: int):
        self._ep = ep
        self._slot = slot
        self._data = ep.tbp.view(slot)
        self.source = ep.tbp.source(slot)
        ep.tokens.add(self)

    @property
    def data(self):
        """The message, a read-only view of its slot: EINVAL once released, EBADF once its
        endpoint is closed (a view kept from before is released too: ValueError on use)."""
        if self._slot == -2:
            raise OSError(errno.EBADF, "the token's endpoint was closed")
        if self._slot < 0:
            raise OSError(errno.EINVAL, "token already released")
        return self._data

    def release(self) -> None:
        if self._slot == -2:
            raise OSError(errno.EBADF, "the token's endpoint was closed")
        if self._slot < 0:
            raise OSError(errno.EINVAL, "token already released")
        self._data.obj.revoke()
        self._data.release()
        self._ep.tokens.discard(self)
        self._ep.tbp.release(self._slot)
        self._slot = -1

    def revoke(self) -> None:
        self._data.obj.revoke()
        self._data.release()
        self._slot = -2

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._slot >= 0:
            self.release()

    def __len__(self):
        return self.data.nbytes


cdef class Endpoint(OpenFile):
    """A DP endpoint: a vertex port of the directed graph, as an open file.

    Every message is deposited into one and read out of one, so its fields are typed;
    ``export`` is what a real node's owner process is given (dpcore._export), once made.
    """

    kind = "DP endpoint"

    def __init__(self, DirectedPoint dp, proc, int ep):
        # The pool first: its region is all that can fail, and it is given back if it does.
        region = dp.node.alloc_shared(dp.tbp_slots * dp.max_message, f"dp-n{dp.node.nid}-ep{ep}-tbp")
        try:
            self.tbp = TokenBufferPool(region, dp.tbp_slots, dp.max_message)
        except BaseException:
            region.release()
            raise
        OpenFile.__init__(self, dp.node)
        self.dp = dp
        self.proc = proc
        self.ep = ep
        self.target = None
        self.tokens = weakref.WeakSet()
        self.sent = 0
        self.received = 0

    # Reads: the TBP is mapped into the process read-only, so reading is user-level
    # work; the generic read() path below adds the system-call entry in front.

    @property
    def target(self):
        """(nid, ep): where this endpoint's writes go (`dp_target`), or None."""
        return self._target

    @target.setter
    def target(self, value):
        # Kept as C ints too where it is two ints of C range: the transmit path unpacked the
        # tuple per message. Anything else is unpacked (and fails) there, as before.
        self._target = value
        self._to_ints = False
        if type(value) is tuple and len(value) == 2 and type(value[0]) is int and type(value[1]) is int \
                and -0x80000000 <= value[0] <= 0x7FFFFFFF and -0x80000000 <= value[1] <= 0x7FFFFFFF:
            self._to_nid = value[0]
            self._to_ep = value[1]
            self._to_ints = True

    def read_path(self, proc, nbytes):
        if self.export is not None:
            return self.export.read_path(nbytes)
        return self.dp.read_path(self, nbytes)

    def write_path(self, proc, data):
        return self.dp.write_path(self, data)

    cdef int took(self) except -1:
        """A message left the queue: readability follows what is still queued."""
        self.received += 1
        if self.tbp.count == 0:
            self.set_readable(False)

    cdef int deposited(self) except -1:
        if self.export is not None:
            # A real node's endpoint: the owner's fd is the delivery ring's eventfd, and
            # deliver() hands every queued message over at once, so the file itself is
            # never left readable -- raising and dropping its own eventfd would be two
            # system calls per message for nobody.
            self.export.deliver()
        else:
            self.set_readable(True)
        self.readers.wake()

    def export_to(self, owner):
        """Real nodes: what this endpoint's owner process is given (kernelsim.daemon)."""
        from dpcore._export import EndpointExport
        return EndpointExport(self, owner)

    def release(self, proc) -> None:
        self.dp.endpoints.pop(self.ep, None)
        if self.dp.rx_ep is self:
            self.dp.rx_ep = None
        for tok in list(self.tokens):
            tok.revoke()
        self.dp.retire(self)
        if self.export is not None:
            self.export.close()
        self.tbp.unpin()
        self.node.modules.module_put("dp")
        self.readers.wake()

    def stats(self) -> dict:
        out = {"ep": self.ep, "target": self.target, "sent": self.sent, "received": self.received,
               "tbp": self.tbp.stats()}
        if self.export is not None:
            out["export"] = self.export.stats()
        return out


cdef class DirectedPoint:
    """DP's state in one kernel (the `dp` module's instance)."""

    def __init__(self, node, int tbp_slots, int max_message):
        self.node = node
        self.read_path_fn = self.read_path
        self.nid = node.nid
        self.mem = node.mem
        self.costs = node.costs
        p = node.profile
        self.c_open = node.costs.cycles(p["dp.open_cycles"])
        self.c_xmit = node.costs.cycles(p["dp.xmit_cycles"])
        self.c_mdr = node.costs.cycles(p["dp.mdr_cycles"])
        self.c_read = node.costs.cycles(p["dp.read_cycles"])
        self.copy_base = node.costs.copy_base
        self.copy_rate = node.costs.copy_rate
        self.tbp_slots = tbp_slots
        self.max_message = max_message
        self.nart = Nart()
        self.endpoints = {}
        self.netdevs = []
        self.types = {}                 # message type -> protocol handler (protocol modules)
        self.rx_malformed = 0
        self.rx_no_endpoint = 0
        self.rx_unknown_type = 0
        self.local_deliveries = 0
        self.closed_totals = {k: 0 for k in ("deposited", "taken", "released", "dropped_full", "dropped_too_long")}
        self.closed_endpoints = []      # the last few, for --stats after a benchmark
        self.mdr = Mdr(self)            # the receive hand-off a NIC driver calls per frame

    # -- system calls ------------------------------------------------------------------

    def sys_open(self, proc, ep):
        """dp_open(ep): the one new system call: endpoint + pinned TBP, as an fd."""
        yield self.c_open
        if not isinstance(ep, int) or isinstance(ep, bool) or not 0 <= ep <= MAX_ENDPOINT:
            raise OSError(errno.EINVAL, f"endpoint number must be 0..{MAX_ENDPOINT}, not {ep!r}")
        if ep in self.endpoints:
            raise OSError(errno.EADDRINUSE, f"endpoint {ep} is already open on node {self.node.nid}")
        try:
            e = Endpoint(self, proc, ep)
        except MemoryError:
            raise OSError(errno.ENOBUFS, "no memory for the endpoint's Token Buffer Pool") from None
        self.endpoints[ep] = e
        self.node.modules.module_get("dp")
        return proc.fds.install(e)

    def sys_target(self, proc, fd, nid, ep):
        """dp_target(fd, nid, ep): the destination of this endpoint's writes."""
        yield self.c_open
        e = _endpoint_of(proc, fd)
        if not isinstance(ep, int) or isinstance(ep, bool) or not 0 <= ep <= MAX_ENDPOINT:
            raise OSError(errno.EINVAL, f"endpoint number must be 0..{MAX_ENDPOINT}, not {ep!r}")
        if not isinstance(nid, int) or isinstance(nid, bool) or not 0 <= nid <= MAX_NID:
            raise OSError(errno.EINVAL, f"node id must be an int 0..{MAX_NID}, not {nid!r}")
        self.nart.lookup(nid)
        e.target = (nid, ep)
        return 0

    def gate_write(self, proc, fd, data):
        """dp_write through the call gate: no VFS, straight to the transmit path (whose
        path this returns: the gate entry runs it, one generator less per message)."""
        return _write_path(self, _endpoint_of(proc, fd), data)

    def gate_write_routine(self):
        """`gate_write` as the call gate's table holds it: a `KernelRoutine`, which the
        kernel entry calls by C (no Python call and no argument tuple per message)."""
        cdef _GateWrite r = _GateWrite.__new__(_GateWrite)
        r.dp = self
        return r

    # -- transmit ----------------------------------------------------------------------

    def write_path(self, Endpoint e, data):
        """The transmit path (DP-C05): a `_WritePath` (a C state machine); the generator
        it is, for reading::

            if e.target is None:
                raise OSError(errno.EDESTADDRREQ, ...)
            n = len(data)
            if n > self.max_message:
                raise OSError(errno.EMSGSIZE, ...)
            nid, dst_ep = e.target
            if nid == self.nid:
                return (yield from self._deliver_locally(e, dst_ep, data))
            dev, hw = self.nart.lookup(nid)
            try:
                buf = dev.tx_reserve()
            except WouldBlock:
                yield self.c_xmit
                raise
            # The frame goes straight into the transmit buffer (DP-C03); the NIC cannot
            # see it before the descriptor is handed over, so the build's time is
            # yielded there.
            dev.write_link_header(buf, hw, DP_ETHERTYPE)
            dm_build(...) at buf + dev.link_header_bytes; the data after the header
            yield from dev.tx_commit_path(DM_HEADER + n, self.c_xmit + self.copy_cost(n))
            e.sent += 1
            return n
        """
        return _write_path(self, e, data)

    def _deliver_locally(self, Endpoint e, int dst_ep, data):
        cdef Endpoint dst
        """A message to this node's own endpoint never touches the NIC (no loopback wire)."""
        yield self.c_xmit + self.copy_cost(len(data))
        self.local_deliveries += 1
        e.sent += 1
        dst = self.endpoints.get(dst_ep)
        if dst is None:
            self.rx_no_endpoint += 1
        elif dst.tbp.deposit(data, 0, len(data), self.nid, e.ep):
            dst.deposited()
        return len(data)

    def retire(self, e) -> None:
        """Keep a closed endpoint's counters for statistics."""
        st = e.tbp.stats()
        for k in self.closed_totals:
            self.closed_totals[k] += st[k]
        kept = self.closed_endpoints + [e.stats()]
        self.closed_endpoints = kept[max(0, len(kept) - 8):]

    # -- receive -----------------------------------------------------------------------

    def read_path(self, Endpoint e, nbytes):
        """Copy the next message out of the TBP (user-level work on the mapped pool).

        A `_ReadPath` (a C state machine); the generator it is, for reading::

            slot = tbp.take()
            if slot < 0:
                yield self.c_read
                raise WouldBlock(e.readers, f"no message on endpoint {e.ep}")
            n = tbp.length(slot)
            data = tbp.copy_out(slot, nbytes)
            e.took()
            yield self.c_read + self.copy_cost(min(n, nbytes))
            tbp.release(slot)
            return data
        """
        return _read_path(self, e, nbytes)

    def take_path(self, Endpoint e):
        """Zero-copy read: hand out the slot itself as a token."""
        yield self.c_read
        slot = e.tbp.take()
        if slot < 0:
            raise WouldBlock(e.readers, f"no message on endpoint {e.ep}")
        e.took()
        return Token(e, slot)

    def mdr_path(self, dev, Py_ssize_t addr, Py_ssize_t length):
        """The MDR as a path (what a NIC's interrupt path runs for each frame of DP's
        protocol): `mdr` does the work; this is its Python face."""
        return self.mdr(dev, addr, length)

    def _typed_path(self, handler, dev, Py_ssize_t addr, Py_ssize_t length):
        # A protocol module's message type: the MDR's own time, then the protocol's path.
        yield self.c_mdr
        return (yield from handler(dev, addr, length))

    def stats(self) -> dict:
        return {"endpoints": {ep: e.stats() for ep, e in sorted(self.endpoints.items())},
                "closed_endpoints": self.closed_endpoints, "closed_tbp_totals": dict(self.closed_totals),
                "local_deliveries": self.local_deliveries,
                "nart": self.nart.entries(), "rx_malformed": self.rx_malformed,
                "rx_no_endpoint": self.rx_no_endpoint, "rx_unknown_type": self.rx_unknown_type}


cdef Endpoint _endpoint_of(proc, fd):
    f = (<Process?> proc).fds.get(fd)
    if not isinstance(f, Endpoint):
        raise OSError(errno.EINVAL, f"fd {fd} is not a DP endpoint")
    return <Endpoint> f


cdef class Mdr(RxHandler):
    """The MDR (DP-C06): what a NIC's receive path hands each frame of DP's protocol.

    A C call (`RxHandler.rx`): it parses the Directed Message header, finds the
    endpoint and deposits the message into its Token Buffer Pool, waking a reader --
    all at the instant the frame is handed over. Its effects (a deposit, a wake-up) are
    seen only by processes of this node, which cannot run before the interrupt path
    returns; so it returns its time for the interrupt path to yield at its next device
    access, and needs no path of its own -- except for a protocol module's message type,
    whose handler's path it hands back.
    """

    def __cinit__(self, DirectedPoint dp):
        self.dp = dp

    cdef int rx(self, object dev, Py_ssize_t addr, Py_ssize_t length, double* cost,
                PyObject** cont) except -1:
        cdef DmHeader h
        cdef DirectedPoint dp = self.dp
        cdef PhysMem mem = dp.mem
        cdef Endpoint e
        if not span_ok(addr, length, mem.size):
            span_check(addr, length, mem.size, "MDR frame")
        cost[0] = dp.c_mdr
        if length < DM_HEADER or dm_parse(&mem.buf[addr], length, &h) < 0:
            dp.rx_malformed += 1
            return 0
        if h.mtype != 0:
            handler = dp.types.get(h.mtype)
            if handler is None:
                dp.rx_unknown_type += 1
                return 0
            path = dp._typed_path(handler, dev, addr, length)
            Py_INCREF(path)
            cont[0] = <PyObject*> path
            return 1
        # A stream's frames go to one endpoint: the last one is kept (no boxed endpoint
        # number and dict lookup per frame).
        if dp.rx_ep is not None and (<Endpoint> dp.rx_ep).ep == h.dst_ep:
            e = <Endpoint> dp.rx_ep
        else:
            e = dp.endpoints.get(h.dst_ep)
            if e is None:
                dp.rx_no_endpoint += 1
                return 0
            dp.rx_ep = e
        if not e.tbp.deposit(mem.buf, addr + DM_HEADER, h.length, h.src_nid, h.src_ep):
            return 0
        e.deposited()
        cost[0] = dp.c_mdr + dp.copy_cost(h.length)
        return 0


# Spare read and write paths (`kernelsim._path.reuse`): a round trip makes two of each.
cdef list _reads = [None] * 4
cdef list _writes = [None] * 4


cdef class _ReadPath(Path):
    """`DirectedPoint.read_path`: its first step takes a slot (at the instant the path
    starts, as the generator's body would), its second copies nothing more: the
    message was copied out at the first, and the slot goes back to the pool."""
    cdef DirectedPoint dp
    cdef Endpoint e
    cdef object nbytes
    cdef int slot
    cdef int state          # 0: not started, 1: slot taken, 2: empty (WouldBlock owed), 3: over
    cdef double lead        # CPU time spent before it starts (`_UserRead.start_pair`): a first step

    cdef int step(self, double* cost) except -1:
        cdef TokenBufferPool tbp = self.e.tbp
        cdef Py_ssize_t n, want
        if self.lead:
            # The poll that noticed the message (a call's `before`), as `kernelsim.after`
            # would put it in front: the slot is taken when it is spent.
            cost[0] = self.lead
            self.lead = 0.0
            return 1
        if self.state == 0:
            self.slot = tbp.take()
            if self.slot < 0:
                self.state = 2
                cost[0] = self.dp.c_read
                return 1
            n = tbp.length(self.slot)
            self.value = tbp.copy_out(self.slot, self.nbytes)
            want = self.nbytes              # a C size: copy_out took it as one already
            self.e.took()
            self.state = 1
            cost[0] = self.dp.c_read + self.dp.copy_cost(n if n < want else want)
            return 1
        if self.state == 1:
            self.state = 3
            tbp.release(self.slot)
            return 0
        if self.state == 2:
            self.state = 3
            raise WouldBlock(self.e.readers, f"no message on endpoint {self.e.ep}")
        self.value = None
        return 0


cdef class _WritePath(Path):
    """`DirectedPoint.write_path` (its docstring has the generator it replaces)."""
    cdef DirectedPoint dp
    cdef Endpoint e
    cdef object data
    cdef object cur             # the path it goes on in: the NIC's commit, or a local delivery
    cdef object blocked         # the WouldBlock raised once the failed attempt's time is spent
    cdef Py_ssize_t n
    cdef int state              # 0: not started, 1: in `cur`, then done; 2: blocked; 3: local; 4: over

    cdef int step(self, double* cost) except -1:
        # Once over (returned or raised, as the generator it replaces would be), the path
        # holds nothing: a spare one (`_write_path`) keeps no endpoint or node alive.
        # (`_step` through a pointer that does not say it can fail, the error taken here:
        # a `try` block costs more than the step.)
        cdef int r = _write_step_unchecked(self, cost)
        if r == -1:
            exc = take_raised()
            self.state = 4
            self.dp = self.e = self.data = self.cur = self.blocked = None
            raise exc
        if r == 0:
            self.dp = self.e = self.data = self.cur = self.blocked = None
        return r

    cdef int _step(self, double* cost) except -1:
        cdef DirectedPoint dp = self.dp
        cdef Endpoint e = self.e
        cdef PhysMem mem
        cdef NetDevice nd
        cdef Py_ssize_t n, at, buf
        cdef int nid, dst_ep
        cdef PyObject* res = NULL
        if self.state == 0:
            if not e._to_ints and e._target is None:
                raise OSError(errno.EDESTADDRREQ, f"endpoint {e.ep} has no target: call dp_target first")
            n = len(self.data)
            if n > dp.max_message:
                raise OSError(errno.EMSGSIZE, f"message of {n} bytes exceeds DP's {dp.max_message}-byte limit")
            if e._to_ints:
                nid = e._to_nid
                dst_ep = e._to_ep
            else:
                nid, dst_ep = e._target
            if nid == dp.nid:
                self.cur = dp._deliver_locally(e, dst_ep, self.data)
                self.state = 3
            else:
                dev, hw = dp.nart.route(nid)
                nd = <NetDevice?> dev               # the driver's transmit calls are C calls
                buf = _tx_buffer_unchecked(nd)      # (no `try` block: see `step`)
                if buf == -1:
                    wb = take_raised()
                    if not isinstance(wb, WouldBlock):
                        raise wb
                    self.blocked = wb
                    self.state = 2
                    cost[0] = dp.c_xmit
                    return 1
                at = nd.tx_header(buf, hw, C_DP_ETHERTYPE)
                mem = dp.mem
                if not span_ok(at, DM_HEADER + n, mem.size):
                    span_check(at, DM_HEADER + n, mem.size, "DP transmit buffer")
                dm_build(&mem.buf[at], dst_ep, dp.nid, e.ep, 0, <int> n)
                _copy_in(&mem.buf[at + DM_HEADER], self.data, n)
                self.data = None
                self.n = n
                self.cur = nd.tx_commit(DM_HEADER + n, dp.c_xmit + dp.copy_cost(n))
                self.state = 1
        if self.state == 1:
            if step_any(self.cur, cost, &res):
                return 1
            Py_XDECREF(res)
            self.cur = None
            self.state = 4
            e.sent += 1
            self.value = _sent_bytes(self.n)
            return 0
        if self.state == 3:
            if step_any(self.cur, cost, &res):
                return 1
            self.value = <object> res
            Py_XDECREF(res)
            self.cur = None
            self.state = 4
            return 0
        if self.state == 2:
            self.state = 4
            wb, self.blocked = self.blocked, None
            raise wb
        self.value = None
        return 0


cdef _ReadPath _read_path(DirectedPoint dp, Endpoint e, nbytes):
    cdef _ReadPath path = <_ReadPath> reuse(_reads, _ReadPath)
    path.value = None
    path.state = path.slot = 0
    path.lead = 0.0
    path.dp = dp
    path.e = e
    path.nbytes = nbytes
    return path


@cython.final
cdef class _UserRead(KernelRoutine):
    """A DP read as user-level work (`kernelsim.run_user` starts a `KernelRoutine` with
    the process and its arguments by a C call): (endpoint, nbytes) -> its endpoint's
    DP's `read_path`, without a Python call that parses them, per read."""

    cdef object start(self, object proc, tuple args):
        cdef Endpoint e
        if len(args) != 2 or not isinstance(args[0], Endpoint):
            raise TypeError("a DP read takes an endpoint and a byte count")
        return self.start_pair(proc, args[0], args[1], NULL)

    cdef object start_pair(self, object proc, object a, object b, double* before):
        cdef Endpoint e
        cdef _ReadPath path
        if not isinstance(a, Endpoint):
            raise TypeError("a DP read takes an endpoint and a byte count")
        e = <Endpoint> a
        if type(e.dp) is DirectedPoint:
            path = _read_path(e.dp, e, b)
            if before != NULL:
                path.lead = before[0]
                before[0] = 0.0
            return path
        return e.dp.read_path_fn(e, b)


user_read = _UserRead()


cdef class _GateWrite(KernelRoutine):
    """`DirectedPoint.gate_write` for the call gate's table: (fd, data) -> the transmit path."""
    cdef DirectedPoint dp

    cdef object start(self, object proc, tuple args):
        if len(args) != 2:
            raise TypeError(f"dp_write takes an fd and the data ({len(args)} arguments given)")
        return _write_path(self.dp, _endpoint_of(proc, args[0]), args[1])

    cdef object start_pair(self, object proc, object a, object b, double* before):
        return _write_path(self.dp, _endpoint_of(proc, a), b)


cdef int _copy_in(unsigned char* dst, object data, Py_ssize_t n) except -1:
    """Copy a message's `n` bytes (bytes, or any C-contiguous buffer) to `dst`: from the
    bytes object's own storage when it is one (no buffer view made per message)."""
    cdef Py_buffer view
    if PyBytes_CheckExact(data):
        memcpy(dst, PyBytes_AS_STRING(data), n)
        return 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if view.len != n:
            raise ValueError("a message's buffer changed size while it was sent")
        memcpy(dst, view.buf, n)
    finally:
        PyBuffer_Release(&view)
    return 0


# What a write path returns, the message's length as a Python int: the last one made, again
# (a stream's messages have one length; an int above 256 is an allocation).
cdef object _sent_obj = None
cdef Py_ssize_t _sent_n = -1


cdef inline object _sent_bytes(Py_ssize_t n):
    global _sent_obj, _sent_n
    if n != _sent_n or _sent_obj is None:
        _sent_obj = n
        _sent_n = n
    return _sent_obj


cdef Py_ssize_t _tx_buffer(NetDevice nd) except -1:
    return nd.tx_buffer()


ctypedef Py_ssize_t (*_TxBufferFn)(NetDevice) noexcept
cdef _TxBufferFn _tx_buffer_unchecked = <_TxBufferFn> _tx_buffer
ctypedef int (*_WriteStepFn)(_WritePath, double*) noexcept
cdef _WriteStepFn _write_step_unchecked = <_WriteStepFn> _WritePath._step


cdef _WritePath _write_path(DirectedPoint dp, Endpoint e, data):
    cdef _WritePath path = <_WritePath> reuse(_writes, _WritePath)
    path.value = path.cur = path.blocked = None
    path.state = path.n = 0
    path.dp = dp
    path.e = e
    path.data = data
    return path
