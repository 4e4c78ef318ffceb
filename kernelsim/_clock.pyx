# cython: language_level=3, annotation_typing=False
"""trio, running in modeled time.

`EngineClock` is a trio clock whose time *is* the engine's, and `EngineClock.drive`
is the task that moves it: it sleeps until every other task is blocked and no I/O is
ready -- the moment at which, on real hardware, the CPUs would be waiting for devices
(trio asks the clock how long it may sleep; see `_until_idle`) -- and then
runs engine events (devices, wires, interrupt and kernel paths) until one of them
makes a task runnable or until the next trio deadline, whichever comes first. trio
carries on at that modeled instant. This is how MockClock's autojump works, with the
engine's event list in place of a bare jump. Nothing sleeps in wall time, so a
modeled millisecond costs only the events inside it.

A task that finds itself the only runnable one may move modeled time itself rather
than park and wait for `drive` (libdp does, for speed). "The only runnable one" must
count every task trio will still run at this instant -- including the rest of the
batch trio is working through, which its statistics do not show -- or tasks would run
late in modeled time, and in an order that depends on trio's shuffling of batches. So
the clock carries an Instrument that counts exactly -- tasks scheduled minus task steps
begun -- and must see the run from its start: pass ``instruments=[clock.counter]`` to
``trio.run`` (``Cluster.run`` does). Without it, tasks simply park and `drive` moves
time: correct, only slower.

If every task is blocked, no engine event is pending and no trio deadline is set, the
modeled cluster can never move again: `drive` cancels the run's scope and records the
deadlock, and the run ends with OSError(EDEADLK) rather than hanging.
"""
from __future__ import annotations

import errno
import math
import threading

import trio
from trio._core import _run as _trio_run       # (trio.testing's wait_all_tasks_blocked too: importing
                                              # trio.testing imports pytest, a tenth of a second per command)
from cpython.pythread cimport PyThread_get_thread_ident
from kernelsim._node cimport raise_readable

_GRC = _trio_run.GLOBAL_RUN_CONTEXT

__all__ = ["EngineClock", "RunnableCounter"]


cdef RunnableCounter _live = None


cdef RunnableCounter live_counter():
    """The counter of the trio run in progress (None outside one, or for another trio)."""
    return _live


cdef RunnableCounter own_counter():
    """`live_counter()` if the calling thread is the one its run is in, else None."""
    if _live is not None and _live.thread == PyThread_get_thread_ident():
        return _live
    return None


cdef class RunnableCounter:
    """Tasks trio will still run before it next looks for I/O: scheduled - steps begun.

    An instrument (trio asks it by hook name, so it need not subclass
    `trio.abc.Instrument`); its hooks run twice per task switch, so they are C methods.
    ``stepped`` counts the task steps a modeled wait took in trio's stead in this run
    (`kernelsim._trio`, "Handing the turn over"): they count as steps begun too.
    """

    def before_run(self) -> None:
        global _live
        self.runnable = 0
        self.stepped = 0
        self.live = True
        try:
            runner = _GRC.runner
        except AttributeError:
            return
        if self._bind(runner):
            _live = self

    cdef bint _bind(self, runner) except -1:
        """Take the parts of `runner` the calls read (False: another trio's internals)."""
        try:
            self.runq = runner.runq
            self.runq_append = self.runq.append
            self.is_guest = runner.is_guest
            self.hooks = runner.instruments.data
            self.deadlines = runner.deadlines
        except AttributeError:          # another trio's internals: the calls look them up
            return False
        every = self.hooks.get("_all")
        self.instruments = every if type(every) is dict else None
        try:
            self.io_registered = runner.io_manager._registered
            self.entry_queue = runner.entry_queue
            self.entry_jobs = runner.entry_queue.queue
            self.entry_once = runner.entry_queue.idempotent_queue
            self.wakeup_fd = runner.entry_queue.wakeup.wakeup_sock.fileno()
        except AttributeError:          # no hand-over of the turn (`_trio._step_woken`)
            self.io_registered = self.entry_queue = self.entry_jobs = self.entry_once = None
            self.wakeup_fd = -1
        self.runner = runner
        self.thread = PyThread_get_thread_ident()
        self.context = _context_dict()
        self._main_task = None
        self.stepping = None
        clock = runner.clock
        self.own_clock = isinstance(clock, EngineClock) and clock.counter is self
        return True

    cdef object main_task(self):
        if self._main_task is None and self.runner is not None:
            self._main_task = self.runner.main_task      # None until trio has made it
        return self._main_task

    def after_run(self) -> None:
        global _live, _joining
        raise_readable()
        if _joining is self:
            _joining = None
        self.live = False
        self.runner = self.runq = self.runq_append = self.hooks = self.deadlines = self._main_task = None
        self.kernel_woken = None
        self.instruments = None
        self.context = None
        self.send_coro0 = self.send_fn0 = self.send_coro1 = self.send_fn1 = None
        self.stepping = None
        self.io_registered = self.entry_queue = self.entry_jobs = self.entry_once = None
        self.own_clock = False
        if _live is self:
            _live = None

    def task_scheduled(self, task) -> None:
        self.runnable += 1

    def before_task_step(self, task) -> None:
        self.runnable -= 1
        self.stepping = task
        self.kernel_woken = None
        raise_readable()                # the task may look at a descriptor (see OpenFile)


cdef dict _context_dict():
    """This thread's dict of trio's run context, where ``GLOBAL_RUN_CONTEXT.task = t`` puts
    `t` -- when the context is a threading.local whose classes define no descriptor for
    ``task`` (a write is then the dict's); else None."""
    cls = type(_GRC)
    if threading.local not in cls.__mro__ or any("task" in k.__dict__ for k in cls.__mro__):
        return None
    d = _GRC.__dict__
    return d if type(d) is dict else None


