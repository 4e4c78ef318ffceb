"""A node as an OS process: the kernel, serving the processes attached to it.

How a script reaches the kernel of a real node
==============================================

A real node is one OS process running one `kernelsim.Node` in real time, its NIC on a
real transport. Scripts are other OS processes; each one that *attaches* becomes a
kernel process of that node (`Node.spawn`) and reaches the kernel by the two entries of
the design, both real:

* **The generic system-call entry** is a request over the node's control socket (a UNIX
  SOCK_SEQPACKET socket in the run directory, `kernelsim.daemon._wire`): the node
  dispatches it through its system-call table (``node.syscall_path``) exactly as a
  modeled ``int 0x80`` would, and answers. A call that would block (a read with nothing
  to read) parks on the kernel wait queue its path named and is answered when the queue
  is woken -- or with EAGAIN for a non-blocking fd, or cancelled by the caller.
* **The call gate** is a submission ring in shared memory, one per open file: the
  process appends ``(gate name, payload)`` entries and returns -- no kernel crossing --
  and the node, which polls its rings, runs each through its call-gate table
  (``node.callgate_path(proc, name, (fd, payload))``). A gate that would block (a full
  transmit ring) leaves its entry where it is and is retried when the queue wakes: the
  process's ring fills and it waits, which is flow control. An error found by the node
  (the gate returned one) is kept in the file's ``error`` word and raised by the
  process's next call, as a socket's SO_ERROR is.

Program order across the two entries holds: before a process's system call runs, every
entry it put in its rings before is handled.

**Files cross the process boundary as descriptors.** When a system call leaves a new
file in the process's fd table, the node hands the process, over SCM_RIGHTS, the
descriptors that make up that file on the user's side: the file's readiness eventfd
(which *is* the process's fd number for it: select/poll/trio work on it), the memory file
and eventfd doorbell of its submission ring, and whatever its module exports -- a file
whose class has ``export_to(owner)`` decides that (DP's endpoints export their Token
Buffer Pool read-only and a ring of delivery records, `dpcore._export`). The node knows
nothing of DP: it asks the file.

**The loop** (`NodeServer.serve`) polls the NIC's transport and the submission rings,
with ``sched_yield`` between empty polls (another process may need this core), for up
to ``spin_s`` after the last piece of work; then announces that it sleeps (each ring's
and transport's sleep flag, so producers ring their doorbells) and blocks in ``epoll``
on every doorbell, transport descriptor and socket -- the polling watchdog of the LCI
paper (FACTS LCI-C09), in the node. ``spin_s`` sets the poll (``dp cluster up
--spin-us``). Polling pays only where a core is spare (`default_spin`): with fewer than
`SPIN_MIN_CPUS` usable CPUs a yielding poller takes its turn behind every other runnable
task, while a sleeper its doorbell wakes preempts them, so there nodes and the processes
attached to them sleep at once -- unless the cluster pins each node to a CPU of its own
(``dp cluster up --placement cross`` or ``pair``, libdp._realnode): then the node polls,
and so do the scripts on its core under ``cross`` (another node's, whose waits alternate
with this node's work; under ``pair`` its own scripts sleep, libdp._attach), and a poll
ends as soon as a ``sched_yield`` gave the core away (`YIELD_IDLE_S`: someone else on
this core -- a script mid-stream -- wants it) where those are the node's own scripts
(``give_way``); under ``cross`` the node polls on, and only yields that wait out time
slices (`CrowdedCore`) stop it.
Measured by benchmarks/bench_real_nodes.py on a loaded 2-core host, 1-byte round trip:
unpinned, everything polling, 2-3 ms; unpinned, everything sleeping, 58-120 µs; pinned,
nodes polling, scripts sleeping, 31-48 µs; crossed, everything polling, 29-32 µs; a
full-size stream is fastest crossed (docs/real-nodes.md, "Placement and waiting").

**Deliveries wake a process once per pass**: the loop publishes the event-ring records
a pass made (`kernelsim.daemon._rings.publish_posts`) before it polls on or sleeps.

**Processes come and go.** A process is known by its connection: when it closes (the
process exited, or was killed) the node exits the kernel process, which closes every
file it held -- its endpoints are reclaimed. A process of another user is refused at
``accept`` (SO_PEERCRED); the run directory and socket are the owner's alone (0700/0600).
SIGTERM or SIGINT stops the node cleanly: attached processes see their connection
close (ENETDOWN), every file is closed, every region released, the socket removed.
"""
from __future__ import annotations

from cpython.exc cimport PyErr_CheckSignals
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from libc.string cimport memcmp, memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport Py_REFCNT
from kernelsim._path cimport reuse
from kernelsim._cpu cimport Completion, Cpu
from kernelsim._engine cimport Engine, wall_now
from kernelsim._node cimport Costs, callgate_entry_pair, poll_ports
from kernelsim.media._shmring cimport RING_EMPTY, ShmRing
from kernelsim.daemon._rings cimport CrowdedCore, RingExport, epoll_event, epoll_wait, sched_yield
import errno
import os
import select
import signal
import socket
import struct
import time

from kernelsim._cpu import LEVEL_PROC
from kernelsim._node import WouldBlock
from kernelsim.daemon._rings import batch_posts, publish_posts
from kernelsim.daemon._wire import errno_reply, pack_args, recv_msg, send_msg, unpack_args
from kernelsim.media._shmring import ShmRing, ring_bytes

__all__ = ["NodeServer", "GATE_CALL", "GATE_FILEOP", "GATE_SLOTS", "GATE_SLOT_BYTES", "ERROR_WORD_OFFSET"]

