"""The `dp` kernel module: DP's services layer bound to the node's network devices."""
from __future__ import annotations

import errno

from dpcore._codec import DM_HEADER_BYTES, DM_MAX_LENGTH
from dpcore._services import DP_ETHERTYPE, DirectedPoint
from kernelsim import Module, Param


def _init(kernel, tbp_slots: int, netdev: str):
    devs = list(kernel.netdevs.values()) if not netdev else [kernel.netdevs.get(netdev)]
    if not devs or devs[0] is None:
        raise OSError(errno.ENODEV, f"dp: no network device {netdev or ''} to carry DP".replace("  ", " "))
    max_message = min(kernel.profile["dp.max_message"], DM_MAX_LENGTH,
                       *(d.max_payload - DM_HEADER_BYTES for d in devs))
    dp = DirectedPoint(kernel, tbp_slots or kernel.profile["dp.tbp_slots"], max_message)
    mods = kernel.modules
    for dev in devs:
        dev.add_protocol(DP_ETHERTYPE, dp.mdr)
        mods.on_unload(lambda dev=dev: dev.remove_protocol(DP_ETHERTYPE))
        mods.module_get(dev.driver_module)          # a NIC carrying DP keeps its driver loaded
        mods.on_unload(lambda dev=dev: mods.module_put(dev.driver_module))
        dp.netdevs.append(dev)
    dp.nart.learn(kernel.hosts, dp.netdevs)           # entries are made as peers are first addressed
    kernel.register_syscall("dp_open", dp.sys_open)
    kernel.register_syscall("dp_target", dp.sys_target)
    kernel.register_callgate("dp_write", dp.gate_write_routine())
    kernel.register_service("dp", dp)
    return dp


def _exit(kernel, dp) -> None:
    """Everything `init` registered is undone by the loader, in reverse order."""


MODULE = Module(
    name="dp",
    description="Directed Point: endpoints, Token Buffer Pools, NART, MDR and call-gate messaging",
    sources=("DP-A04", "DP-C01", "DP-C02", "DP-C03", "DP-C04", "DP-C05", "DP-C06", "DP-C07"),
    params={
        "tbp_slots": Param(int, 0, "slots in each endpoint's Token Buffer Pool (0: the profile's dp.tbp_slots)",
                           min=0, max=65536),
        "netdev": Param(str, "", "network device to carry DP (empty: every device)"),
    },
    init=_init,
    exit=_exit,
)
