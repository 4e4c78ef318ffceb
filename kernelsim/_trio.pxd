from cpython.ref cimport PyObject
from kernelsim._node cimport Node
from kernelsim._waits cimport WaitQueue

# `run_entry` and `run_user` for a C caller (libdp's per-message calls): the call's
# coroutine, without a Python call that parses eight or nine arguments.
cdef object entry_call(Node node, object proc, bint gate, object name, object args, object fd, double wake_cost,
                       object spin_s)
cdef object user_call(Node node, object proc, object fn, tuple args, object fd, double cost, object pool,
                      WaitQueue readers, object spin_s)

# The same for a call of two arguments (DP's per-message calls), with no argument tuple.
cdef object entry_call_pair(Node node, object proc, bint gate, object name, object a, object b, object fd,
                        double wake_cost, object spin_s)
cdef object user_call_pair(Node node, object proc, object fn, object a, object b, object fd, double cost,
                       object pool, WaitQueue readers, object spin_s)

# ``await call`` for a compiled caller that awaits at once (the compiled benchmark loops):
# for a call made by the above and not yet stepped, it runs now, and a call that ends
# without a pass of trio's (most of a modeled ping-pong's) returns its value with no
# awaitable stepped and no StopIteration raised; otherwise ``later[0]`` is a new reference
# to what to await for the value (and this returns None). Its error is raised here.
cdef object call_now(object call, PyObject** later)

# ``await run_path(node, path)`` for a compiled caller that awaits at once (AM's calls, per
# transfer): the path's value where it ran to its end with nothing owed to trio -- a
# modeled call that does not block, the usual case -- with no coroutine made; otherwise
# ``rest[0]`` is a new reference to what to await for the value (and this returns None).
cdef object path_call(Node node, object path, PyObject** rest)

# ``call_now(entry_call_pair(...))`` and ``call_now(user_call_pair(...))`` as one call (the
# compiled benchmark loops'): the call object is made only where the call must give trio a
# pass -- most of a modeled ping-pong's calls end without one, and make none.
cdef object entry_pair_now(Node node, object proc, bint gate, object name, object a, object b, object fd,
                           double wake_cost, object spin_s, PyObject** later)
cdef object user_pair_now(Node node, object proc, object fn, object a, object b, object fd, double cost,
                          object pool, WaitQueue readers, object spin_s, PyObject** later)