GATE_CALL = 1           # entry: kind, name length, gate name, payload -> node.callgate_path
GATE_FILEOP = 2         # entry: kind, payload -> the file's export.ring_op
cdef enum:
    C_GATE_CALL = 1         # the same as C constants: the gate drain compares an entry's kind
    C_GATE_FILEOP = 2       # by C (a module global is a dict lookup and a boxed compare)
GATE_SLOTS = 256
GATE_SLOT_BYTES = 8192  # any NIC's largest DP message fits
ERROR_WORD_OFFSET = ring_bytes(GATE_SLOTS, GATE_SLOT_BYTES)     # u32 errno after the ring
_ERR = struct.Struct("<I")
SPIN_MIN_CPUS = 4
cdef enum:
    GATE_BUDGET = 64        # entries one gate runs per pass before the next gate's turn
    GATE_SETTLE = 16        # entries a drain runs before the devices take their work (`_drain_gate`)
    SOCKET_POLL_EVERY = 4   # empty polling passes per look at the sockets (_loop); 1-byte RTT 27.9-28.3 -> 27.0-27.1 us
YIELD_IDLE_S = 20e-6    # a sched_yield that returns later than this ran someone else (a no-op yield: ~1 µs)
cdef double _yield_idle_s = YIELD_IDLE_S
# DP_GATE_RETRY=0 (diagnostics, tests): an entry that finds the transmit ring full parks
# at once, even when the drain's unsent entries are what fill it (`_gate_entry_raw`), so
# it goes the wait-queue way (`NodeServer._block`) that a ring full for any reason takes.
cdef bint _retry_unsettled = os.environ.get("DP_GATE_RETRY", "1") != "0"

cdef extern from *:
    """
    /* New contents for a bytes object only its filler holds: its cached hash goes too. */
    static inline void dp_bytes_refill(PyObject *b, const unsigned char *src, Py_ssize_t n) {
        memcpy(PyBytes_AS_STRING(b), src, n);
        ((PyBytesObject *) b)->ob_shash = -1;
    }
    """
    void dp_bytes_refill(object b, const unsigned char* src, Py_ssize_t n)


def default_spin(seconds: float) -> float:
    """How long a node, or a process attached to one, polls before it sleeps: `seconds`
    where a core is spare (at least `SPIN_MIN_CPUS` usable CPUs), else 0."""
    return seconds if len(os.sched_getaffinity(0)) >= SPIN_MIN_CPUS else 0.0


DEFAULT_SPIN_S = default_spin(1e-3)
_EPOLL_IN = select.EPOLLIN
cdef double _INF = float("inf")


class _PlainExport:
    """What any open file shows its owner: its readiness eventfd, nothing more."""

    def __init__(self, f):
        self.f = f

    def user_fd(self) -> int:
        return self.f.fileno()

    def describe(self):
        return {}, []

    def ring_op(self, payload: bytes) -> None:
        raise OSError(errno.EINVAL, f"{self.f.kind} has no ring operations")

    def close(self) -> None:
        pass


cdef class Gate:
    """One open file's submission ring, node side."""

    cdef public object session, node_fd, file, export, memfd, bell, blocked, _view, _err
    cdef public ShmRing ring
    cdef public bytearray _buf
    cdef public Py_ssize_t entries, errors
    cdef object _name_raw, _name    # the last gate name an entry gave (bytes) and its str:
                                    # a gate's entries nearly always name the same routine
    cdef object _proc, _callgates   # what every entry runs on, looked up once (`_bind`)
    cdef object _payload            # the last entry's payload, refilled if nothing kept it (`_payload_of`)
    cdef Costs _costs
    cdef Engine _engine
    cdef Cpu _cpu

    def __init__(self, session, node_fd, f, export):
        self.session, self.node_fd, self.file, self.export = session, node_fd, f, export
        self.memfd = os.memfd_create(f"dp-gate-{node_fd}", os.MFD_CLOEXEC)
        self.bell = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            os.ftruncate(self.memfd, ERROR_WORD_OFFSET + 64)
            self.ring = ShmRing.over_fd(self.memfd, self.bell, True, GATE_SLOTS, GATE_SLOT_BYTES)
            import mmap
            self._err = mmap.mmap(self.memfd, ERROR_WORD_OFFSET + 64)
        except BaseException:
            os.close(self.memfd)
            os.close(self.bell)
            raise
        self.blocked = None             # (entry bytes) waiting for a wait queue
        self._buf = bytearray(GATE_SLOT_BYTES)
        self._view = memoryview(self._buf)
        self.entries = 0
        self.errors = 0

    def set_error(self, err: int) -> None:
        self.errors += 1
        _ERR.pack_into(self._err, ERROR_WORD_OFFSET, err)

    def close(self) -> None:
        if self.ring is not None:
            self.ring.close()
            self.ring = None
            self._err.close()
            os.close(self.memfd)
            os.close(self.bell)


class _Parked:
    __slots__ = ("call_id", "name", "args", "queue", "waiter", "woken")


class Session:
    """One attached OS process: its connection, its kernel process, its files' gates."""

    def __init__(self, server, sock: socket.socket, pid: int, uid: int):
        self.server = server
        self.sock = sock
        self.peer_pid = pid
        self.uid = uid
        self.proc = None
        self.gates: dict[int, Gate] = {}        # node fd -> gate
        self.parked: dict = {}                  # call id -> _Parked
        self.backlog: list = []                 # requests waiting for a blocked gate
        self.closed = False

    def fileno(self) -> int:
        return self.sock.fileno()


