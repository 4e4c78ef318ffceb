"""DP in a process attached to a real node: ``libdp.attach``.

    import libdp
    dp = libdp.attach(node=0)            # or DP_NODE / an MPI or Slurm rank, DP_RUN_DIR
    fd = dp.sync.dp_open(5)
    dp.sync.dp_target(fd, 1, 5)
    dp.sync.dp_write(fd, b"hello")       # through the call gate
    print(dp.sync.dp_read(fd))           # from the Token Buffer Pool, mapped read-only

The object has the calls of `libdp.DP` -- async (trio) methods, blocking ones under
``.sync`` -- with the same errnos, so a program written for modeled mode runs here
unchanged. How each call reaches the node's kernel (`kernelsim.daemon`):

* ``dp_open``, ``dp_target``, ``write``, ``read``, ``close`` and every other system call
  are requests over the node's control socket, dispatched through its system-call table.
* ``dp_write`` appends to the endpoint's submission ring in shared memory -- the call
  gate -- and returns; the node picks the entry up from its polling loop. What the node
  finds wrong afterwards is raised by the endpoint's next call.
* ``dp_read`` / ``dp_read_token`` are user-level: the endpoint's delivery ring says which
  slot of the Token Buffer Pool holds the next message, and the pool is mapped into this
  process read-only; the slot goes back to the node through the submission ring.
* The fd a call returns is a real descriptor (the endpoint's eventfd): select, poll and
  trio's ``wait_readable`` see it readable while messages wait.

Waiting polls first and then sleeps on the descriptor *and* the control socket, so a node
that dies wakes every blocked call with ENETDOWN; a process that dies is noticed by its
node, which closes its endpoints. The poll is **bounded and adaptive** (`Spinner`): at
most ``spin_s`` (``attach(spin_s=)``, else ``DP_SPIN_US``, else 200 µs with four usable
CPUs or more and none below), yielding the CPU between tries, and none at all while this
process's waits keep outlasting it -- an idle server sleeps at once instead of burning its
cap on every call. A process its cluster placed (``attach(pin=)``) polls by default only
where it shares a CPU with *another* node (placement ``cross``, `CROSSED_SPIN_S`): in a
round trip that node's work and this process's wait alternate, so a yield between polls
hands the core over without a wake-up, where a sleeping script would be woken across
CPUs. Under ``pair`` it shares the core with its own node, whose work comes right before
and after its own, and sleeps at once. Measured on a 2-core host
(benchmarks/bench_real_nodes.py): unpinned, scripts that poll up to 1 ms cut a 1-byte
round trip from about 100-120 µs to 58-80 µs; paired with polling nodes, sleeping
scripts take 31-34 µs, polling ones over 1 ms; crossed, polling scripts take 31-38 µs
against 40-59 µs asleep (session 32, interleaved runs), and stream as fast. A pinned
process cannot move away from a CPU-bound neighbour, and a yield then waits out the
neighbour's time slice: after two polls whose yields came back that late, the process's
waits sleep at once for a while (`Spinner.yielded`, the node loop's rule; with a compiler
on one core, a crossed round trip polled in 1.3 ms and slept in 66-83 µs).
"""
from __future__ import annotations

import errno
import mmap
import os
import select
import socket
import struct
import time
import weakref

import trio

from kernelsim import checkpoint, sleep_until_readable
from kernelsim.daemon import (ERROR_WORD_OFFSET, GATE_CALL, GATE_FILEOP, EventRing, default_spin, pack_args,
                              recv_msg, send_msg)
from kernelsim.media._shmring import ShmRing
from libdp._api import NodeView
from libdp._calls import _bytes, _check_count
from libdp._clusterfile import ClusterFile, default_run_dir, node_from_environment, node_socket
from libdp._endpoint_rings import EndpointTable, Spinner, endpoint_rings

__all__ = ["attach", "AttachedDP", "SyncAttachedDP", "NodeLink", "RemoteToken", "DEFAULT_SPIN_S",
           "spin_from_environment"]

DEFAULT_SPIN_S = default_spin(200e-6)      # 0 where no core is spare (see kernelsim.daemon's essay)
CROSSED_SPIN_S = 1e-3                      # a placed script on another node's CPU (placement cross) polls this long
MAX_SPIN_S = 0.01                          # DP_SPIN_US beyond this is a mistake, not a poll
_U32 = struct.Struct("<I")
_OP_RELEASE = 1
_WRITE_HEAD = bytes([GATE_CALL, len(b"dp_write")]) + b"dp_write"
_perf = time.perf_counter


