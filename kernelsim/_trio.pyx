# cython: language_level=3
"""Running kernel paths on behalf of a trio task -- the binding every user half uses.

A process's call into the kernel (or its user-level library work) is a *path* run on
its node's CPU. `run_path` submits one and returns its value to the calling task;
`wait_on` blocks the task until a wait queue is woken; `run_blocking` is the loop every
blocking call is: run the path, and when it says WouldBlock, wait on the queue it
names and run the continuation. Each has a blocking twin for scripts without trio.

Modeled time: the task parks until the path returns (the engine clock moves time) --
unless it is the only task trio would run now, in which case it runs the engine itself
(see `_drive_inline`). Real time: the path runs straight through; a wait polls the
node's devices for a bounded time, then blocks on their file descriptors (the LCI
paper's polling watchdog, LCI-C09).

Every DP call of a modeled ping-pong passes through here, so it is Cython: one small
completion object per call instead of closures, the clock's runnable count read
directly, and the engine driven in a C loop.
"""

cimport cython
from libc.math cimport INFINITY
from cpython.dict cimport PyDict_Check, PyDict_Next, PyDict_SetItem
from kernelsim._dictver cimport dict_version
from cpython.list cimport PyList_GET_SIZE
from cpython.pythread cimport PyThread_get_thread_ident
cdef extern from "Python.h":
    Py_ssize_t PyDict_GET_SIZE(dict d)
    Py_ssize_t Py_SIZE(object o)        # a deque's length (trio's run queue)
from cpython.object cimport PyObject_GenericSetAttr, PyTypeObject
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from kernelsim._path cimport reuse
from kernelsim._pyiter cimport PyIter_Send, take_raised
from cpython.exc cimport PyErr_Occurred
import collections
import contextvars
import errno
import hashlib
from heapq import heappop
import linecache
from types import CodeType as _CodeType
import math
import os
import select
import time

import outcome
import trio
from trio._core import _run as _trio_run
from trio._core import _traps as _trio_traps
from trio._core import _entry_queue as _trio_entry_queue

from kernelsim._clock import EngineClock
from kernelsim._clock cimport RunnableCounter, join_run, live_counter, own_counter
from kernelsim._cpu cimport Completion, Cpu
from kernelsim._engine cimport Engine, wall_now
from kernelsim._waits cimport Pool, Waiter, WaitQueue
from kernelsim._node cimport (KernelRoutine, Node, OpenFile, Process, kernel_entry, kernel_entry_pair, poll_ports,
                              defer_raising, raise_readable)

cdef extern from "<poll.h>" nogil:
    struct pollfd:
        int fd
        short events
        short revents
    int poll(pollfd* fds, unsigned long nfds, int timeout)
    enum: POLLIN

from libc.errno cimport errno as c_errno, EINTR
from libc.math cimport ceil
from cpython.exc cimport PyErr_CheckSignals

cdef extern from "sched.h":
    int sched_yield() nogil
from kernelsim._node import WouldBlock

cdef int LEVEL_PROC = 1
_reschedule = trio.lowlevel.reschedule
_current_task = trio.lowlevel.current_task
_current_clock = trio.lowlevel.current_clock
# trio's per-thread run context: the running task and runner, read directly on the hot
# path (trio's public accessors add a Python call -- and for the clock a locals() dict --
# to every DP call); the public calls remain the fallback for another trio's internals.
_GRC = _trio_run.GLOBAL_RUN_CONTEXT


cdef object _task():
    cdef RunnableCounter counter = own_counter()
    if counter is not None and counter.stepping is not None:
        return counter.stepping         # (trio's thread-local, kept by the counter's step hook)
    try:
        return _GRC.task
    except AttributeError:
        return _current_task()
_checkpoint = trio.lowlevel.checkpoint
_shielded_checkpoint = trio.lowlevel.cancel_shielded_checkpoint
_checkpoint_if_cancelled = trio.lowlevel.checkpoint_if_cancelled
_ABORT_FAILED = trio.lowlevel.Abort.FAILED
_ABORT_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


# -- parking and waking a task, trio's two primitives without their Python frames ---------
#
# Each modeled round trip parks and wakes two tasks. trio's `reschedule` is a Python
# method that makes the wake-up's outcome (an attrs class whose generated __init__ is
# Python too) and then dispatches the `task_scheduled` hook through its instrument table
# to our own counter; `wait_task_rescheduled` is a coroutine around a generator, awaited
# with another attrs message. Together they were ~10k instructions per wake, more than
# the kernel path that caused it. `_wake` and `_park` do the same steps in C -- but only
# for a trio (and outcome) whose functions are, to the character, the ones replicated
# here (their sources' digests are checked at import); any other gets the public calls.

def _source_digest(fn):
    """The digest of `fn`'s source: its lines from the first (its decorators') to the last
    any of its statements reaches, as the code object records them -- every line whose
    change changes what it does. (Not `inspect.getsource`, which tokenizes the block to
    find its end: ~15 ms of every process's start, most of it `unrolled_run`'s.)"""
    try:
        code = fn.__code__
        lines = linecache.getlines(code.co_filename)
        first, last = code.co_firstlineno, _last_line(code)
    except (AttributeError, TypeError):
        return None
    if not lines or last < first or last > len(lines):
        return None
    return hashlib.sha256("".join(lines[first - 1:last]).encode()).hexdigest()[:16]


def _last_line(code):
    """The last source line `code`, or a function or class nested in it, reaches."""
    last = max((end for _, end, _, _ in code.co_positions() if end is not None), default=code.co_firstlineno)
    for c in code.co_consts:
        if isinstance(c, _CodeType):
            last = max(last, _last_line(c))
    return last


_Value = outcome.Value
_wait_task_rescheduled = trio.lowlevel.wait_task_rescheduled
_async_yield = getattr(_trio_traps, "_async_yield", None)
_WaitTaskRescheduled = getattr(_trio_traps, "WaitTaskRescheduled", None)
cdef tuple _NO_ARGS = ()


cdef inline object _new(object cls):
    """``cls.__new__(cls)`` as the class's own tp_new, by a C call: on a Python-level class
    Cython looks ``__new__`` up on the type and calls object.__new__ with an argument tuple
    (~350 instructions), once per wake and once per park."""
    return (<PyTypeObject*> <PyObject*> cls).tp_new(<type> cls, <PyObject*> _NO_ARGS, NULL)
# What is replicated, and the digest of the source it replicates (trio 0.35, outcome 1.3).
try:
    _REPLICATED_WAKE = {_trio_run.Runner.reschedule: "d25a5648b6a42879", _Value.__init__: "9616215324e31dd9"}
    _REPLICATED_PARK = {_wait_task_rescheduled: "c6691068007dfa47", _WaitTaskRescheduled.__init__: "5281303e20dd6bd4",
                        _Value.unwrap: "db4601d0345fb3f8", outcome.Outcome._set_unwrapped: "b61ac41048137da2",
                        _async_yield: "6b9cd7444475d9a9"}
except AttributeError:                  # a trio without these internals
    _REPLICATED_WAKE = _REPLICATED_PARK = None


def _matches(replicated) -> bool:
    return replicated is not None and all(_source_digest(fn) == digest for fn, digest in replicated.items())

try:
    _REPLICATED_DEADLINE = {_trio_run.Deadlines.next_deadline: "bd55a5fed21bb616"}
except AttributeError:
    _REPLICATED_DEADLINE = None
try:
    # (EntryQueue's methods: none replaces its run_sync_soon queues, so a counter keeps them,
    # and `_quiet` looks at them on every hand-over.)
    _REPLICATED_STEP = {_trio_run.unrolled_run: "9226ba6956c1ca77",
                        _trio_run.Task._attempt_delivery_of_any_pending_cancel: "16a19fcafc86d89c",
                        _trio_entry_queue.EntryQueue.task: "a103cdf1cec6dc15",
                        _trio_entry_queue.EntryQueue.close: "b3e9a7f2a55f19b5",
                        _trio_entry_queue.EntryQueue.run_sync_soon: "162b61ce686b3a8a"}
except AttributeError:
    _REPLICATED_STEP = None
cdef bint _fast_deadline = _matches(_REPLICATED_DEADLINE)
cdef bint _fast_step = _matches(_REPLICATED_STEP)
cdef bint _fast_wake = _matches(_REPLICATED_WAKE)
cdef bint _fast_park = _matches(_REPLICATED_PARK)


def replicates_trio(on=None) -> bool:
    """Whether parks and wakes take the C replicas, and a modeled wait may step the task it
    woke itself (`_step_woken`) (True), or trio's public calls and run loop do.

    ``replicates_trio(False)`` switches to the public calls and ``replicates_trio(True)``
    back to the replicas where they match this trio (the tests run both ways). Returns
    the setting in force afterwards.
    """
    global _fast_wake, _fast_park, _fast_deadline, _fast_step
    if on is not None:
        _fast_wake = bool(on) and _matches(_REPLICATED_WAKE)
        _fast_park = bool(on) and _matches(_REPLICATED_PARK)
        _fast_deadline = bool(on) and _matches(_REPLICATED_DEADLINE)
        _fast_step = bool(on) and _matches(_REPLICATED_STEP)
    return _fast_wake and _fast_park and _fast_deadline and _fast_step


# -- trio's fields, read and written where their slots are ----------------------------
#
# trio's Task, Runner and CancelStatus and outcome's Value keep their fields in slots
# (attrs' slots=True). Reading one by name looks the name up through the type's MRO and
# calls its member descriptor: ~120 instructions, some fifty times per modeled round trip
# (the wakes, parks and hand-overs of this module). A `_Field` does what the descriptor
# does -- the object pointer at the slot's offset -- once it has checked, at import, that
# the name is a writable object slot of that class and that the class does not intercept
# setattr (Value is frozen: the replicas set its fields as its own methods do, with
# object.__setattr__). An object of any other type, or a trio where the name is not such
# a slot, goes through getattr and setattr.

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char* name
        int type
        Py_ssize_t offset
        int flags
    enum:
        T_OBJECT_EX
        READONLY

cdef extern from "Python.h":
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member


@cython.final
cdef class _Field:
    cdef object cls                 # a class (trio's have their own metaclass)
    cdef str name
    cdef Py_ssize_t offset          # -1: by name
    cdef bint frozen                # set with object.__setattr__, as the class's own code does

    cdef inline object get(self, object o):
        cdef PyObject* v
        if type(o) is self.cls and self.offset >= 0:
            v = (<PyObject**> ((<char*> <PyObject*> o) + self.offset))[0]
            if v != NULL:
                return <object> v
        return getattr(o, self.name)

    cdef inline bint has(self, object o) noexcept:
        """Whether `get` reads `o`'s slot, and finds it set (it cannot raise)."""
        return type(o) is self.cls and self.offset >= 0 and \
            (<PyObject**> ((<char*> <PyObject*> o) + self.offset))[0] != NULL

    cdef inline int set(self, object o, object value) except -1:
        cdef PyObject** slot
        cdef PyObject* old
        if type(o) is self.cls and self.offset >= 0:
            slot = <PyObject**> ((<char*> <PyObject*> o) + self.offset)
            old = slot[0]
            Py_INCREF(value)
            slot[0] = <PyObject*> value
            Py_XDECREF(old)
        elif self.frozen:
            PyObject_GenericSetAttr(o, self.name, value)
        else:
            setattr(o, self.name, value)
        return 0


cdef list _FIELDS = []     # every field made, for the tests (`_read_fields`)


cdef _Field _field(object cls, str name, bint frozen=False):
    cdef _Field f = _Field.__new__(_Field)
    _FIELDS.append(f)
    cdef PyMemberDef* member
    f.cls, f.name, f.frozen, f.offset = cls, name, frozen, -1
    descr = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
    if type(descr) is _MemberDescriptor and (frozen or cls.__setattr__ is object.__setattr__):
        member = (<PyMemberDescrObject*> <PyObject*> descr).d_member
        if member.type == T_OBJECT_EX and not (member.flags & READONLY):
            f.offset = member.offset
    return f

