"""LCI's implementation variants (the LCI paper, Table II).

Each variant of the paper is a point in three orthogonal choices, and that is how the
module takes them: ``reliability`` (none: the base's reliable-network assumption and
NI-to-NI credits, LCI-C03/C07; ni: go-back-N on the NI, LCI-C13; host: go-back-N in the
host library, LCI-C12), ``transfer`` (sdma: the host copies into its packet queue and
the NI fetches by DMA, LCI-C05/C06; pio: the host writes the NI send buffer with
write-combined stores, LCI-C15; rcpy: the NI fetches straight from user memory through
the NI TLB, LCI-C16..C19) and ``mtu`` (1, 2 or 4 Kbyte NI packet buffers, LCI-A40..A42).
The paper's names are presets; composite names (I-pio-1k, I-nirx-pio, ...) combine
their parts.

Multicast adds a fourth choice, where packets are forwarded (``multicast``): on the NI
(LCI-C10: I-sdma, I-pio, I-nirx) or on the host (``hmc``: I-sdma-hmc, LCI-C20; and
always with I-hrx, whose protocol runs on the host, LCI-C12). I-sdma-mpimc is not a
module variant: it is MPICH's broadcast over unicast in libdp (LCI-C21).
"""
from __future__ import annotations

import errno
from dataclasses import dataclass

__all__ = ["Variant", "RELIABILITY", "TRANSFER", "MTUS", "MULTICAST", "PAPER_VARIANTS", "parse_variant", "resolve"]

RELIABILITY = ("none", "ni", "host")
MULTICAST = ("ni", "host")
TRANSFER = ("sdma", "pio", "rcpy")
MTUS = (1024, 2048, 4096)

# The variants the paper measured point-to-point (Table II), in its order.
PAPER_VARIANTS = ("I-sdma", "I-pio", "I-rcpy", "I-nirx", "I-hrx", "I-1k", "I-4k")

_TOKENS = {
    "sdma": ("transfer", "sdma"), "pio": ("transfer", "pio"), "rcpy": ("transfer", "rcpy"),
    "nirx": ("reliability", "ni"), "hrx": ("reliability", "host"),
    "1k": ("mtu", 1024), "2k": ("mtu", 2048), "4k": ("mtu", 4096),
}
_TOKENS["hmc"] = ("multicast", "host")


@dataclass(frozen=True)
class Variant:
    reliability: str = "none"
    transfer: str = "sdma"
    mtu: int = 2048
    multicast: str = ""                 # "" : the NI forwards, unless the host runs the protocol

    def __post_init__(self):
        if not self.multicast:
            object.__setattr__(self, "multicast", "host" if self.reliability == "host" else "ni")
        if self.reliability == "host" and self.multicast != "host":
            raise OSError(errno.EINVAL, "lci: with I-hrx the host runs the protocol, so it forwards multicast "
                                        "too (LCI-C12): multicast=ni needs reliability=none or ni")

    @property
    def name(self) -> str:
        """The paper's name where it has one, else the composite (I-pio-1k, I-nirx-rcpy)."""
        parts = []
        if self.reliability != "none":
            parts.append("nirx" if self.reliability == "ni" else "hrx")
        if self.transfer != "sdma":
            parts.append(self.transfer)
        if self.mtu != 2048:
            parts.append(f"{self.mtu // 1024}k")
        if self.multicast == "host" and self.reliability != "host":
            parts.append("hmc")
        if parts in ([], ["hmc"]):
            parts.insert(0, "sdma")                 # I-sdma, I-sdma-hmc
        return "I-" + "-".join(parts)


def parse_variant(name: str) -> Variant:
    """``I-sdma``, ``I-pio-1k``, ...: EINVAL naming what is wrong."""
    if not isinstance(name, str) or not name.startswith("I-") or len(name) < 3:
        raise OSError(errno.EINVAL, f"lci: a variant is named I-<part>[-<part>...] (e.g. I-sdma, I-pio-1k), "
                                    f"not {name!r}")
    got: dict = {}
    for tok in name[2:].split("-"):
        tok = tok.lower()
        if tok == "mpimc":
            raise OSError(errno.EINVAL, "lci: I-sdma-mpimc is MPICH's broadcast, host-level message forwarding "
                                        "over unicast (libdp.lci_mcast.mpich_bcast; dp lci-bcast --variant "
                                        "I-sdma-mpimc), not a variant of the module")
        if tok not in _TOKENS:
            raise OSError(errno.EINVAL, f"lci: unknown variant part {tok!r} in {name!r} (parts: "
                                        f"{', '.join(_TOKENS)})")
        knob, value = _TOKENS[tok]
        if knob in got and got[knob] != value:
            raise OSError(errno.EINVAL, f"lci: variant {name!r} names two choices of {knob}")
        got[knob] = value
    return Variant(**got)


def resolve(variant: str, reliability: str = "", transfer: str = "", mtu: int = 0, multicast: str = "") -> Variant:
    """A preset with the explicit knobs on top (an empty knob keeps the preset's)."""
    v = parse_variant(variant)
    if reliability and reliability not in RELIABILITY:
        raise OSError(errno.EINVAL, f"lci: reliability must be one of {', '.join(RELIABILITY)}")
    if transfer and transfer not in TRANSFER:
        raise OSError(errno.EINVAL, f"lci: transfer must be one of {', '.join(TRANSFER)}")
    if mtu and mtu not in MTUS:
        raise OSError(errno.EINVAL, f"lci: mtu must be one of {', '.join(map(str, MTUS))}")
    if multicast and multicast not in MULTICAST:
        raise OSError(errno.EINVAL, f"lci: multicast must be one of {', '.join(MULTICAST)}")
    rel = reliability or v.reliability
    mc = multicast or (v.multicast if v.multicast == "host" and v.reliability != "host" else "")
    return Variant(rel, transfer or v.transfer, mtu or v.mtu, mc)
