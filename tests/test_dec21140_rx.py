"""The 21140 model's receive DMA in flight (nic_drivers/dec21140/_model.pyx).

A frame's last bit starts its final DMA burst and status write; until that is done the
descriptor is the card's, and the frame after it waits for the DMA engine. The card
keeps these frames in a C ring (no Python object per frame): each completion must write
its own frame's status to its own descriptor -- however many are in flight, across the
ring's wrap and growth, and after a reset that lets a later frame's DMA finish first.
"""
from __future__ import annotations

from kernelsim import Engine, PhysMem
from libdp._cluster import build_profile
from nic_drivers.dec21140 import hwaddr_for
from nic_drivers.dec21140._model import Dec21140

OWN = 1 << 31
FS_LS = (1 << 9) | (1 << 8)
RER = 1 << 25           # end of ring
SR, PR = 1 << 1, 1 << 6  # CSR6: receive started, promiscuous
SWR = 1                  # CSR0: software reset
RING, BUFS, BUF_SIZE = 0x1000, 0x4000, 1536


def _card(ndesc):
    eng, mem = Engine(), PhysMem(1 << 20)
    dev = Dec21140(eng, mem, hwaddr_for(1), build_profile("p133"))
    _start_receive(dev, mem, ndesc)
    return eng, mem, dev


def _start_receive(dev, mem, ndesc):
    for i in range(ndesc):
        d = RING + 16 * i
        mem.wr32(d, OWN)
        mem.wr32(d + 4, BUF_SIZE | (RER if i == ndesc - 1 else 0))
        mem.wr32(d + 8, BUFS + BUF_SIZE * i)
    dev.csr_write(3, RING)
    dev.csr_write(6, SR | PR)


def _frame(i, n):
    return bytes([0x02, 0, 0, 0, 0, i]) + bytes([i] * (n - 6))


def test_every_frame_in_flight_completes_to_its_own_descriptor_across_wrap_and_growth():
    eng, mem, dev = _card(32)
    frames = [_frame(i, 20 + 3 * i) for i in range(17)]
    for f in frames[:5]:
        dev.rx_frame(f, True)                # five at one instant: five DMAs queued
    for _ in range(3):
        assert eng.step()                    # three done: the ring's head moves on
    for i in range(3):
        assert mem.rd32(RING + 16 * i) == ((len(frames[i]) + 4) << 16) | FS_LS
    assert mem.rd32(RING + 16 * 3) & OWN     # still the card's
    for f in frames[5:]:
        dev.rx_frame(f, True)                # 14 in flight: the ring wraps, then grows
    eng.run()
    for i, f in enumerate(frames):
        d = RING + 16 * i
        assert mem.rd32(d) == ((len(f) + 4) << 16) | FS_LS, i
        assert bytes(mem.read(BUFS + BUF_SIZE * i, len(f))) == f
    assert dev.rx_frames == 17 and dev.rx_missed == 0


def test_a_descriptor_whose_dma_is_not_done_is_not_reused():
    eng, mem, dev = _card(2)
    for i in range(3):                       # the third comes back to descriptor 0
        dev.rx_frame(_frame(i, 40), True)
    assert dev.rx_frames == 2 and dev.rx_missed == 1
    eng.run()
    assert mem.rd32(RING) == (44 << 16) | FS_LS


def test_after_a_reset_each_completion_still_writes_its_own_frame():
    eng, mem, dev = _card(4)
    long_frame, short_frame = _frame(1, 64), _frame(2, 14)
    dev.rx_frame(long_frame, True)           # to descriptor 0; its DMA under way
    dev.csr_write(0, SWR)                    # reset: the ring let go, the DMA engine idle
    _start_receive(dev, mem, 4)
    mem.wr32(RING, OWN)
    dev.rx_frame(short_frame, True)          # descriptor 0 again; a shorter final burst
    assert eng.step()                        # the short frame's DMA ends first
    assert mem.rd32(RING) == ((14 + 4) << 16) | FS_LS
    assert eng.step()                        # then the long one's, which was under way
    assert mem.rd32(RING) == ((64 + 4) << 16) | FS_LS
    assert not eng.step()