_MemberDescriptor = type(_trio_run.Task._runner)
_Task, _Runner, _CancelStatus = _trio_run.Task, _trio_run.Runner, _trio_run.CancelStatus
cdef _Field _task_runner = _field(_Task, "_runner")
cdef _Field _task_send_fn = _field(_Task, "_next_send_fn")
cdef _Field _task_send = _field(_Task, "_next_send")
cdef _Field _task_abort_func = _field(_Task, "_abort_func")
cdef _Field _task_sleep_data = _field(_Task, "custom_sleep_data")
cdef _Field _task_coro = _field(_Task, "coro")
cdef _Field _task_context = _field(_Task, "context")
cdef _Field _task_cancel_status = _field(_Task, "_cancel_status")
cdef _Field _task_schedule_points = _field(_Task, "_schedule_points")
cdef _Field _task_cancel_points = _field(_Task, "_cancel_points")
cdef _Field _status_cancelled = _field(_CancelStatus, "effectively_cancelled")
cdef _Field _runner_ki_pending = _field(_Runner, "ki_pending")
cdef _Field _runner_main_task = _field(_Runner, "main_task")
cdef _Field _value_unwrapped = _field(_Value, "_unwrapped", True)
cdef _Field _value_value = _field(_Value, "value", True)
cdef _Field _deadlines_heap = _field(_trio_run.Deadlines, "_heap")
cdef _Field _scope_deadline = _field(_trio_run.CancelScope, "_registered_deadline")


def _read_fields(objs):
    """For each field of this module whose class one of `objs` is: (class name, field,
    read at its slot?, what it reads, what getattr reads) -- for the tests."""
    cdef _Field f
    rows = []
    for f in _FIELDS:
        for o in objs:
            if type(o) is f.cls:
                rows.append((f.cls.__name__, f.name, f.offset >= 0, f.get(o), getattr(o, f.name)))
    return rows


cdef list _values = [None] * 4     # spare wake-up outcomes (`kernelsim._path.reuse`)
cdef type _message_type = <type> _WaitTaskRescheduled     # (cast: trio's classes have their own metaclass)
# (Cast, not checked: Value's metaclass is ABCMeta, and a `type` argument is checked exact.)
cdef type _value_type = <type> _Value


cdef object _value_none():
    """``outcome.Value(None)``: its generated __init__, two attribute stores, done in C --
    a spare one where the pool holds its last reference: a wake's Value is unwrapped by
    the woken park and dropped, and one nothing else holds is a new Value(None) to anyone
    (a GC-tracked object made and freed per wake)."""
    v = reuse(_values, _value_type)
    _value_unwrapped.set(v, False)
    _value_value.set(v, None)
    return v


cdef object _unwrap(o):
    """``o.unwrap()`` for the outcome a park returns: a Value's, done in C."""
    if _fast_park and type(o) is _Value:
        if _value_unwrapped.get(o):
            raise outcome.AlreadyUsedError
        _value_unwrapped.set(o, True)
        return _value_value.get(o)
    return o.unwrap()


cdef list _messages = [None] * 4  # spare park messages (`kernelsim._path.reuse`)


# The park message made last while a hand-over steps a task, and its abort function: the
# hand-over (`_step_woken`) takes the abort function of the message the step ended in from
# here, not by reading the message's attribute (an instance dict's lookup). Held only
# during that step (a held message is no spare).
cdef bint _parks_noted = False
cdef object _noted_message = None
cdef object _noted_abort = None


cdef object _wait_message(abort_func):
    """``WaitTaskRescheduled(abort_func)``, the same way -- a spare one where the pool
    holds its last reference: trio reads a park's message once and drops it, and one
    nothing else holds is a new message to anyone (an object and its attributes made
    and freed per park). (It keeps its last abort function until it is used again.)"""
    global _noted_message, _noted_abort
    m = reuse(_messages, _message_type)
    PyObject_GenericSetAttr(m, "abort_func", abort_func)
    if _parks_noted:
        _noted_message = m
        _noted_abort = abort_func
    return m


cdef int _wake(object task) except -1:
    """``trio.lowlevel.reschedule(task)``: runnable again, its wait returning None."""
    if _task_runner.has(task):
        runner = _task_runner.get(task)     # (no `try` block: see `_step_woken`)
    else:
        try:
            runner = _task_runner.get(task)
        except AttributeError:
            _reschedule(task)
            return 0
    if not _fast_wake:
        runner.reschedule(task)
        return 0
    if _task_send_fn.get(task) is not None:
        raise RuntimeError(f"{task!r} is not parked")       # trio's assert
    cdef RunnableCounter c = live_counter()
    # What can fail first: a wake that raises leaves the task parked as it was (trio's
    # cancellation of it must still find it so), and its error goes to the waker.
    send_fn = _send_of(c, _task_coro.get(task))
    send = _value_none()
    _task_send_fn.set(task, send_fn)
    _task_send.set(task, send)
    _task_abort_func.set(task, None)
    _task_sleep_data.set(task, None)
    if c is not None and c.runner is runner and _alone(c):
        # The run's own parts, read once (`RunnableCounter._bind`); the counter is the only
        # instrument, so its task_scheduled hook is all there is to call.
        c.kernel_woken = task           # it resumes in the kernel, parked there (`_step_woken`)
        if c.is_guest and Py_SIZE(c.runq) == 0:
            runner.force_guest_tick_asap()
        c.runq_append(task)
        c.runnable += 1
        return 0
    if c is not None and c.runner is runner:
        runq = c.runq                   # the run's own, read once (`RunnableCounter.before_run`)
        hooks = c.hooks.get("task_scheduled")
        c.kernel_woken = task           # it resumes in the kernel, parked there (`_step_woken`)
    else:
        runq = runner.runq
        hooks = runner.instruments.data.get("task_scheduled")
    if not runq and runner.is_guest:
        runner.force_guest_tick_asap()
    runq.append(task)
    if hooks:
        _task_scheduled(runner, hooks, task)
    return 0


cdef object _send_of(RunnableCounter c, coro):
    """``coro.send``: a ping-pong wakes the same two tasks in turn, so the run's counter
    keeps the last two made (a bound method is a lookup and an object per wake)."""
    if c is None:
        return coro.send
    if coro is c.send_coro0:
        return c.send_fn0
    if coro is c.send_coro1:
        return c.send_fn1
    send = coro.send
    c.send_coro1, c.send_fn1 = c.send_coro0, c.send_fn0
    c.send_coro0, c.send_fn0 = coro, send
    return send


cdef int _task_scheduled(runner, dict hooks, task) except -1:
    # The usual table holds one hook, the clock's counter: bump it without the dispatch.
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    if len(hooks) == 1:
        PyDict_Next(hooks, &pos, &key, &value)
        if type(<object> key) is RunnableCounter:
            (<RunnableCounter> key).runnable += 1
            return 0
    runner.instruments.call("task_scheduled", task)
    return 0


cdef object _to_trio(object checkpoint):
    """`checkpoint()`, what a modeled call awaits to give trio's loop a pass: the files
    made readable meanwhile raised first, since that loop may look at descriptors."""
    raise_readable()
    return checkpoint()


cdef object _park(abort_func):
    """``_unwrap(await _park(abort))`` is ``await trio.lowlevel.wait_task_rescheduled(abort)``
    -- with trio's own bottom generator, `_async_yield`, awaited directly (as `_Yield`, its
    C twin), a coroutine less per park."""
    if not _hosting:
        # trio's loop looks at descriptors next (see OpenFile); a stepped task's park
        # goes back to the task that steps it, still in the kernel.
        raise_readable()
    cdef _Yield y
    if _fast_park:
        y = _Yield.__new__(_Yield)
        y.message = _wait_message(abort_func)
        return y
    return _park_outcome(abort_func)


# -- awaitables as C objects ----------------------------------------------------------------
#
# A cdef class with ``__await__`` and ``__next__`` is awaitable; the two slots the awaiting
# coroutine steps it by -- am_send (each resume) and tp_iternext (its first step) -- are set
# to C functions at import, so that no Python-level ``send`` is called and no coroutine or
# generator (a frame, made and freed per await) stands in between.

cdef extern from "Python.h":
    int _PyGen_SetStopIterationValue(object value) noexcept
    void PyErr_Restore(PyObject* kind, PyObject* value, PyObject* tb) noexcept
    ctypedef int (*sendfunc)(PyObject*, PyObject*, PyObject**) noexcept
    ctypedef PyObject* (*iternextfunc)(PyObject*) noexcept
    ctypedef struct PyAsyncMethods:
        sendfunc am_send
    ctypedef struct _TypeSlots "PyTypeObject":
        PyAsyncMethods* tp_as_async
        iternextfunc tp_iternext


cdef PyObject* _stop_with(PyObject* value) noexcept:
    """tp_iternext's return: StopIteration with `value` (a reference it takes)."""
    if type(<object> value) is tuple or isinstance(<object> value, BaseException):
        _PyGen_SetStopIterationValue(<object> value)        # (wrapped, as its args would be read)
        Py_XDECREF(value)
    else:
        # Set as is, not chained to an exception being handled (`_PyErr_SetObject` walks the
        # thread's stack of them to find one): the awaiting coroutine takes the value.
        Py_INCREF(StopIteration)
        PyErr_Restore(<PyObject*> StopIteration, value, NULL)
    return NULL


cdef inline object _sent(int r, PyObject* res):
    """The Python-level ``send`` of an awaitable whose C send gave `r` and `res` (as the
    am_send slot: 1 yielded `res`, 0 returned it, -1 raised): yield, StopIteration, or raise."""
    if r == -1:
        raise take_raised()
    out = <object> res
    Py_XDECREF(res)
    if r == 1:
        return out
    raise StopIteration(out)


@cython.final
@cython.freelist(4)
cdef class _Yield:
    """trio's ``_async_yield(message)`` -- yield `message` to trio's loop, return what the
    task is resumed with -- as a C object rather than a Python generator per park."""
    cdef object message
    cdef int state                  # 0: not yet yielded; 1: yielded; 2: over

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        return self.send(None)

    def send(self, value):
        cdef PyObject* res = NULL
        cdef int r = _yield_send_unchecked(self, value, &res)       # before `res` is read
        return _sent(r, res)

    def throw(self, typ, val=None, tb=None):
        # Thrown in at the yield, it is raised there, as in the generator.
        self.state = 2
        self.message = None
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        if tb is not None:
            val = val.with_traceback(tb)
        raise val

    def close(self):
        self.state = 2
        self.message = None


cdef int _yield_send(_Yield y, object value, PyObject** res) except -1:
    res[0] = NULL
    if y.state == 0:
        if value is not None:
            raise TypeError("can't send non-None value to a just-started generator")
        y.state = 1
        m = y.message
        y.message = None
        Py_INCREF(m)
        res[0] = <PyObject*> m
        return 1
    if y.state == 1:
        y.state = 2
        Py_INCREF(value)
        res[0] = <PyObject*> value
        return 0
    raise RuntimeError("cannot reuse already awaited coroutine")


ctypedef int (*_YieldSend)(_Yield, object, PyObject**) noexcept
cdef _YieldSend _yield_send_unchecked = <_YieldSend> _yield_send


cdef PyObject* _yield_next(PyObject* y) noexcept:
    cdef PyObject* res = NULL
    cdef int r = _yield_send_unchecked(<_Yield> y, None, &res)
    if r == 0:
        return _stop_with(res)
    return res if r == 1 else NULL


(<_TypeSlots*> _Yield).tp_as_async.am_send = <sendfunc> _yield_send
(<_TypeSlots*> _Yield).tp_iternext = _yield_next


async def _park_outcome(abort_func):
    return outcome.Value(await _wait_task_rescheduled(abort_func))


