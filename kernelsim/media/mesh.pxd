cdef class OnlyPeer:
    # The router of a cluster of two: every frame goes to the one other node.
    cdef readonly long nid


cdef class MeshSender:
    # `ShmMesh`'s sending side, typed: what a `DevicePort` reaches by a C call per frame.
    cdef public object dest_of          # dest_of(frame) -> node id or None
    cdef public long nid
    cdef public dict _out               # peer node id -> its ring (attached on first send)
    cdef public long long tx_no_peer, tx_no_station, tx_full

    cdef int send_c(self, object frame, const unsigned char* p, Py_ssize_t n) except -1
