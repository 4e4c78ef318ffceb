# cython: language_level=3, boundscheck=False, wraparound=False
"""The host CPU of a simulated node.

Kernel and library code is written as *paths*: generator functions that do their work
in plain Python and `yield` the CPU time (seconds) that work takes on the modeled
machine. Effects placed after a `yield` happen when that time has been spent::

    def xmit(...):
        yield cost.callgate          # entering the kernel
        build_frame(...)
        yield cost.build + cost.copy(n)
        nic.csr_write(1, 0)          # poll demand: the NIC sees it now

The CPU runs one path at a time at two levels. Interrupt paths (level 0) preempt
process paths (level 1): a process path's remaining time is pushed back by the time
the interrupt paths take, as on a uniprocessor. Paths of one level run FIFO.

A segment is normally one engine event. When the path's next segment can end before
anything else in the model happens -- no event is due first, no one outside the engine
is about to look -- the CPU moves time itself (`Engine.advance`) and runs on: the same
effects at the same modeled instants, without an event and a heap round trip. Only
the code that owns the instant may do that: the CPU's own segment event, or a caller
that says it does nothing more before the engine runs (``submit(..., last=True)``).
A path's completion hands the instant back (its `on_done` may do anything).

In real time the same paths run straight through (their yields are ignored: the host
spends the time itself). A path started while another runs -- an interrupt raised by
a device inside a system call -- waits until the running one returns, as if the
kernel held interrupts off for the length of a path.
"""
cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._engine cimport Engine, EventTarget, try_advance
from kernelsim._path cimport Path, SpendFn, Walk, set_spender, swap_walker, walk
from kernelsim._waits cimport Waiter

from kernelsim._pyiter cimport resume as _send, take_raised


cdef int IRQ_LEVEL = 0
cdef int PROC_LEVEL = 1
LEVEL_IRQ = 0
LEVEL_PROC = 1


cdef class Completion(Waiter):
    cdef int complete(self, object value, object exc) except -1:
        raise NotImplementedError

    def __call__(self, value=None, exc=None):
        self.complete(value, exc)


cdef class _Job:
    pass


cdef class _JobQueue:
    cdef void push(self, _Job job) noexcept:
        if self.tail is None:
            self.head = job
        else:
            self.tail.next = job
        self.tail = job
        self.n += 1

    cdef void push_first(self, _Job job) noexcept:
        job.next = self.head
        self.head = job
        if self.tail is None:
            self.tail = job
        self.n += 1

    cdef void unlink(self, _Job job) noexcept:
        """Take `job` out (the head, but after a misuse anywhere in the chain)."""
        cdef _Job prev
        if self.head is job:
            self.head = job.next
        else:
            prev = self.head
            while prev.next is not job:
                prev = prev.next
            prev.next = job.next
            if self.tail is job:
                self.tail = prev
        if self.head is None:
            self.tail = None
        self.n -= 1


