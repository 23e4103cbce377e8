"""Knob: one tunable launch setting, with its domain, default and group (how each framework writes it is that
framework's :class:`~infrarsi.knobs.spelling.Spelling`).

A knob validates itself when it is built (optuna's distributions do the same): an empty domain, a
default outside the domain or a bool knob with a non-bool domain is an error that says the fix.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

KnobKind = Literal["int", "categorical", "bool"]

# Characters a knob value may never hold: they end a shell line or a C string, whatever the quoting.
UNSAFE_CHARS = {"\n": "a newline", "\r": "a carriage return", "\0": "a NUL byte"}


def value_problem(name: str, kind: str, value: Any) -> str | None:
    """Why ``value`` cannot be a value of an ``kind`` knob (wrong type, or text with a newline/NUL), else None.

    Types are strict: ``4.0 == 4`` in Python, but ``--micro-batch-size 4.0`` is an argument error in the
    framework, so a float is never an int knob's value; True is never an int or a category."""
    if kind == "int" and (isinstance(value, bool) or not isinstance(value, int)):
        hint = f"; write {int(value)}" if isinstance(value, float) and value.is_integer() else ""
        return f"{name}={value!r} is a {type(value).__name__}, but {name} is an int knob{hint}"
    if kind == "bool" and not isinstance(value, bool):
        return f"{name}={value!r} is a {type(value).__name__}, but {name} is a bool knob (true or false)"
    if kind == "categorical":
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            return f"{name}={value!r} is a {type(value).__name__}; a categorical knob takes text or numbers"
        if isinstance(value, str):
            for ch, what in UNSAFE_CHARS.items():
                if ch in value:
                    return (f"{name}={value!r} contains {what}; a knob value is one word of a command line "
                            f"(remove it from the contract or the setting)")
    return None
KnobGroup = Literal[
    "parallelism", "memory", "communication", "precision", "compile", "kernel", "runtime", "data"
]


class Knob(BaseModel):
    """A tunable setting.

    ``domain`` lists every value the knob may take (a bool knob's domain is ``(False, True)``);
    ``default`` is the value a launch that does not mention the knob gets (the framework's default).
    ``env`` names the environment variable the knob is (``NCCL_ALGO``), the same for every framework that takes
    it; a flag or a config field is the framework's own spelling (:mod:`infrarsi.knobs.spelling`).
    ``means`` says which catalog knob this one is when its name does not (``Knob(name="tp", ..., means=
    "tensor_parallel")``): what the search knows about that knob then applies to this one (search/meaning.py,
    which also knows the common short spellings).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    kind: KnobKind
    domain: tuple[Any, ...] = ()
    default: Any = None
    group: KnobGroup = "runtime"
    env: str = ""
    doc: str = ""
    means: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _fill(cls, data: Any) -> Any:
        if isinstance(data, dict):
            data = dict(data)
            if data.get("kind") == "bool" and not data.get("domain"):
                data["domain"] = (False, True)
            dom = tuple(data.get("domain") or ())
            data["domain"] = dom
            if data.get("default") is None and dom:
                data["default"] = False if data.get("kind") == "bool" else dom[0]
        return data

    @model_validator(mode="after")
    def _check(self) -> "Knob":
        if not self.domain:
            raise ValueError(f"knob {self.name!r}: domain is empty; give at least one value")
        if len(set(map(repr, self.domain))) != len(self.domain):
            raise ValueError(f"knob {self.name!r}: domain {list(self.domain)} has repeated values")
        if self.kind == "bool" and set(self.domain) - {False, True}:
            raise ValueError(f"knob {self.name!r}: a bool knob's domain is (False, True), got {list(self.domain)}")
        if self.kind == "int" and not all(isinstance(v, int) and not isinstance(v, bool) for v in self.domain):
            raise ValueError(f"knob {self.name!r}: an int knob needs int values, got {list(self.domain)}")
        for v in self.domain:
            bad = value_problem(self.name, self.kind, v)
            if bad:
                raise ValueError(f"knob {self.name!r}: {bad}")
        if self.default not in self.domain:
            raise ValueError(
                f"knob {self.name!r}: default {self.default!r} is not in its domain {list(self.domain)}"
            )
        return self

    def normalize(self, value: Any) -> Any:
        """The canonical form of a value of this knob's kind, without a domain check: a bool knob's 0/1
        become False/True. Values of another form pass unchanged (the domain check is :meth:`coerce`'s
        job; a float for an int knob is refused at the edge, by init). Settings are built from normalized
        values, so equal settings have equal hashes (``True == 1`` in Python, but their JSON keys differ)."""
        if self.kind == "bool" and not isinstance(value, bool) and isinstance(value, (int, float)) and value in (0, 1):
            return bool(value)
        return value

    def coerce(self, value: Any) -> Any:
        """Convert a value written as text (a flag, a TOML string) to this knob's type, or raise
        ValueError naming the knob and its domain."""
        v = value
        if self.kind == "bool" and isinstance(value, str):
            low = value.strip().lower()
            if low in ("true", "1", "yes", "on"):
                v = True
            elif low in ("false", "0", "no", "off"):
                v = False
        elif self.kind == "int" and isinstance(value, str):
            try:
                v = int(value)
            except ValueError:
                raise ValueError(f"{self.name}: {value!r} is not an integer; expected one of {list(self.domain)}") from None
        bad = value_problem(self.name, self.kind, v)
        if bad:
            raise ValueError(bad)
        if v not in self.domain:
            raise ValueError(f"{self.name}: {value!r} is not in its domain {list(self.domain)}")
        return v

    def with_domain(self, domain: list[Any] | tuple[Any, ...], default: Any = None) -> "Knob":
        """The same knob restricted (or widened) to ``domain``; the default is kept when it is inside."""
        dom = tuple(domain)
        d = default if default is not None else (self.default if self.default in dom else dom[0])
        return Knob(**{**self.model_dump(), "domain": dom, "default": d})