cdef object _WAKE_UP = object()     # `_Completion.__call__` without an argument


cdef class _Completion(Completion):
    """A path's `on_done` (and a wait queue's waiter): records, stops the engine, wakes.

    `task` is set only once the calling task has parked; until then the call is still
    running on its own stack and looks at `done` itself. As a waiter it knows its
    `queue`, so that an aborted wait takes itself off it. Made by `_completion`.
    """
    cdef Engine engine
    cdef readonly bint done
    cdef bint hosting               # its task is stepping another (`_settle`): runnable when done
    cdef object value, exc, task, raise_cancel
    cdef WaitQueue queue

    cdef int wake_up(self) except -1:
        return self.complete(None, None)

    cdef int complete(self, object value, object exc) except -1:
        cdef RunnableCounter counter
        self.done = True
        self.value = value
        self.exc = exc
        if self.engine is not None:
            self.engine.request_stop()
        if self.task is not None:
            task, self.task = self.task, None
            _wake(task)
        elif self.hosting:
            # Its task would be runnable now, were it parked as trio sees it: the task it
            # steps must count it, and drive no further than this instant on its own.
            self.hosting = False
            counter = live_counter()
            counter.runnable += 1
        return 0

    def abort_wait(self, _):
        # A wait can be cancelled: nothing has happened yet but the queue entry.
        self.task = None
        self.queue.discard(self)
        return _ABORT_SUCCEEDED

    def __call__(self, raise_cancel=_WAKE_UP):
        # The completion is its own wait's abort function (``abort_wait``; trio calls it
        # with the cancellation): a bound method made and dropped per park cost more.
        # Called bare, it is the waiter it also is (`Waiter.__call__`).
        if raise_cancel is _WAKE_UP:
            self.wake_up()
            return None
        self.task = None
        self.queue.discard(self)
        return _ABORT_SUCCEEDED

    def host_abort(self, raise_cancel):
        # trio cancels the task while it steps another (`_settle`): what its park's abort
        # would do. A path cannot be abandoned; a wait is taken off its queue and the task
        # is runnable at once, with the cancellation to raise -- which `_settle` raises
        # itself, so trio is told the abort failed (it would reschedule a running task).
        if self.queue is None or not self.hosting or self.done:
            return _ABORT_FAILED
        self.queue.discard(self)
        self.hosting = False
        self.raise_cancel = raise_cancel
        cdef RunnableCounter counter = live_counter()
        counter.runnable += 1
        return _ABORT_FAILED


cdef list _completions = [None] * 8     # spares (`kernelsim._path.reuse`): six per round trip


cdef _Completion _completion(Engine engine):
    """A completion that stops `engine` when it completes (None: a wait's, whose queue's
    wake stops the engine itself)."""
    cdef _Completion c = <_Completion> reuse(_completions, _Completion)
    c.done = c.hosting = False
    c.value = c.exc = c.task = c.raise_cancel = c.queue = None
    c.engine = engine
    return c


cdef object _outcome(_Completion done):
    """The call's value, or its error raised; the completion lets go of both (it goes back
    to the pool, where it would keep them alive until its next use)."""
    value, exc = done.value, done.exc
    done.value = done.exc = None
    if exc is not None:
        raise exc
    return value


def _refuse_abort(_):
    # A kernel path cannot be abandoned half-way: cancellation is delivered at the
    # next checkpoint, once the path has returned -- unless the engine failed under the
    # clock's drive (`EngineClock.failed`): then nothing will ever finish the path.
    if getattr(_current_clock(), "failed", None) is not None:
        return _ABORT_SUCCEEDED
    return _ABORT_FAILED

__all__ = ["checkpoint", "sleep_until_readable", "replicates_trio", "run_path", "wait_on", "run_blocking", "run_entry", "run_user", "run_path_sync", "wait_on_sync", "run_blocking_sync",
           "after", "DEFAULT_SPIN_S"]

DEFAULT_SPIN_S = 1e-3    # real time: poll this long before sleeping on a descriptor

# How a modeled call goes on once its work is submitted (`_start_path`, `_start_wait`):
cdef enum:
    _PARK = 0       # not done: park the task until the engine (run by trio's clock) finishes it
    _INLINE = 1     # done by driving the engine inline, and nothing else woke: no schedule point
    _DONE = 2       # done, but other tasks may have woken: a full schedule point
    # Done while this task stepped another (`_settle`), as if it had parked and been woken:
    _WOKEN = 3      # nothing else runnable: go on, no cancellation point (a woken park has none)
    _WOKEN_AMONG = 4    # others runnable at this instant: a pass of trio's loop, shielded


def after(cost: float, path):
    """The path `path`, preceded by `cost` seconds of CPU time."""
    yield cost
    return (yield from path)


from kernelsim._path cimport Path, step_any


cdef class _Lead(Path):
    """`after(cost, path)` as a C state machine, for the calls of this module: no Python
    frame between the CPU and the path on each of the path's resumes."""
    cdef object path
    cdef double cost
    cdef bint led

    cdef int step(self, double* cost) except -1:
        cdef PyObject* res = NULL
        if not self.led:
            self.led = True
            cost[0] = self.cost
            return 1
        if step_any(self.path, cost, &res):
            return 1
        out = <object> res
        Py_XDECREF(res)
        self.path = None                # (a spare keeps nothing of its call)
        self.value = out
        return 0


cdef list _leads = [None] * 4


cdef _Lead _lead(double cost, object path):
    cdef _Lead lead = <_Lead> reuse(_leads, _Lead)
    lead.value = None
    lead.led = False
    lead.cost = cost
    lead.path = path
    return lead


def _never():
    return False


cdef bint _cancel_pending(task) except -1:
    """Would `checkpoint_if_cancelled` do anything for `task`, the calling one? Asked
    first, since it almost never would: a call that drove the engine inline then creates
    no coroutine at all."""
    cdef int r = _cancel_pending_unchecked(task)
    if r == -1:
        exc = take_raised()
        if not isinstance(exc, AttributeError):
            raise exc
        return True                     # another trio's internals: let trio decide
    return r


cdef bint _cancel_pending_of(task) except -1:
    if _status_cancelled.get(_task_cancel_status.get(task)):
        return True
    # A KeyboardInterrupt is delivered to the main task only: asked of it alone (the
    # flag first, at its slot: it is almost never set).
    runner = _task_runner.get(task)
    return _runner_ki_pending.get(runner) and task is _runner_main_task.get(runner)


cdef int _start_path(Engine engine, Cpu on, object path, _Completion done, task) except -1:
    # Files made readable from here on are raised when the call leaves the kernel
    # (`raise_readable` at its exits and yields): see OpenFile.
    cdef bint was = defer_raising(True)
    try:
        return _settle(engine, done, task, _submit(engine, on, path, done, task))
    finally:
        defer_raising(was)


cdef int _submit(Engine engine, Cpu on, object path, _Completion done, task) except -1:
    """Submit the call's path and drive the engine until it is done (or parks).

    When the calling task would drive the engine next anyway (`_drive_inline`), nothing
    happens between the submit and that drive: the path's own segments may then end at
    once (a window on the engine, ``submit(last=True)``; see `Engine.advance`) rather than
    each be an event that the drive runs next -- the same steps at the same instants, as
    long as nothing is due first. Where a step in the window wakes something (a stop), the
    drive would have ended after that step's event: so does this one."""
    cdef double until
    cdef RunnableCounter counter = _inline_counter(task, &until)
    cdef long long stops, advances
    if counter is None:
        on.submit(LEVEL_PROC, path, done)
        if done.done:
            return _DONE
        return _drive(engine, done, task)
    stops = engine.stops
    advances = engine.advances
    engine.open_window(until)
    try:
        on.submit(LEVEL_PROC, path, done, True)
    finally:
        engine.close_window()
    if engine.advances == advances:
        # Not a segment ended in the window: the call went as without one.
        if done.done:
            return _DONE
        if engine.stops != stops:
            return _drive(engine, done, task)       # its first step woke something: look again
    elif done.done or engine.stops != stops:
        # The drive's end, as `_drive_inline` would have seen it.
        if done.done and engine.stops == stops + 1 and counter.live and counter.runnable == 0:
            return _INLINE
        return _DONE if done.done else _PARK
    # Nothing woke: the drive goes on, the only task, to the same deadline.
    if _run_inline(engine, done, counter, until):
        return _INLINE
    return _DONE if done.done else _PARK


cdef int _start_wait(Engine engine, WaitQueue queue, _Completion woken, task) except -1:
    cdef bint was = defer_raising(True)
    try:
        woken.queue = queue
        queue.add(woken)
        return _settle(engine, woken, task, _drive(engine, woken, task))
    finally:
        defer_raising(was)


cdef inline int _drive(Engine engine, _Completion done, task) except -1:
    if _drive_inline(engine, done, task):
        # Only this call's own completion stopped the engine: no other task can
        # have become runnable, so the schedule point has nothing to do.
        return _INLINE
    return _DONE if done.done else _PARK


cdef int _settle(Engine engine, _Completion done, task, int how) except -1:
    """How the call goes on after `how`: while it would park only for trio to step the one
    task it woke, it steps that task itself and carries on (see "Handing the turn over")."""
    cdef RunnableCounter counter
    while how == _PARK:
        if not _step_woken(task, done, engine):
            return _PARK
        if done.raise_cancel is not None:
            # Cancelled while parked on a wait, which its abort took it off: that
            # cancellation is what its park returns (`_Completion.host_abort`).
            counter = live_counter()
            counter.runnable -= 1
            raise_cancel, done.raise_cancel = done.raise_cancel, None
            raise_cancel()
        if done.done:
            # The stepped task's work completed this call and counted this task runnable
            # (`_Completion.complete`): this is its step beginning.
            counter = live_counter()
            counter.runnable -= 1
            return _WOKEN if counter.runnable == 0 and _quiet(counter, counter.runner) else _WOKEN_AMONG
        how = _drive(engine, done, task)
    return how


async def run_path(Node node, path, cpu=None):
    """Run `path` at process level on `node`'s CPU (or on `cpu`, another processor of
    the node: the calling process's); return its value or raise its error."""
    cdef _Completion done
    cdef PyObject* rest = NULL
    cdef Cpu on = <Cpu> (node.cpu if cpu is None else cpu)
    if not node.modeled:
        done = _try_real(on, node.engine, path)
        await checkpoint()
        return _outcome(done)
    value = _path_now(node, on, path, &rest)
    if rest == NULL:
        return value
    later = <object> rest
    Py_XDECREF(rest)
    return await later


cdef object path_call(Node node, object path, PyObject** rest):
    # (kernelsim/_trio.pxd says what it is for)
    rest[0] = NULL
    if not node.modeled:
        later = run_path(node, path)
        Py_INCREF(later)
        rest[0] = <PyObject*> later
        return None
    return _path_now(node, node.cpu, path, rest)


cdef object _path_now(Node node, Cpu on, object path, PyObject** rest):
    """A modeled `run_path` up to its first need of trio: the path's value when it ended
    with nothing for trio to do (no schedule point owed, no cancellation pending);
    otherwise None, and ``rest[0]`` a new reference to the coroutine that does the rest."""
    cdef Engine engine = node.engine
    cdef _Completion done
    cdef int how
    task = _task()
    done = _completion(engine)
    try:
        how = _start_path(engine, on, path, done, task)
    except BaseException:
        raise_readable()                # control leaves the kernel (see OpenFile)
        raise
    if how == _INLINE and not _cancel_pending(task):
        raise_readable()
        return _outcome(done)
    later = _path_rest(done, how, task)
    Py_INCREF(later)
    rest[0] = <PyObject*> later
    return None


