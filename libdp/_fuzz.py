"""``dp fuzz``: hostile frames into every NIC's receive path, counted, never a crash.

    dp fuzz [--nic dec21140,atm,myrinet,tb2] [--frames 1000000] [--seed N] [--json]

For each NIC, a modeled two-node cluster with DP loaded and a few endpoints open on the
receiving node gets `--frames` frames at the device's receive entry (``rx_frame``, where
a wire or a real transport hands frames to the card): half are well-formed DP frames
for that NIC (its link header, a Directed Message header, data) with random fields,
half are those frames mutated -- bytes flipped, cut short, lengthened, header fields
pushed to their extremes, a hardware CRC that failed -- or plain noise. After each frame
the engine runs (DMA, interrupts, driver, MDR) and every so often the reader drains its
pools, so the whole receive path sees the frames, not only the device (a card that has
no buffer ready would otherwise drop most of them at its door).

A *crash* is any exception that escapes the receive path, or a device model that stops
working. After the frames, a real DP message must still travel node 0 -> node 1 intact
(within three tries: the last junk may leave a half-done AAL5 reassembly that eats one).
The report gives frames per second and where the frames went (delivered, or dropped and
counted by which layer), read from the counters the kernel and devices keep.
"""
from __future__ import annotations

import errno
import random
import time

from libdp._argtypes import positive_int
from libdp._report import Column, Table, emit, progress

__all__ = ["add_commands", "fuzz_nic", "NIC_FRAMERS"]

DP_PROTO = 0x88B5
OPEN_EPS = (0, 1, 2, 3)            # endpoints open on the receiving node; others are closed
CHUNK = 4096                       # frames per step of the progress bar


def _dm(rng: random.Random, max_data: int) -> bytes:
    """A Directed Message: 8-byte header with random fields, then data."""
    n = rng.choice((0, 1, rng.randrange(max_data + 1), max_data))
    dst_ep = rng.choice((0, 1, 2, 3, 4, 5, rng.randrange(1 << 16)))
    mtype = rng.choice((0, 0, 0, rng.randrange(16)))
    length = rng.choice((n, n, n, rng.randrange(1 << 12)))
    hdr = (dst_ep.to_bytes(2, "big") + rng.randrange(1 << 16).to_bytes(2, "big")
           + rng.randrange(1 << 16).to_bytes(2, "big") + ((mtype << 12) | length).to_bytes(2, "big"))
    return hdr + rng.randbytes(n)


def _ether(rng, max_data):
    from nic_drivers.dec21140 import hwaddr_for
    dst = hwaddr_for(1) if rng.random() < 0.9 else rng.choice((b"\xff" * 6, rng.randbytes(6)))
    return dst + hwaddr_for(0) + DP_PROTO.to_bytes(2, "big") + _dm(rng, max_data)


def _atm(rng, max_data):
    from nic_drivers.atm import hwaddr_for
    from nic_drivers.atm._model import aal5_cells
    vpi, vci = hwaddr_for(1) if rng.random() < 0.9 else (rng.randrange(256), rng.randrange(1 << 16))
    return bytes(aal5_cells(vpi, vci, DP_PROTO.to_bytes(2, "big") + _dm(rng, max_data)))


def _myrinet(rng, max_data):
    from nic_drivers.myrinet.firmware import BULK_PROTO, MYRI_TYPE_DP
    proto = DP_PROTO if rng.random() < 0.9 else BULK_PROTO
    return MYRI_TYPE_DP.to_bytes(2, "big") + proto.to_bytes(2, "big") + _dm(rng, max_data)


def _tb2(rng, max_data):
    from nic_drivers.tb2 import _model as hw
    body = _dm(rng, min(max_data, hw.DATA_MAX - 8))
    hdr = bytearray(hw.HDR_BYTES)
    hdr[hw.H_DST:hw.H_DST + 2] = (1).to_bytes(2, "big")
    hdr[hw.H_ROUTE] = rng.randrange(4)
    hdr[hw.H_LEN:hw.H_LEN + 2] = len(body).to_bytes(2, "big")
    hdr[hw.H_PROTO:hw.H_PROTO + 2] = DP_PROTO.to_bytes(2, "big")
    return bytes(hdr) + body


# NIC -> (well-formed DP frame maker, largest DP data it carries in the fuzz)
NIC_FRAMERS = {"dec21140": (_ether, 1500), "atm": (_atm, 1500), "myrinet": (_myrinet, 4000), "tb2": (_tb2, 216)}


def _mutate(rng: random.Random, frame: bytes) -> bytes:
    kind = rng.randrange(7)
    b = bytearray(frame)
    if kind == 0 and b:                                  # a few bytes flipped anywhere
        for _ in range(rng.randint(1, 4)):
            b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
    elif kind == 1 and b:                                # a byte in the first 48 (headers) set to an extreme
        b[rng.randrange(min(48, len(b)))] = rng.choice((0, 0xFF, 0x80, 0x7F))
    elif kind == 2:                                      # cut short
        del b[rng.randrange(len(b) + 1):]
    elif kind == 3:                                      # lengthened
        b += rng.randbytes(rng.choice((1, 7, 64, 1600, 5000)))
    elif kind == 4:                                      # noise of any length
        b = bytearray(rng.randbytes(rng.choice((0, 1, 13, 53, 64, 200, 1600, 4200, 9000))))
    elif kind == 5 and len(b) > 8:                       # a block of the frame duplicated over another
        i, j, n = rng.randrange(len(b)), rng.randrange(len(b)), rng.randint(1, 64)
        b[j:j + n] = b[i:i + n]
    else:                                                # header words zeroed
        b[:rng.randint(1, 16)] = bytes(rng.randint(1, 16))
    return bytes(b)


