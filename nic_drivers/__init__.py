"""NIC drivers and device models, one package per NIC.

Each package exports: ``MODULE`` (the driver as a kernel module), ``LINK_KIND`` (which
NART address its links use), ``hwaddr_for(nid)``, ``make_device(node)`` (put the card
on a node's bus) and ``connect(engine, profile, devices)`` (build the modeled medium
between the cards and return it).
"""
from __future__ import annotations

import errno
import importlib

__all__ = ["NIC_NAMES", "nic"]

NIC_NAMES = ("dec21140",)


def nic(name: str):
    if name not in NIC_NAMES:
        raise OSError(errno.ENODEV, f"no NIC model {name!r} (available: {', '.join(NIC_NAMES)})")
    return importlib.import_module(f"nic_drivers.{name}")