def attach(node: int | None = None, *, run_dir: str | None = None, cluster: str | None = None,
           name: str | None = None, spin_s: float | None = None, pin: bool | None = None) -> "AttachedDP":
    """Attach this process to node `node` of a running cluster.

    Which node: `node`, else ``DP_NODE``, else the rank an MPI or Slurm launcher gave the
    process (``OMPI_COMM_WORLD_RANK``, ``PMIX_RANK``, ``PMI_RANK``, ``SLURM_PROCID``). Which
    cluster: `run_dir`, else ``DP_RUN_DIR``, else the run directory of cluster file
    `cluster` (or ``DP_CLUSTER``), else the default cluster's (``dp cluster up``'s).
    ENOENT if no node is running there; ENETDOWN if it stopped. `spin_s`: the most a wait
    polls before it sleeps (else ``DP_SPIN_US`` microseconds, else `DEFAULT_SPIN_S`).

    `pin`: run on the CPU the node's cluster places its scripts on (``dp cluster up`` on
    a host with fewer CPUs than processes: `libdp._realnode.plan_placement`, `script_cpu`);
    default ``DP_PIN`` (0 or 1), else yes. Unless `spin_s` or ``DP_SPIN_US`` says otherwise,
    a pinned process polls `CROSSED_SPIN_S` on another node's CPU (placement ``cross``) and
    not at all on its own node's (``pair``: it would poll on the core its node needs next).
    """
    explicit_spin = spin_s is not None or bool(os.environ.get("DP_SPIN_US"))
    spin_s = spin_from_environment() if spin_s is None else _check_spin(spin_s)
    nid = node if node is not None else node_from_environment()
    if nid is None:
        raise OSError(errno.EINVAL, "which node? give attach(node=N) or set DP_NODE (or run under mpirun/srun)")
    if not isinstance(nid, int) or isinstance(nid, bool) or nid < 0:
        raise OSError(errno.EINVAL, f"a node id is a non-negative int, not {nid!r}")
    if run_dir is None:
        run_dir = os.environ.get("DP_RUN_DIR")
    if run_dir is None:
        cluster = cluster or os.environ.get("DP_CLUSTER")
        run_dir = ClusterFile.load(cluster).run_dir if cluster else default_run_dir()
    link = NodeLink.connect(node_socket(run_dir, nid), name=name)
    try:
        pinned = _join_node_cpu(link.hello, pin)
    except BaseException:
        link.close()
        raise
    if pinned and not explicit_spin:
        crossed = link.hello.get("script_cpu") != link.hello.get("cpu")
        spin_s = CROSSED_SPIN_S if crossed else 0.0
    dp = AttachedDP(link, spin_s=spin_s)
    dp.pinned = pinned
    return dp


_pinned = {"mask": None, "links": 0}      # this process's CPUs before it joined a node's, and by how many links


def _join_node_cpu(hello: dict, pin: bool | None) -> bool:
    """Pin this process to the CPU the node's cluster places its scripts on (the hello's
    ``script_cpu``: `libdp._realnode.script_cpu`), if it places them; True if it did.
    Only the first attachment of a process pins it (one attached to several nodes stays
    where the first put it); the last `detach` gives the process its CPUs back."""
    cpu = hello.get("script_cpu")
    if cpu is None:
        return False
    if pin is None:
        raw = os.environ.get("DP_PIN", "1").strip()
        if raw not in ("0", "1"):
            raise OSError(errno.EINVAL, f"DP_PIN is 0 or 1, not {raw!r}")
        pin = raw == "1"
    if not pin:
        return False
    if _pinned["links"] == 0:
        mask = os.sched_getaffinity(0)
        try:
            os.sched_setaffinity(0, {cpu})
        except OSError:
            return False            # not a CPU this process may use (another cpuset): stay where it is
        _pinned["mask"] = mask
    _pinned["links"] += 1
    return True


def _leave_node_cpu() -> None:
    _pinned["links"] -= 1
    if _pinned["links"] == 0 and _pinned["mask"] is not None:
        try:
            os.sched_setaffinity(0, _pinned["mask"])
        except OSError:
            pass
        _pinned["mask"] = None


def _check_spin(spin_s) -> float:
    if not isinstance(spin_s, (int, float)) or isinstance(spin_s, bool) or not 0 <= spin_s <= MAX_SPIN_S:
        raise OSError(errno.EINVAL, f"a wait polls 0..{MAX_SPIN_S} s before it sleeps, not {spin_s!r}")
    return float(spin_s)


