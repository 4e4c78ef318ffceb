# A kernel path as a C state machine: what the CPU (and the paths that run other
# paths: the interrupt path, the kernel entries) step with a C call instead of a
# generator resume. `_path.pyx` says why and how.
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport PyObject, Py_INCREF, Py_REFCNT, _Py_REFCNT, Py_XDECREF
from kernelsim._engine cimport Engine, try_advance
from kernelsim._pyiter cimport resume


cdef class Path:
    cdef object value           # what the path returned, once `step` has said 0

    # 1: the path spent `cost[0]` seconds of CPU time and goes on after it (a yield);
    # 0: it returned `self.value`. An error is raised at the instant it happens.
    cdef int step(self, double* cost) except -1


# Spending a segment in place (`_path.pyx`, "Spent in place"): what a path's step calls
# instead of yielding, while its CPU walks it.
ctypedef int (*SpendFn)(PyObject* walker, double c) except -1
cdef PyObject* swap_walker(PyObject* walker) noexcept
cdef int set_spender(SpendFn fn) except -1

ctypedef struct Walk:
    PyObject* walker        # the CPU walking a Path now (borrowed: the walk holds it); NULL: none
    SpendFn spend           # its answer by a call (`_cpu._spend`)
    # The CPU's own state for the answer `spent` gives inline, valid while `walker` is
    # `owner` (set by the CPU at a walk's start, cleared at its end; a nested walk of
    # another CPU leaves it to the call). All borrowed: the owner holds them.
    PyObject* owner
    PyObject* engine        # its Engine
    bint* ahead             # &cpu._ahead: the running path owns this instant
    Py_ssize_t* irq_waiting # &cpu._irq.n for a process path (an interrupt path preempts it); else NULL
    double* busy            # the running level's busy time
    long long* advanced     # &cpu.segments_advanced
    bint refused            # the last ask was told to yield: the CPU need not ask the engine again

# The one walk state (a module variable of _path: every cimporter reads it through a pointer).
cdef Walk walk


cdef inline int spent(double c) except -1:
    """1 if the CPU walking this path has spent `c` seconds of it in place (go on now);
    0 if the path is to yield `c` (no walk, or something may happen before its end).

    Inline: 14 asks per DP/21140 round trip were three calls across two modules
    (`spent` -> `_cpu._spend` -> `_cpu._over`) for a test of a few fields. The CPU's
    common case is tested here, on the fields `walk` points at, and is the same test as
    `_cpu._over` (the same accounting); anything else asks the CPU (`walk.spend`)."""
    cdef Engine e
    if walk.walker == NULL:
        return 0
    if walk.walker != walk.owner or c <= 0.0:
        return walk.spend(walk.walker, c)
    if walk.ahead[0] and (walk.irq_waiting == NULL or walk.irq_waiting[0] == 0):
        e = <Engine> walk.engine
        if try_advance(e, e.now + c):
            walk.busy[0] += c
            walk.advanced[0] += 1
            return 1
    walk.refused = True
    return 0


cdef class RxHandler:
    # A protocol's receive hand-off (`NetDevice.add_protocol`) as a C call: see _path.pyx.
    cdef int rx(self, object dev, Py_ssize_t addr, Py_ssize_t length, double* cost,
                PyObject** cont) except -1


cdef inline int step_any(object path, double* cost, PyObject** res) except -1:
    """Step `path`: a Path by its C call, anything else (a generator) by a resume.

    1: it yielded `cost[0]`; 0: it returned, a new reference to its value in `res[0]`.
    """
    cdef int r
    cdef object v
    if isinstance(path, Path):
        r = (<Path> path).step(cost)
        if r == 0:
            v = (<Path> path).value
            (<Path> path).value = None
            Py_INCREF(v)
            res[0] = <PyObject*> v
        return r
    # A generator is not a pass-through of the C paths it runs: none of them spends in
    # its stead (`spent`).
    cdef PyObject* walker = swap_walker(NULL)
    r = resume(path, res)
    swap_walker(walker)
    if r == 1:
        v = <object> res[0]
        Py_XDECREF(res[0])
        res[0] = NULL
        cost[0] = <double> v
    return r


cdef inline object reuse(list pool, type cls):
    """A spare instance of `cls` from `pool` -- one that nothing but the pool holds any
    more, its call over -- or a new one, kept in the pool while it has room (None marks a
    free place). The caller sets every field: a spare holds what its last use left.

    The per-call objects of a modeled call (paths, completions) are made and dropped
    several times per round trip; a Cython freelist cannot serve them, as their bases
    live in other modules."""
    cdef Py_ssize_t i
    cdef PyObject* p
    cdef object o
    # The scan reads the entries as pointers: a reference taken and dropped per entry
    # looked at cost more than the test itself.
    for i in range(PyList_GET_SIZE(pool)):
        p = PyList_GET_ITEM(pool, i)
        if p == <PyObject*> None:
            o = cls.__new__(cls)
            pool[i] = o
            return o
        if _Py_REFCNT(p) == 1:                  # the pool's reference alone
            return <object> p
    return cls.__new__(cls)