async def _path_rest(_Completion done, int how, task):
    """What `run_path` gives trio, once its path has run as far as it could."""
    try:
        if how == _INLINE:
            await _to_trio(_checkpoint_if_cancelled)        # (a cancellation is pending)
        elif how == _DONE:
            await _to_trio(_checkpoint)
        elif how == _PARK:
            done.task = task
            _unwrap(await _park(_refuse_abort))
        elif how == _WOKEN_AMONG:
            await _to_trio(_shielded_checkpoint)
    finally:
        raise_readable()                # control leaves the kernel (see OpenFile)
    return _outcome(done)


async def wait_on(Node node, queue, spin_s: float = DEFAULT_SPIN_S) -> None:
    """Block the calling task until `queue` is woken."""
    cdef _Completion woken
    cdef int how
    if node.modeled:
        task = _task()
        woken = _completion(None)          # the queue's wake stops the engine itself
        try:
            how = _start_wait(node.engine, queue, woken, task)
            if how == _INLINE:
                if _cancel_pending(task):
                    await _to_trio(_checkpoint_if_cancelled)
            elif how == _DONE:
                await _to_trio(_checkpoint)
            elif how == _PARK:
                woken.task = task
                _unwrap(await _park(woken))
            elif how == _WOKEN_AMONG:
                await _to_trio(_shielded_checkpoint)
        finally:
            raise_readable()            # control leaves the kernel (see OpenFile)
        return
    cdef _Flag woken_flag = _Flag.__new__(_Flag)
    cdef list ports = node.real_ports
    queue.add(woken_flag)
    try:
        while not woken_flag.set:
            _spin(node.engine, ports, woken_flag, spin_s)
            if woken_flag.set:
                break
            if _may_sleep(node, ports) and not woken_flag.set:
                await _sleep_on_ports(node, ports, woken_flag)
            else:
                await trio.lowlevel.checkpoint()
    finally:
        if not woken_flag.set:
            queue.discard(woken_flag)
    await checkpoint()


async def _sleep_on_ports(Node node, list ports, _Flag woken):
    """Sleep until a port's descriptor is readable or `woken` is set.

    Several tasks of one program may wait on the same in-process node (a sender and a
    receiver, as in ``dp bibw``), but trio lets one task at a time wait on a descriptor:
    the first sleeps on the ports (`_PortSleep.sleeper`), the others park, and the
    sleeper wakes them when it wakes, to poll. Whatever sets a waiter's flag -- another
    task's poll, a path's completion -- ends that waiter's sleep at once (`_Flag.scope`).
    """
    sleep = getattr(node, "_port_sleep", None)
    if sleep is None:
        sleep = node._port_sleep = _PortSleep()
    with trio.CancelScope() as scope:
        woken.scope = scope
        if woken.set:
            scope.cancel()
        if (<_PortSleep> sleep).sleeping:
            (<_PortSleep> sleep).parked.add(scope)
            try:
                await trio.sleep_forever()
            finally:
                (<_PortSleep> sleep).parked.discard(scope)
        else:
            (<_PortSleep> sleep).sleeping = True
            try:
                # One port and nothing else for trio to do (a rank that is its node's
                # kernel): one poll(2), as trio would sleep, and that is this wait's park.
                if len(ports) != 1 or not sleep_until_readable(ports[0].fileno()):
                    await _wait_any_readable([p.fileno() for p in ports])
            finally:
                (<_PortSleep> sleep).sleeping = False
                for other in list((<_PortSleep> sleep).parked):
                    other.cancel()          # one of them sleeps on the ports next
            for p in ports:
                p.drain()
    woken.scope = None


@cython.final
cdef class _PortSleep:
    """Per in-process real node: whether a task sleeps on its ports, and who is parked."""
    cdef bint sleeping
    cdef set parked

    def __cinit__(self):
        self.parked = set()


cdef enum:
    _MAKE_CALLABLE = 0      # ``fn(first)``
    _MAKE_ENTRY = 1         # a kernel entry (system call or call gate) into the routine `name`
    _MAKE_USER = 2          # user-level work on mapped kernel memory: ``fn(*args)``, every try


@cython.final
@cython.freelist(8)
cdef class _PathMaker:
    """One blocking call: how it builds its path -- ``make(True)`` for the first try,
    ``make(False)`` for the continuation after a wait (no second kernel entry) -- and what
    the call needs besides. One class for the three kinds, not a subclass each: Cython
    keeps a freelist only for a class that is no subclass, and a round trip makes four.

    It is also the async call itself (`run_blocking`, `run_entry`, `run_user` return it):
    an awaitable that runs the call when first stepped. Most calls of a modeled ping-pong
    end without giving trio a pass (they drove the engine inline, or were woken while
    their task stepped another): those return at once, with no coroutine made. A call
    that must give trio a pass (a park, a checkpoint) goes on in a coroutine made at that
    point (`_blocking_rest`), which the call then steps. The calls made for a trio task
    are spares (`_makers`) and let go of everything once over (`_over`)."""
    cdef int kind
    cdef int state              # _NEW, _GOING_ON (in `rest`), _PARKED, _OVER
    cdef bint gate
    cdef Node node
    cdef object fn, proc, name, args
    # A call of two arguments (DP's per-message calls) keeps them here, not in a tuple
    # (`args` None): made and freed per call, a tuple cost more than the fields.
    cdef bint pair
    cdef object a, b
    cdef object nonblocking, fd, spin_s, pool
    cdef WaitQueue first_wait
    cdef double wake_cost, before
    cdef object rest            # the coroutine the call goes on in
    # _PARKED: parked by the call itself (`_park_call`), not in `rest`: on what (_PARKED_WAIT:
    # the wait before its first try; _PARKED_PATH: a try's path), for which task, and the
    # completion it waits for.
    cdef int parked
    cdef object task
    cdef _Completion done
    cdef object message         # _YIELD: the park's message, for the first step to yield

    cdef object make(self, bint first):
        return self.make_after(first, 0.0)

    cdef object make_after(self, bint first, double before):
        """`make(first)` preceded by `before` seconds of CPU time: a routine that leads its
        own path with it does (`KernelRoutine.start_pair`), else `_lead` goes in front."""
        cdef object path
        if self.kind == _MAKE_ENTRY:
            # what the node's ``syscall_path``/``callgate_path`` make, without a closure
            # or a Python call per call
            if self.pair:
                path = kernel_entry_pair(self.node, self.gate, self.proc, self.name, self.a, self.b, first)
            else:
                path = kernel_entry(self.node, self.gate, self.proc, self.name, self.args, first)
        elif self.kind == _MAKE_USER:
            if self.pair:
                if isinstance(self.fn, KernelRoutine):
                    path = (<KernelRoutine> self.fn).start_pair(self.proc, self.a, self.b, &before)
                else:
                    path = self.fn(self.a, self.b)
            elif isinstance(self.fn, KernelRoutine):
                path = (<KernelRoutine> self.fn).start(self.proc, <tuple> self.args)
            else:
                path = self.fn(*self.args)
        else:
            path = self.fn(first)
        return _lead(before, path) if before else path

    def __await__(self):
        return self

    def __iter__(self):
        return self

    # The Python-level protocol; the C one is the type's am_send and tp_iternext (set at
    # import, below), which the awaiting coroutine uses.
    def __next__(self):
        return self.send(None)

    def send(self, value):
        cdef PyObject* res = NULL
        cdef int r = _call_send_unchecked(self, value, &res)       # before `res` is read
        return _sent(r, res)

    def throw(self, typ, val=None, tb=None):
        if self.state == _GOING_ON:
            try:
                return self.rest.throw(typ, val, tb)
            except BaseException:
                _over(self)
                raise
        if self.state == _PARKED or self.state == _YIELD:
            raise_readable()            # as `_blocking_rest` leaves (its `finally`)
            _over(self)
        elif self.state == _NEW:
            _over(self)
        if val is None:
            val = typ() if isinstance(typ, type) else typ
        if tb is not None:
            val = val.with_traceback(tb)
        raise val

    def close(self):
        if self.state == _GOING_ON:
            try:
                self.rest.close()
            finally:
                _over(self)
        elif self.state == _PARKED or self.state == _YIELD:
            raise_readable()
            _over(self)
        elif self.state == _NEW:
            _over(self)


cdef enum:
    _NEW = 0
    _GOING_ON = 1
    _OVER = 2
    _PARKED = 3
    _YIELD = 4          # parked by `call_now`, its message not yet yielded: then _PARKED
    _PARKED_WAIT = 1
    _PARKED_PATH = 2


cdef int _over(_PathMaker call) except -1:
    # A spare lets go of what is its call's own (the message, closures, the coroutine);
    # the node's objects it names live as long as the node, as a spare completion's engine.
    call.state = _OVER
    call.args = call.a = call.b = None
    call.fn = None
    call.nonblocking = None
    call.rest = None
    call.task = None
    call.done = None
    call.message = None
    return 0


cdef int _call_send(_PathMaker call, object value, PyObject** res) except -1:
    """Step the call (a PySendResult): 1 and what it yielded to trio in ``res[0]``; 0 and
    its value; or its error raised."""
    cdef int r
    res[0] = NULL
    if call.state == _GOING_ON:
        r = _call_rest_unchecked(call.rest, value, res)
        if r != 1:
            _over(call)
        return r
    if call.state == _PARKED:
        r = _resume_unchecked(call, value, res)
    elif call.state == _YIELD:
        if value is not None:
            raise TypeError("can't send non-None value to a just-started call")
        call.state = _PARKED
        m = call.message
        call.message = None
        Py_INCREF(m)
        res[0] = <PyObject*> m
        return 1
    elif call.state == _OVER:
        raise RuntimeError("cannot reuse already awaited call")
    elif value is not None:
        raise TypeError("can't send non-None value to a just-started call")
    else:
        r = _start_unchecked(call, res)
    if r == 2:
        return 1                        # parked (again), by itself
    if r == 1:
        # It must give trio a pass: from here on it is `call.rest`'s.
        call.state = _GOING_ON
        r = _call_rest_unchecked(call.rest, None, res)
        if r == 1:
            return 1
        _over(call)
        return r
    return _ended(call, r)


cdef inline int _ended(_PathMaker call, int r) except -1:
    """A call's path has ended (`r` 0, or -1 with its error raised): the call is over and
    control leaves the kernel (see OpenFile); the error, if any, goes on up."""
    if r == -1:
        exc = take_raised()
        _over(call)
        raise_readable()
        raise exc
    _over(call)
    raise_readable()
    return 0


cdef int _call_rest(object rest, object value, PyObject** res) except -1:
    return <int> PyIter_Send(rest, value, res)


ctypedef int (*_CallSend)(_PathMaker, object, PyObject**) noexcept
ctypedef int (*_RestSend)(object, object, PyObject**) noexcept
ctypedef int (*_Start)(_PathMaker, PyObject**) noexcept
ctypedef int (*_Resume)(_PathMaker, object, PyObject**) noexcept
cdef _CallSend _call_send_unchecked = <_CallSend> _call_send
cdef _Start _start_unchecked = <_Start> _start
cdef _Resume _resume_unchecked = <_Resume> _resume
cdef _RestSend _call_rest_unchecked = <_RestSend> _call_rest


cdef PyObject* _call_next(PyObject* call) noexcept:
    # tp_iternext: the awaiting coroutine's first step.
    cdef PyObject* res = NULL
    cdef int r = _call_send_unchecked(<_PathMaker> call, None, &res)
    if r == 0:
        return _stop_with(res)
    return res if r == 1 else NULL


(<_TypeSlots*> _PathMaker).tp_as_async.am_send = <sendfunc> _call_send
(<_TypeSlots*> _PathMaker).tp_iternext = _call_next

cdef list _makers = [None] * 8     # spares (`kernelsim._path.reuse`) for the async calls


