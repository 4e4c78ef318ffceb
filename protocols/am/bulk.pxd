# The bulk-transfer part of the SP AM endpoint chain (fields: window.pxd).
from protocols.am.keepalive cimport KeepAlive


cdef class Bulk(KeepAlive):
    pass
