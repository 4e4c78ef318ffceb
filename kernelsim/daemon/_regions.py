"""Kernel memory a user process maps: anonymous memory files (memfd).

A real node installs `MemfdRegion` as its ``shared_allocator`` (see
`kernelsim.Node.alloc_shared`), so every region a module asks for -- DP's Token Buffer
Pools -- is a memory file of its own. A process is given a descriptor that was opened
**read-only** (`MemfdRegion.readonly_fd`): it can map the pages for reading and nothing
else (``mmap(PROT_WRITE)`` is EACCES, a store through a read-only mapping is SIGSEGV),
which is the isolation DP's design asks of the TBP. The file has no name in any file
system: it lives while the node or the process holds it, and a crash leaves nothing in
``/dev/shm``.
"""
from __future__ import annotations

import errno
import mmap
import os

__all__ = ["MemfdRegion", "map_readonly"]


class MemfdRegion:
    """A region of `nbytes` in a memory file of its own (``buf``, ``name``, ``fd``, ``release()``)."""

    __slots__ = ("buf", "name", "fd", "_mm")

    def __init__(self, nbytes: int, name_hint: str = ""):
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise OSError(errno.EINVAL, f"a shared region needs a positive size, not {nbytes!r}")
        self.name = f"memfd:{name_hint or 'dp-region'}"
        self.fd = os.memfd_create(name_hint or "dp-region", os.MFD_CLOEXEC)
        try:
            os.ftruncate(self.fd, nbytes)
            self._mm = mmap.mmap(self.fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise
        self.buf = memoryview(self._mm)

    def readonly_fd(self) -> int:
        """A new descriptor of this memory file opened O_RDONLY (the caller closes it)."""
        if self.buf is None:
            raise OSError(errno.EBADF, f"region {self.name} was released")
        return os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)

    def release(self) -> None:
        if self.buf is not None:
            self.buf.release()
            self.buf = None
            self._mm.close()
            os.close(self.fd)

    def __repr__(self):
        return f"<MemfdRegion {self.name} {'released' if self.buf is None else len(self.buf)}>"


def map_readonly(fd: int):
    """Map a whole memory file for reading: (mmap, read-only memoryview)."""
    size = os.fstat(fd).st_size
    mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
    return mm, memoryview(mm)