cdef inline _PathMaker _maker(int kind, Node node, object proc, object fd, object nonblocking, double wake_cost,
                              object spin_s, double before, object pool, WaitQueue first_wait, bint spare):
    cdef _PathMaker maker = <_PathMaker> reuse(_makers, _PathMaker) if spare else _PathMaker.__new__(_PathMaker)
    maker.kind = kind
    maker.state = _NEW
    maker.node = node
    maker.proc = proc
    maker.fd = fd
    maker.nonblocking = nonblocking
    maker.wake_cost = wake_cost
    maker.spin_s = spin_s
    maker.before = before
    maker.pool = pool
    maker.first_wait = first_wait
    maker.rest = None
    return maker


cdef _PathMaker _callable_maker(Node node, object make_path, object nonblocking, double wake_cost, object spin_s,
                                double before, bint spare):
    cdef _PathMaker maker = _maker(_MAKE_CALLABLE, node, None, None, nonblocking, wake_cost, spin_s, before, None,
                                   None, spare)
    maker.fn = make_path
    maker.gate = False
    maker.name = maker.args = maker.a = maker.b = None
    maker.pair = False
    return maker


cdef _PathMaker _entry_maker(Node node, object proc, bint gate, object name, object args, object fd,
                             double wake_cost, object spin_s, bint spare):
    cdef _PathMaker maker = _maker(_MAKE_ENTRY, node, proc, fd, None, wake_cost, spin_s, 0.0, None, None, spare)
    maker.gate = gate
    maker.name = name
    maker.args = args
    maker.a = maker.b = None
    maker.pair = False
    maker.fn = None
    return maker


cdef _PathMaker _user_maker(Node node, object proc, object fn, tuple args, object fd, double cost, object pool,
                            WaitQueue readers, object spin_s, bint spare):
    cdef _PathMaker maker = _maker(_MAKE_USER, node, proc, fd, None, cost, spin_s, 0.0, pool, readers, spare)
    maker.fn = fn
    maker.args = args
    maker.a = maker.b = None
    maker.pair = False
    maker.gate = False
    maker.name = None
    return maker


def run_blocking(Node node, make_path, *, nonblocking=_never, double wake_cost=0.0,
                 spin_s: float = DEFAULT_SPIN_S, double before=0.0):
    """Run ``make_path(True)``; on WouldBlock wait and run ``make_path(False)`` after `wake_cost`.

    ``make_path(first)`` builds the path: ``first`` is False for a continuation after a
    wait (no second kernel entry). `nonblocking()` is asked after each WouldBlock:
    True turns it into BlockingIOError(EAGAIN), as on a non-blocking fd. `before`: CPU
    time the caller spent before the first try (a poll that noticed what it waited for).
    Returns the call, an awaitable (await it once).
    """
    return _callable_maker(node, make_path, nonblocking, wake_cost, spin_s, before, True)


cdef object entry_call(Node node, object proc, bint gate, object name, object args, object fd, double wake_cost,
                       object spin_s):
    return _entry_maker(node, proc, gate, name, args, fd, wake_cost, spin_s, True)


cdef object user_call(Node node, object proc, object fn, tuple args, object fd, double cost, object pool,
                      WaitQueue readers, object spin_s):
    return _user_maker(node, proc, fn, args, fd, cost, pool, readers, spin_s, True)


cdef object entry_call_pair(Node node, object proc, bint gate, object name, object a, object b, object fd,
                        double wake_cost, object spin_s):
    cdef _PathMaker maker = _entry_maker(node, proc, gate, name, None, fd, wake_cost, spin_s, True)
    maker.pair = True
    maker.a = a
    maker.b = b
    return maker


cdef object user_call_pair(Node node, object proc, object fn, object a, object b, object fd, double cost,
                       object pool, WaitQueue readers, object spin_s):
    cdef _PathMaker maker = _user_maker(node, proc, fn, None, fd, cost, pool, readers, spin_s, True)
    maker.pair = True
    maker.a = a
    maker.b = b
    return maker


cdef object call_now(object call, PyObject** later):
    # (kernelsim/_trio.pxd says what it is for)
    cdef PyObject* res = NULL
    cdef int r
    cdef _PathMaker c
    later[0] = NULL
    if type(call) is not _PathMaker or (<_PathMaker> call).state != _NEW:
        Py_INCREF(call)
        later[0] = <PyObject*> call
        return None
    c = <_PathMaker> call
    r = _start_unchecked(c, &res)
    if r == 0 or r == -1:
        _ended(c, r)
        value = <object> res
        Py_XDECREF(res)
        return value
    if r == 2:
        # Parked by itself: trio's message is yielded by the awaiting coroutine's first step.
        c.message = <object> res
        Py_XDECREF(res)
        c.state = _YIELD
    else:
        c.state = _GOING_ON             # in `rest`, not stepped yet: the first step sends None
    Py_INCREF(call)
    later[0] = <PyObject*> call
    return None


# -- A call run now, its call object made only if it must give trio a pass --------------------
#
# `call_now` of a call just made: most of a modeled ping-pong's calls end inline (the
# engine driven by the lone task, or the call woken while its task stepped another), and
# for those the call object -- taken from spares, some twenty fields set and cleared -- is
# only a bag of arguments. These run the call from their arguments as `_start` and
# `_first_try` do and make the call object only where one of those would go on in it (a
# park, a pass of trio's loop), filled as `entry_call_pair`/`user_call_pair` fill it and
# left in the state `call_now` leaves it in. Anything else -- real time, a WouldBlock to
# wait on -- goes the same way it went.

cdef object entry_pair_now(Node node, object proc, bint gate, object name, object a, object b, object fd,
                           double wake_cost, object spin_s, PyObject** later):
    # (kernelsim/_trio.pxd says what it is for)
    cdef PyObject* res = NULL
    later[0] = NULL
    if not node.modeled:
        return call_now(entry_call_pair(node, proc, gate, name, a, b, fd, wake_cost, spin_s), later)
    cdef int r = _entry_now_unchecked(node, proc, gate, name, a, b, fd, wake_cost, spin_s, &res)    # before `res` is read
    return _now_end(r, res, later)


cdef object user_pair_now(Node node, object proc, object fn, object a, object b, object fd, double cost,
                          object pool, WaitQueue readers, object spin_s, PyObject** later):
    # (kernelsim/_trio.pxd says what it is for)
    cdef PyObject* res = NULL
    later[0] = NULL
    if not node.modeled:
        return call_now(user_call_pair(node, proc, fn, a, b, fd, cost, pool, readers, spin_s), later)
    cdef int r = _user_now_unchecked(node, proc, fn, a, b, fd, cost, pool, readers, spin_s, &res)    # before `res` is read
    return _now_end(r, res, later)


cdef object _now_end(int r, PyObject* res, PyObject** later):
    """After `_entry_now`/`_user_now` gave `r`: the call's value (0), its error raised (-1)
    -- control leaving the kernel, as `_ended` has it -- or (1) the call to await for it,
    in ``later[0]`` (its new reference, `res`)."""
    if r == -1:
        exc = take_raised()
        raise_readable()
        raise exc
    if r == 1:
        later[0] = res
        return None
    value = <object> res
    Py_XDECREF(res)
    raise_readable()
    return value


cdef int _entry_now(Node node, object proc, bint gate, object name, object a, object b, object fd,
                    double wake_cost, object spin_s, PyObject** res) except -1:
    """`_start` and `_first_try` of an entry's call, from its arguments: 0 and its value in
    ``res[0]``, or 1 and the call object, made now, in ``res[0]`` (`_go_on`)."""
    task = _task()
    path = kernel_entry_pair(node, gate, proc, name, a, b, True)
    cdef _Completion done = _completion(node.engine)
    cdef int how = _start_path(node.engine, node.cpu, path, done, task)
    if _ended_now(how, done, task, res):
        return 0
    return _go_on(entry_call_pair(node, proc, gate, name, a, b, fd, wake_cost, spin_s), task, done, how, False,
                  res)


cdef int _user_now(Node node, object proc, object fn, object a, object b, object fd, double cost, object pool,
                   WaitQueue readers, object spin_s, PyObject** res) except -1:
    """The same for a user-level call (`user_call_pair`'s)."""
    cdef _Completion done
    cdef int how
    cdef double before = 0.0
    task = _task()
    if readers is not None and _empty(pool) and not _is_nonblocking(None, proc, fd):
        # The pool looked at first, and an empty one waited on (`_start`).
        done = _completion(None)        # the queue's wake stops the engine itself
        how = _start_wait(node.engine, readers, done, task)
        if (how == _PARK and _fast_park) or _passes(how, task):
            return _go_on(user_call_pair(node, proc, fn, a, b, fd, cost, pool, readers, spin_s), task, done, how,
                          True, res)
        before = cost
    if isinstance(fn, KernelRoutine):
        path = (<KernelRoutine> fn).start_pair(proc, a, b, &before)
    else:
        path = fn(a, b)
    if before:
        path = _lead(before, path)
    done = _completion(node.engine)
    how = _start_path(node.engine, node.cpu, path, done, task)
    if _ended_now(how, done, task, res):
        return 0
    return _go_on(user_call_pair(node, proc, fn, a, b, fd, cost, pool, readers, spin_s), task, done, how, False,
                  res)


ctypedef int (*_EntryNow)(Node, object, bint, object, object, object, object, double, object, PyObject**) noexcept
ctypedef int (*_UserNow)(Node, object, object, object, object, object, double, object, WaitQueue, object,
                         PyObject**) noexcept
cdef _EntryNow _entry_now_unchecked = <_EntryNow> _entry_now
cdef _UserNow _user_now_unchecked = <_UserNow> _user_now


cdef inline bint _ended_now(int how, _Completion done, task, PyObject** res) except -1:
    """The try ended the call (its value in ``res[0]``; its error raised): `_first_try`'s
    test, and `_entry_now`'s and `_user_now`'s."""
    if (how == _INLINE or how == _WOKEN) and (done.exc is None or not isinstance(done.exc, WouldBlock)) \
            and not (how == _INLINE and _cancel_pending(task)):
        value = _outcome(done)
        Py_INCREF(value)
        res[0] = <PyObject*> value
        return True
    return False


cdef int _go_on(_PathMaker call, task, _Completion done, int how, bint waiting, PyObject** res) except -1:
    """The call `_entry_now`/`_user_now` ran, in `call` from here on, as `call_now` leaves a
    call that must give trio a pass: parked by itself (`_park_call`), or in `rest`. 1, and
    ``res[0]`` the call."""
    cdef PyObject* m = NULL
    if how == _PARK and _fast_park:
        _park_call(call, task, done, _PARKED_WAIT if waiting else _PARKED_PATH, done if waiting else _refuse_abort,
                   &m)
        call.message = <object> m
        Py_XDECREF(m)
        call.state = _YIELD
    else:
        call.rest = _blocking_rest(call, task, done, how, waiting)
        call.state = _GOING_ON
    Py_INCREF(call)
    res[0] = <PyObject*> call
    return 1


def run_entry(Node node, proc, bint gate, name, args, fd, double wake_cost=0.0, spin_s: float = DEFAULT_SPIN_S):
    """`run_blocking` of process `proc`'s call `name` through the call gate (`gate`) or the
    generic system-call entry, on file `fd` (None: no file; else its ``nonblocking``
    flag is read after each WouldBlock): ``node.callgate_path(proc, name, args, first)``
    or ``node.syscall_path(...)``, without a closure per call. Returns the call (await it).
    (`entry_call` is the same for a C caller: libdp's per-message calls.)"""
    return entry_call(node, proc, gate, name, args, fd, wake_cost, spin_s)


def run_user(Node node, proc, fn, tuple args, fd, double cost=0.0, object pool=None, WaitQueue readers=None,
             spin_s: float = DEFAULT_SPIN_S):
    """A user-level call on a pool mapped into `proc` (file `fd`): path ``fn(*args)`` --
    or, for a `KernelRoutine` `fn`, ``fn.start(proc, args)``, a C call.

    `pool`, `readers`: a pool the process can look at (its ``count``) and the queue its
    arrivals wake. When the call starts and finds the pool empty it waits on `readers`
    first (unless `fd` is non-blocking); the call then starts `cost` later (the poll that
    noticed the arrival). After a WouldBlock the retry also starts `cost` later. Returns
    the call (await it); the pool is looked at when it runs, not when it is made.
    (`user_call` is the same for a C caller.)"""
    return user_call(node, proc, fn, args, fd, cost, pool, readers, spin_s)


