"""Host memory as LCI's user process sees it: virtual pages, and the host TLB of RCPY.

RCPY names memory by virtual address at both ends (LCI-C16), so the process needs an
address space: `UserMemory` hands out page-aligned virtual buffers backed by physical
pages of the node's memory (not contiguous: each page is its own), and translates --
the "small kernel extension" of LCI-C17 pins a page and returns its physical address,
at the cost ``lci.pin_s``. `UserBuffer` is one such buffer; its bytes are what the
application computes in place (writing them is the application's work, not LCI's).

`Htlb` is the host's direct-mapped TLB of 1024 entries (LCI-A45): what the host knows
the NI can translate. The host is the master (LCI-C17): it changes an entry only when
no DMA through the NI's old mapping can be pending -- on a send-side miss it learns
that from the miss's send completion (LCI-C18), on a receive-side miss it installs the
new mapping in both TLBs itself (LCI-C19).
"""
from __future__ import annotations

import errno

__all__ = ["UserMemory", "UserBuffer", "Htlb", "PAGE", "TLB_ENTRIES"]

PAGE = 4096
TLB_ENTRIES = 1024
VBASE = 0x40000000


class UserBuffer:
    """A virtually contiguous buffer of the LCI process."""

    __slots__ = ("vm", "vaddr", "size", "live")

    def __init__(self, vm, vaddr, size):
        self.vm = vm
        self.vaddr = vaddr
        self.size = size
        self.live = True

    def _span(self, off, n):
        if not self.live:
            raise OSError(errno.EFAULT, "the buffer has been freed")
        if not isinstance(off, int) or not isinstance(n, int) or off < 0 or n < 0 or off + n > self.size:
            raise OSError(errno.EFAULT, f"[{off}, {off}+{n}) is outside the {self.size}-byte buffer")
        return self.vaddr + off

    def write(self, off: int, data) -> None:
        data = bytes(data)
        self.vm.write(self._span(off, len(data)), data)

    def read(self, off: int = 0, n: int | None = None) -> bytes:
        n = self.size - off if n is None else n
        return self.vm.read(self._span(off, n), n)

    def __repr__(self):
        return f"<UserBuffer {self.vaddr:#x}+{self.size}>"


class UserMemory:
    """The LCI process's virtual pages."""

    def __init__(self, mem):
        self.mem = mem
        self.pages: dict[int, int] = {}        # virtual page -> physical page address
        self.pinned: set[int] = set()
        self.next_vpage = VBASE // PAGE
        self.buffers: list[UserBuffer] = []

    def alloc(self, nbytes: int) -> UserBuffer:
        if not isinstance(nbytes, int) or isinstance(nbytes, bool) or nbytes < 1:
            raise OSError(errno.EINVAL, f"a buffer has a positive size, not {nbytes!r}")
        npages = -(-nbytes // PAGE)
        got = []
        try:
            for _ in range(npages):
                got.append(self.mem.alloc(PAGE, PAGE))
        except MemoryError:
            for a in got:
                self.mem.release(a)
            raise OSError(errno.ENOMEM, f"no memory for a {nbytes}-byte buffer") from None
        v0 = self.next_vpage
        for i, a in enumerate(got):
            self.pages[v0 + i] = a
        self.next_vpage += npages + 1          # an unmapped page between buffers
        buf = UserBuffer(self, v0 * PAGE, nbytes)
        self.buffers.append(buf)
        return buf

    def free(self, buf: UserBuffer) -> None:
        if buf.vm is not self or not buf.live:
            raise OSError(errno.EINVAL, "not a live buffer of this process")
        buf.live = False
        self.buffers.remove(buf)
        v0 = buf.vaddr // PAGE
        for v in range(v0, v0 + -(-buf.size // PAGE)):
            self.mem.release(self.pages.pop(v))
            self.pinned.discard(v)

    def release_all(self) -> None:
        for b in list(self.buffers):
            self.free(b)

    def phys(self, vaddr: int) -> int:
        """Physical address of `vaddr`, or -1 if the page is not mapped."""
        p = self.pages.get(vaddr // PAGE)
        return -1 if p is None else p + vaddr % PAGE

    def mapped(self, vaddr: int, n: int) -> bool:
        return all((v in self.pages) for v in range(vaddr // PAGE, (vaddr + max(n, 1) - 1) // PAGE + 1))

    def pieces(self, vaddr: int, n: int):
        """(physical address, length) of each page-bounded piece of [vaddr, vaddr+n)."""
        while n > 0:
            k = min(n, PAGE - vaddr % PAGE)
            p = self.phys(vaddr)
            if p < 0:
                raise OSError(errno.EFAULT, f"virtual address {vaddr:#x} is not mapped")
            yield p, k
            vaddr += k
            n -= k

    def write(self, vaddr: int, data: bytes) -> None:
        i = 0
        for p, k in self.pieces(vaddr, len(data)):
            self.mem.write(p, data[i:i + k])
            i += k

    def read(self, vaddr: int, n: int) -> bytes:
        return b"".join(self.mem.read(p, k) for p, k in self.pieces(vaddr, n))


class Htlb:
    """The host TLB: direct-mapped, `TLB_ENTRIES` entries of (virtual page, physical page)."""

    __slots__ = ("tags", "phys", "hits", "misses")

    def __init__(self):
        self.tags = [-1] * TLB_ENTRIES
        self.phys = [0] * TLB_ENTRIES
        self.hits = self.misses = 0

    def lookup(self, vpage: int) -> bool:
        if self.tags[vpage % TLB_ENTRIES] == vpage:
            self.hits += 1
            return True
        self.misses += 1
        return False

    def set(self, vpage: int, paddr: int) -> None:
        i = vpage % TLB_ENTRIES
        self.tags[i] = vpage
        self.phys[i] = paddr