def spin_from_environment() -> float:
    """``DP_SPIN_US`` (microseconds) if set, else `DEFAULT_SPIN_S`; EINVAL if it is not a number in range."""
    raw = os.environ.get("DP_SPIN_US")
    if raw is None or raw == "":
        return DEFAULT_SPIN_S
    try:
        us = float(raw)
    except ValueError:
        raise OSError(errno.EINVAL, f"DP_SPIN_US is microseconds, not {raw!r}") from None
    return _check_spin(us * 1e-6)


# --------------------------------------------------------------------------- the control socket


class NodeLink:
    """This process's connection to its node: requests and their answers, matched by id."""

    def __init__(self, sock: socket.socket, hello: dict):
        self.sock = sock
        self.hello = hello
        self.nid = hello["nid"]
        self._next = 1
        self._answers: dict = {}
        self._socket_waiter = None          # trio.Event of the task sleeping on the socket, if one is
        self._socket_sleep = None           # and the cancel scope of its sleep (`pump` ends it)
        self.gone: OSError | None = None

    @classmethod
    def connect(cls, path: str, name: str | None = None) -> "NodeLink":
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            raise OSError(errno.ENOENT, f"no node is running at {path} (dp cluster up, or dp node start)") from None
        except PermissionError:
            sock.close()
            raise OSError(errno.EACCES, f"{path} belongs to another user") from None
        link = cls(sock, {"nid": None})
        link.hello = link.call({"op": "hello", "pid": os.getpid(), "name": name or f"pid{os.getpid()}"})
        link.nid = link.hello["nid"]
        return link

    def _send(self, header: dict, payload=b"", fds=()) -> int:
        if self.gone is not None:
            raise OSError(self.gone.errno, self.gone.strerror)
        call_id = self._next
        self._next += 1
        header["id"] = call_id
        try:
            send_msg(self.sock, header, payload, fds)
        except (BrokenPipeError, ConnectionResetError, ConnectionRefusedError) as exc:
            self._lost(exc)
        return call_id

    def _lost(self, exc=None):
        self.gone = OSError(errno.ENETDOWN, f"node {self.nid} is gone (its control socket closed"
                                            f"{': ' + exc.strerror if exc is not None and exc.strerror else ''})")
        raise OSError(self.gone.errno, self.gone.strerror)

    def pump(self) -> None:
        """Read whatever answers have arrived (never blocks); ENETDOWN once the node is gone."""
        if self.gone is not None:
            raise OSError(self.gone.errno, self.gone.strerror)
        while True:
            try:
                msg = recv_msg(self.sock)
            except (BlockingIOError, InterruptedError):
                return
            except (ConnectionResetError, BrokenPipeError) as exc:
                self._lost(exc)
            if msg is None:
                self._lost()
            header, payload, fds = msg
            self._answers[header.get("id")] = (header, payload, fds)
            if self._socket_sleep is not None:
                # Read by some other task (one waiting on its endpoint, whose wait set holds
                # this socket too): the task sleeping on the socket may be the caller, and
                # the socket it sleeps on is not readable any more.
                self._socket_sleep.cancel()

    def _answer(self, call_id):
        header, payload, fds = self._answers.pop(call_id)
        if "errno" in header:
            for fd in fds:
                os.close(fd)
            kind = BlockingIOError if header.get("type") == "BlockingIOError" else OSError
            raise kind(header["errno"], header.get("error", ""))
        return header, payload, fds

    def call_full(self, header: dict, payload=b"", fds=(), timeout: float | None = None):
        """Send a request, block for its answer: (header, payload, fds)."""
        call_id = self._send(header, payload, fds)
        end = None if timeout is None else _perf() + timeout
        self.sock.setblocking(False)
        while call_id not in self._answers:
            self.pump()
            if call_id in self._answers:
                break
            left = None if end is None else max(0.0, end - _perf())
            if not select.select([self.sock], [], [], left)[0] and left is not None and left <= 0:
                raise TimeoutError(f"node {self.nid} did not answer within {timeout} s")
        return self._answer(call_id)

    def call(self, header: dict, payload=b"", fds=()):
        return self.call_full(header, payload, fds)[0]

    async def acall_full(self, header: dict, payload=b"", fds=()):
        call_id = self._send(header, payload, fds)
        self.sock.setblocking(False)
        try:
            while call_id not in self._answers:
                self.pump()
                if call_id in self._answers:
                    break
                await self._await_answers()
        except trio.Cancelled:
            self._cancel(call_id)
            raise
        await trio.lowlevel.checkpoint()
        return self._answer(call_id)

    async def _await_answers(self) -> None:
        """Until the control socket has something: one task of the process sleeps on it
        (trio allows one waiter per descriptor), the others on an event it sets when it
        wakes -- several tasks may each have a call out (bibw's sender and receiver) -- or
        until another task has read the socket (`pump` ends the sleep)."""
        if self._socket_waiter is not None:
            await self._socket_waiter.wait()
            return
        self._socket_waiter = woke = trio.Event()
        try:
            with trio.CancelScope() as self._socket_sleep:
                await trio.lowlevel.wait_readable(self.sock)
        finally:
            self._socket_sleep = None
            self._socket_waiter = None
            woke.set()

    def _cancel(self, call_id) -> None:
        """A cancelled caller: the node forgets the parked call; its answer, if any, is dropped."""
        try:
            send_msg(self.sock, {"op": "cancel", "target": call_id, "id": 0})
        except OSError:
            pass
        self._answers.pop(call_id, None)

    def admin(self, cmd: str, **kw):
        return self.call({"op": "admin", "cmd": cmd, **kw})["ret"]

    def close(self) -> None:
        self.sock.close()