cdef bint _is_nonblocking(object nonblocking, object proc, object fd) except -1:
    if nonblocking is not None:
        return bool(nonblocking())
    if fd is None:
        return False
    f = (<Process?> proc).fds.get(fd)
    return (<OpenFile> f).nonblocking if isinstance(f, OpenFile) else f.nonblocking


cdef inline bint _empty(object pool) except -1:
    if isinstance(pool, Pool):
        return (<Pool> pool).count == 0
    return pool.count == 0


cdef inline bint _passes(int how, task) except -1:
    """Must the call give trio a pass (or deliver a cancellation) after `how`?"""
    if how == _INLINE:
        return _cancel_pending(task)
    return how != _WOKEN


cdef int _start(_PathMaker call, PyObject** res) except -1:
    """The call up to where it must give trio a pass: 0 with its value in ``res[0]`` if it
    ended first (its error raised), else 1 with `call.rest` made to go on from there.

    In modeled time this is `run_path` and `wait_on` inlined."""
    cdef Engine engine
    cdef _Completion done
    cdef int how
    cdef Node node = call.node
    cdef WaitQueue first_wait = call.first_wait
    cdef double before = call.before
    if not node.modeled:
        call.rest = _blocking_real(node, call, call.nonblocking, call.proc, call.fd, call.spin_s, call.pool,
                                   first_wait)
        return 1
    task = _task()
    if first_wait is not None and _empty(call.pool):
        if not _is_nonblocking(call.nonblocking, call.proc, call.fd):
            done = _completion(None)    # the queue's wake stops the engine itself
            how = _start_wait(node.engine, first_wait, done, task)
            if how == _PARK and _fast_park:
                return _park_call(call, task, done, _PARKED_WAIT, done, res)
            if _passes(how, task):
                call.rest = _blocking_rest(call, task, done, how, True)
                return 1
            before = call.wake_cost
    return _first_try(call, task, before, res)


cdef int _first_try(_PathMaker call, task, double before, PyObject** res) except -1:
    """The call's first try, after `before` seconds of CPU time: as `_start`."""
    cdef Node node = call.node
    cdef Engine engine = node.engine
    path = call.make_after(True, before)
    cdef _Completion done = _completion(engine)
    cdef int how = _start_path(engine, node.cpu, path, done, task)
    if _ended_now(how, done, task, res):
        return 0
    if how == _PARK and _fast_park:
        return _park_call(call, task, done, _PARKED_PATH, _refuse_abort, res)
    call.rest = _blocking_rest(call, task, done, how, False)
    return 1


cdef int _park_call(_PathMaker call, task, _Completion done, int on, abort_func, PyObject** res) except -1:
    """``done.task = task; await _park(abort_func)`` as `_blocking_rest` does it, with no
    coroutine: the call parks by itself (2, trio's message in ``res[0]``) and goes on in
    `_resume`. A blocking read parks once per message: its coroutine, made and dropped,
    and the steps through it cost more than the rest of the park."""
    done.task = task
    if not _hosting:
        raise_readable()                # as `_park`
    m = _wait_message(abort_func)
    call.state = _PARKED
    call.parked = on
    call.task = task
    call.done = done
    Py_INCREF(m)
    res[0] = <PyObject*> m
    return 2


cdef int _resume(_PathMaker call, value, PyObject** res) except -1:
    """The parked call, resumed by trio with `value`: what `_blocking_rest` does after its
    park, up to the next pass it must give trio (1: `call.rest` made to go on from there;
    2: parked again) or its end (0, its value in ``res[0]``)."""
    cdef _Completion done = call.done
    task = call.task
    call.done = None
    call.task = None
    call.state = _NEW                   # (not over: the call is still running)
    _unwrap(value)
    if call.parked == _PARKED_WAIT:
        return _first_try(call, task, call.wake_cost, res)
    if done.exc is None or not isinstance(done.exc, WouldBlock):
        value = _outcome(done)
        Py_INCREF(value)
        res[0] = <PyObject*> value
        return 0
    # A retry: `_blocking_rest` from the same point (after a park, nothing more to give).
    call.rest = _blocking_rest(call, task, done, _WOKEN, False)
    return 1


async def _blocking_rest(_PathMaker call, task, _Completion done, int how, bint waiting):
    """The call `_start` began, from where it must give trio a pass: after the wait for
    its first try (`waiting`) or after a try that went `how` (its completion `done`)."""
    cdef Node node = call.node
    cdef Engine engine = node.engine
    cdef Cpu on = node.cpu
    cdef double wake_cost = call.wake_cost
    nonblocking, proc, fd = call.nonblocking, call.proc, call.fd
    try:
        if waiting:
            if how == _INLINE:
                if _cancel_pending(task):
                    await _to_trio(_checkpoint_if_cancelled)
            elif how == _DONE:
                await _to_trio(_checkpoint)
            elif how == _PARK:
                done.task = task
                _unwrap(await _park(done))
            elif how == _WOKEN_AMONG:
                await _to_trio(_shielded_checkpoint)
            path = call.make_after(True, wake_cost)
            done = _completion(engine)
            how = _start_path(engine, on, path, done, task)
        while True:
            if how == _PARK:
                done.task = task
                _unwrap(await _park(_refuse_abort))
            elif how == _DONE:
                await _to_trio(_checkpoint)
            elif how == _WOKEN_AMONG:
                await _to_trio(_shielded_checkpoint)
            if done.exc is None or not isinstance(done.exc, WouldBlock):
                if how == _INLINE and _cancel_pending(task):
                    await _to_trio(_checkpoint_if_cancelled)
                return _outcome(done)
            wb = done.exc
            done.exc = None
            if _is_nonblocking(nonblocking, proc, fd):
                if how == _INLINE and _cancel_pending(task):
                    await _to_trio(_checkpoint_if_cancelled)
                raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
            # The wait is this call's checkpoint (it parks, or checks for cancellation).
            done = _completion(None)
            how = _start_wait(engine, (<WaitQueue?> wb.queue), done, task)
            if how == _INLINE:
                if _cancel_pending(task):
                    await _to_trio(_checkpoint_if_cancelled)
            elif how == _DONE:
                await _to_trio(_checkpoint)
            elif how == _PARK:
                done.task = task
                _unwrap(await _park(done))
            elif how == _WOKEN_AMONG:
                await _to_trio(_shielded_checkpoint)
            path = call.make_after(False, wake_cost)
            done = _completion(engine)
            how = _start_path(engine, on, path, done, task)
    finally:
        raise_readable()                # control leaves the kernel (see OpenFile)

def run_path_sync(Node node, path):
    return node.run_now(path)


def wait_on_sync(Node node, queue, spin_s: float = DEFAULT_SPIN_S) -> None:
    if node.modeled:
        woken = []
        queue.add(lambda: woken.append(True))
        while not woken:
            if not node.engine.step():
                raise OSError(errno.EDEADLK, "modeled deadlock: nothing can ever wake this call")
        return
    _wait_real_sync(node, queue, spin_s)


cdef int _wait_real_sync(Node node, WaitQueue queue, double spin_s) except -1:
    """Real time: poll the node's devices up to `spin_s`, then sleep on their fds; again
    until `queue` is woken (the polling watchdog, LCI-C09)."""
    cdef _Flag woken = _Flag.__new__(_Flag)
    cdef list ports = node.real_ports
    cdef Engine engine = node.engine
    queue.add(woken)
    try:
        while not woken.set:
            _spin(engine, ports, woken, spin_s)
            if woken.set:
                break
            if _may_sleep(node, ports) and not woken.set:
                select.select([p.fileno() for p in ports], [], [])
                for p in ports:
                    p.drain()
    finally:
        if not woken.set:               # a woken waiter is off the queue already
            queue.discard(woken)
    return 0


def run_blocking_sync(Node node, make_path, *, nonblocking=lambda: False, double wake_cost=0.0,
                      double spin_s=DEFAULT_SPIN_S):
    """`run_blocking` for a caller without trio: returns the call's value."""
    return _blocking_sync(_callable_maker(node, make_path, nonblocking, wake_cost, spin_s, 0.0, False))


def run_entry_sync(Node node, proc, bint gate, name, args, fd, double wake_cost=0.0, double spin_s=DEFAULT_SPIN_S):
    """`run_entry` for a caller without trio: returns the call's value."""
    return _blocking_sync(_entry_maker(node, proc, gate, name, args, fd, wake_cost, spin_s, False))


def run_user_sync(Node node, proc, fn, tuple args, fd, double cost=0.0, object pool=None, WaitQueue readers=None,
                  double spin_s=DEFAULT_SPIN_S):
    """`run_user` for a caller without trio: returns the call's value."""
    return _blocking_sync(_user_maker(node, proc, fn, args, fd, cost, pool, readers, spin_s, False))


cdef object _blocking_sync(_PathMaker maker):
    """`_blocking` without trio. Modeled time: the call drives the engine until the path
    returns (`Node.run_now`), so a modeled result is the async call's. Real time: `_run_real_sync`."""
    cdef Node node = maker.node
    cdef double wake_cost = maker.wake_cost
    nonblocking, proc, fd, spin_s = maker.nonblocking, maker.proc, maker.fd, maker.spin_s
    if not node.modeled:
        return _run_real_sync(node, maker, nonblocking, proc, fd, spin_s, maker.pool, maker.first_wait)
    path = maker.make(True)
    while True:
        try:
            return node.run_now(path)
        except WouldBlock as wb:
            if _is_nonblocking(nonblocking, proc, fd):
                raise BlockingIOError(errno.EAGAIN, str(wb.strerror)) from None
            wait_on_sync(node, wb.queue, spin_s)
        path = maker.make_after(False, wake_cost)


cdef object _run_real_sync(Node node, _PathMaker maker, nonblocking, proc, fd, double spin_s,
                           object pool, WaitQueue first_wait):
    """Real time, no trio: each try runs straight through on the CPU (`_try_real`); the
    wall clock is the only cost, so no modeled lead is added.

    A pool the process can see empty is waited on before the first try (as `_blocking`
    does): a read that would find nothing does not run and fail first. A non-blocking
    call polls the devices once before it says EAGAIN: a real node in this process hears
    its wire only when someone polls it (no interrupt comes between calls), and what has
    arrived by now is what a kernel would have taken.
    """
    cdef Cpu on = node.cpu
    cdef Engine engine = node.engine
    cdef _Completion done
    cdef bint polled = False
    cdef int step
    if first_wait is not None and pool.count == 0 and not _is_nonblocking(nonblocking, proc, fd):
        _wait_real_sync(node, first_wait, spin_s)
    path = maker.make(True)
    while True:
        done = _try_real(on, engine, path)
        step = _after_real_try(done, node, engine, nonblocking, proc, fd, &polled)
        if step == _REAL_WAIT:
            _wait_real_sync(node, done.exc.queue, spin_s)
        elif step != _REAL_RETRY:
            return _outcome(done)
        path = maker.make(False)


