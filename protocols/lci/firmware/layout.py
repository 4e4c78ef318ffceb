"""Where LCI's control program keeps things in LANai SRAM, and the words the host writes.

The host and the NI talk through SRAM (the host maps it; PIO writes, never reads:
LCI-A48) and through host memory (the NI's DMAs). Control block words at the bottom
of SRAM hold the configuration the host writes at load time and a few words it writes
while running; the send descriptor ring, the free-host-buffer ring (LCI-C08's "Recv
Completions") and the NI TLB (LCI-C17) follow in the control program's area
(``lanai.firmware_bytes``); the NI send buffers and the receive-buffer pool fill the
rest of SRAM.

A send descriptor (LCI-C02 step 3, C05) is 32 bytes; the host writes it with one
write-combined burst, its first word last in effect (the valid bit is what the NI's
event loop polls for), and the NI clears the valid bit when it has taken it:

    +0   VALID | kind << 24 | flags << 16 | length
    +4   destination node << 16 | NI send buffer
    +8   SDMA: host address of the data; RCPY: the source's virtual address
    +12  RCPY: the destination's virtual address
    +16  I-hrx: sequence number << 16 | acknowledgement (the host's protocol)
    +20  RCPY send-side TLB miss: the new physical page for the NTLB (LCI-C18)

The host drives the NI's TLB (LCI-C17) through a small command ring of its own, and
hands it anonymous pages for receive-side misses (LCI-C19) through another, both
written with the valid bit as the free-buffer ring is.
"""
from __future__ import annotations

from nic_drivers.myrinet.fabric import MAX_ROUTE_BYTES

# Control block (byte offsets in SRAM)
CB_CONFIG = 0x00           # reliability | transfer << 4 | (mtu >> 10) << 8
CB_CPL_RING = 0x04         # host address of the send-completion ring
CB_CPL_SLOTS = 0x08
CB_STATUS = 0x0C           # host address of the NI status word (an abort's reason)
CB_WATCHDOG_NS = 0x10
CB_WINDOW = 0x14           # W (credits) or the retransmission window
CB_IRQ = 0x18              # host: network interrupts on (1) or off (0)               [watched]
CB_POLLED = 0x1C           # host: packets taken from its receive queue (a count)
CB_RETX_NS = 0x2C
CB_DACK_NS = 0x30
CB_NSEND = 0x34            # NI send buffers
CB_NFREE = 0x38            # entries of the free-host-buffer ring
CB_NANON = 0x3C            # entries of the anonymous-page ring (RCPY)
CB_HOST_SLOT = 0x40        # bytes of one host receive buffer
CB_TICK = 0x48             # host, real time only: a look at the NI's clock   [watched]
CB_ACCEPT = 0x44           # host: take packets from the network (1), or drop them (0): a
                           # board on a real transport whose LCI process runs elsewhere

SD_BASE = 0x100
SD_BYTES = 32
SD_VALID = 1 << 31
SD_SEND = 1                # a data packet (message passing)
SD_ACK = 2                 # I-hrx: an explicit acknowledgement the host asks for
SD_RETX = 3                # I-hrx: send the packet still in an NI send buffer again
SD_RCPY = 4                # one packet of an RCPY page transfer
SD_MCAST = 5               # multicast the buffer to the children of root (+12) in the NI's table
SD_KINDS = (SD_SEND, SD_ACK, SD_RETX, SD_RCPY, SD_MCAST)
SDF_PIO = 1 << 0           # the host wrote the data into the send buffer itself
SDF_MISS = 1 << 1          # RCPY: HTLB miss, data written by PIO, +20 holds the new mapping
SDF_NOTIFY = 1 << 2        # RCPY: the receiver wants a notification
SDF_WIRE_SHIFT = 4         # bits 4-6: the packet kind on the wire, if not DATA (host-level
SDF_WIRE_MASK = 0x70       # multicast forwards and fetch-and-add of I-hrx; F&A requests)

CPL_VALID = 1 << 31        # a send-completion record: VALID | descriptor index
RX_FULL = 1 << 31          # a host receive buffer's last word: FULL | packet bytes
FREE_VALID = 1             # a free-ring entry: host address | VALID (addresses are 64-aligned)

NTLB_ENTRIES = 1024        # LCI-A45: direct-mapped, 1024 entries
NTLB_BYTES = 8             # vpage tag | flags, physical page
NTLB_VALID = 1 << 0
NTLB_LOCKED = 1 << 1
NTLB_CMD_UPDATE = 1        # install (vpage -> ppage) and unlock
NTLB_CMDS = 16             # the host's NTLB command ring: VALID | cmd, vpage, ppage (12 bytes each)
NTLB_CMD_BYTES = 12
PAGE = 4096                # LCI-A43: page transfers of at most one 4 Kbyte page

ROUTE_MAX = MAX_ROUTE_BYTES    # route bytes a packet buffer has room for: the fabric's longest (22 hops
                               # on a 1024-node PPro grid); the buffers' 64-byte rounding absorbs it
RX_HEADROOM = ROUTE_MAX    # before each receive buffer: a route, to forward the packet in place (C10)
CTL_BUFFERS = 8            # NI-made control packets (acks, retransmission requests) in flight


def layout(sram_bytes: int, firmware_bytes: int, nsend: int, nfree: int, nanon: int, pool: int, mtu: int) -> dict:
    """Offsets of every region; ValueError (the caller's ENOMEM) if SRAM is too small."""
    nsd = 2 * nsend
    sd_end = SD_BASE + nsd * SD_BYTES
    free_base = sd_end
    anon_base = free_base + nfree * 4
    cpl_stage = anon_base + nanon * 4
    status_stage = cpl_stage + nsd * 4
    cmd_base = status_stage + 4
    ntlb_base = (cmd_base + NTLB_CMDS * NTLB_CMD_BYTES + 63) // 64 * 64
    ctl_base = ntlb_base + NTLB_ENTRIES * NTLB_BYTES
    ctl_bytes = 64
    area_end = ctl_base + CTL_BUFFERS * ctl_bytes
    if area_end > firmware_bytes:
        raise ValueError(f"the control area needs {area_end} bytes, lanai.firmware_bytes is {firmware_bytes}")
    send_bytes = (ROUTE_MAX + 2 + 16 + mtu + 63) // 64 * 64
    rx_bytes = (RX_HEADROOM + 2 + 16 + mtu + 4 + 63) // 64 * 64
    send_base = firmware_bytes
    rx_base = send_base + nsend * send_bytes
    end = rx_base + (pool + 1) * rx_bytes          # the pool plus one buffer packets are dropped into
    if end > sram_bytes:
        raise ValueError(f"{nsend} send buffers and {pool} receive buffers of {mtu} bytes need {end} bytes of "
                         f"SRAM, the board has {sram_bytes}")
    return {"nsd": nsd, "free_base": free_base, "anon_base": anon_base, "cpl_stage": cpl_stage,
            "status_stage": status_stage, "cmd_base": cmd_base, "ntlb_base": ntlb_base, "ctl_base": ctl_base, "ctl_bytes": ctl_bytes,
            "send_base": send_base, "send_bytes": send_bytes, "rx_base": rx_base, "rx_bytes": rx_bytes,
            "sram_used": end}