def fuzz_nic(nic: str, frames: int, seed: int = 0, on_progress=None) -> dict:
    """Feed `frames` hostile frames into `nic`'s receive path; return what happened."""
    from libdp._cluster import Cluster

    make, max_data = NIC_FRAMERS[nic]
    rng = random.Random(seed)
    cluster = Cluster(nodes=2, nic=nic, seed=seed)
    rx_node = cluster.node(1)
    dev = rx_node.pci_devices[0]
    reader = cluster.process(1).sync
    fds = []
    for ep in OPEN_EPS:
        fd = reader.dp_open(ep)
        reader.set_blocking(fd, False)
        fds.append(fd)
    crashes, first_crash, read = 0, None, 0
    t0 = time.perf_counter()
    for i in range(frames):
        frame = make(rng, max_data)
        if rng.random() < 0.5:
            frame = _mutate(rng, frame)
        try:
            dev.rx_frame(frame, rng.random() < 0.95)
            cluster.engine.run()        # each frame through DMA, interrupt, driver and MDR before the next
            if i % 64 == 63:
                read += _drain(reader, fds)
        except Exception as exc:                         # noqa: BLE001 - a crash is what we count
            crashes += 1
            first_crash = first_crash or f"frame {i}: {type(exc).__name__}: {exc}"
        if on_progress is not None and i % CHUNK == CHUNK - 1:
            on_progress(nic)
    cluster.engine.run()
    read += _drain(reader, fds)
    wall = time.perf_counter() - t0
    still_works = _still_works(cluster)
    st = rx_node.stats()
    return {"nic": nic, "frames": frames, "crashes": crashes, "first_crash": first_crash,
            "still_delivers": still_works, "frames_per_s": frames / wall if wall else 0.0, "wall_s": wall,
            "messages_read": read, "counters": _where(st)}


def _drain(reader, fds) -> int:
    n = 0
    for fd in fds:
        while True:
            try:
                reader.dp_read(fd)
            except BlockingIOError:
                break
            n += 1
    return n


def _still_works(cluster, attempts: int = 3) -> bool:
    """A real message still travels node 0 -> node 1 intact, within `attempts` tries.

    One try may be lost for a good reason: the last hostile frames can leave a half-done
    reassembly behind (an AAL5 PDU whose end cell never came), and the next PDU on that
    connection then fails its length check with it, as it would on a real link. A path
    that delivers nothing in three tries is broken.
    """
    a, b = cluster.process(0).sync, cluster.process(1).sync
    fa, fb = a.dp_open(77), b.dp_open(77)
    a.dp_target(fa, 1, 77)
    b.set_blocking(fb, False)
    msg = (bytes(range(200)) * 2)[:min(400, cluster.node(0).services["dp"].max_message)]
    ok = False
    for _ in range(attempts):
        a.dp_write(fa, msg)
        cluster.engine.run()
        try:
            ok = b.dp_read(fb) == msg
            break
        except BlockingIOError:         # this one was lost: try again
            continue
    a.close(fa)
    b.close(fb)
    return ok


def _where(stats: dict) -> dict:
    """Every counter of drops and errors in a node's statistics, flattened (non-zero ones)."""
    out = {}

    def walk(prefix, d):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict):
                walk(key, v)
            elif isinstance(v, int) and not isinstance(v, bool) and v and any(
                    w in str(k) for w in ("drop", "error", "malformed", "unknown", "no_", "crc", "hec", "runt",
                                          "too_long", "misrouted", "filtered", "missed", "bad", "full",
                                          "deposited", "rx_frames", "rx_packets")):
                out[key] = v

    walk("", stats)
    return out


def add_commands(sub, common) -> None:
    p = sub.add_parser("fuzz", help="hostile frames into every NIC's receive path: crashes (0) and drops counted",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    p.add_argument("--nic", default=",".join(NIC_FRAMERS),
                   help=f"comma-separated NICs (default: all of {', '.join(NIC_FRAMERS)})")
    p.add_argument("--frames", type=positive_int, default=1_000_000, help="frames per NIC (default 1,000,000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of a table")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args) -> int:
    nics = [n.strip() for n in args.nic.split(",") if n.strip()]
    for n in nics:
        if n not in NIC_FRAMERS:
            raise OSError(errno.EINVAL, f"no receive-path fuzzer for NIC {n!r} (have: {', '.join(NIC_FRAMERS)})")
    rows = []
    with progress(args, len(nics) * (args.frames // CHUNK), f"{CHUNK} frames") as bar:
        for n in nics:
            rows.append(fuzz_nic(n, args.frames, args.seed, bar.advance))
    doc = {"benchmark": "fuzz", "seed": args.seed, "results": rows}
    table = Table(title=f"Receive-path fuzz: {args.frames} frames per NIC, seed {args.seed}",
                  columns=[Column("nic", "NIC"), Column("frames", "Frames"), Column("crashes", "Crashes"),
                           Column("still_delivers", "Still delivers"), Column("frames_per_s", "Frames/s", ".0f"),
                           Column("messages_read", "Read")],
                  rows=rows)
    rc = emit(args, doc, None, table)
    if any(r["crashes"] or not r["still_delivers"] for r in rows):
        first = next(r for r in rows if r["crashes"] or not r["still_delivers"])
        raise OSError(errno.EIO, f"{first['nic']}: {first['crashes']} crashes ({first['first_crash']}), "
                                 f"still delivers: {first['still_delivers']}")
    return rc
