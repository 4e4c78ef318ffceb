"""A node as an OS process (real time): the node server, the memory it shares with the
processes attached to it, and the rings they talk through.

* `NodeServer` -- runs one real-time node's kernel and serves attached processes: system
  calls over a UNIX control socket, call gates through per-file submission rings in
  shared memory, files handed over as descriptors (see ``_server``'s essay).
* `MemfdRegion` -- the allocator a real node installs for kernel memory a process maps
  read-only (``Node.shared_allocator``).
* `EventRing` -- records from the node to one process, its eventfd readable while any wait.

It knows nothing of DP: a file that has more to show its owner than readiness says so
through ``export_to(owner)``.
"""
from kernelsim.daemon._passthrough import Passthrough
from kernelsim.daemon._regions import MemfdRegion, map_readonly
from kernelsim.daemon._rings import EventRing, batch_posts, event_ring_bytes, publish_posts
from kernelsim.daemon._server import (ERROR_WORD_OFFSET, GATE_CALL, GATE_FILEOP, GATE_SLOT_BYTES, GATE_SLOTS,
                                      NodeServer, default_spin)
from kernelsim.daemon._wire import BYTES, pack_args, recv_msg, send_msg, unpack_args

__all__ = ["NodeServer", "Passthrough", "MemfdRegion", "map_readonly", "EventRing", "event_ring_bytes", "batch_posts", "publish_posts", "GATE_CALL", "GATE_FILEOP",
           "GATE_SLOTS", "GATE_SLOT_BYTES", "ERROR_WORD_OFFSET", "default_spin", "BYTES", "pack_args", "recv_msg", "send_msg",
           "unpack_args"]
