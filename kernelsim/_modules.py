"""Kernel modules, loaded and unloaded as on Linux.

A module declares its name, a one-line description, its sources, typed parameters,
its dependencies, and `init`/`exit`. DP itself, every NIC driver and every protocol is
a module; a kernel boots bare. Modules are found through the Python entry-point group
``dp.modules`` -- the built-in ones are registered there by this package's own setup,
third-party ones by theirs.

Loading follows the Linux rules a user expects: ENOENT for an unknown module or a
missing dependency, EEXIST for a second load, EINVAL naming a bad parameter, EBUSY
for `rmmod` while the module is used. A module whose `init` raises leaves the kernel
as it was: every resource it registered through the kernel's `undo` log is released
in reverse order (the Linux "unwind on failure" idiom, done once here for everyone).
"""
from __future__ import annotations

import errno
from dataclasses import dataclass, field
from typing import Any, Callable

__all__ = ["Param", "Module", "ModuleTable", "available_modules", "find_module"]

ENTRY_POINT_GROUP = "dp.modules"


@dataclass(frozen=True)
class Param:
    type: type
    default: Any
    help: str
    min: float | None = None
    max: float | None = None
    choices: tuple | None = None

    def check(self, module: str, name: str, value):
        want = self.type
        if isinstance(value, str) and want is not str:
            value = _parse(module, name, want, value)
        if want is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, want) or (want is int and isinstance(value, bool)):
            raise OSError(errno.EINVAL, f"{module}: parameter {name} takes {want.__name__}, not {value!r}")
        if self.choices is not None and value not in self.choices:
            raise OSError(errno.EINVAL, f"{module}: parameter {name} must be one of {', '.join(map(str, self.choices))}")
        if self.min is not None and value < self.min:
            raise OSError(errno.EINVAL, f"{module}: parameter {name} must be >= {self.min}")
        if self.max is not None and value > self.max:
            raise OSError(errno.EINVAL, f"{module}: parameter {name} must be <= {self.max}")
        return value


def _parse(module, name, want, text):
    try:
        if want is bool:
            if text.lower() in ("1", "y", "yes", "true", "on"):
                return True
            if text.lower() in ("0", "n", "no", "false", "off"):
                return False
            raise ValueError
        if want is int:
            return int(text, 0)
        return want(text)
    except ValueError:
        raise OSError(errno.EINVAL, f"{module}: parameter {name} takes {want.__name__}, not {text!r}") from None


@dataclass
class Module:
    name: str
    description: str
    init: Callable
    exit: Callable
    sources: tuple = ()
    params: dict = field(default_factory=dict)
    depends: tuple = ()

    def info(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "sources": list(self.sources),
            "depends": list(self.depends),
            "params": {k: {"type": p.type.__name__, "default": p.default, "help": p.help}
                       for k, p in self.params.items()},
        }


_index: dict | None = None


def available_modules() -> dict[str, Module]:
    """Registered modules by name (entry points), read once per process as depmod's index is.

    Scanning the installed distributions costs milliseconds; a 1024-node cluster loads
    two modules on every node.
    """
    global _index
    if _index is None:
        from importlib.metadata import entry_points     # ~50 ms to import: only where a module is looked up
        found = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, ep)
        _index = found
    return dict(_index)


def find_module(name: str) -> Module:
    ep = available_modules().get(name)
    if ep is None:
        raise OSError(errno.ENOENT, f"module {name!r} not found")
    try:
        mod = ep.load()
    except (ImportError, AttributeError) as exc:
        raise OSError(errno.ENOENT, f"module {name!r} is registered but cannot be loaded ({exc})") from None
    if not isinstance(mod, Module) or mod.name != name:
        raise OSError(errno.ENOEXEC, f"entry point {name!r} is not a dp module")
    return mod


class _Loaded:
    __slots__ = ("module", "params", "state", "refs", "users", "holders", "undo")

    def __init__(self, module, params):
        self.module = module
        self.params = params
        self.state = None
        self.refs = 0           # open endpoints, mapped cards: module_get/module_put from outside a module
        self.users: list[str] = []      # modules that depend on it
        self.holders: list[str] = []    # modules that took a reference in their init (a NIC carrying DP)
        self.undo: list = []

    def used_by(self) -> list[str]:
        return list(dict.fromkeys(self.users + self.holders))


