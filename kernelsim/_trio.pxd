from kernelsim._node cimport Node
from kernelsim._waits cimport WaitQueue

# `run_entry` and `run_user` for a C caller (libdp's per-message calls): the call's
# coroutine, without a Python call that parses eight or nine arguments.
cdef object entry_call(Node node, object proc, bint gate, object name, object args, object fd, double wake_cost,
                       object spin_s)
cdef object user_call(Node node, object proc, object fn, tuple args, object fd, double cost, object pool,
                      WaitQueue readers, object spin_s)