# -- a counter for a run started without one ----------------------------------------------

cdef RunnableCounter _joining = None


cdef class _Sync:
    """Makes a counter that joined a run mid-way exact, then leaves: once trio's I/O wait
    ends, the batch the counter did not see begin is over and the tasks trio runs next
    are exactly its run queue (what it schedules from here on, the counter counts)."""
    cdef RunnableCounter counter

    def after_io_wait(self, timeout) -> None:
        global _live, _joining
        c = self.counter
        trio.lowlevel.remove_instrument(self)
        if _joining is c:
            _joining = None
        if c.runner is None:
            return
        c.runnable = len(c.runq)
        c.live = True
        _live = c


cdef RunnableCounter join_run():
    """The counter of the trio run in progress; for a run started without one, a counter
    joins it and counts from the end of trio's next I/O wait on (None until then, and
    outside trio or for another trio's internals). Scripts that call ``trio.run``
    themselves get one at their first DP call."""
    global _joining
    try:
        runner = _GRC.runner
    except AttributeError:
        return None
    if _live is not None and _live.runner is runner:
        return _live
    if _joining is not None and _joining.runner is runner:
        return None
    cdef RunnableCounter c = RunnableCounter.__new__(RunnableCounter)
    if not c._bind(runner):
        return None
    cdef _Sync sync = _Sync.__new__(_Sync)
    sync.counter = c
    trio.lowlevel.add_instrument(c)
    trio.lowlevel.add_instrument(sync)
    _joining = c
    return None


class EngineClock(trio.abc.Clock):
    def __init__(self, engine):
        self.engine = engine
        self.counter = RunnableCounter()
        self.deadlocked = False
        # An error an engine event raised while `drive` ran it: the run's, raised by `run`
        # (a system task's error would be trio's TrioInternalError -- or no error at all,
        # the run hung, while a task waits for a path only the engine can finish).
        self.failed = None
        self._idle_waiter = None        # `drive`'s task while it waits for trio to go idle

    def start_clock(self) -> None:
        pass

    def current_time(self) -> float:
        return self.engine.now

    def deadline_to_sleep_time(self, deadline: float) -> float:
        # trio asks this only when it has no task left to run: the moment `drive` waits
        # for. Wake it (and sleep not at all); otherwise never sleep in wall time for a
        # modeled deadline: `drive` moves time instead.
        task = self._idle_waiter
        if task is not None:
            self._idle_waiter = None
            trio.lowlevel.reschedule(task)
            return 0.0
        return 0.0 if deadline <= self.engine.now else 86400.0

    def only_runnable_task(self) -> bool:
        """True when the calling task is the only one trio would run now."""
        return self.counter.live and self.counter.runnable == 0

    async def _until_idle(self) -> None:
        """Return once every other task is blocked (the counter must be live).

        trio's ``wait_all_tasks_blocked`` would do, but while a task waits in it trio
        looks its waiters up in a sorted dict on every pass of its run loop -- every
        task switch of a modeled program. Here trio's own question to the clock,
        `deadline_to_sleep_time`, wakes this task; it goes back to sleep if the same
        pass also woke another task (an fd became readable, a deadline expired).
        """
        while True:
            self._idle_waiter = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_idle_wait)
            if self.counter.runnable == 0:
                return

    def _abort_idle_wait(self, _raise_cancel):
        self._idle_waiter = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def drive(self, scope: trio.CancelScope | None = None) -> None:
        """Run the engine whenever every other task is blocked.

        Start it beside the modeled program (`run` does, as a system task). On deadlock
        it cancels `scope` if given, else raises OSError(EDEADLK) into its nursery.
        """
        engine = self.engine
        counter = self.counter
        stats = trio.lowlevel.current_statistics
        wait_idle = _trio_run.wait_all_tasks_blocked
        while True:
            if counter.live:
                await self._until_idle()
            else:
                await wait_idle()
            gap = stats().seconds_to_next_deadline
            until = engine.now + gap if gap < math.inf else math.inf
            try:
                engine.run_until_stop(until)
            except Exception as exc:
                # The engine cannot go on from half an event: the tasks waiting for it are
                # let go (a kernel path's park, which refuses a cancellation while the engine
                # can still finish the path, accepts one now: `kernelsim._trio._refuse_abort`)
                # and the error is the run's.
                self.failed = exc
                if scope is None:
                    raise
                scope.cancel()
                return
            if engine.stop_requested:
                continue
            if until < math.inf:
                engine.now = until          # a trio deadline expires at this modeled time
                continue
            self.deadlocked = True
            if scope is None:
                raise OSError(errno.EDEADLK, "modeled deadlock: every process is blocked and no event is pending")
            scope.cancel()
            return

    async def run(self, async_fn, *args):
        """Run ``async_fn(*args)`` in modeled time (inside ``trio.run(..., clock=self)``)."""
        self.deadlocked = False
        self.failed = None
        with trio.CancelScope() as scope:
            trio.lowlevel.spawn_system_task(self.drive, scope)
            try:
                return await async_fn(*args)
            finally:
                if self.failed is not None:
                    # In place of the Cancelled (or value) the program ended with.
                    exc, self.failed = self.failed, None
                    raise exc from exc.__cause__
        if self.deadlocked:
            raise OSError(errno.EDEADLK, "modeled deadlock: every process is blocked and no event is pending")
        raise RuntimeError("modeled run cancelled")  # pragma: no cover - only a deadlock cancels it