async def _blocking_real(Node node, _PathMaker maker, nonblocking, proc, fd, spin_s, object pool,
                         WaitQueue first_wait):
    """`_run_real_sync` for a trio task. The call is one checkpoint: its wait's, or one
    after its only try (a checkpoint is a pass of trio's run loop, a system call and a
    task switch: a read that waited does not take a second)."""
    cdef Cpu on = node.cpu
    cdef Engine engine = node.engine
    cdef _Completion done
    cdef bint polled = False
    cdef bint checked = False
    if first_wait is not None and pool.count == 0 and not _is_nonblocking(nonblocking, proc, fd):
        await wait_on(node, first_wait, spin_s)
        checked = True
    path = maker.make(True)
    while True:
        done = _try_real(on, engine, path)
        step = _after_real_try(done, node, engine, nonblocking, proc, fd, &polled)
        if step == _REAL_WAIT:
            await wait_on(node, done.exc.queue, spin_s)
            checked = True
        elif step != _REAL_RETRY:
            if not checked:
                await checkpoint()
            return _outcome(done)
        path = maker.make(False)


cdef enum:
    _REAL_FINISHED = 0      # the try returned or raised: `_outcome`
    _REAL_WAIT = 1          # it would block: wait on its queue, then try again
    _REAL_RETRY = 2         # non-blocking, and polling the devices took frames: try again


cdef int _after_real_try(_Completion done, Node node, Engine engine, nonblocking, proc, fd, bint* polled) except -1:
    """What a real-time call does after a try. A non-blocking call polls the devices once
    before it says EAGAIN (`_outcome` then raises the BlockingIOError it sets)."""
    if not isinstance(done.exc, WouldBlock):
        return _REAL_FINISHED
    if not _is_nonblocking(nonblocking, proc, fd):
        return _REAL_WAIT
    if polled[0] or not poll_ports(node.real_ports, engine):
        done.exc = BlockingIOError(errno.EAGAIN, str(done.exc.strerror))
        return _REAL_FINISHED
    polled[0] = True
    return _REAL_RETRY


cdef _Completion _try_real(Cpu on, Engine engine, path):
    """One try of a path in real time: straight through on the CPU, then the device work
    it left -- unless it must wait: the wait runs that work once its waiter is on the
    queue, so a wake-up the work causes is never lost."""
    cdef _Completion done = _completion(None)
    on.submit(LEVEL_PROC, path, done)
    if not isinstance(done.exc, WouldBlock):
        engine.run()
    return done


cdef bint _drive_inline(Engine engine, _Completion done, task) except -1:
    """Move modeled time from inside the calling task while it is the only one that can run.

    This is what `EngineClock.drive` would do once trio found every task blocked, less
    two task switches and a pass of trio's run loop per wait. It stops as soon as an
    event wakes anything (this task or another, or makes an fd readable) or the next
    trio deadline comes: from there trio schedules as usual. True when `done` was
    filled and nothing else was woken on the way.
    """
    cdef double until
    cdef RunnableCounter counter = _inline_counter(task, &until)
    if counter is None:
        return False
    return _run_inline(engine, done, counter, until)


cdef inline bint _run_inline(Engine engine, _Completion done, RunnableCounter counter, double until) except -1:
    cdef long long stops = engine.stops
    engine.run_until_stop(until)
    return done.done and engine.stops == stops + 1 and counter.live and counter.runnable == 0


cdef RunnableCounter _inline_counter(task, double* until):
    """The run's counter if the calling task may drive the engine itself now (the only one
    trio would run), with how far in ``until[0]`` (trio's next deadline); else None."""
    # The live counter's run is the calling task's (so this thread's): `own_counter`
    # without the thread's ident, the task's runner read at its slot.
    cdef RunnableCounter counter = live_counter()
    if counter is not None and counter.runner is not None and _task_runner.has(task) \
            and _task_runner.get(task) is counter.runner:
        runner = counter.runner
    elif (counter := own_counter()) is not None and counter.runner is not None:
        runner = counter.runner         # this thread's run is the counter's
    else:
        try:
            runner = task._runner
        except AttributeError:
            runner = None
        counter = None
    if counter is None or counter.runner is not runner:
        # Not a run whose parts the counter holds: ask the clock.
        clock = runner.clock if runner is not None else _current_clock()
        if not isinstance(clock, EngineClock):
            return None
        counter = clock.counter
    elif not counter.own_clock:
        return None
    if not counter.live or counter.runnable != 0:
        return None
    if _fast_deadline and counter.runner is runner and _no_deadline(counter.deadlines):
        until[0] = INFINITY             # (asked on every call: `_deadline_of`'s first test, here)
    else:
        until[0] = _next_trio_deadline(runner, counter)
    return counter


cdef inline bint _no_deadline(deadlines) noexcept:
    """The run's deadline queue is empty (a program without timeouts), read at its slot."""
    if not _deadlines_heap.has(deadlines):
        return False
    heap = _deadlines_heap.get(deadlines)
    return type(heap) is list and PyList_GET_SIZE(heap) == 0


# -- Handing the turn over -----------------------------------------------------------
#
# A modeled ping-pong parks and wakes two tasks per round trip. A's read drives the
# engine until B's message is in, which wakes B, and parks; trio's run loop then makes a
# pass -- its clock, its I/O poll, its deadlines, a batch of one -- to step B, whose read
# drives the engine until A's reply is in; another pass steps A. When such a pass would do
# nothing but step the one task just woken, the parking task takes the step itself: it
# steps B exactly as trio's loop would (the same calls on the task, in the same order),
# and B's next park comes back to it. If B's step completed A's own wait, A goes on with
# no pass of trio's loop at all; else it drives the engine again. What runs, and at which
# modeled instant, is what trio would have run: no modeled result moves. Two passes of
# trio's loop per round trip go.
#
# "Would do nothing but" is checked, not hoped: exactly one task runnable (the counter),
# no descriptor waited on but trio's own wake-up socket -- so an fd a delivery made
# readable wakes no one yet --, no run_sync_soon job queued, no KeyboardInterrupt
# pending, no trio deadline due, no instrument but the counter. A stepped task does not
# hand over in turn (one level deep: its frames sit on its host's stack). A step that ends
# in anything but a park -- a checkpoint, a foreign yield, a return, an exception -- is
# given back to trio, which finishes it as if it had taken the step. Only for a trio
# whose run loop is, to the character, the one replicated (`_REPLICATED_STEP`).

cdef bint _hosting = False      # a task stepped by `_step_woken` is running
cdef _Completion _hosted = None  # meanwhile, the completion its host waits for


@cython.final
cdef class _HostAbort:
    """The hosting task's abort function while it steps another: ``_hosted.host_abort``.
    One object for every hand-over (they are never nested: `_hosting`), not a bound
    method made and dropped per hand-over."""

    def __call__(self, raise_cancel):
        return _hosted.host_abort(raise_cancel)


cdef _HostAbort _HOST_ABORT = _HostAbort.__new__(_HostAbort)


@cython.final
cdef class _GivenBack:
    """A stepped task's end for trio to take as its own step's: the message the task
    yielded, or the exception its step ended in (StopIteration for a return)."""
    cdef object msg, exc

    def __call__(self, _ignored):
        if self.exc is not None:
            exc, self.exc = self.exc, None
            raise exc
        msg, self.msg = self.msg, None
        return msg


cdef inline bint _alone(RunnableCounter counter) noexcept:
    """The counter is the run's only instrument: then no hook of trio's table calls anything
    but it, and it has no after_task_step -- what `_quiet`'s look at the hooks asks, by a
    look at one small table instead of five lookups (trio adds and removes an instrument in
    "_all" and in its hooks' tables together)."""
    cdef dict every = counter.instruments
    cdef Py_ssize_t pos = 0
    cdef PyObject* key
    cdef PyObject* value
    if every is None or PyDict_GET_SIZE(every) != 1 or type(counter) is not RunnableCounter:
        return False
    PyDict_Next(every, &pos, &key, &value)
    return key == <PyObject*> counter


# trio's registered descriptors (a dict) as last seen holding none but its wake-up socket's,
# at that version (`kernelsim._dictver`): asked on every hand-over, it changes only when a
# task waits on a descriptor.
cdef PyObject* _quiet_registered = NULL
cdef unsigned long long _quiet_version = 0


cdef inline bint _only_wakeup_fd(RunnableCounter counter, registered) except -1:
    """No descriptor waited on but trio's own wake-up socket."""
    global _quiet_registered, _quiet_version
    cdef unsigned long long v = dict_version(registered) if PyDict_Check(registered) else 0
    if v != 0 and v == _quiet_version and <PyObject*> registered == _quiet_registered:
        return True
    cdef Py_ssize_t n = len(registered)
    if n > 1 or (n == 1 and counter.wakeup_fd not in registered):
        return False
    if v != 0:
        _quiet_registered = <PyObject*> registered
        _quiet_version = v
    return True


cdef type _deque = collections.deque


cdef inline bint _nonempty(o) except -1:
    """``bool(o)`` for run_sync_soon's queues (a deque and a dict): their sizes read, not
    asked through the type's slots."""
    if type(o) is _deque:
        return Py_SIZE(o) != 0
    if type(o) is dict:
        return PyDict_GET_SIZE(o) != 0
    return bool(o)


cdef bint _quiet(RunnableCounter counter, runner) except -1:
    """Nothing for trio's next pass to attend to but its runnable tasks."""
    registered = counter.io_registered
    if registered is None or _runner_ki_pending.get(runner):
        return False
    if not _only_wakeup_fd(counter, registered):
        return False
    if _nonempty(counter.entry_jobs) or _nonempty(counter.entry_once):
        return False
    if _alone(counter):
        return True
    hooks = counter.hooks
    if hooks.get("after_task_step"):
        return False
    for name in ("before_task_step", "task_scheduled"):
        called = hooks.get(name)
        if called and (len(called) != 1 or counter not in called):
            return False
    return True


# The run queue's bound ``pop``, kept with its queue: ``runq.pop()`` looks the method up on
# every hand-over (a run has one queue for its whole life).
cdef object _popped_queue = None
cdef object _popped_by = None


cdef inline int _runq_pop(runq) except -1:
    global _popped_queue, _popped_by
    if runq is not _popped_queue:
        _popped_by = runq.pop
        _popped_queue = runq
    _popped_by()
    return 0


cdef inline int _set_task(RunnableCounter counter, task) except -1:
    """``GLOBAL_RUN_CONTEXT.task = counter.stepping = task``: in the run's thread, a store
    in the context's dict for that thread (`RunnableCounter.context`)."""
    counter.stepping = task
    if counter.context is not None and counter.thread == PyThread_get_thread_ident():
        PyDict_SetItem(counter.context, "task", task)
    else:
        _GRC.task = task
    return 0


cdef extern from "Python.h":
    int PyContext_Enter(object ctx) except -1
    int PyContext_Exit(object ctx) except -1

_Context = type(contextvars.copy_context())


cdef object _run_in(ctx, fn, arg):
    """``ctx.run(fn, arg)``, what trio steps a task with: for a Context, its enter and exit
    by C calls, without looking the method up and parsing its arguments."""
    if type(ctx) is not _Context:
        return ctx.run(fn, arg)
    PyContext_Enter(ctx)
    try:
        return fn(arg)
    finally:
        PyContext_Exit(ctx)


cdef object _step_in(task, send_fn, send):
    return _run_in(_task_context.get(task), send_fn, send)


ctypedef PyObject* (*_StepInFn)(object, object, object) noexcept
cdef _StepInFn _step_in_unchecked = <_StepInFn> _step_in


