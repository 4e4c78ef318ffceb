from kernelsim._waits cimport WaitQueue
from kernelsim._engine cimport Engine
from kernelsim._cpu cimport Cpu


cdef class Costs:
    cdef public double cycle, syscall, vfs, callgate, irq_entry, irq_exit, wakeup
    cdef public double copy_base, copy_rate, mem_miss, pci_read, pci_write

    cpdef double cycles(self, double n)
    cpdef double copy(self, Py_ssize_t nbytes)


cdef class OpenFile:
    cdef public object node
    cdef int _efd
    cdef bint _readable
    cdef bint _unraised                 # readable, its eventfd not raised yet (raise_readable)
    cdef public bint nonblocking
    cdef public WaitQueue readers
    cdef public WaitQueue writers
    cdef dict __dict__                  # subclasses (endpoints) keep their own state

    cdef int set_readable(self, bint ready) except -1


# Raise the eventfd of every file marked readable since the last call: before
# anything outside the kernel's code can look at a descriptor (see OpenFile).
cdef int raise_readable() except -1
# Whether files made readable from now on wait for `raise_readable` (a modeled call's
# kernel part, `kernelsim._trio`) or are raised at once; returns the previous setting.
cdef bint defer_raising(bint on) noexcept


cdef class FdTable:
    cdef dict _files
    # The last fd looked up (that int object) and its file: a DP process asks for one fd
    # three times per message (its call, the blocking test, the entry), a dict lookup each.
    cdef object _last_fd, _last_file

    cpdef object get(self, object fd)
    cdef object peek(self, object fd)


# A process and its node: what every call reads on its way in (the node's engine, CPU,
# mode, costs and tables; the process's fd table and CPU) are C fields; anything else a
# module or a tool keeps on them lives in their __dict__.
cdef class Process:
    cdef public object node, pid, name
    cdef public Cpu cpu
    cdef public FdTable fds
    cdef public bint alive
    cdef dict __dict__


cdef class Node:
    cdef public object nid, name, profile
    cdef public Engine engine
    cdef public bint modeled
    cdef public Costs costs
    cdef public Cpu cpu
    cdef public dict syscalls, callgates, services
    cdef public list real_ports
    cdef dict __dict__


cdef class KernelRoutine:
    # A routine of a kernel table (a system call, a call gate) that makes its path by a C
    # call: what a kernel entry calls per call instead of ``fn(proc, *args)``.
    cdef object start(self, object proc, tuple args)
    # The same for a call of two arguments (DP's per-message calls), with no argument tuple
    # made and freed per call; `before[0]`: CPU time the path must spend first -- a routine
    # that leads its path with it itself sets it to 0 (else the caller puts it in front).
    cdef object start_pair(self, object proc, object a, object b, double* before)


# A kernel entry's path into routine `name`: through `node`'s call gate or its generic
# system-call entry (`Node.callgate_path` / `Node.syscall_path`).
cdef object kernel_entry(Node node, bint gate, object proc, object name, object args, bint entry)
# The same for a call of two arguments, ``fn(proc, a, b)``, with no argument tuple.
cdef object kernel_entry_pair(Node node, bint gate, object proc, object name, object a, object b, bint entry)
# The same through the call gate, for a caller that looked `node.callgates` and
# `node.costs` up once (a node's gate drain: per message).
cdef object callgate_entry(object callgates, Costs costs, object proc, object name, object args)
cdef object callgate_entry_pair(object callgates, Costs costs, object proc, object name, object a, object b)

# `Node.poll_devices` for a caller that holds the node's real ports (the list itself: ports
# come and go in it) and its engine: a node's polling loop, every pass.
cdef Py_ssize_t poll_ports(list ports, Engine engine) except -1