cdef class Cpu(EventTarget):
    def __cinit__(self, Engine engine, bint modeled):
        self.engine = engine
        self.modeled = modeled
        self._irq = _JobQueue.__new__(_JobQueue)
        self._proc = _JobQueue.__new__(_JobQueue)
        self._running = None
        self._ev = -1
        self._in_real_run = False
        self._ahead = False

    def __dealloc__(self):
        # `walk` keeps this CPU's field addresses between its walks (`_walk_start`): another
        # CPU made at the same address must not find them.
        if walk.owner == <PyObject*> self:
            walk.owner = NULL

    cpdef submit(self, int level, object gen, object on_done, bint last=False):
        """Run path `gen` at `level`; call `on_done(value, exc)` when it returns or raises.

        ``last=True``: the caller does nothing more at this instant before it runs the
        engine (inside a window it opened), so the path may advance time itself.
        """
        cdef _Job job = self._spare
        cdef _Job cur
        if level != IRQ_LEVEL and level != PROC_LEVEL:
            raise ValueError(f"no CPU level {level}")
        if job is None:
            job = _Job.__new__(_Job)
        else:
            self._spare = job.next
        job.gen = gen
        # Two assignments, not one of a conditional expression: that one is an untyped
        # object, tested again against `Path` (its type's bases walked) per job.
        if isinstance(gen, Path):
            job.path = <Path> gen
        else:
            job.path = None
        job.on_done = on_done
        job.remaining = 0.0
        job.level = level
        job.next = None
        if self.modeled and self._running is None and self._irq.head is None \
                and self._proc.head is None:
            # An idle CPU: the job runs now, at once, and most end inside this call. It
            # joins its FIFO (at the head, where it would be) only if it has to wait.
            if level == IRQ_LEVEL:
                self.jobs_irq += 1
            else:
                self.jobs_proc += 1
            self._running = job
            if last:
                self._ahead = True
                try:
                    _run_first(self, job)
                finally:
                    self._ahead = False
            else:
                _run_first(self, job)
            return
        if level == IRQ_LEVEL:
            self._irq.push(job)
            self.jobs_irq += 1
        else:
            self._proc.push(job)
            self.jobs_proc += 1
        if not self.modeled:
            if not self._in_real_run:
                self._run_real()
            return
        cur = self._running
        if cur is not None and level == IRQ_LEVEL and cur.level == PROC_LEVEL and self._ev >= 0:
            # Preempt: the process path keeps what it had left of its segment.
            self.engine.cancel(self._ev)
            self._ev = -1
            cur.remaining = self._seg_end - self.engine.now
            self.busy_proc_s += self.engine.now - self._seg_start
            self._running = None
            self.preemptions += 1
        if last and self._running is None:
            self._ahead = True
            try:
                self._dispatch()
            finally:
                self._ahead = False
        else:
            self._dispatch()

    cdef inline _Job _head(self):
        """The path to run next: the first interrupt path, else the first process path."""
        return self._irq.head if self._irq.head is not None else self._proc.head

    cdef int _run_real(self) except -1:
        cdef _Job job
        self._in_real_run = True
        try:
            while True:
                job = self._head()
                if job is None:
                    break
                self._advance(job)
        finally:
            self._in_real_run = False
        return 0

    cdef int _dispatch(self) except -1:
        cdef _Job job
        while self._running is None:
            job = self._head()
            if job is None:
                return 0
            self._running = job
            if job.remaining > 0.0:
                self._start_segment(job, job.remaining)
            else:
                self._advance(job)
        return 0

    cdef int _advance(self, _Job job) except -1:
        """Run the path's Python code up to the next segment it waits for (or its end)."""
        cdef PyObject* res = NULL
        cdef double c
        # The paths a C path runs may spend their segments in place (`_path.spent`).
        cdef PyObject* walker = _walk_start(self, job)
        cdef int r = _walk_unchecked(self, job, &c, &res)
        swap_walker(walker)
        if r == -1:
            exc = take_raised()
            if not isinstance(exc, Exception):
                raise exc               # a cancellation, an interrupt: not the path's error
            self._finish(job, None, exc)
        elif r == 0:
            out = <object> res
            Py_XDECREF(res)
            self._finish(job, out, None)
        else:
            self._start_segment(job, c)
        return 0

    cdef int _start_segment(self, _Job job, double cost) except -1:
        if job.level == PROC_LEVEL and self._irq.head is not None:
            # An interrupt arrived while this path ran its Python code: it goes first.
            job.remaining = cost
            self._running = None
            return self._dispatch()
        job.remaining = cost
        self._seg_start = self.engine.now
        self._seg_end = self.engine.now + cost
        self._ev = self.engine.post(self._seg_end, self, 0, job)
        return 0

    cdef int on_event(self, int what, object arg) except -1:
        """The running segment has ended: the path goes on, owning this instant."""
        cdef _Job job = <_Job> arg
        self._ev = -1
        if job.level == IRQ_LEVEL:
            self.busy_irq_s += self.engine.now - self._seg_start
        else:
            self.busy_proc_s += self.engine.now - self._seg_start
        job.remaining = 0.0
        self._ahead = True
        try:
            self._advance(job)
        finally:
            self._ahead = False
        return 0

    cdef int _finish(self, _Job job, object value, object exc) except -1:
        cdef bint ahead = self._ahead
        (self._irq if job.level == IRQ_LEVEL else self._proc).unlink(job)
        if self._running is job:
            self._running = None
        _end(self, job, value, exc)
        if self.modeled:
            # The next path starts as the last thing of whoever owned this instant: it may
            # go on ahead as this one could (what `on_done` did that someone outside must
            # see first -- a wake, an event -- the engine's advance refuses to pass).
            self._ahead = ahead
            self._dispatch()
        return 0

    def stats(self):
        return {
            "busy_irq_us": self.busy_irq_s * 1e6,
            "busy_proc_us": self.busy_proc_s * 1e6,
            "paths_irq": self.jobs_irq,
            "paths_proc": self.jobs_proc,
            "preemptions": self.preemptions,
            "segments_advanced": self.segments_advanced,
        }


cdef inline int _end(Cpu cpu, _Job job, object value, object exc) except -1:
    """A job's end, once out of its FIFO (`Cpu._finish`, `_run_first`): spared, as nothing
    refers to it now (its segment event has run or was cancelled), then whoever waits for
    its path told -- free to look at this instant."""
    cdef object on_done = job.on_done
    job.gen = None
    job.path = None
    job.on_done = None
    job.next = cpu._spare
    cpu._spare = job
    cpu._ahead = False
    if isinstance(on_done, Completion):
        (<Completion> on_done).complete(value, exc)
    else:
        on_done(value, exc)
    return 0


