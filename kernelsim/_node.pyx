# cython: language_level=3, annotation_typing=False
"""A simulated node: one kernel on one machine.

The node owns the machine (CPU, physical memory, interrupt controller, cost model
read from its platform profile) and the kernel's tables (processes and their fd
tables, system calls, call gates, network devices, loaded modules). It knows nothing
of DP: DP, the NIC drivers and the protocols register themselves here when loaded.

Two entries into the kernel, each with its own modeled cost:

* the generic system-call entry (``int 0x80`` on Linux 2.0: full register save,
  dispatch through the system-call table, the checks on the way out), used by
  ``read``/``write``/``close`` and DP's one new system call ``dp_open``;
* the call gate (an x86 ``lcall`` through a gate descriptor straight into a kernel
  routine), used by DP's light-weight messaging calls such as ``dp_write``.

Every message passes through an entry, an open file and its fd table, so those and
the cost table are Cython, and so are the node and its processes (`cdef class`es whose
fields a call reads on its way in are C fields).
"""
from __future__ import annotations

cimport cython

import errno
import os
from collections import deque

from kernelsim._cpu import LEVEL_PROC
from kernelsim._irq import IrqController
from kernelsim._modules import ModuleTable
from kernelsim._physmem import PhysMem
from cpython.ref cimport PyObject, Py_XDECREF
from kernelsim._waits cimport WaitQueue
from kernelsim._engine cimport Engine
from kernelsim.media.backend cimport DevicePort

cdef extern from "sys/eventfd.h":
    ctypedef unsigned long long eventfd_t
    int eventfd_read(int fd, eventfd_t* value) nogil
    int eventfd_write(int fd, eventfd_t value) nogil

__all__ = ["Costs", "Node", "Process", "OpenFile", "PrivateRegion", "WouldBlock"]


class WouldBlock(BlockingIOError):
    """Raised by a path that cannot proceed yet; carries the queue to wait on."""

    def __init__(self, queue: WaitQueue, what: str = "resource temporarily unavailable"):
        super().__init__(errno.EAGAIN, what)
        self.queue = queue