cdef class LoopStats:
    """What a node's loop has done: ``busy_s`` of wall time in passes that found work,
    ``passes`` (every pass), ``busy_passes``, ``sleeps`` (times it slept in epoll),
    ``crowded`` (times it stopped polling for a CPU-bound neighbour: `_rings.CrowdedCore`).
    ``dp node status`` shows them; a stream's node CPU per message is ``busy_s`` over the
    messages (the rest of its CPU, if it polls, is polling)."""
    cdef public double busy_s
    cdef public long long passes, busy_passes, sleeps, crowded

    def as_dict(self) -> dict:
        return {"busy_s": self.busy_s, "passes": self.passes, "busy_passes": self.busy_passes,
                "sleeps": self.sleeps, "crowded": self.crowded}


class NodeServer:
    """Serve `node` (a real-time `kernelsim.Node`) on the UNIX socket `path` until stopped."""

    def __init__(self, node, path: str, *, spin_s: float = DEFAULT_SPIN_S, give_way: bool = True, describe=None,
                 log=None):
        if node.modeled:
            raise OSError(errno.EINVAL, "a node server runs a real-time node")
        self.node = node
        self.path = path
        self.spin_s = spin_s
        # Does a yield that gave the core away end the poll? Yes where the node's own
        # scripts share its core (placement pair, or unpinned): one mid-stream wants the
        # core. No where the scripts on its core are another node's (cross): theirs is the
        # work that alternates with this node's, and a node asleep needs a doorbell.
        self.give_way = give_way
        self.describe = describe or (lambda: {})
        self.log = log or (lambda msg: None)
        self.sessions: dict[int, Session] = {}   # socket fd -> session
        self._stopping = False
        self._listen = None
        self._epoll = None
        self._gates: list[Gate] = []
        self._ready: list[Session] = []          # sessions with a parked call woken
        self._ready_gates: list = []            # gates whose parked entry's wait queue woke
        self._sources: list = []                 # more things to poll: cards handed to processes
        self._tied: list[int] = []               # pidfds of processes this node must not outlive
        self.started = time.time()
        self.calls = 0
        self._closed_gate_entries = 0            # entries of gates since dropped (`gate_entries`)
        self._gate_names: dict[bytes, str] = {}
        self.refused = 0
        self.loop_stats = LoopStats()

    # ---------------------------------------------------------------- life

    def bind(self) -> None:
        """Create the listening socket (0600); EADDRINUSE if a live node already serves `path`."""
        if os.path.exists(self.path):
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                probe.connect(self.path)
            except OSError:
                os.unlink(self.path)            # a dead node's socket
            else:
                raise OSError(errno.EADDRINUSE, f"a node is already serving {self.path}")
            finally:
                probe.close()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET | socket.SOCK_CLOEXEC)
        old = os.umask(0o177)
        try:
            s.bind(self.path)
        finally:
            os.umask(old)
        s.listen(64)
        s.setblocking(False)
        self._listen = s

    def stop(self) -> None:
        """Ask the loop to end (safe from a signal handler)."""
        self._stopping = True

    def serve(self) -> None:
        """Run until `stop` (or SIGTERM/SIGINT when run in the main thread); then shut down."""
        if self._listen is None:
            self.bind()
        rfd, wfd = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        old_wakeup, old_handlers = None, {}
        try:
            old_wakeup = signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
            for sig in (signal.SIGTERM, signal.SIGINT):
                old_handlers[sig] = signal.signal(sig, lambda *_: self.stop())
        except ValueError:              # not the main thread: stop() only
            pass
        self._epoll = select.epoll()
        self._epoll.register(self._listen.fileno(), _EPOLL_IN)
        self._epoll.register(rfd, _EPOLL_IN)
        for port in self.node.real_ports:
            self._epoll.register(port.fileno(), _EPOLL_IN)
        for fd in self._tied:
            self._epoll.register(fd, _EPOLL_IN)
        batch_posts(True)               # deliveries wake their processes once per pass (kernelsim.daemon._rings)
        try:
            self._loop()
        finally:
            batch_posts(False)
            self._shutdown()
            if old_wakeup is not None:
                signal.set_wakeup_fd(old_wakeup)
            for sig, h in old_handlers.items():
                signal.signal(sig, h)
            os.close(rfd)
            os.close(wfd)

    def _loop(self) -> None:
        node = self.node
        cdef Engine engine = <Engine?> node.engine
        # The loop holds the server's lists, never rebound (`_resume_parked` empties them in
        # place): a pass tests them by C instead of looking each up by name.
        cdef list ports = node.real_ports, gates = self._gates, sources = self._sources
        cdef list ready = self._ready, ready_gates = self._ready_gates
        epoll_poll = self._epoll.poll
        cdef int epfd = self._epoll.fileno()
        cdef epoll_event ev
        cdef double spin_s = self.spin_s
        cdef bint give_way = self.give_way
        cdef double last_work = wall_now(), start, back
        cdef CrowdedCore crowding = CrowdedCore()
        cdef unsigned int empty = 0
        cdef Py_ssize_t work
        cdef LoopStats stats = self.loop_stats
        while not self._stopping:
            # A signal's Python handler (SIGTERM/SIGINT: `stop`) runs only when something
            # asks for it: a polling pass is compiled code and may never sleep in a system
            # call that would be interrupted, so each pass asks.
            PyErr_CheckSignals()
            start = wall_now()
            stats.passes += 1
            # The gates first: entries that ring no doorbell (a pool's slots given back) are
            # taken before the frames that may need them.
            work = _poll_gates(self, gates)
            work += poll_ports(ports, engine)
            if engine.peek() != _INF:
                engine.run()                # device work a parked call left, timers paths armed
                work += 1
            for src in sources:
                work += src.poll()
            if ready or ready_gates:
                work += self._resume_parked()
            # What this pass delivered -- and what the requests handled since the last pass
            # did: every process woken once, before the node polls on or sleeps.
            publish_posts()
            if work:
                last_work = wall_now()
                stats.busy_s += last_work - start
                stats.busy_passes += 1
                if spin_s > 0.0:
                    empty = 0
                    continue
            if not work:
                # The sockets (requests, new processes, exits) are asked every
                # SOCKET_POLL_EVERY empty passes of a poll, not every pass: a pass is a
                # few hundred ns of rings and a system call costs as much -- each hop of
                # a round trip waits on average half a pass for the frame to be seen.
                # The look is one epoll_wait by C; epoll's Python list of events is made
                # only when one is ready (level-triggered: still ready when asked again).
                empty += 1
                if empty % SOCKET_POLL_EVERY == 1 or spin_s <= 0.0:
                    if epoll_wait(epfd, &ev, 1, 0) > 0:
                        events = epoll_poll(0)
                        if events:
                            self._handle_events(events)
                            last_work = wall_now()
                            continue
                if spin_s > 0.0:
                    # The pass began a few hundred ns ago: its start stands for now.
                    if start - last_work < spin_s and start >= crowding.until:
                        sched_yield()
                        # Poll only while the core is otherwise idle: a yield that gave the
                        # core away (another process ran) means polling takes it from that
                        # process -- its own script, mid-stream -- so sleep instead (unless
                        # the core's scripts are another node's: `give_way`); the script's
                        # doorbell wakes the node when it has posted. Yields that waited
                        # out time slices stop polling for a while (`CrowdedCore`).
                        back = wall_now()
                        if back - start < _yield_idle_s:
                            continue
                        if crowding.late_yield(start, back):
                            stats.crowded += 1
                        elif not give_way:
                            continue
            # Sleep -- also straight after work when the node does not poll: announcing the
            # sleep checks every ring once more (a producer that published meanwhile makes
            # it fail), and epoll returns at once for a socket or doorbell already readable,
            # so no empty pass over everything is needed before it.
            if engine.peek() != _INF or ready or ready_gates:
                continue
            sleeping = [(g.ring, g.bell) for g in gates if g.blocked is None]
            sleeping += [(src, src.fileno()) for src in sources]
            ok = True
            for p in ports:
                ok = p.prepare_to_sleep() and ok
            for r, _ in sleeping:
                ok = r.prepare_to_sleep() and ok
            stats.sleeps += 1
            events = epoll_poll(-1) if ok and not self._stopping else []
            # Only a doorbell that rang has anything to read: one system call per wake-up
            # instead of one per ring (a bell rung after epoll returned stays readable and
            # makes the next epoll return at once: nothing is lost).
            fired = {fd for fd, _ in events}
            for p in ports:
                p.cancel_sleep()
                if p.fileno() in fired:
                    p.drain()
            for r, bell in sleeping:
                r.cancel_sleep()
                if bell in fired:
                    r.drain()
            if events:
                self._handle_events(events)
            last_work = wall_now()

    def tie_to(self, pid: int) -> None:
        """Stop when process `pid` exits (a temporary cluster's nodes end with their maker)."""
        fd = os.pidfd_open(pid)
        self._tied.append(fd)
        if self._epoll is not None:
            self._epoll.register(fd, _EPOLL_IN)

    def add_source(self, src) -> None:
        """Poll `src` too (``poll``, ``fileno``, ``prepare_to_sleep``, ``cancel_sleep``, ``drain``)."""
        self._sources.append(src)
        if self._epoll is not None:
            self._epoll.register(src.fileno(), _EPOLL_IN)

    def remove_source(self, src) -> None:
        if src in self._sources:
            self._sources.remove(src)
            if self._epoll is not None:
                try:
                    self._epoll.unregister(src.fileno())
                except (OSError, ValueError):
                    pass

    def _shutdown(self) -> None:
        for s in list(self.sessions.values()):
            self._close_session(s, "the node is stopping")
        if self._listen is not None:
            self._listen.close()
            self._listen = None
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        for fd in self._tied:
            os.close(fd)
        self._tied = []

    # ---------------------------------------------------------------- running paths

    def _run(self, path):
        """Run a process-level path now (real time); (value, exception)."""
        node = self.node
        box = []
        node.cpu.submit(LEVEL_PROC, path, lambda v, e: box.append((v, e)))
        while not box:
            if not node.engine.step():
                return None, OSError(errno.EDEADLK, "no event can complete this call")
        if not isinstance(box[0][1], WouldBlock):
            node.engine.run()       # else once the caller is parked: no wake-up is lost (see _loop)
        return box[0]

    # ---------------------------------------------------------------- sockets

    def _handle_events(self, events) -> int:
        work = 0
        for fd, _mask in events:
            if fd in self._tied:
                self.log("the process this node was tied to has exited: stopping")
                self.stop()
                continue
            if self._listen is not None and fd == self._listen.fileno():
                work += self._accept()
                continue
            s = self.sessions.get(fd)
            if s is not None:
                work += self._serve_session(s)
        return work

    def _accept(self) -> int:
        n = 0
        while True:
            try:
                conn, _ = self._listen.accept()
            except (BlockingIOError, InterruptedError):
                return n
            pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
            if uid != os.geteuid() and uid != 0:
                self.refused += 1
                self.log(f"refused a process of uid {uid} (pid {pid})")
                conn.close()
                continue
            conn.setblocking(False)
            s = Session(self, conn, pid, uid)
            self.sessions[conn.fileno()] = s
            self._epoll.register(conn.fileno(), _EPOLL_IN)
            n += 1

    def _serve_session(self, s: Session) -> int:
        n = 0
        while not s.closed:
            try:
                msg = recv_msg(s.sock)
            except (BlockingIOError, InterruptedError):
                return n
            except OSError as exc:
                self._close_session(s, f"connection error: {exc}")
                return n + 1
            if msg is None:
                self._close_session(s, "the process closed its connection")
                return n + 1
            n += 1
            header, payload, fds = msg
            for fd in fds:                          # only `identify` takes descriptors
                if header.get("op") != "identify":
                    os.close(fd)
            if s.backlog or any(g.blocked is not None for g in s.gates.values()):
                s.backlog.append((header, payload, fds))
                continue
            self._request(s, header, payload, fds)
        return n

    def _reply(self, s: Session, header: dict, payload=b"", fds=()) -> None:
        try:
            send_msg(s.sock, header, payload, fds)
        except OSError as exc:
            self._close_session(s, f"cannot answer: {exc}")

    def _request(self, s: Session, header: dict, payload: bytes, fds) -> None:
        op = header.get("op")
        call_id = header.get("id")
        self.calls += 1
        try:
            if s.proc is None and op != "hello":
                raise OSError(errno.EPROTO, "say hello first")
            if op == "hello":
                self._hello(s, header)
            elif op == "syscall":
                self._drain_gates(s)
                self._syscall(s, call_id, header, payload)
            elif op == "cancel":
                self._cancel(s, header.get("target"))
            elif op == "admin":
                self._reply(s, {"id": call_id, "ret": self._admin(header)})
            elif op == "identify":
                self._identify(s, call_id, fds)
            else:
                raise OSError(errno.EPROTO, f"unknown request {op!r}")
        except Exception as exc:   # noqa: BLE001 - every failure is the caller's answer
            self._reply(s, errno_reply(call_id, exc))

    def _hello(self, s: Session, header: dict) -> None:
        if s.proc is not None:
            raise OSError(errno.EPROTO, "already attached")
        name = str(header.get("name") or f"pid{s.peer_pid}")[:64]
        s.proc = self.node.spawn(name)
        s.proc.peer_pid = s.peer_pid
        node = self.node
        info = {"id": header.get("id"), "nid": node.nid, "pid": s.proc.pid, "node_pid": os.getpid(),
                "profile": {k: node.profile[k] for k in node.profile.as_dict()},
                "platform": node.profile.name, **self.describe()}
        self._reply(s, info)

    def _syscall(self, s: Session, call_id, header: dict, payload: bytes) -> None:
        name = header.get("name")
        if not isinstance(name, str):
            raise OSError(errno.EPROTO, "a system call needs a name")
        args = unpack_args(header.get("args", []), payload)
        nonblock = bool(header.get("nonblock"))
        before = {fd for fd, _ in s.proc.fds}
        self._attempt(s, call_id, name, args, nonblock, True, before)

    def _attempt(self, s, call_id, name, args, nonblock, entry, before) -> None:
        value, exc = self._run(self.node.syscall_path(s.proc, name, args, entry))
        if isinstance(exc, WouldBlock):
            if nonblock:
                self._reply(s, errno_reply(call_id, BlockingIOError(errno.EAGAIN, str(exc.strerror))))
                return
            p = _Parked()
            p.call_id, p.name, p.args, p.queue, p.woken = call_id, name, args, exc.queue, False

            def waiter(p=p, s=s):
                p.woken = True
                if s not in self._ready:
                    self._ready.append(s)
            p.waiter = waiter
            p.queue.add(waiter)
            s.parked[call_id] = (p, before)
            return
        if exc is not None:
            self._reply(s, errno_reply(call_id, exc))
            return
        fds_now = {fd for fd, _ in s.proc.fds}
        gone = [fd for fd in s.gates if fd not in fds_now]
        for fd in gone:
            self._drop_gate(s, fd)
        new = sorted(fds_now - before)
        if new:
            self._export(s, call_id, value, new)
            return
        if isinstance(value, (bytes, bytearray, memoryview)):
            self._reply(s, {"id": call_id, "ret": {"$b": 1}}, bytes(value))
        else:
            self._reply(s, {"id": call_id, "ret": value})

    def _resume_parked(self) -> int:
        n = self._resume_gates()
        ready = self._ready[:]
        self._ready.clear()                     # in place: `_loop` holds the list
        for s in ready:
            if s.closed:
                continue
            for call_id, (p, before) in list(s.parked.items()):
                if p.woken:
                    del s.parked[call_id]
                    n += 1
                    self._attempt(s, call_id, p.name, p.args, False, False, before)
        return n

    def _cancel(self, s: Session, call_id) -> None:
        entry = s.parked.pop(call_id, None)
        if entry is not None:
            p, _ = entry
            p.queue.discard(p.waiter)
            self._reply(s, errno_reply(call_id, OSError(errno.EINTR, "cancelled")))

    def _identify(self, s: Session, call_id, fds) -> None:
        """Whose file is the descriptor the process sent? EACCES: another process's; EBADF: nobody's."""
        try:
            if len(fds) != 1:
                raise OSError(errno.EINVAL, "identify takes one descriptor")
            for other in self.sessions.values():
                for node_fd, gate in other.gates.items():
                    if _same_file(fds[0], gate.export.user_fd()):
                        if other is s:
                            self._reply(s, {"id": call_id, "ret": node_fd})
                            return
                        raise OSError(errno.EACCES, f"fd is process {other.proc.pid}'s {gate.file.kind} "
                                                    f"on node {self.node.nid}")
            raise OSError(errno.EBADF, "not a file of this node")
        finally:
            for fd in fds:
                os.close(fd)

    # ---------------------------------------------------------------- files across the boundary

    def _export(self, s: Session, call_id, value, new_fds) -> None:
        """Hand the process the user side of each new file (the call's value names one of them).

        Per file: its readiness eventfd (the process's fd for it), its gate ring's memory
        file and doorbell, then what its export adds (fresh descriptors, closed here once sent).
        """
        files, passed, fresh = [], [], []
        try:
            for fd in new_fds:
                f = s.proc.fds.get(fd)
                export_to = getattr(f, "export_to", None)
                export = export_to(s) if export_to is not None else _PlainExport(f)
                gate = Gate(s, fd, f, export)
                s.gates[fd] = gate
                self._gates.append(gate)
                self._epoll.register(gate.bell, _EPOLL_IN)      # the process rings it when we sleep
                info, extra = export.describe()
                fresh += extra
                files.append({"node_fd": fd, "kind": f.kind, "nfds": 3 + len(extra), **info,
                              "gate": {"slots": GATE_SLOTS, "slot_bytes": GATE_SLOT_BYTES,
                                       "error_offset": ERROR_WORD_OFFSET}})
                passed += [export.user_fd(), gate.memfd, gate.bell, *extra]
            self._reply(s, {"id": call_id, "ret": value, "files": files}, b"", passed)
        finally:
            for fd in fresh:
                os.close(fd)

    @property
    def gate_entries(self) -> int:
        """Call-gate entries this node has run, on every gate it ever had."""
        return self._closed_gate_entries + sum((<Gate> g).entries for g in self._gates)

    def _drop_gate(self, s: Session, fd: int) -> None:
        gate = s.gates.pop(fd, None)
        if gate is not None:
            self._gates.remove(gate)
            self._closed_gate_entries += (<Gate> gate).entries
            try:
                self._epoll.unregister(gate.bell)
            except (OSError, ValueError):
                pass
            gate.export.close()
            gate.close()

    # ---------------------------------------------------------------- call gates

    def _poll_gates(self) -> int:
        return _poll_gates(self, self._gates)

    def _drain_gates(self, s: Session) -> None:
        for gate in list(s.gates.values()):
            if gate.blocked is None and gate.ring is not None and gate.ring.pending():
                _drain_gate(self, gate, GATE_BUDGET)

    def _drain_gate(self, Gate gate, Py_ssize_t budget=GATE_BUDGET) -> int:
        return _drain_gate(self, gate, budget)

    def _gate_name(self, raw) -> str:
        """A gate name as the process wrote it (bytes) -> str, decoded once per name."""
        key = bytes(raw)
        name = self._gate_names.get(key)
        if name is None:
            name = key.decode()
            if len(self._gate_names) < 256:     # names come from processes: bounded
                self._gate_names[key] = name
        return name

    def _gate_entry(self, gate: Gate, entry) -> bool:
        """Run one entry (bytes, or a view of the gate's buffer -- copied here before
        anything can keep it); False if it had to wait (kept in `gate.blocked`)."""
        s = gate.session
        kind = entry[0] if len(entry) else 0
        try:
            if kind == GATE_CALL:
                ln = entry[1]
                name = self._gate_name(entry[2:2 + ln])
                payload = bytes(entry[2 + ln:])
                value, exc = self._run(self.node.callgate_path(s.proc, name, (gate.node_fd, payload)))
                if isinstance(exc, WouldBlock):
                    self._block(gate, bytes(entry), exc.queue)
                    return False
                if exc is not None:
                    raise exc
            elif kind == GATE_FILEOP:
                gate.export.ring_op(bytes(entry[1:]))
            else:
                raise OSError(errno.EPROTO, f"unknown gate entry kind {kind}")
        except OSError as exc:
            gate.set_error(exc.errno or errno.EIO)
        except Exception:   # noqa: BLE001 - a process's bad entry never stops the node
            gate.set_error(errno.EINVAL)
        return True

    def _block(self, gate: Gate, entry: bytes, queue) -> None:
        gate.blocked = entry

        def waiter():
            # Called by the event that freed the queue (a transmit interrupt's path), inside
            # the engine: the entry runs again from the loop, after that event. Run here, its
            # call would wait on the engine it is inside of (EDEADLK: the CPU is still in the
            # waking path, so nothing could complete the call).
            if gate.blocked is entry and gate not in self._ready_gates:
                self._ready_gates.append(gate)
        queue.add(waiter)

    def _resume_gates(self) -> int:
        """Run again each woken gate's parked entry, then the requests its session held
        back while it waited (`_serve_session`)."""
        ready = self._ready_gates[:]
        self._ready_gates.clear()               # in place: `_loop` holds the list
        n = 0
        for gate in ready:
            entry = gate.blocked
            if entry is None or gate.ring is None:
                continue                        # closed meanwhile
            gate.blocked = None
            n += 1
            if not self._gate_entry(gate, entry):
                continue                        # parked again
            s = gate.session
            while s.backlog and not any(g.blocked is not None for g in s.gates.values()) and not s.closed:
                self._request(s, *s.backlog.pop(0))
        return n

    # ---------------------------------------------------------------- administration

    def _admin(self, header: dict):
        cmd = header.get("cmd")
        mods = self.node.modules
        if cmd == "insmod":
            mods.insmod(header["name"], **dict(header.get("params") or {}))
            return mods.lsmod()
        if cmd == "modprobe":
            mods.modprobe(header["name"], **dict(header.get("params") or {}))
            return mods.lsmod()
        if cmd == "rmmod":
            mods.rmmod(header["name"])
            return mods.lsmod()
        if cmd == "lsmod":
            return mods.lsmod()
        if cmd == "modinfo":
            return mods.modinfo(header["name"])
        if cmd == "status":
            return self.status()
        if cmd == "stats":
            return _jsonable(self.node.stats())
        if cmd == "stop":
            self.stop()
            return {"stopping": True}
        raise OSError(errno.EINVAL, f"unknown node command {cmd!r}")

    def status(self) -> dict:
        procs = []
        for s in self.sessions.values():
            if s.proc is None:
                continue
            files = []
            for fd, f in s.proc.fds:
                st = f.stats() if hasattr(f, "stats") else {}
                files.append({"fd": fd, "kind": f.kind, **({"ep": st["ep"]} if "ep" in st else {})})
            procs.append({"pid": s.peer_pid, "kernel_pid": s.proc.pid, "name": s.proc.name, "files": files})
        return {"nid": self.node.nid, "pid": os.getpid(), "uptime_s": time.time() - self.started,
                "modules": self.node.modules.lsmod(), "processes": procs, "calls": self.calls,
                "gate_entries": self.gate_entries, "refused": self.refused, "loop": self.loop_stats.as_dict(),
                "gives_way": self.give_way, **self.describe()}

    # ---------------------------------------------------------------- leaving

    def _close_session(self, s: Session, why: str) -> None:
        if s.closed:
            return
        s.closed = True
        self.log(f"process {s.peer_pid} detached: {why}")
        for p, _ in s.parked.values():
            p.queue.discard(p.waiter)
        s.parked.clear()
        for fd in list(s.gates):
            self._drop_gate(s, fd)
        if s.proc is not None and s.proc.alive:
            try:
                s.proc.exit()                   # closes every file it held: its endpoints are reclaimed
            except Exception as exc:   # noqa: BLE001 - a half-closed process must not stop the node
                self.log(f"closing process {s.peer_pid}'s files: {exc}")
            try:
                self.node.processes.remove(s.proc)
            except ValueError:
                pass
        self.sessions.pop(s.sock.fileno(), None)
        if self._epoll is not None:
            try:
                self._epoll.unregister(s.sock.fileno())
            except (OSError, ValueError):
                pass
        s.sock.close()