class ModuleTable:
    """The kernel's list of loaded modules."""

    def __init__(self, kernel):
        self.kernel = kernel
        self._loaded: dict[str, _Loaded] = {}
        self._loading: _Loaded | None = None
        self._unloading: _Loaded | None = None

    def insmod(self, name: str, **params):
        if name in self._loaded:
            raise OSError(errno.EEXIST, f"module {name} is already loaded")
        mod = find_module(name)
        for dep in mod.depends:
            if dep not in self._loaded:
                raise OSError(errno.ENOENT, f"{name}: needs module {dep}, which is not loaded (use modprobe)")
        values = {k: p.default for k, p in mod.params.items()}
        for k, v in params.items():
            if k not in mod.params:
                raise OSError(errno.EINVAL, f"{name}: unknown parameter {k}")
            values[k] = mod.params[k].check(name, k, v)
        rec = _Loaded(mod, values)
        self._loading = rec
        try:
            rec.state = mod.init(self.kernel, **values)
        except MemoryError:
            self._unwind(rec)
            raise OSError(errno.ENOMEM, f"{name}: out of kernel memory") from None
        except BaseException:
            self._unwind(rec)
            raise
        finally:
            self._loading = None
        for dep in mod.depends:
            self._loaded[dep].users.append(name)
        self._loaded[name] = rec
        return rec.state

    def modprobe(self, name: str, **params):
        """Load `name` after its dependencies. Loaded already: fine, unless `params` ask
        for values other than those it runs with (EEXIST: rmmod it first)."""
        if name in self._loaded:
            rec = self._loaded[name]
            for k, v in params.items():
                if k not in rec.module.params:
                    raise OSError(errno.EINVAL, f"{name}: unknown parameter {k}")
                if rec.module.params[k].check(name, k, v) != rec.params[k]:
                    raise OSError(errno.EEXIST, f"module {name} is already loaded with {k}={rec.params[k]!r}; "
                                                "rmmod it to load it with other parameters")
            return rec.state
        mod = find_module(name)
        for dep in mod.depends:
            self.modprobe(dep)
        return self.insmod(name, **params)

    def rmmod(self, name: str) -> None:
        rec = self._loaded.get(name)
        if rec is None:
            raise OSError(errno.ENOENT, f"module {name} is not loaded")
        if rec.users or rec.holders:
            raise OSError(errno.EBUSY, f"module {name} is in use by {', '.join(rec.used_by())}")
        if rec.refs:
            raise OSError(errno.EBUSY, f"module {name} is in use ({rec.refs} references)")
        self._unloading = rec
        try:
            rec.module.exit(self.kernel, rec.state)
            self._unwind(rec)
        finally:
            self._unloading = None
        del self._loaded[name]
        for dep in rec.module.depends:
            self._loaded[dep].users.remove(name)

    def on_unload(self, fn) -> None:
        """Register an undo step for the module being loaded (run in reverse on failure/unload)."""
        if self._loading is None:
            raise RuntimeError("on_unload outside a module's init")
        self._loading.undo.append(fn)

    @staticmethod
    def _unwind(rec: _Loaded) -> None:
        while rec.undo:
            rec.undo.pop()()

    def modinfo(self, name: str) -> dict:
        """What `modinfo NAME` shows: description, parameters, dependencies, sources; for
        a loaded module also the values it runs with and what its ``state.modinfo()``
        reports (a setting it chose at load, say)."""
        info = find_module(name).info()
        rec = self._loaded.get(name)
        if rec is not None:
            info["loaded"] = {"params": dict(rec.params)}
            report = getattr(rec.state, "modinfo", None)
            if callable(report):
                info["loaded"].update(report())
        return info

    def get(self, name: str):
        rec = self._loaded.get(name)
        if rec is None:
            raise OSError(errno.ENOENT, f"module {name} is not loaded")
        return rec.state

    def module_get(self, name: str) -> None:
        """Take a reference on `name` (rmmod is EBUSY until it is put). Taken by a module
        while it loads, the reference names that module in lsmod's "used by", as Linux
        does for a module holding another's symbols."""
        holder = self._loading
        if holder is not None and holder.module.name != name:
            self._loaded[name].holders.append(holder.module.name)
        else:
            self._loaded[name].refs += 1

    def module_put(self, name: str) -> None:
        rec = self._loaded[name]
        current = self._unloading or self._loading     # a module's exit, or its failed init unwinding
        if current is not None and current.module.name in rec.holders:
            rec.holders.remove(current.module.name)
        else:
            rec.refs -= 1

    def loaded(self, name: str) -> bool:
        return name in self._loaded

    def lsmod(self) -> list[dict]:
        return [{"name": n, "params": dict(r.params), "use_count": r.refs + len(r.users) + len(r.holders),
                 "used_by": r.used_by()} for n, r in self._loaded.items()]