cdef int _step_woken(task, _Completion done, Engine engine) except -1:
    """Step the one runnable task here, as trio's next pass would, if that pass would do
    nothing else; 1 if it was stepped (parked again, or given back to trio), else 0.

    Meanwhile `task`, waiting for `done`, is parked as trio sees it: `done` completing
    counts it runnable, and a cancellation reaches it through its park's abort."""
    global _hosting, _hosted
    cdef RunnableCounter counter = live_counter()
    if not _fast_step or _hosting or counter is None or not counter.own_clock or counter.runnable != 1:
        return 0
    runner = counter.runner
    runq = counter.runq                 # trio's deque (its length at Py_SIZE, as `_wake` reads it)
    if Py_SIZE(runq) != 1:
        return 0
    other = runq[0]
    send_fn = _task_send_fn.get(other)
    if other is task or type(send_fn) is _GivenBack or _task_runner.get(task) is not runner:
        return 0
    if not _quiet(counter, runner) or engine.now >= _next_trio_deadline(runner, counter):
        return 0
    # trio's loop from here: pop, before_task_step, take the send, step in the task's context.
    _runq_pop(runq)
    counter.runnable -= 1
    counter.stepped += 1
    send = _task_send.get(other)
    _task_send_fn.set(other, None)
    _task_send.set(other, None)
    cdef _GivenBack given = None
    if other is not counter.kernel_woken:
        raise_readable()                # it may resume outside the kernel (see OpenFile)
    counter.kernel_woken = None
    _set_task(counter, other)
    _hosting = done.hosting = True
    _hosted = done
    _task_abort_func.set(task, _HOST_ABORT)
    cdef bint deferring = defer_raising(False)     # its own calls defer for themselves
    global _parks_noted, _noted_message, _noted_abort
    _parks_noted = True
    # (Stepped through a pointer that does not say it can fail, its error taken here: a
    # `try` block walks the stack of handled exceptions, one entry per coroutine.)
    cdef PyObject* res = _step_in_unchecked(other, send_fn, send)
    if res == NULL:
        exc = take_raised()
        given = _GivenBack.__new__(_GivenBack)
        given.exc = exc
    else:
        msg = <object> res
        Py_XDECREF(res)
    defer_raising(deferring)
    _parks_noted = False
    noted_message, noted_abort = _noted_message, _noted_abort
    _noted_message = _noted_abort = None
    _hosting = done.hosting = False
    _hosted = None
    _task_abort_func.set(task, None)
    _set_task(counter, task)
    if given is None:
        if type(msg) is _WaitTaskRescheduled:
            # Parked again: trio's handling of the message.
            _task_schedule_points.set(other, _task_schedule_points.get(other) + 1)
            _task_cancel_points.set(other, _task_cancel_points.get(other) + 1)
            # (The message the step's park yielded, held meanwhile: its abort function as
            # noted; a message from elsewhere is read.)
            _task_abort_func.set(other, noted_abort if msg is noted_message else msg.abort_func)
            if _runner_ki_pending.get(runner) and other is _runner_main_task.get(runner):
                other._attempt_delivery_of_pending_ki()
            if _status_cancelled.get(_task_cancel_status.get(other)):   # the method's own first test, asked first
                other._attempt_delivery_of_any_pending_cancel()
            return 1
        given = _GivenBack.__new__(_GivenBack)
        given.msg = msg
    _task_send_fn.set(other, given)
    runq.append(other)
    hooks = counter.hooks.get("task_scheduled")
    if hooks:
        _task_scheduled(runner, hooks, other)
    return 1


# -- Checkpoints that find nothing to do ---------------------------------------------
#
# Every public async call is a checkpoint: a cancel point, and a schedule point where trio
# may run other tasks. In real time, a call that finished at once pays its schedule point
# as a full pass of trio's run loop -- an epoll_wait, the deadline queue, a batch -- even
# in a program whose only task is the caller, where the pass finds nothing to do but
# resume it: for a script's ping-pong, most of what its trio calls cost beyond the blocking
# ones. `checkpoint` is trio's, less that pass when trio would provably do nothing else:
# no other task runnable (the run's `RunnableCounter`, which must see the run from its
# start: libdp's real-time runs pass it), no descriptor waited on but trio's own wake-up
# socket, no run_sync_soon job, no KeyboardInterrupt pending, no deadline due. The cancel
# point stays. A loop of such calls in one task therefore starves no one: the moment
# another task can run, each call is a full checkpoint again. It reads the internals
# `_step_woken` reads, and only where that may.

cdef bint _nothing_else_to_run(task) except -1:
    """Would a schedule point now only resume `task`, the calling one?"""
    cdef RunnableCounter counter = live_counter()
    if counter is None and _fast_step:
        counter = join_run()            # a script's own trio.run: counted from the next pass on
    if not _fast_step or counter is None or not counter.live or counter.runnable != 0:
        return False
    if counter is own_counter():
        runner = counter.runner
    else:
        try:
            runner = task._runner
        except AttributeError:
            return False
    if counter.runner is not runner or not _quiet(counter, runner):
        return False
    cdef double due = _next_trio_deadline(runner, counter)
    return due == INFINITY or due > runner.clock.current_time()


def sleep_until_readable(int fd) -> bool:
    """Sleep until `fd` is readable, here, if that is all trio's next pass would do: nothing
    else to run, no other descriptor waited on (see "Checkpoints that find nothing to do").

    The sleep is trio's own -- `fd` and trio's wake-up socket, until trio's next deadline --
    less the registration of `fd` with trio's epoll, the pass around it and the task's
    park and wake. True when `fd` is readable: the sleep was the caller's checkpoint, and
    is counted as trio counts a park (``trio.testing.assert_checkpoints`` sees it), so a
    call that slept here needs no other. False when it did not sleep -- also when a
    cancellation is already pending, which trio's park would deliver at once -- or woke
    for trio (a run_sync_soon job or a signal came, a deadline fell due): the caller then
    waits trio's way (``wait_readable``), which attends to that first.
    """
    task = _task()
    if not _nothing_else_to_run(task) or _cancel_pending(task):
        return False
    cdef RunnableCounter counter = live_counter()
    runner = counter.runner
    cdef double due = _next_trio_deadline(runner, counter)
    cdef int timeout_ms = -1
    if due != INFINITY:
        timeout_ms = <int> ceil((due - runner.clock.current_time()) * 1e3)
        if timeout_ms <= 0:
            return False
    cdef pollfd fds[2]
    fds[0].fd = fd
    fds[0].events = POLLIN
    fds[1].fd = counter.wakeup_fd
    fds[1].events = POLLIN
    cdef int n
    while True:
        with nogil:
            n = poll(fds, 2, timeout_ms)
        if n >= 0:
            break
        if c_errno != EINTR:
            raise OSError(c_errno, os.strerror(c_errno))
        PyErr_CheckSignals()            # a handler that raises ends the sleep (PEP 475)
        return False                    # a signal: trio may have work (its handler wakes it)
    if n > 0 and fds[0].revents != 0 and fds[1].revents == 0:
        # Woken by `fd` alone, with no job or signal for trio: the park ends as trio's
        # would. (A deadline that fell due meanwhile is delivered at the next checkpoint,
        # as trio delivers it after the I/O that woke a task in the same pass.)
        task._schedule_points += 1
        task._cancel_points += 1
        return True
    return False


def checkpoint():
    """``trio.lowlevel.checkpoint()``, without the pass of trio's run loop when that pass
    would only resume the caller (see "Checkpoints that find nothing to do"); a cancel
    point always. Await it at once, as trio's: it decides when called and returns what to
    await -- where nothing is to be done, an awaitable that is already finished, so that
    the commonest checkpoint makes no coroutine."""
    task = _task()
    if _nothing_else_to_run(task):
        # A schedule point all the same -- decided here, on trio's own state -- and counted
        # as trio counts them (`trio.testing.assert_checkpoints` reads the counts).
        task._schedule_points += 1
        if _cancel_pending(task):
            return _checkpoint_if_cancelled()
        task._cancel_points += 1
        return _PASSED
    return _checkpoint()


@cython.final
cdef class _Passed:
    """An awaitable whose ``await`` is over at once (None): a checkpoint already taken."""

    def __await__(self):
        return self

    def __iter__(self):
        return self

    def __next__(self):
        raise StopIteration


cdef _Passed _PASSED = _Passed()


@cython.final
cdef class _Flag(Waiter):
    """A real-time wait's waiter: the queue's wake sets it, the polling loop reads it;
    a trio task asleep on the node's ports (`scope`) is woken."""
    cdef bint set
    cdef object scope

    cdef int wake_up(self) except -1:
        self.set = True
        if self.scope is not None:
            self.scope.cancel()
        return 0


DEF SPIN_POLLS_PER_YIELD = 4


cdef int _spin(Engine engine, list ports, _Flag woken, double spin_s) except -1:
    """Poll the node's devices until `woken` or `spin_s` has passed.

    Every few empty polls the CPU is offered to other processes (sched_yield): when the
    peer shares this core -- more nodes than cores -- it runs soon instead of after the
    whole spin; on a core of its own the yield returns at once, but a yield is a pass
    through the scheduler all the same (about as dear as the poll), and every pass a frame
    waits for is delay on the round trip: so not after every poll (`SPIN_POLLS_PER_YIELD`).
    """
    cdef double deadline = wall_now() + spin_s
    cdef unsigned int empty = 0
    while not woken.set:                    # at least one pass, also with spin_s == 0
        engine.now = wall_now()             # real time: what a path reads as "now" is the wall clock
        if not poll_ports(ports, engine):
            if engine.peek() != INFINITY:
                # A timer a path armed (a keep-alive, a retransmission): in real time every
                # event is due at once, and the waiter it wakes polls again -- the spin of a
                # protocol that polls, its timeout counted in polls as on the machine.
                engine.run()
            empty += 1
            if empty % SPIN_POLLS_PER_YIELD == 0:
                sched_yield()
        if wall_now() >= deadline:
            break
    return 0


def _may_sleep(Node node, ports) -> bool:
    """Nothing left to run but what a port brings: every port told to ring (else False).
    An armed timer (a polling protocol's next poll) keeps the waiter polling instead."""
    if node.engine.peek() != INFINITY:
        return False
    return all(p.prepare_to_sleep() for p in ports)


cdef double _next_trio_deadline(runner, RunnableCounter counter) except? -1.0:
    """When trio's next deadline falls (the clock is the engine's, so it is modeled time).

    ``current_statistics()`` answers this but also gathers I/O statistics, which made it
    the costliest call of a modeled round trip; ask the runner's deadline queue when
    this trio has one, else fall back to the public call. No deadline at all (a program
    without timeouts) is an empty heap: answered without the queue's Python method.
    """
    cdef double due = _deadline_unchecked(runner, counter)
    if due == -1.0 and PyErr_Occurred():
        exc = take_raised()
        if not isinstance(exc, AttributeError):
            raise exc
        gap = trio.lowlevel.current_statistics().seconds_to_next_deadline
        return trio.current_time() + gap if gap < math.inf else math.inf
    return due


cdef double _deadline_of(runner, RunnableCounter counter) except? -1.0:
    if runner is None:
        runner = _GRC.runner
    deadlines = counter.deadlines if counter.runner is runner else runner.deadlines
    if not _fast_deadline:
        return deadlines.next_deadline()
    # `Deadlines.next_deadline`, replicated: the first entry whose scope still has that
    # deadline, the stale ones dropped.
    heap = _deadlines_heap.get(deadlines)
    if type(heap) is list and PyList_GET_SIZE(heap) == 0:
        return INFINITY                 # no deadline (a program without timeouts)
    while heap:
        deadline, _, scope = <tuple> heap[0]
        if deadline == _scope_deadline.get(scope):
            return deadline
        heappop(heap)
    return INFINITY


# Both asked on every modeled call, and called through pointers that do not declare they
# can fail, their error taken by the caller (`take_raised`): a `try` block costs more.
ctypedef int (*_TaskTest)(object) noexcept
ctypedef double (*_DeadlineFn)(object, RunnableCounter) noexcept
cdef _TaskTest _cancel_pending_unchecked = <_TaskTest> _cancel_pending_of
cdef _DeadlineFn _deadline_unchecked = <_DeadlineFn> _deadline_of


async def _wait_any_readable(fds):
    if len(fds) == 1:
        await trio.lowlevel.wait_readable(fds[0])
        return
    async with trio.open_nursery() as nursery:
        async def one(fd):
            await trio.lowlevel.wait_readable(fd)
            nursery.cancel_scope.cancel()
        for fd in fds:
            nursery.start_soon(one, fd)
