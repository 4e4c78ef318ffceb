cdef class RunnableCounter:
    cdef public long long runnable
    cdef public long long stepped   # task steps taken by a modeled wait, not by trio's loop
    cdef public bint live
    # The run it counts, and the parts of trio's runner a modeled call touches on every
    # park and wake (constant for the run): read once at ``before_run``.
    cdef readonly object runner
    cdef object runq
    cdef object runq_append         # its bound append (a deque's: a method lookup per wake)
    cdef bint is_guest              # the runner's (constant for a run)
    cdef dict hooks
    # trio's table of every instrument of the run (``hooks["_all"]``, made once with the
    # table): while the counter is alone in it, no hook calls anything else (`_trio._quiet`).
    cdef dict instruments
    cdef object deadlines
    # What else trio's next pass would look at before it steps a task (`_trio._step_woken`):
    # the I/O manager's registered descriptors, the run_sync_soon queue, and the one
    # descriptor trio itself always waits on (that queue's wake-up socket).
    cdef object io_registered
    cdef object entry_queue
    cdef object entry_jobs, entry_once     # its two queues (trio never replaces them: a digest in _trio checks)
    cdef int wakeup_fd
    cdef readonly bint own_clock    # the run's clock is the EngineClock this counter belongs to
    # The thread the run is in: one trio run per thread, so a call made in it is a call of
    # this run (a C comparison where reading the calling task's runner was a lookup).
    cdef unsigned long thread
    cdef object _main_task          # the run's main task, once trio made it
    # The task `kernelsim._trio` woke last from a kernel wait, until a task is stepped: a
    # task stepped in its stead resumes in the kernel (see OpenFile's lazy raise).
    cdef public object kernel_woken
    # The task being stepped (trio's GLOBAL_RUN_CONTEXT.task, a thread-local whose read costs
    # about 500 instructions): set by the step hook and by `_trio`'s hand-over, which sets
    # trio's too. None until the first step the counter sees.
    cdef public object stepping
    # This thread's dict of trio's run context (a threading.local: its attributes live
    # there, and a write through the local costs ~500 instructions, mostly finding it):
    # where `_trio`'s hand-over writes the task it steps. None for another trio.
    cdef dict context
    # The bound ``send`` of the last two task coroutines woken (a wake sets a task's next
    # send to its coroutine's send, as trio's reschedule does): made once, not per wake.
    cdef object send_coro0, send_fn0, send_coro1, send_fn1

    cdef bint _bind(self, runner) except -1
    cdef object main_task(self)


cdef RunnableCounter live_counter()
cdef RunnableCounter own_counter()
cdef RunnableCounter join_run()