# --------------------------------------------------------------------------- files on this side


class _File:
    """The user side of a node's open file: its fd (readiness), its submission ring."""

    def __init__(self, owner, info: dict, fds: list):
        self.owner = owner
        self.node_fd = info["node_fd"]
        self.kind = info["kind"]
        self.fd, gate_mem, gate_bell = fds[0], fds[1], fds[2]
        self._waitset = None                # epoll of its fd and the control socket, once waited on
        self.nonblocking = False
        self.closed = False
        g = info["gate"]
        try:
            self.ring = ShmRing.over_fd(gate_mem, gate_bell, False)
            self._err = mmap.mmap(gate_mem, g["error_offset"] + 64)
        finally:
            os.close(gate_mem)
            os.close(gate_bell)
        self._err_at = g["error_offset"]

    def check_error(self) -> None:
        """Raise (once) what the node found wrong with an earlier call-gate entry."""
        err = _U32.unpack_from(self._err, self._err_at)[0]
        if err:
            _U32.pack_into(self._err, self._err_at, 0)
            raise OSError(err, f"{os.strerror(err)} (an earlier call-gate entry on fd {self.fd})")

    def push(self, entry: bytes) -> bool:
        return self.ring.send(entry)

    def waitset(self, sock) -> select.epoll:
        """An epoll descriptor readable when this file's fd or the node's control socket is:
        one descriptor to sleep on (one poll(2) for a blocking call, one ``wait_readable``
        for trio -- no task per descriptor). Made once, on the first wait."""
        ws = self._waitset
        if ws is None:
            ws = select.epoll()
            try:
                ws.register(self.fd, select.EPOLLIN)
                ws.register(sock.fileno(), select.EPOLLIN)
            except BaseException:
                ws.close()
                raise
            self._waitset = ws
        return ws

    def unmap(self) -> None:
        self.closed = True
        if self._waitset is not None:
            try:
                trio.lowlevel.notify_closing(self._waitset.fileno())     # a task sleeping on it wakes
            except RuntimeError:
                pass                                                        # (not inside trio.run)
            self._waitset.close()
            self._waitset = None
        self.ring.close()
        self._err.close()
        os.close(self.fd)