cdef Py_ssize_t _poll_gates(object server, list gates) except -1:
    """A pass over the node's gates: the entries waiting in each ring that is not blocked."""
    cdef Gate gate
    cdef ShmRing ring
    cdef Py_ssize_t n = 0
    for gate in gates:
        if gate.blocked is None:
            ring = gate.ring
            # By C while the ring is mapped; else its method raises what it always has.
            if ring.pending_raw() if ring is not None and ring._base != NULL else ring.pending():
                n += _drain_gate(server, gate, GATE_BUDGET)
    return n


cdef Py_ssize_t _drain_gate(object server, Gate gate, Py_ssize_t budget) except -1:
    """Run up to `budget` of the gate's entries, straight from the ring into the gate's
    buffer (typed: a call-gate entry is per message -- bench_node_pass)."""
    cdef ShmRing ring = gate.ring
    cdef bytearray buf = gate._buf
    cdef unsigned char* p = <unsigned char*> buf
    cdef Py_ssize_t k, n = 0, cap = len(buf), unsettled = 0
    # The engine -- the devices' work the entries left: a transmit ring walk -- runs after
    # every GATE_SETTLE entries and after the last, not after each: the card then sends
    # the burst in one walk and finds its ring empty once (one transmit-underrun interrupt
    # per burst, not per frame), as a card would while the CPU queues frames faster than it
    # sends them. Below the default transmit ring (32), so a burst does not fill it.
    while n < budget:
        k = ring.recv_raw(p, <size_t> cap)
        if k < 0:
            if k != RING_EMPTY:
                _settle(gate, unsettled)
                ring.recv_into(buf)             # raises what went wrong (closed, corrupt)
            break
        n += 1
        unsettled += 1
        if not _gate_entry_raw(server, gate, p, k, unsettled >= GATE_SETTLE, unsettled > 1):
            unsettled = 0                       # parked: the engine runs from the loop (see _run_now)
            break
        if unsettled >= GATE_SETTLE:
            unsettled = 0
    _settle(gate, unsettled)
    gate.entries += n
    return n


