"""Offsets and lengths that cannot overflow, and the node's hook for shared kernel memory.

Every Cython accessor that takes an offset and a length (the DM codec, the Token Buffer
Pool, physical memory, the LANai SRAM) refuses a span outside its buffer with EFAULT and
a negative length with EINVAL -- including values whose sum would wrap a Py_ssize_t --
and writes nothing when it refuses.
"""
from __future__ import annotations

import errno

import pytest

from dpcore._codec import dm_build_at, dm_pack, dm_parse_at
from dpcore._tbp import TokenBufferPool
from kernelsim import PhysMem, PrivateRegion
from kernelsim._physmem import read_only_window
from libdp import Cluster

HUGE = [2 ** 62, 2 ** 63 - 1, -(2 ** 63)]


def _errno(call) -> int:
    with pytest.raises(OSError) as ei:
        call()
    return ei.value.errno


# --------------------------------------------------------------------------- codec


@pytest.mark.parametrize("addr,avail", [(2 ** 62, 2 ** 62), (60, 2 ** 63 - 1), (64, 1), (-1, 8),
                                        (2 ** 63 - 1, 2 ** 63 - 1), (-(2 ** 63), 8)])
def test_parse_at_outside_the_buffer_is_efault(addr, avail):
    assert _errno(lambda: dm_parse_at(bytearray(64), addr, avail)) == errno.EFAULT


def test_parse_at_negative_length_is_einval_and_edges_are_fine():
    assert _errno(lambda: dm_parse_at(bytearray(64), 0, -1)) == errno.EINVAL
    assert dm_parse_at(bytearray(64), 64, 0) is None            # nothing there: malformed, not a fault
    assert dm_parse_at(bytearray(64), 56, 8) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize("addr", [57, 64, -1, *HUGE])
def test_build_at_outside_the_buffer_is_efault_and_writes_nothing(addr):
    buf = bytearray(64)
    assert _errno(lambda: dm_build_at(buf, addr, 1, 2, 3, 0, 4)) == errno.EFAULT
    assert buf == bytearray(64)


def test_build_at_field_out_of_range_is_einval():
    buf = bytearray(64)
    assert _errno(lambda: dm_build_at(buf, 0, 0x10000, 2, 3, 0, 4)) == errno.EINVAL
    assert _errno(lambda: dm_build_at(buf, 0, 1, 2, 3, 0, 0x1000)) == errno.EINVAL
    assert buf == bytearray(64)


@pytest.mark.parametrize("off", HUGE)
def test_pack_at_a_huge_offset_is_valueerror(off):
    with pytest.raises(ValueError):
        dm_pack(bytearray(64), off, 1, 2, 3, 0, 0)


# --------------------------------------------------------------------------- physical memory


@pytest.mark.parametrize("addr", [4093, 4096, -1, *HUGE])
def test_physmem_word_access_outside_memory_is_efault(addr):
    mem = PhysMem(4096)
    assert _errno(lambda: mem.rd32(addr)) == errno.EFAULT
    assert _errno(lambda: mem.wr32(addr, 0xDEADBEEF)) == errno.EFAULT
    assert _errno(lambda: mem.rd16be(addr + 2 if 0 <= addr < 4096 else addr)) == errno.EFAULT
    assert bytes(mem.view) == bytes(4096)


@pytest.mark.parametrize("addr,n", [(4000, 97), (1, 2 ** 63 - 1), (2 ** 62, 2 ** 62), (-1, 4)])
def test_physmem_spans_outside_memory_are_efault(addr, n):
    mem = PhysMem(4096)
    assert _errno(lambda: mem.read(addr, n)) == errno.EFAULT
    assert _errno(lambda: mem.move(0, addr, n)) == errno.EFAULT
    assert _errno(lambda: mem.move(addr, 0, n)) == errno.EFAULT
    if 0 < n < 1 << 20:
        assert _errno(lambda: mem.write(addr, bytes(n))) == errno.EFAULT
    assert bytes(mem.view) == bytes(4096)


@pytest.mark.parametrize("off,n", [(2 ** 62, 2 ** 62), (60, 2 ** 63 - 1), (65, 0), (-1, 8), (-(2 ** 63), 8)])
def test_read_only_windows_outside_memory_are_efault(off, n):
    assert _errno(lambda: read_only_window(bytearray(64), off, n)) == errno.EFAULT


def test_read_only_window_edges_and_negative_length():
    assert _errno(lambda: read_only_window(bytearray(64), 0, -1)) == errno.EINVAL
    assert bytes(read_only_window(bytearray(b"x" * 64), 64, 0)) == b""
    assert bytes(read_only_window(bytearray(range(64)), 63, 1)) == bytes([63])


def test_physmem_negative_length_is_einval_and_the_last_byte_is_reachable():
    mem = PhysMem(4096)
    assert _errno(lambda: mem.read(0, -1)) == errno.EINVAL
    mem.wr32(4092, 0x01020304)
    assert mem.rd32(4092) == 0x01020304 and mem.read(4096, 0) == b""
    assert _errno(lambda: mem.release(12345)) == errno.EINVAL


