"""Platform profiles: the numbers a modeled machine is built from.

A profile is a TOML file shipped in ``kernelsim/profiles``. Every value carries its
source -- a source id (docs/sources.md), or "modeling choice" with the reason -- so a
reader can check each input of a modeled figure. Any value can be overridden per run
(``--param link.rate_bps=10e6``); unknown keys and values of the wrong type are
refused with EINVAL rather than silently ignored.
"""
from __future__ import annotations

import errno
import difflib
import math
import tomllib
from dataclasses import dataclass
from importlib import resources

__all__ = ["Profile", "ProfileValue", "available_profiles", "load_profile", "parse_param"]


@dataclass(frozen=True)
class ProfileValue:
    value: object
    unit: str
    source: str
    min: float | None = None        # smallest value that means something (inclusive)
    max: float | None = None


# What a value's name says about it, where the row gives no bounds of its own: a rate or
# a clock of zero would divide by zero; a probability lies in [0, 1].
def _implied_bounds(key: str, old) -> tuple[float | None, float | None]:
    if isinstance(old, bool) or not isinstance(old, (int, float)):
        return None, None
    if key.endswith(("_Bps", "_bps", ".hz", "_hz")):
        return 1e-300, None
    if key.startswith("fault.") and not key.endswith("_s"):
        return 0.0, 1.0
    return 0.0, None


class Profile:
    """A platform profile with per-run overrides; read values with ``p["key"]``."""

    def __init__(self, name: str, description: str, nic: str, values: dict[str, ProfileValue]):
        self.name = name
        self.description = description
        self.nic = nic
        self._values = dict(values)
        self.overrides: dict[str, object] = {}

    def __getitem__(self, key: str):
        return self._values[key].value

    def __contains__(self, key: str) -> bool:
        return key in self._values

    def get(self, key: str, default=None):
        v = self._values.get(key)
        return default if v is None else v.value

    def keys(self):
        return self._values.keys()

    def entry(self, key: str) -> ProfileValue:
        return self._values[key]

    def override(self, key: str, value) -> None:
        """Replace one value, keeping its type; EINVAL for unknown keys or bad values."""
        if key not in self._values:
            close = difflib.get_close_matches(key, self._values, n=3)
            hint = f" (did you mean {', '.join(close)}?)" if close else ""
            raise OSError(errno.EINVAL, f"unknown profile parameter {key!r} for profile {self.name}{hint}")
        old = self._values[key]
        new = _coerce(key, old.value, value)
        lo, hi = _implied_bounds(key, old.value)
        lo = old.min if old.min is not None else lo
        hi = old.max if old.max is not None else hi
        if lo is not None and new < lo:
            raise OSError(errno.EINVAL, f"parameter {key!r} must be {'>' if lo == 1e-300 else '>='} "
                                        f"{0 if lo == 1e-300 else lo} (got {new!r})")
        if hi is not None and new > hi:
            raise OSError(errno.EINVAL, f"parameter {key!r} must be <= {hi} (got {new!r})")
        self._values[key] = ProfileValue(new, old.unit, f"--param override (was {old.value!r}: {old.source})",
                                         old.min, old.max)
        self.overrides[key] = new

    def copy(self) -> "Profile":
        p = Profile(self.name, self.description, self.nic, self._values)
        p.overrides = dict(self.overrides)
        return p

    def as_dict(self) -> dict[str, object]:
        return {k: v.value for k, v in sorted(self._values.items())}


def _coerce(key: str, old, value):
    if isinstance(value, str):
        text = value.strip()
        if isinstance(old, bool):
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise OSError(errno.EINVAL, f"parameter {key!r} takes true or false, not {value!r}")
        try:
            if isinstance(old, int):
                f = float(text)
                if f != int(f):
                    raise ValueError
                value = int(f)
            elif isinstance(old, float):
                value = float(text)
            else:
                return text
        except ValueError:
            raise OSError(errno.EINVAL, f"parameter {key!r} takes a {type(old).__name__}, not {value!r}") from None
    if isinstance(old, bool) != isinstance(value, bool):
        raise OSError(errno.EINVAL, f"parameter {key!r} takes a {type(old).__name__}, not {value!r}")
    if isinstance(old, (int, float)) and not isinstance(old, bool):
        if not isinstance(value, (int, float)):
            raise OSError(errno.EINVAL, f"parameter {key!r} takes a number, not {value!r}")
        if not math.isfinite(value):
            raise OSError(errno.EINVAL, f"parameter {key!r} must be a finite number (got {value!r})")
        if value < 0:
            raise OSError(errno.EINVAL, f"parameter {key!r} must not be negative (got {value!r})")
        if isinstance(old, int) and not isinstance(old, bool):
            if int(value) != value:
                raise OSError(errno.EINVAL, f"parameter {key!r} takes a whole number, not {value!r}")
            return int(value)
        return float(value)
    return value


def parse_param(text: str) -> tuple[str, str]:
    """Split ``KEY=VALUE`` as given to ``--param``."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise OSError(errno.EINVAL, f"--param takes KEY=VALUE, not {text!r}")
    return key.strip(), value.strip()


def available_profiles() -> list[str]:
    root = resources.files("kernelsim") / "profiles"
    return sorted(p.name[:-5] for p in root.iterdir() if p.name.endswith(".toml"))


def load_profile(name: str, _seen: tuple = ()) -> Profile:
    """Load profile `name`. A profile whose ``[profile]`` table names a ``base`` starts
    from that profile's values and replaces or adds its own (the same machine under an
    assumption of its own, or a variant of it)."""
    root = resources.files("kernelsim") / "profiles"
    path = root / f"{name}.toml"
    if not path.is_file():
        raise OSError(errno.ENOENT, f"no platform profile {name!r} (available: {', '.join(available_profiles())})")
    doc = tomllib.loads(path.read_text())
    meta = doc.get("profile", {})
    values = {}
    nic = meta.get("nic", "")
    base = meta.get("base")
    if base is not None:
        if base == name or base in _seen:
            raise ValueError(f"profile {name}: its base {base!r} leads back to itself")
        parent = load_profile(base, _seen + (name,))
        values = dict(parent._values)
        nic = meta.get("nic", parent.nic)
    for key, item in doc.get("params", {}).items():
        if not isinstance(item, dict) or "value" not in item or "source" not in item:
            raise ValueError(f"profile {name}: {key} needs a value and a source")
        values[key] = ProfileValue(item["value"], item.get("unit", ""), item["source"],
                                   item.get("min"), item.get("max"))
    return Profile(meta.get("name", name), meta.get("description", ""), nic, values)
