# cython: language_level=3, annotation_typing=False
"""Seeded fault injection for modeled media: loss, corruption, duplication, reordering.

Every modeled medium passes each frame through `FaultInjector.apply`, which returns the
copies to deliver: none (lost), one, or two (duplicated); each with an extra delay
(reordering: a frame held back lets later ones pass) and whether its CRC still holds
(corruption flips a byte and the receiving NIC's CRC check catches it). Rates are
profile parameters (``fault.loss`` and so on, 0 by default) so ``--param`` sets them;
the random stream comes from the cluster's seed, so a faulty run is repeatable.
"""
import random

__all__ = ["FaultInjector"]


cdef class FaultInjector:
    # Cython, so that a medium's per-frame test of `active` is a C read (`faults_active`),
    # not a generic attribute lookup per frame. Every field stays what it was (a Python
    # object as given, set and read by name); `active` a bool.

    def __init__(self, profile, rng=None):
        self.loss = profile.get("fault.loss", 0.0)
        self.corrupt = profile.get("fault.corrupt", 0.0)
        self.duplicate = profile.get("fault.duplicate", 0.0)
        self.reorder = profile.get("fault.reorder", 0.0)
        self.reorder_delay_s = profile.get("fault.reorder_delay_s", 0.0)
        for name in ("loss", "corrupt", "duplicate", "reorder"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"fault.{name} is a probability, not {v}")
        self.rng = rng or random.Random(0)
        self.active = bool(self.loss or self.corrupt or self.duplicate or self.reorder)
        self.lost = self.corrupted = self.duplicated = self.reordered = 0

    def apply(self, frame):
        """The deliveries of one frame: (bytes, extra delay in s, CRC intact)."""
        if not self.active:
            return [(frame, 0.0, True)]
        rng = self.rng
        if self.loss and rng.random() < self.loss:
            self.lost += 1
            return []
        out = [(frame, 0.0, True)]
        if self.duplicate and rng.random() < self.duplicate:
            self.duplicated += 1
            out.append((frame, 0.0, True))
        result = []
        for data, delay, ok in out:
            if self.corrupt and data and rng.random() < self.corrupt:
                self.corrupted += 1
                i = rng.randrange(len(data))
                data = data[:i] + bytes([data[i] ^ (1 << rng.randrange(8))]) + data[i + 1:]
                ok = False
            if self.reorder and rng.random() < self.reorder:
                self.reordered += 1
                delay += self.reorder_delay_s
            result.append((data, delay, ok))
        return result

    def stats(self) -> dict:
        return {"lost": self.lost, "corrupted": self.corrupted, "duplicated": self.duplicated,
                "reordered": self.reordered}
