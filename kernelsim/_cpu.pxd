cimport cython
from cpython.ref cimport PyObject
from kernelsim._engine cimport Engine, EventTarget
from kernelsim._path cimport Path
from kernelsim._waits cimport Waiter


cdef class Completion(Waiter):
    # A path's `on_done` as a C call (the trio binding's completions are these): the CPU
    # calls `complete` instead of the Python call ``on_done(value, exc)``.
    cdef int complete(self, object value, object exc) except -1


@cython.final
cdef class _Job:
    # One submitted path. Jobs are links of their level's FIFO and, once finished, of the
    # CPU's list of spare jobs: no object is made and no list grows per path.
    cdef object gen
    cdef Path path             # gen, when it is a C state machine; else None
    cdef object on_done
    cdef double remaining
    cdef int level
    cdef _Job next

@cython.final
cdef class _JobQueue:
    # One level's FIFO of jobs: a chain from head to tail.
    cdef _Job head, tail
    cdef Py_ssize_t n          # its jobs: what `_path.spent` tests of the interrupt FIFO (`walk`)
    cdef void push(self, _Job job) noexcept
    cdef void push_first(self, _Job job) noexcept
    cdef void unlink(self, _Job job) noexcept

cdef class Cpu(EventTarget):
    cdef Engine engine
    cdef readonly bint modeled
    cdef _JobQueue _irq, _proc     # the FIFO of each level (interrupt paths, process paths)
    cdef _Job _spare           # finished jobs, for reuse (a chain)
    cdef _Job _running
    cdef double _seg_end
    cdef double _seg_start
    cdef long long _ev
    cdef bint _in_real_run
    cdef bint _ahead           # the running path owns this instant: it may advance time
    cdef readonly double busy_irq_s
    cdef readonly double busy_proc_s
    cdef readonly long long jobs_irq
    cdef readonly long long jobs_proc
    cdef readonly long long preemptions
    cdef readonly long long segments_advanced

    cpdef submit(self, int level, object gen, object on_done, bint last=*)
    cdef int on_event(self, int what, object arg) except -1
    # Final methods (nothing subclasses the CPU): direct calls, open to gcc's inlining,
    # not calls through the type's table. Their value is only ever None: an int, not an
    # object to count and drop per call.
    @cython.final
    cdef _Job _head(self)
    @cython.final
    cdef int _dispatch(self) except -1
    @cython.final
    cdef int _advance(self, _Job job) except -1
    @cython.final
    cdef int _start_segment(self, _Job job, double cost) except -1
    @cython.final
    cdef int _finish(self, _Job job, object value, object exc) except -1
    @cython.final
    cdef int _run_real(self) except -1