cdef int _run_first(Cpu cpu, _Job job) except -1:
    """`Cpu._advance` and, for a path that returns, `Cpu._finish`, for the job `submit`
    runs on an idle CPU, which is in no FIFO yet: a path that must wait (or raises) is put
    at the head of its own and goes on by the ordinary calls."""
    cdef PyObject* res = NULL
    cdef double c
    cdef object out
    cdef bint ahead
    cdef PyObject* walker = _walk_start(cpu, job)
    cdef int r = _walk_unchecked(cpu, job, &c, &res)
    swap_walker(walker)
    if r != 0:
        (cpu._irq if job.level == IRQ_LEVEL else cpu._proc).push_first(job)
        if r == -1:
            exc = take_raised()
            if not isinstance(exc, Exception):
                raise exc
            return cpu._finish(job, None, exc)
        return cpu._start_segment(job, c)
    out = <object> res
    Py_XDECREF(res)
    ahead = cpu._ahead
    cpu._running = None
    _end(cpu, job, out, None)
    cpu._ahead = ahead
    if cpu._irq.head is not None or cpu._proc.head is not None:
        cpu._dispatch()
    return 0


cdef int _walk(Cpu cpu, _Job job, double* cost, PyObject** value) except -1:
    """Step the path through every segment that can end at once (`Engine.advance`).

    1: it yielded `cost[0]`, a segment that needs an event; 0: it returned, a new
    reference to its value in `value[0]`; -1: it raised (`_advance` gives the error to the
    path's waiter)."""
    cdef object out
    cdef int r
    cdef double c
    cdef Path path = job.path
    while True:
        if path is not None:
            # A C state machine: its next instant by a C call, no generator resume.
            walk.refused = False
            r = path.step(&c)
            if r == 0:
                out = path.value
                path.value = None
                Py_INCREF(out)
                value[0] = <PyObject*> out
                return 0
            if not cpu.modeled:
                continue
        else:
            walk.refused = False
            r = _send(job.gen, value)
            if r == 0:
                return 0
            out = <object> value[0]
            Py_XDECREF(value[0])
            value[0] = NULL
            if not cpu.modeled:
                continue
            c = <double> out
        if c > 0.0:
            if walk.refused:
                walk.refused = False    # the path asked already: the engine said no
            elif _over(cpu, job.level, c):
                continue
            cost[0] = c
            return 1


cdef inline bint _over(Cpu cpu, int level, double c) except -1:
    """The running path's next segment, `c` seconds, is over already: nothing can happen
    before it ends (the CPU owns this instant, no interrupt path waits to preempt a process
    path, the engine can advance to its end)."""
    if cpu._ahead and not (level == PROC_LEVEL and cpu._irq.head is not None) \
            and try_advance(cpu.engine, cpu.engine.now + c):
        if level == IRQ_LEVEL:
            cpu.busy_irq_s += c
        else:
            cpu.busy_proc_s += c
        cpu.segments_advanced += 1
        return True
    return False


cdef inline PyObject* _walk_start(Cpu cpu, _Job job) noexcept:
    """Make `cpu` the walker of `job`'s path (none for a generator: `_path.spent`) and, on
    a modeled CPU, point `walk` at the fields `_over` tests for this job, so that the
    common ask is answered inline; the previous walker back.

    The fields stay between walks (`walk.owner`): the next walk of the same CPU at the
    same level (most of them) sets none. A walk of another CPU nested in this one leaves
    them that CPU's: this one's asks go by the call (`_spend`) for the rest of its walk."""
    cdef double* busy
    # `walk` by a local pointer: gcc reloads the module's pointer to it after every store
    # through it otherwise (it may alias anything).
    cdef Walk* w = &walk
    cdef PyObject* prev = w.walker
    if job.path is None:
        w.walker = NULL
        return prev
    w.walker = <PyObject*> cpu
    if cpu.modeled:
        busy = &cpu.busy_irq_s if job.level == IRQ_LEVEL else &cpu.busy_proc_s
        if w.owner != <PyObject*> cpu or w.busy != busy:
            w.owner = <PyObject*> cpu
            w.engine = <PyObject*> cpu.engine
            w.ahead = &cpu._ahead
            w.irq_waiting = &cpu._irq.n if job.level == PROC_LEVEL else NULL
            w.busy = busy
            w.advanced = &cpu.segments_advanced
    return prev


cdef int _spend(Cpu cpu, double c) except -1:
    """`_path.spent`'s call for the CPU walking a path (the asks it does not answer
    inline: a real-time CPU, a segment of no time, a walk whose fields `walk` does not
    hold): what `_walk` would do with the yield of `c` that the path asks about (a
    real-time CPU and a segment of no time go on at once).
    (The walker is borrowed: typed as the argument, it is not counted again.)"""
    if not cpu.modeled or c <= 0.0:
        return 1
    if cpu._running is not None and _over(cpu, cpu._running.level, c):
        return 1
    walk.refused = True
    return 0


set_spender(<SpendFn> _spend)


# `_advance` calls `_walk` through a pointer that does not say it can fail, and looks at
# the -1 itself (`take_raised`): a `try` block would cost more than the walk (seven walks
# per AM transfer).
ctypedef int (*_WalkFn)(Cpu, _Job, double*, PyObject**) noexcept
cdef _WalkFn _walk_unchecked = <_WalkFn> _walk

