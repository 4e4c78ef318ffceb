# Resuming a generator from C: the kernel paths' C iterators (_cpu, _irq, _node, _trio)
# step Python generators with PyIter_Send instead of a Python-level send() per resume.
# And taking an error without a `try` block, for the loops that step paths.
from cpython.exc cimport PyErr_Fetch, PyErr_NormalizeException
from cpython.ref cimport PyObject, Py_XDECREF


cdef extern from "Python.h":
    ctypedef enum PySendResult:
        PYGEN_RETURN
        PYGEN_ERROR
        PYGEN_NEXT
    PySendResult PyIter_Send(object iter, object arg, PyObject** presult)


cdef inline int resume(object gen, PyObject** result) except -1:
    """Resume `gen`: 1 and what it yielded, 0 and what it returned; or raise its error."""
    return <int> PyIter_Send(gen, None, result)


cdef extern from "Python.h":
    int PyException_SetTraceback(object exc, object tb) except -1


cdef inline object take_raised():
    """Take the exception being raised, as ``except BaseException as e`` would bind it.

    For a hot loop that calls a function through a pointer declared ``noexcept`` and
    looks at its -1 itself: entering a `try` block walks the thread's stack of handled
    exceptions, one entry per coroutine the engine runs inside of (~120 instructions),
    more than a path's step. See `kernelsim._cpu._advance`."""
    cdef PyObject* kind
    cdef PyObject* value
    cdef PyObject* tb
    PyErr_Fetch(&kind, &value, &tb)
    PyErr_NormalizeException(&kind, &value, &tb)
    exc = <object> value
    if tb != NULL:
        PyException_SetTraceback(exc, <object> tb)
    Py_XDECREF(kind)
    Py_XDECREF(value)
    Py_XDECREF(tb)
    return exc
