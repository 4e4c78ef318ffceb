"""NIC drivers and device models, one package per NIC.

Each package exports: ``MODULE`` (the driver as a kernel module), ``LINK_KIND`` (which
NART address its links use), ``DEFAULT_PLATFORM`` (the profile of the papers' machine
with this NIC), ``hwaddr_for(nid)``, ``make_device(node)`` (put the card on a node's
bus) and ``connect(engine, profile, devices, rng)`` (build the modeled medium between
the cards, with seeded fault injection, and return it).
"""
from __future__ import annotations

import errno
import importlib
import importlib.util

__all__ = ["NIC_NAMES", "available_nics", "nic"]

NIC_NAMES = ("dec21140", "atm", "myrinet", "tb2")


def available_nics() -> list[str]:
    """The NIC packages present in this installation."""
    return [n for n in NIC_NAMES if importlib.util.find_spec(f"nic_drivers.{n}") is not None]


def nic(name: str):
    if name not in available_nics():
        raise OSError(errno.ENODEV, f"no NIC model {name!r} (available: {', '.join(available_nics())})")
    return importlib.import_module(f"nic_drivers.{name}")