cdef inline int _settle(Gate gate, Py_ssize_t unsettled) except -1:
    if unsettled and gate._engine is not None:
        gate._engine.run()
    return 0


cdef bint _gate_entry_raw(object server, Gate gate, const unsigned char* p, Py_ssize_t k, bint settle,
                         bint deferred) except -1:
    """`NodeServer._gate_entry` for an entry still in the gate's buffer: the name and the
    payload are taken out of it as bytes, nothing else is made per entry. `settle`: run
    the engine once the call is done (else the drain does, later); `deferred`: entries
    before it in this drain left the engine work it has not run yet."""
    cdef int kind = p[0] if k > 0 else 0
    cdef Py_ssize_t ln
    cdef object name, exc
    if kind == C_GATE_FILEOP:                       # a pool's slots given back, per read
        try:
            if isinstance(gate.export, RingExport):     # DP's endpoint: by C, from the buffer
                (<RingExport> gate.export).ring_op_raw(p + 1, k - 1)
            else:
                gate.export.ring_op(p[1:k])
        except OSError as e:
            gate.set_error(e.errno or errno.EIO)
        except Exception:   # noqa: BLE001 - a process's bad entry never stops the node
            gate.set_error(errno.EINVAL)
        return True
    if kind != C_GATE_CALL or k < 2 or 2 + <Py_ssize_t> p[1] > k:
        return server._gate_entry(gate, p[:k])     # anything malformed: refused there
    ln = p[1]
    raw = gate._name_raw
    if raw is not None and PyBytes_GET_SIZE(raw) == ln and memcmp(PyBytes_AS_STRING(raw), p + 2, ln) == 0:
        name = gate._name
    else:
        raw = p[2:2 + ln]
        name = server._gate_names.get(raw)
        if name is None:
            return server._gate_entry(gate, p[:k])     # a name not seen yet: decoded (and checked) there
        gate._name_raw = raw
        gate._name = name
    if gate._cpu is None:
        _bind(server, gate)
    try:
        exc = _call_entry(gate, name, p + 2 + ln, k - 2 - ln, settle)
        if exc is not None and deferred and _retry_unsettled and isinstance(exc, WouldBlock):
            # Full only because the entries before it have not been sent yet (a transmit
            # ring smaller than GATE_SETTLE): let the devices take them, as running the
            # engine after each entry would have, and try once more before it waits.
            gate._engine.run()
            exc = _call_entry(gate, name, p + 2 + ln, k - 2 - ln, settle)
        if exc is not None:
            if isinstance(exc, WouldBlock):
                server._block(gate, p[:k], exc.queue)
                return False
            raise exc
    except OSError as e:
        gate.set_error(e.errno or errno.EIO)
    except Exception:   # noqa: BLE001 - a process's bad entry never stops the node
        gate.set_error(errno.EINVAL)
    return True