class _Endpoint(_File):
    """A DP endpoint: its Token Buffer Pool mapped read-only, its delivery ring."""

    def __init__(self, owner, info: dict, fds: list):
        super().__init__(owner, info, fds)
        self.ep = info["ep"]
        self.slot_bytes = info["slot_bytes"]
        self.max_message = info["max_message"]
        self.tbp_fd, dlv_fd = fds[3], fds[4]   # the pool's descriptor was opened read-only by the node
        try:
            size = os.fstat(self.tbp_fd).st_size
            self.tbp_mm = mmap.mmap(self.tbp_fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
            self.tbp = memoryview(self.tbp_mm)          # read-only: the kernel's pages
            self.deliveries = EventRing(dlv_fd, fds[0])
        except BaseException:
            os.close(self.tbp_fd)
            raise
        finally:
            os.close(dlv_fd)
        self.tokens = weakref.WeakSet()
        try:
            # The round trip's user side -- gate entry, delivery, copy, slot release -- in C.
            self.rings = endpoint_rings(self.ring, self.deliveries, self.tbp_mm, self._err, self._err_at,
                                        fd=self.fd, ep=self.ep, slot_bytes=self.slot_bytes,
                                        max_message=self.max_message, write_head=_WRITE_HEAD,
                                        gate_fileop=GATE_FILEOP, op_release=_OP_RELEASE, spinner=owner.spinner)
        except BaseException:
            self.deliveries.close()
            self.tbp.release()
            self.tbp_mm.close()
            os.close(self.tbp_fd)
            raise
        self.target = None
        self.take = self.rings.take                     # (slot, length, source) or None
        self.release = self.rings.release               # batched; no doorbell
        self.flush_releases = self.rings.flush_releases
        self.check_error = self.rings.check_error

    @property
    def target(self):
        return self._target

    @target.setter
    def target(self, target) -> None:
        self._target = target
        self.rings.targeted = target is not None

    def unmap(self) -> None:
        for tok in list(self.tokens):
            tok._revoke()
        self.rings.close()
        self.deliveries.close()
        self.tbp.release()
        self.tbp_mm.close()
        os.close(self.tbp_fd)
        super().unmap()


class _Card(_File):
    """A card the node handed to this process (a protocol that drives the adapter itself):
    its frame rings, as the port of this process's own copy of the card."""

    def __init__(self, owner, info: dict, fds: list):
        super().__init__(owner, info, fds)
        from kernelsim.media.real import ShmEnd
        rx_mem, rx_bell, tx_mem, tx_bell = fds[3:7]
        try:
            rx = ShmRing.over_fd(rx_mem, rx_bell, False)
            tx = ShmRing.over_fd(tx_mem, tx_bell, False)
        finally:
            for fd in (rx_mem, rx_bell, tx_mem, tx_bell):
                os.close(fd)
        self.end = ShmEnd(tx, rx, 1, ("", ""), owns=True)
        self.kernel = None

    def unmap(self) -> None:
        self.end.close()
        super().unmap()


def _user_level_kernel(dp: "AttachedDP", card: _Card, proto: str):
    """This process's own kernel for a protocol that drives the card itself: the node's NIC
    model, its driver, DP and `proto` with the node's parameters, the card's frames its medium."""
    from kernelsim.media.backend import DevicePort
    from libdp._api import DP
    from libdp._cluster import Cluster
    from nic_drivers import nic as nic_package
    h = dp.link.hello
    pkg = nic_package(h["nic"])
    hosts = {n: {pkg.LINK_KIND: pkg.hwaddr_for(n)} for n in h["nids"]}
    mods = {m["name"]: m for m in dp.link.admin("lsmod")}
    params = {k: str(v) for k, v in (mods.get(proto) or {}).get("params", {}).items()}
    node = Cluster.real_node(dp.nid, hosts, DevicePort(card.end), platform=h["platform"], nic=h["nic"],
                             params=h.get("params", ()), load=[(proto, params)])
    node.engine.run()
    card.kernel = node
    return DP(node.spawn(f"pid{os.getpid()}"), spin_s=dp.spin_s)


class RemoteToken:
    """A message read in place: ``data`` is a read-only view of its slot in the mapped pool."""

    __slots__ = ("_ep", "_slot", "_data", "source", "__weakref__")

    def __init__(self, ep: _Endpoint, slot: int, n: int, source):
        self._ep = ep
        self._slot = slot
        off = slot * ep.slot_bytes
        self._data = ep.tbp[off:off + n]
        self.source = source
        ep.tokens.add(self)

    @property
    def data(self):
        """The message: EINVAL once released, EBADF once its endpoint is closed (as dpcore's Token)."""
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
        self._data.release()
        self._ep.tokens.discard(self)
        self._ep.release(self._slot)
        self._slot = -1

    def _revoke(self) -> None:
        self._data.release()
        self._slot = -2

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self._slot >= 0:
            self.release()

    def __len__(self):
        return self._data.nbytes if self._slot >= 0 else 0


class _ProfileView(dict):
    def __init__(self, values, name):
        super().__init__(values)
        self.name = name


# --------------------------------------------------------------------------- the calls


class AttachedDP:
    """DP for this process on its node (async calls; ``.sync`` for blocking ones)."""

    def __init__(self, link: NodeLink, *, spin_s: float = DEFAULT_SPIN_S):
        self.link = link
        self.spin_s = spin_s
        self.spinner = Spinner(spin_s)
        self.node = NodeView(link.nid, _ProfileView(link.hello.get("profile", {}), link.hello.get("platform")),
                             False, lambda: link.admin("stats"))
        self._files: dict[int, _File] = {}
        # The no-wait calls are C methods of the endpoint table: one C call per message.
        self._endpoints = EndpointTable(self._fast_endpoint)
        self.dp_write_nowait = self._endpoints.write_nowait
        self.dp_read_nowait = self._endpoints.read_nowait
        self.dp_read_polled = self._endpoints.read_polled
        self.sync = SyncAttachedDP(self)
        self.pinned = False             # runs where its cluster places scripts (attach, cross/pair placement)

    @property
    def nid(self) -> int:
        return self.link.nid

    @property
    def nids(self) -> list[int]:
        """The node ids of this node's cluster (its cluster file's nodes)."""
        return list(self.link.hello.get("nids", [self.link.nid]))

    def now(self) -> float:
        return _perf()

    # -- system calls (the generic entry) --------------------------------------------------

    def _syscall_header(self, name, args, nonblock=False):
        packed, payload = pack_args(args)
        h = {"op": "syscall", "name": name, "args": packed}
        if nonblock:
            h["nonblock"] = True
        return h, payload

    def _after_syscall(self, header, payload, fds):
        files = header.get("files")
        if files:
            at = 0
            for info in files:
                mine = fds[at:at + info["nfds"]]
                at += info["nfds"]
                cls = _Endpoint if info["kind"] == "DP endpoint" else _Card if "passthrough" in info else _File
                f = cls(self, info, mine)
                self._files[f.fd] = f
                if cls is _Endpoint:
                    self._endpoints.add(f.fd, f.rings)
                if header.get("ret") == info["node_fd"]:
                    header["ret"] = f.fd
        ret = header.get("ret")
        if isinstance(ret, dict) and "$b" in ret:
            return payload
        return ret

    async def syscall(self, name: str, *args, nonblock=False):
        """Any system call of the node (generic entry), file descriptors translated."""
        h, payload = self._syscall_header(name, args, nonblock)
        return self._after_syscall(*await self.link.acall_full(h, payload))

    def _node_fd(self, fd) -> int:
        return self._file(fd).node_fd

    def _file(self, fd) -> _File:
        f = self._files.get(fd) if isinstance(fd, int) and not isinstance(fd, bool) else None
        if f is None or f.closed:
            self._identify(fd)
        return f

    def _identify(self, fd):
        """Not ours: EACCES if it is another process's file of this node, else EBADF."""
        if isinstance(fd, int) and not isinstance(fd, bool) and fd >= 0:
            try:
                os.fstat(fd)
            except OSError:
                pass
            else:
                self.link.call({"op": "identify"}, b"", [fd])      # raises EACCES (or EBADF)
        raise OSError(errno.EBADF, f"bad file descriptor {fd!r}")

    def _endpoint(self, fd) -> _Endpoint:
        f = self._file(fd)
        if not isinstance(f, _Endpoint):
            raise OSError(errno.EINVAL, f"fd {fd} is not a DP endpoint")
        return f

    async def dp_open(self, ep: int) -> int:
        return await self.syscall("dp_open", ep)

    async def dp_target(self, fd: int, nid: int, ep: int) -> int:
        e = self._endpoint(fd)
        r = await self.syscall("dp_target", e.node_fd, nid, ep)
        e.target = (nid, ep)
        return r

    async def write(self, fd: int, data) -> int:
        f = self._file(fd)
        f.check_error()
        return await self.syscall("write", f.node_fd, _bytes(data), nonblock=f.nonblocking)

    async def read(self, fd: int, nbytes: int) -> bytes:
        _check_count(nbytes)
        f = self._file(fd)
        f.check_error()
        if isinstance(f, _Endpoint):
            f.flush_releases()
        return await self.syscall("read", f.node_fd, nbytes, nonblock=f.nonblocking)

    async def close(self, fd: int) -> int:
        f = self._file(fd)
        if isinstance(f, _Endpoint):
            f.flush_releases()
        try:
            r = await self.syscall("close", f.node_fd)
        finally:
            self._forget(f)
        return r

    def _forget(self, f: _File) -> None:
        if not f.closed:
            self._files.pop(f.fd, None)
            self._endpoints.discard(f.fd)
            f.unmap()

    def set_blocking(self, fd: int, blocking: bool) -> None:
        f = self._file(fd)
        f.nonblocking = not blocking
        if isinstance(f, _Endpoint):
            f.rings.sleep_on(-1, -1)        # a blocking read that sleeps arms it again

    # -- the call gate --------------------------------------------------------------------

    def _fast_endpoint(self, fd) -> _Endpoint:
        e = self._files.get(fd) if type(fd) is int else None
        if type(e) is not _Endpoint or e.closed:
            e = self._endpoint(fd)
        return e

    async def dp_write(self, fd: int, data) -> int:
        e = self._fast_endpoint(fd)
        write = e.rings.write
        n = write(data)
        if n < 0:
            n = await self._await(e, lambda: write(data) + 1, None) - 1
        # Every public async call is a checkpoint (cancel point and schedule point), as in
        # trio itself, even when the gate took the entry at once: a task looping on
        # dp_write must not starve the others. Its schedule point, a pass of trio's loop,
        # costs more than the gate: `checkpoint` skips it where it would find nothing to do.
        await checkpoint()
        return n

    # -- batching loops: no wait, no checkpoint ---------------------------------------------
    # ``dp_write_nowait(fd, data)``, ``dp_read_nowait(fd, nbytes=65536)`` and
    # ``dp_read_polled(fd, nbytes=65536)`` (what comes while this process polls) are set per
    # object in __init__: the C methods of its `EndpointTable` (libdp._endpoint_rings).

    # -- reading from the mapped pool -----------------------------------------------------

    async def dp_read(self, fd: int, nbytes: int = 65536) -> bytes:
        if type(nbytes) is not int or nbytes < 0:
            _check_count(nbytes)
        e = self._fast_endpoint(fd)
        rings = e.rings
        data = rings.read(nbytes)
        if data is not None:
            await checkpoint()
            return data
        if not e.nonblocking:
            # The poll in C (none if the spinner says sleep at once); then, where trio has
            # nothing else to do, one poll(2), which is the call's checkpoint, and the read
            # in C -- the sync read's C wait, in trio's terms. Anything else waits
            # `_await`'s way.
            start = _perf()
            data = rings.poll_read(nbytes)
            if data is not None:
                await checkpoint()
                return data
            rings.check_error()
            if sleep_until_readable(e.waitset(self.link.sock).fileno()):
                data = rings.read(nbytes)
                if data is not None:
                    self.spinner.waited(_perf() - start)
                    return data
        got = await self._await(e, e.take, e.deliveries)
        return rings.copy_out(got[0], got[1], nbytes)

    async def dp_read_token(self, fd: int) -> RemoteToken:
        e = self._endpoint(fd)
        got = e.take()
        if got is None:
            got = await self._await(e, e.take, e.deliveries)
        else:
            await checkpoint()
        return RemoteToken(e, *got)

    async def _await(self, f: _File, attempt, readable):
        """Retry `attempt` until it gives something: spin, then sleep on `readable`'s fd (or
        briefly, for ring space) and the control socket. Honors non-blocking fds.

        A wait is the call's checkpoint (trio's park, or `sleep_until_readable`'s, which
        counts as one): only a call that never waited takes one more. The control socket is
        read only when a wake-up brought nothing to take (what woke a read is almost always
        its delivery): an answer, or ENETDOWN -- the node died."""
        if f.nonblocking:
            raise BlockingIOError(errno.EAGAIN, f"fd {f.fd}: resource temporarily unavailable")
        if isinstance(f, _Endpoint):
            f.flush_releases()
        pause = 50e-6
        spinner = self.spinner
        start = _perf()
        waited = False
        while True:
            got = spinner.spin(attempt)
            if got:
                break
            f.check_error()
            if f.closed:
                raise OSError(errno.EBADF, f"fd {f.fd} was closed")
            if readable is None:
                self.link.pump()                        # ENETDOWN if the node died
                await trio.sleep(pause)
                pause = min(pause * 2, 2e-3)
            else:
                ws = f.waitset(self.link.sock)
                if not sleep_until_readable(ws.fileno()):
                    await trio.lowlevel.wait_readable(ws.fileno())
            waited = True
            got = attempt()
            if got:
                break
            if readable is not None:
                sock_fd = self.link.sock.fileno()
                for fd, _ in ws.poll(0):
                    if fd == sock_fd:
                        self.link.pump()
        spinner.waited(_perf() - start)
        if not waited:
            await checkpoint()
        return got

    async def user_level(self, proto: str):
        """A protocol that drives the card itself (SP AM): ``{proto}_open`` on the node hands
        this process the card; the process gets a kernel of its own around it and a DP for it.
        EBUSY if another process has the card, ENOSYS without the module on the node."""
        fd = await self.syscall(f"{proto}_open")
        return _user_level_kernel(self, self._files[fd], proto)

    async def endpoint(self, ep: int, target: tuple | None = None):
        from libdp._api import Endpoint
        fd = await self.dp_open(ep)
        e = Endpoint(self, fd, ep)
        if target is not None:
            await e.target(*target)
        return e

    # -- node administration, from a script ---------------------------------------------------

    def lsmod(self):
        return self.link.admin("lsmod")

    def insmod(self, name: str, **params):
        return self.link.admin("insmod", name=name, params={k: str(v) for k, v in params.items()})

    def rmmod(self, name: str):
        return self.link.admin("rmmod", name=name)

    def detach(self) -> None:
        """Close every file and the connection (the node reclaims anything left)."""
        for f in list(self._files.values()):
            self._forget(f)
        self.link.close()
        if self.pinned:
            self.pinned = False
            _leave_node_cpu()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.detach()


class SyncAttachedDP:
    """The same calls, blocking."""

    def __init__(self, dp: AttachedDP):
        self._dp = dp
        self.link = dp.link
        # ``dp_write(fd, data)`` and ``dp_read(fd, nbytes=65536)`` are the C methods of the
        # process's `EndpointTable` (libdp._endpoint_rings): one C call per message while
        # nothing has to wait; a wait comes back here (`_write_waiting`, `_read_waiting`).
        dp._endpoints.blocking_waits(self._write_waiting, self._read_waiting)
        self.dp_write = dp._endpoints.write
        self.dp_read = dp._endpoints.read

    def syscall(self, name, *args, nonblock=False):
        h, payload = self._dp._syscall_header(name, args, nonblock)
        return self._dp._after_syscall(*self.link.call_full(h, payload))

    def dp_open(self, ep):
        return self.syscall("dp_open", ep)

    def user_level(self, proto):
        fd = self.syscall(f"{proto}_open")
        return _user_level_kernel(self._dp, self._dp._files[fd], proto)

    def dp_target(self, fd, nid, ep):
        e = self._dp._endpoint(fd)
        r = self.syscall("dp_target", e.node_fd, nid, ep)
        e.target = (nid, ep)
        return r

    def write(self, fd, data):
        f = self._dp._file(fd)
        f.check_error()
        return self.syscall("write", f.node_fd, _bytes(data), nonblock=f.nonblocking)

    def read(self, fd, nbytes):
        _check_count(nbytes)
        f = self._dp._file(fd)
        f.check_error()
        if isinstance(f, _Endpoint):
            f.flush_releases()
        return self.syscall("read", f.node_fd, nbytes, nonblock=f.nonblocking)

    def close(self, fd):
        f = self._dp._file(fd)
        if isinstance(f, _Endpoint):
            f.flush_releases()
        try:
            return self.syscall("close", f.node_fd)
        finally:
            self._dp._forget(f)

    def set_blocking(self, fd, blocking):
        self._dp.set_blocking(fd, blocking)

    def _write_waiting(self, fd, data):
        e = self._dp._fast_endpoint(fd)
        write = e.rings.write
        return self._wait(e, lambda: write(data) + 1, None) - 1

    def _read_waiting(self, fd, nbytes):
        e = self._dp._fast_endpoint(fd)
        rings = e.rings
        if not e.nonblocking:
            # The wait in C: the poll its spinner allows, the sleep, the wake-up, pop, copy
            # and release in one call -- from now on inside read_wait's one call.
            ws_fd = (e._waitset or e.waitset(self.link.sock)).fileno()
            sock_fd = self.link.sock.fileno()
            rings.sleep_on(ws_fd, sock_fd)
            data = rings.read_sleeping(nbytes, ws_fd, sock_fd)
            if data is not None:
                return data
        got = self._wait(e, rings.take, e.deliveries)      # the control socket, polling, EAGAIN
        return rings.copy_out(got[0], got[1], nbytes)

    def dp_read_token(self, fd):
        e = self._dp._endpoint(fd)
        got = e.take() or self._wait(e, e.take, e.deliveries)
        return RemoteToken(e, *got)

    def _wait(self, f, attempt, readable, timeout: float | None = None):
        if f.nonblocking:
            raise BlockingIOError(errno.EAGAIN, f"fd {f.fd}: resource temporarily unavailable")
        if isinstance(f, _Endpoint):
            f.flush_releases()
        start = _perf()
        end = None if timeout is None else start + timeout
        pause = 50e-6
        link = self.link
        spinner = self._dp.spinner
        polls = spinner.cap > 0.0                       # a process on its node's CPU sleeps at once
        while True:
            got = spinner.spin(attempt) if polls else attempt()
            if got:
                if polls:
                    spinner.waited(_perf() - start)
                return got
            f.check_error()
            if end is not None and _perf() >= end:
                raise TimeoutError(f"fd {f.fd}: nothing within {timeout} s")
            if readable is None:
                link.pump()                             # ENETDOWN if the node died
                time.sleep(pause)
                pause = min(pause * 2, 2e-3)
            else:
                sock_fd = link.sock.fileno()
                for fd, _ in (f._waitset or f.waitset(link.sock)).poll(0.5):
                    if fd == sock_fd:
                        link.pump()                     # an answer, or ENETDOWN: the node died
            got = attempt()
            if got:
                if polls:
                    spinner.waited(_perf() - start)
                return got