# --------------------------------------------------------------------------- Token Buffer Pool


def test_tbp_deposit_from_outside_its_source_is_efault_and_queues_nothing():
    pool = TokenBufferPool(PrivateRegion(4 * 64), 4, 64)
    src = bytes(range(100))
    for off, n in [(90, 11), (101, 0), (-1, 1), (2 ** 62, 2 ** 62), (1, 2 ** 63 - 1)]:
        assert _errno(lambda: pool.deposit(src, off, n, 0, 0)) == errno.EFAULT
    assert _errno(lambda: pool.deposit(src, 0, -1, 0, 0)) == errno.EINVAL
    assert pool.count == 0 and pool.free_slots == 4
    assert pool.deposit(src, 90, 10, 3, 7) and pool.deposit(src, 0, 65, 3, 7) is False   # too long: dropped
    slot = pool.take()
    assert bytes(pool.view(slot)) == src[90:] and pool.source(slot) == (3, 7)
    assert pool.stats()["dropped_too_long"] == 1


def test_tbp_refuses_a_region_too_small_for_its_slots():
    with pytest.raises(ValueError):
        TokenBufferPool(PrivateRegion(100), 4, 64)


# --------------------------------------------------------------------------- LANai SRAM


def test_lanai_sram_accessors_refuse_spans_outside_sram():
    c = Cluster(nodes=2, nic="myrinet")
    ni = c.node(0).pci_devices[0]
    top = ni.sram_bytes
    for off in (top - 3, top, -1, *HUGE):
        assert _errno(lambda: ni.rd32(off)) == errno.EFAULT
        assert _errno(lambda: ni.wr32(off, 1)) == errno.EFAULT
        assert _errno(lambda: ni.pio_write32(off, 1)) == errno.EFAULT
    for off, n in [(top - 4, 5), (1, 2 ** 63 - 1), (2 ** 62, 2 ** 62)]:
        assert _errno(lambda: ni.read(off, n)) == errno.EFAULT
    assert _errno(lambda: ni.read(0, -1)) == errno.EINVAL


# --------------------------------------------------------------------------- shared regions


class _Recorder:
    """A stand-in for the real node's shared-memory allocator: named regions, logged."""

    def __init__(self):
        self.made = []
        self.released = []

    def __call__(self, nbytes, name_hint):
        rec = self
        region = PrivateRegion(nbytes)
        region_name = f"/test-{name_hint}"

        class Named:
            buf = region.buf
            name = region_name

            def release(self):
                rec.released.append(self.name)
                self.buf = None
                region.release()
        r = Named()
        self.made.append((nbytes, name_hint, r))
        return r


def test_tbp_slots_live_in_the_region_the_node_allocator_gives():
    c = Cluster(nodes=2)
    rec = _Recorder()
    c.node(1).shared_allocator = rec
    a, b = c.process(0), c.process(1)
    fa = a.sync.dp_open(1)
    a.sync.dp_target(fa, 1, 2)
    fb = b.sync.dp_open(2)
    (nbytes, hint, region), = rec.made
    tbp = c.node(1).services["dp"].endpoints[2].tbp
    assert nbytes == tbp.nslots * tbp.slot_bytes and "ep2" in hint
    assert tbp.region_name == region.name == "/test-" + hint
    assert c.node(1).shared_in_use() == nbytes
    a.sync.dp_write(fa, b"in the region")
    tok = b.sync.dp_read_token(fb)
    assert bytes(tok.data) == b"in the region"
    assert b"in the region" in bytes(region.buf)         # the user maps these very bytes
    tok.release()
    b.sync.close(fb)
    assert rec.released == [region.name] and c.node(1).shared_in_use() == 0


def test_alloc_shared_refuses_a_bad_size():
    node = Cluster(nodes=2).node(0)
    for bad in (0, -1, 1.5, True, "8"):
        assert _errno(lambda: node.alloc_shared(bad, "x")) == errno.EINVAL


@pytest.mark.parametrize("nbytes, align", [(100_000, 16), (5000, 16), (3 * 4096, 4096), (10, 8)])
def test_a_reused_allocation_reads_as_zeros_and_its_neighbours_are_untouched(nbytes, align):
    """A block from the free list is zeroed (whole pages handed back to the kernel, the
    ragged ends by hand) -- and not a byte beyond it."""
    mem = PhysMem(1 << 20)
    before = mem.alloc(64, 16)
    a = mem.alloc(nbytes, align)
    after = mem.alloc(64, 16)
    mem.write(before, b"\x11" * 64)
    mem.write(after, b"\x22" * 64)
    mem.write(a, b"\xff" * nbytes)
    mem.release(a)
    b = mem.alloc(nbytes, align)
    assert b == a and mem.read(b, nbytes) == bytes(nbytes)
    assert mem.read(before, 64) == b"\x11" * 64 and mem.read(after, 64) == b"\x22" * 64