cdef inline object _call_entry(Gate gate, object name, const unsigned char* payload, Py_ssize_t n,
                               bint settle):
    """Run a call-gate entry's routine `name` on the gate's file with `n` bytes of payload:
    what it raised, or None (`_run_now`)."""
    return _run_now(gate._engine, gate._cpu,
                    callgate_entry_pair(gate._callgates, gate._costs, gate._proc, name,
                                    gate.node_fd, _payload_of(gate, payload, n)), settle)


cdef object _payload_of(Gate gate, const unsigned char* p, Py_ssize_t n):
    """An entry's payload as bytes. A full-size message's bytes object is a malloc and a
    free per entry (~500 instructions: bench_node_pass); the last one is filled again
    instead when nothing but the gate holds it any more -- the call copied it to the
    node's memory and dropped it. A local delivery or a blocked call that kept it keeps it:
    a new one is made. Never the empty bytes (a shared singleton); one made here is never
    a shared one (`PyBytes_FromStringAndSize(NULL, n)` always allocates for n > 0)."""
    cdef object b = gate._payload
    if n > 0 and b is not None and Py_REFCNT(b) == 2 and PyBytes_GET_SIZE(b) == n:
        # 2: the gate's field and this local
        dp_bytes_refill(b, p, n)
        return b
    b = PyBytes_FromStringAndSize(NULL, n)
    if n > 0:
        memcpy(PyBytes_AS_STRING(b), p, n)
        gate._payload = b
    return b


