"""kernelsim: the simulated kernel and machine under DP.

The event engine and its trio clock, nodes with their CPU, memory, interrupt
controller, processes, fd tables, system calls and call gates, the module loader,
cost accounting from platform profiles, and media. It knows nothing of DP.
"""
from kernelsim._engine import Engine
from kernelsim._cpu import Cpu, LEVEL_IRQ, LEVEL_PROC
from kernelsim._physmem import PhysMem
from kernelsim._waits import SpinnerQueue, WaitQueue
from kernelsim._modules import Module, ModuleTable, Param, available_modules, find_module
from kernelsim._node import Costs, Node, OpenFile, PrivateRegion, Process, WouldBlock
from kernelsim._netdev import NetDevice, PciDevice
from kernelsim._profile import Profile, available_profiles, load_profile, parse_param
from kernelsim._clock import EngineClock, RunnableCounter
from kernelsim._trio import (DEFAULT_SPIN_S, after, checkpoint, sleep_until_readable, replicates_trio, run_blocking, run_blocking_sync, run_entry,
                             run_entry_sync, run_path, run_path_sync, run_user, run_user_sync, wait_on, wait_on_sync)
from kernelsim._spin import callable_spin, spin

__all__ = [
    "Engine", "EngineClock", "RunnableCounter", "Cpu", "LEVEL_IRQ", "LEVEL_PROC", "PhysMem", "SpinnerQueue", "WaitQueue",
    "Module", "ModuleTable", "Param", "available_modules", "find_module",
    "Costs", "Node", "OpenFile", "PrivateRegion", "Process", "WouldBlock", "NetDevice", "PciDevice",
    "Profile", "available_profiles", "load_profile", "parse_param",
    "DEFAULT_SPIN_S", "after", "checkpoint", "sleep_until_readable", "replicates_trio", "run_blocking", "run_blocking_sync", "run_entry", "run_entry_sync",
    "run_path", "run_path_sync", "run_user", "run_user_sync", "wait_on", "wait_on_sync", "callable_spin", "spin",
]