class PrivateRegion:
    """Kernel memory a user process may map -- the modeled default: a private bytearray.

    Every region, whatever allocator made it, has ``buf`` (a writable memoryview for
    the kernel), ``name`` (what a user process opens to map it; None when there is
    nothing to open, as here) and ``release()`` (idempotent; ``buf`` is None after it).
    Memoryviews taken from ``buf`` must be released before ``release()`` is called.
    """

    __slots__ = ("buf", "name")

    def __init__(self, nbytes: int, name_hint: str = ""):
        self.buf = memoryview(bytearray(nbytes))
        self.name = None

    def release(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None


cdef class Costs:
    """The profile's per-operation costs, in seconds, precomputed for the hot paths."""

    def __init__(self, p):
        self.cycle = 1.0 / p["cpu.hz"]
        self.syscall = p["syscall.entry_s"]
        self.vfs = p["syscall.vfs_s"]
        self.callgate = p["callgate.entry_s"]
        self.irq_entry = p["irq.entry_s"]
        self.irq_exit = p["irq.exit_s"]
        self.wakeup = p["sched.wakeup_s"]
        self.copy_base = p["mem.copy_base_s"]
        self.copy_rate = p["mem.copy_rate_Bps"]
        self.mem_miss = p["mem.miss_s"]
        self.pci_read = p["pci.read_s"]
        self.pci_write = p["pci.write_s"]

    cpdef double cycles(self, double n):
        return n * self.cycle

    cpdef double copy(self, Py_ssize_t nbytes):
        return self.copy_base + nbytes / self.copy_rate


cdef class OpenFile:
    """An open file of a simulated process.

    Each has a real eventfd whose readability follows the file's, so the fd number a
    process is given works with ``select``/``poll`` and trio's ``wait_readable`` in
    both time modes. Subclasses provide paths for read, write and release.

    On a modeled node, within a trio call's kernel part, the eventfd follows the file
    lazily. Only code outside the kernel can look at it -- the program once the call
    returns, trio's I/O wait, another task -- and in a ping-pong the message a delivery
    makes readable is read by the kernel's own read path before any of them runs:
    raising the eventfd at the delivery and lowering it at the read were two system
    calls per message for nobody. So while a call drives the engine
    (`kernelsim._trio`: `defer_raising`) a delivery only marks the file (`_unraised`),
    a read of a file still marked unmarks it, and `raise_readable` raises what is still
    marked wherever control leaves the kernel: the call's return or error, its yield to
    trio, a task it steps (and, as a safety net, the run's `RunnableCounter` before trio
    steps a task and at the run's end). Anywhere else -- real time, a program driving
    the engine itself, `Node.run_now`, the clock's own drive -- a file is raised at once.
    """

    kind = "file"

    def __init__(self, node):
        self.node = node
        self._efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._readable = False
        self.nonblocking = False
        self.readers = WaitQueue(node.engine)
        self.writers = WaitQueue(node.engine)

    def fileno(self) -> int:
        return self._efd

    cdef int set_readable(self, bint ready) except -1:
        cdef eventfd_t count
        if ready == self._readable:
            return 0
        self._readable = ready
        if ready:
            if self._efd >= 0:
                if _deferring:
                    self._unraised = True
                    _mark_unraised(self)
                else:
                    _raise_efd(self._efd)
            self.readers.engine.request_stop()     # a task may wait on the fd itself
        elif self._unraised:
            self._unraised = False                  # never raised: nothing to lower
        elif self._efd >= 0:
            eventfd_read(self._efd, &count)         # EAGAIN when already drained: nothing to undo

    def read_path(self, proc, nbytes):
        raise OSError(errno.EINVAL, f"{self.kind} does not support read")
        yield  # pragma: no cover

    def write_path(self, proc, data):
        raise OSError(errno.EINVAL, f"{self.kind} does not support write")
        yield  # pragma: no cover

    def release(self, proc) -> None:
        """Last close: free what the file holds (no modeled cost beyond close's)."""

    def _close_efd(self) -> None:
        if self._efd >= 0:
            os.close(self._efd)
            self._efd = -1


# Files marked readable since the last raise: the first in a slot of its own (a call
# usually marks one), any others in the list -- no list storage regrown per call.
cdef OpenFile _first_unraised = None
cdef list _unraised = []
cdef bint _deferring = False
cdef long long _raises = 0


cdef inline int _raise_efd(int efd) except -1:
    global _raises
    _raises += 1
    eventfd_write(efd, 1)
    return 0


def readiness_raises() -> int:
    """Open files' eventfds raised so far in this process (statistics: what the lazy
    raise of modeled files saves shows here)."""
    return _raises


cdef bint defer_raising(bint on) noexcept:
    global _deferring
    cdef bint was = _deferring
    _deferring = on
    return was


cdef inline int _mark_unraised(OpenFile f) except -1:
    global _first_unraised
    if _first_unraised is None:
        _first_unraised = f
    else:
        _unraised.append(f)
    return 0


cdef inline int _raise_marked(OpenFile f) except -1:
    if f._unraised:
        f._unraised = False
        if f._efd >= 0:
            _raise_efd(f._efd)
    return 0


cdef int raise_readable() except -1:
    global _first_unraised
    cdef OpenFile f = _first_unraised
    if f is None and not _unraised:
        return 0
    _first_unraised = None
    if f is not None:
        _raise_marked(f)
    if _unraised:
        for f in _unraised:
            _raise_marked(f)
        del _unraised[:]
    return 0


cdef class FdTable:
    def __cinit__(self):
        self._files = {}

    def install(self, f) -> int:
        fd = f.fileno()
        self._last_fd = self._last_file = None
        self._files[fd] = f
        return fd

    cpdef object get(self, object fd):
        if fd is self._last_fd and fd is not None:
            return self._last_file
        f = self._files.get(fd) if type(fd) is int or isinstance(fd, int) else None
        if f is None:
            raise OSError(errno.EBADF, f"bad file descriptor {fd!r}")
        if type(fd) is int:
            self._last_fd, self._last_file = fd, f
        return f

    cdef object peek(self, object fd):
        """The file open on `fd` (an int), or None: `get` without the error, for a caller
        that goes the checking way when this finds nothing."""
        if fd is self._last_fd and fd is not None:
            return self._last_file
        if type(fd) is not int:
            return None
        f = self._files.get(fd)
        if f is not None:
            self._last_fd, self._last_file = fd, f
        return f

    def remove(self, fd: int):
        f = self.get(fd)
        self._last_fd = self._last_file = None
        del self._files[fd]
        return f

    def __iter__(self):
        return iter(list(self._files.items()))

    def __len__(self) -> int:
        return len(self._files)


cdef class Process:
    def __init__(self, node: "Node", pid: int, name: str, cpu: Cpu | None = None):
        self.node = node
        self.pid = pid
        self.name = name
        self.cpu = cpu if cpu is not None else node.cpu     # the processor it runs on
        self.fds = FdTable()
        self.alive = True

    def exit(self) -> None:
        """Close every fd the process still holds (as the kernel does at exit)."""
        for fd, _f in self.fds:
            self.node.run_now(self.node.syscall_path(self, "close", (fd,)))
        self.alive = False

    def __repr__(self):
        return f"<Process {self.pid} {self.name!r} on node {self.node.nid}>"


from kernelsim._path cimport Path, reuse, step_any
from kernelsim._pyiter cimport take_raised
from kernelsim._dictver cimport dict_version


# The routines entries found last, and where: each its table (by address) at that table's
# version, under that name (`kernelsim._dictver`). A process's per-message call finds the
# same routine in the same unchanged table every time; two entries, since a ping-pong's
# two nodes (two tables) call in turn and would evict each other's one. A routine is
# borrowed: the table, unchanged, holds it; a table freed and another made at its address
# has another version. The names are held (compared by identity).
cdef PyObject* _found_table0 = NULL
cdef unsigned long long _found_version0 = 0
cdef object _found_name0 = None
cdef PyObject* _found_fn0 = NULL
cdef PyObject* _found_table1 = NULL
cdef unsigned long long _found_version1 = 0
cdef object _found_name1 = None
cdef PyObject* _found_fn1 = NULL


cdef inline object _routine(dict table, object name):
    """``table.get(name)``."""
    global _found_table0, _found_version0, _found_name0, _found_fn0
    global _found_table1, _found_version1, _found_name1, _found_fn1
    cdef unsigned long long v = dict_version(table)
    if v != 0:
        if v == _found_version0 and <PyObject*> table == _found_table0 and name is _found_name0:
            return <object> _found_fn0
        if v == _found_version1 and <PyObject*> table == _found_table1 and name is _found_name1:
            return <object> _found_fn1
    fn = table.get(name)
    if fn is not None and v != 0:
        # The newest in entry 0, the one it replaces in entry 1 (the older one goes).
        _found_table1, _found_version1, _found_name1, _found_fn1 = \
            _found_table0, _found_version0, _found_name0, _found_fn0
        _found_table0 = <PyObject*> table
        _found_version0 = v
        _found_name0 = name
        _found_fn0 = <PyObject*> fn
    return fn


cdef class KernelRoutine:
    """A kernel routine reached by a C call from the kernel entry (`_Entry`): a table
    (`Node.register_callgate`, `register_syscall`) takes one as it takes any callable
    ``fn(proc, *args) -> path``; the per-message routines (DP's call-gate write) are these."""

    cdef object start(self, object proc, tuple args):
        raise NotImplementedError

    cdef object start_pair(self, object proc, object a, object b, double* before):
        return self.start(proc, (a, b))

    def __call__(self, proc, *args):
        return self.start(proc, args)


cdef class _Entry(Path):
    """A kernel entry's path as a C iterator: the entry cost, then the routine's own path.

    What it replaces, for reading (a generator, one Python frame more on every resume
    of every call's path)::

        if entry:
            yield entry_cost
        fn = table.get(name)
        if fn is None:
            raise OSError(errno.ENOSYS, f"no {what} {name}")
        return (yield from fn(proc, *args))

    The routine is looked up and called only once the entry cost has been spent, as
    in the generator: its checks (EBADF, EINVAL...) happen at that modeled instant.
    """
    cdef dict table
    cdef str what
    cdef object proc, name, cur, args
    cdef object a, b            # the two arguments of a call made without a tuple (`pair`)
    cdef bint pair
    cdef double cost
    cdef int state          # 0: entry cost owed, 1: routine not called yet, 2: running it
    # Run by a real-time CPU, which spends no modeled time: it steps a path again at once
    # after each yield (`Cpu._advance`), so the entry goes on itself -- the same steps in
    # the same order, without a return to the CPU per yield (a gate entry, per message).
    cdef bint real

    cdef int step(self, double* cost) except -1:
        cdef PyObject* res = NULL
        cdef int r
        if self.state == 0:
            self.state = 1
            cost[0] = self.cost
            if not self.real:
                return 1
        if self.state == 1:
            fn = _routine(self.table, self.name)
            if fn is None:
                self.state = 3
                msg = f"no {self.what} {self.name}"
                self.table = self.name = self.proc = self.args = self.a = self.b = None
                raise OSError(errno.ENOSYS, msg)
            # (The routine's start and the steps below are called through pointers that do
            # not say they can fail, the error taken here: a `try` block costs more.)
            if _entry_start_unchecked(self, fn) == -1:
                exc = take_raised()
                self.table = self.name = self.proc = self.args = self.a = self.b = None
                self.state = 3          # over, as the generator it replaces would be
                raise exc
            self.state = 2
            self.proc = None
            self.args = self.a = self.b = None
        elif self.state != 2:
            self.value = None
            return 0
        while True:
            r = _entry_step_unchecked(self, cost, &res)
            if r == -1:
                exc = take_raised()
                self.cur = self.table = self.name = None
                self.state = 3
                raise exc
            if r == 0:
                break
            if not self.real:
                return 1
        out = <object> res
        Py_XDECREF(res)
        self.cur = self.table = self.name = None    # a spare entry holds nothing (`_entry`)
        self.state = 3
        self.value = out
        return 0


cdef int _entry_start(_Entry e, object fn) except -1:
    cdef double before = 0.0
    if e.pair:
        if isinstance(fn, KernelRoutine):
            e.cur = (<KernelRoutine> fn).start_pair(e.proc, e.a, e.b, &before)
        else:
            e.cur = fn(e.proc, e.a, e.b)
    elif isinstance(fn, KernelRoutine) and type(e.args) is tuple:
        e.cur = (<KernelRoutine> fn).start(e.proc, <tuple> e.args)
    else:
        e.cur = fn(e.proc, *e.args)
    return 0


cdef int _entry_step(_Entry e, double* cost, PyObject** res) except -1:
    return step_any(e.cur, cost, res)


ctypedef int (*_EntryStartFn)(_Entry, object) noexcept
ctypedef int (*_EntryStepFn)(_Entry, double*, PyObject**) noexcept
cdef _EntryStartFn _entry_start_unchecked = <_EntryStartFn> _entry_start
cdef _EntryStepFn _entry_step_unchecked = <_EntryStepFn> _entry_step


cdef object kernel_entry(Node node, bint gate, object proc, object name, object args, bint entry):
    if gate:
        return _entry(node.callgates, "call gate", node.costs.callgate, proc, name, args, entry)
    return _entry(node.syscalls, "system call", node.costs.syscall, proc, name, args, entry)


cdef object kernel_entry_pair(Node node, bint gate, object proc, object name, object a, object b, bint entry):
    cdef _Entry e
    if gate:
        e = <_Entry> _entry(node.callgates, "call gate", node.costs.callgate, proc, name, None, entry)
    else:
        e = <_Entry> _entry(node.syscalls, "system call", node.costs.syscall, proc, name, None, entry)
    e.pair = True
    e.a = a
    e.b = b
    return e


cdef Py_ssize_t poll_ports(list ports, Engine engine) except -1:
    cdef Py_ssize_t n = 0
    for port in ports:
        if type(port) is DevicePort:            # by C: this is once per node pass
            n += (<DevicePort> port).poll()
        else:
            n += port.poll()
    if n:
        engine.run()
    return n


cdef object callgate_entry(object callgates, Costs costs, object proc, object name, object args):
    cdef _Entry e = <_Entry> _entry(callgates, "call gate", costs.callgate, proc, name, args, True)
    # A process's paths run on its CPU (real time, or modeled, as all of its node's CPUs).
    e.real = isinstance(proc, Process) and (<Process> proc).cpu is not None \
        and not (<Process> proc).cpu.modeled
    return e


cdef object callgate_entry_pair(object callgates, Costs costs, object proc, object name, object a, object b):
    cdef _Entry e = <_Entry> callgate_entry(callgates, costs, proc, name, None)
    e.pair = True
    e.a = a
    e.b = b
    return e


cdef list _entries = [None] * 4


cdef inline object _entry(object table, str what, double cost, object proc, object name, object args, bint entry):
    cdef _Entry e = <_Entry> reuse(_entries, _Entry)
    e.value = e.cur = None
    e.real = False
    e.table = table
    e.what = what
    e.cost = cost
    e.proc = proc
    e.name = name
    e.args = args
    e.a = e.b = None
    e.pair = False
    e.state = 0 if entry else 1
    return e


cdef class Node:
    def __init__(self, nid: int, profile, engine, *, modeled: bool = True, name: str | None = None,
                 shared_allocator=None):
        self.nid = nid
        self.name = name or f"node{nid}"
        self.profile = profile
        self.engine = engine
        self.modeled = modeled
        self.costs = Costs(profile)
        self.cpu = Cpu(engine, modeled)
        # A multiprocessor (profile key cpu.count) has more CPUs: interrupts and the
        # kernel's own paths run on the first; each process is placed on one of them.
        self.cpus = [self.cpu] + [Cpu(engine, modeled) for _ in range(int(profile.get("cpu.count", 1)) - 1)]
        self.mem = PhysMem(int(profile.get("mem.bytes", 8 << 20)))
        self.shared_allocator = shared_allocator or PrivateRegion
        self._shared: list = []         # regions handed out (released ones pruned lazily)
        self.irq = IrqController(self.cpu, self.costs)
        self.modules = ModuleTable(self)
        self.processes: list[Process] = []
        self.syscalls: dict = {"read": self._sys_read, "write": self._sys_write, "close": self._sys_close}
        self.callgates: dict = {}
        self.netdevs: dict = {}
        self.services: dict = {}
        self.real_ports: list = []
        self.pci_devices: list = []     # the machine's devices, bound by driver modules
        self.hosts: dict = {}           # cluster description: nid -> {link kind: address}
        self._next_pid = 1
        self._kmsg: deque = deque(maxlen=1024)  # the kernel's message ring: log() / dmesg()
        self._boot = engine.now

    # -- the kernel log ------------------------------------------------------------------

    def log(self, message: str) -> None:
        """printk: one line in the kernel's message ring, stamped with the node's time."""
        self._kmsg.append((self.engine.now - self._boot, message))

    def dmesg(self) -> list[str]:
        """The kernel's message ring, oldest first, as ``dmesg`` prints it."""
        return [f"[{t:12.6f}] {m}" for t, m in self._kmsg]

    # -- memory ------------------------------------------------------------------------

    def alloc_shared(self, nbytes: int, name_hint: str):
        """Kernel memory that a user process may map (read-only), outside physical memory.

        Returns a region with ``buf`` (a writable memoryview for the kernel), ``name``
        (what a user process opens to map it, or None) and ``release()``. The node's
        ``shared_allocator`` -- a callable ``(nbytes, name_hint) -> region`` -- makes it:
        by default `PrivateRegion`, a private bytearray (modeled time: the "process" is
        in this interpreter and reads the kernel's bytes through a read-only view). A
        real node installs one whose regions are POSIX shared-memory segments, named
        after `name_hint`, that the owning process opens read-only. DP's Token Buffer
        Pools live in such regions. EINVAL for a size that is not a positive int.
        """
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes <= 0:
            raise OSError(errno.EINVAL, f"a shared region needs a positive size, not {nbytes!r}")
        region = self.shared_allocator(nbytes, name_hint)
        self._shared = [r for r in self._shared if r.buf is not None]
        self._shared.append(region)
        return region

    def shared_in_use(self) -> int:
        """Bytes of shared regions not yet released."""
        return sum(r.buf.nbytes for r in self._shared if r.buf is not None)

    # -- processes ---------------------------------------------------------------------

    def spawn(self, name: str = "proc", cpu: int | None = None) -> Process:
        """A new process, on CPU `cpu` -- by default the next one in turn (on a
        uniprocessor, the only one)."""
        if cpu is None:
            cpu = (self._next_pid - 1) % len(self.cpus)
        if not isinstance(cpu, int) or not 0 <= cpu < len(self.cpus):
            raise OSError(errno.EINVAL, f"node {self.nid} has no CPU {cpu!r} ({len(self.cpus)} CPUs)")
        p = Process(self, self._next_pid, name, self.cpus[cpu])
        self._next_pid += 1
        self.processes.append(p)
        return p

    # -- registration (modules call these from init; undone in reverse on unload) --------

    def register_syscall(self, name: str, fn) -> None:
        self._register(self.syscalls, name, fn, "system call")

    def register_callgate(self, name: str, fn) -> None:
        self._register(self.callgates, name, fn, "call gate")

    def register_netdev(self, name: str, dev) -> None:
        self._register(self.netdevs, name, dev, "network device")

    def register_service(self, name: str, obj) -> None:
        self._register(self.services, name, obj, "service")

    def bind_netdevs(self, device_type, prefix: str, make, what: str) -> list:
        """A driver's probe: each unbound `device_type` card becomes a network device.

        ``make(card, name)`` builds the driver's device (``prefix0``, ``prefix1``, ...);
        it is opened (if it has ``open``), bound to its card and registered. Everything
        is undone in reverse on unload, or on a failure part-way. ENODEV if no card.
        """
        found = [d for d in self.pci_devices if isinstance(d, device_type) and d.driver is None]
        if not found:
            raise OSError(errno.ENODEV, f"no {what} on node {self.nid}'s bus")
        devs = []
        for card in found:
            name = f"{prefix}{sum(1 for n in self.netdevs if n.startswith(prefix))}"
            nd = make(card, name)
            if hasattr(nd, "open"):
                nd.open()                       # unwinds its own allocations if it fails
            self.modules.on_unload(nd.stop)
            card.driver = nd
            self.modules.on_unload(lambda card=card: setattr(card, "driver", None))
            self.register_netdev(name, nd)
            devs.append(nd)
        return devs

    def _register(self, table: dict, name: str, obj, what: str) -> None:
        if name in table:
            raise OSError(errno.EEXIST, f"{what} {name} already registered")
        table[name] = obj
        self.modules.on_unload(lambda: table.pop(name, None))

    # -- kernel entries --------------------------------------------------------------------

    def syscall_path(self, proc, name, args: tuple, bint entry=True):
        """The generic system-call entry: full entry/exit cost, table dispatch.

        ``entry=False`` continues a call that slept in the kernel (no second entry).
        """
        return kernel_entry(self, False, proc, name, args, entry)

    def callgate_path(self, proc, name, args: tuple, bint entry=True):
        """The call-gate entry: a far call into one kernel routine."""
        return kernel_entry(self, True, proc, name, args, entry)

    def _sys_read(self, proc, fd, nbytes):
        yield (<Costs> self.costs).vfs
        return (yield from (<FdTable> proc.fds).get(fd).read_path(proc, nbytes))

    def _sys_write(self, proc, fd, data):
        yield (<Costs> self.costs).vfs
        return (yield from (<FdTable> proc.fds).get(fd).write_path(proc, data))

    def _sys_close(self, proc, fd):
        yield self.costs.vfs
        f = proc.fds.remove(fd)
        f.release(proc)
        f._close_efd()
        return 0

    # -- running paths outside trio ----------------------------------------------------

    def run_now(self, path, cpu: Cpu | None = None):
        """Run a process path to completion, driving the engine (a blocking call).

        In modeled time the engine runs until the path returns; EDEADLK if it never
        can (no event left). In real time the path runs straight through. `cpu`: the
        processor it runs on (the process's own; default the first).
        """
        box = []
        (cpu or self.cpu).submit(LEVEL_PROC, path, lambda v, e: box.append((v, e)))
        while not box:
            if not self.engine.step():
                raise OSError(errno.EDEADLK, "no pending event can complete this call")
        value, exc = box[0]
        if not self.modeled and not isinstance(exc, WouldBlock):
            self.engine.run()           # a path that must wait leaves its device work to the wait
        if exc is not None:
            raise exc
        return value

    def poll_devices(self) -> int:
        """Real time: let every device take what its transport has; return frames taken."""
        return poll_ports(self.real_ports, self.engine)

    def stats(self) -> dict:
        out = {"cpu": self.cpu.stats(), "irq": self.irq.stats(), "mem_in_use_bytes": self.mem.in_use(),
               "shared_in_use_bytes": self.shared_in_use()}
        for i, cpu in enumerate(self.cpus[1:], 1):
            out[f"cpu{i}"] = cpu.stats()
        for name, dev in self.netdevs.items():
            out[name] = dev.stats()
        for i, port in enumerate(self.real_ports):
            out[f"real_port{i}"] = port.stats()
        for name, svc in self.services.items():
            if hasattr(svc, "stats"):
                out[name] = svc.stats()
        return out