cdef int _bind(object server, Gate gate) except -1:
    """Look up once what a gate's entries run on: its process (the session's, set at
    attach, before any file -- so any gate -- exists), the node's call-gate table and
    costs (made with the node, never replaced), its engine and CPU."""
    node = server.node
    gate._proc = gate.session.proc
    gate._callgates = node.callgates
    gate._costs = <Costs?> node.costs
    gate._engine = <Engine?> node.engine
    gate._cpu = <Cpu?> node.cpu
    return 0


cdef int _LEVEL_PROC = LEVEL_PROC


cdef class _Done(Completion):
    """Where a gate entry's path leaves its outcome (the CPU completes it by a C call)."""
    cdef bint done
    cdef object value, exc

    cdef int complete(self, object value, object exc) except -1:
        self.done = True
        self.value = value
        self.exc = exc
        return 0


cdef list _dones = [None] * 2           # spare `_Done`s (`kernelsim._path.reuse`)


cdef object _run_now(Engine engine, Cpu cpu, object path, bint settle):
    """`NodeServer._run` for a gate entry, by C calls: no closure and no list per entry.
    What the call raised is returned (None if nothing); what it returned is dropped, as
    a gate entry has no reply (no tuple per entry)."""
    # One per entry, a spare (it gives its outcome up as it returns it: a spare holds nothing).
    cdef _Done done = <_Done> reuse(_dones, _Done)
    done.done = False
    done.value = done.exc = None
    cpu.submit(_LEVEL_PROC, path, done)
    while not done.done:
        if not engine.step():
            return OSError(errno.EDEADLK, "no event can complete this call")
    if settle and (done.exc is None or not isinstance(done.exc, WouldBlock)):
        engine.run()        # else once the caller is parked: no wake-up is lost (see _loop)
    exc = done.exc
    done.value = done.exc = None
    return exc


def _same_file(fd_a: int, fd_b: int) -> bool:
    """Do two descriptors of this process name the same open file? (kcmp, KCMP_FILE)"""
    import ctypes
    import platform
    sys_kcmp = {"x86_64": 312, "aarch64": 272, "riscv64": 272}.get(platform.machine())
    if sys_kcmp is None:
        raise OSError(errno.ENOSYS, f"kcmp: unknown system call number on {platform.machine()}")
    pid = os.getpid()
    return ctypes.CDLL(None, use_errno=True).syscall(sys_kcmp, pid, pid, 0, fd_a, fd_b) == 0   # KCMP_FILE


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (bytes, bytearray)):
        return x.hex(":")
    if isinstance(x, (int, float, str, bool)) or x is None:
        return x
    return str(x)
