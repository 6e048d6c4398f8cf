"""Each parameter declared once: its type, range, default, help and flag, in the dataclass that holds it.

As scikit-learn's `_parameter_constraints` (`Interval`, `StrOptions`), but the declaration also carries what a
user reads: the help text and the flag. A stage's parameters are one frozen `Params` dataclass whose fields are
declared with `param(default, rule, help)`; the dataclass validates itself once, when it is built, and the CLI
derives its options from the same fields (`erroranalysis.cli.options`), so a default or a range is written in
one place. A parameter that several dataclasses share (the seed, the device) is one `Spec` referenced by each.

    @dataclass(frozen=True)
    class SliceParams(Params):
        max_order: int = param(3, Choice(1, 2, 3), "Features per slice: 1 single features, 2 or 3 conjunctions.")
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from numbers import Integral, Real
from pathlib import Path
from typing import Any

from erroranalysis.core.errors import ParameterError

# ---------------------------------------------------------------------------------------------------------- rules


class Rule:
    """What a value must be. `cli` is the type the command line parses before the rule checks it."""

    cli: type = str

    def ok(self, value) -> bool:
        raise NotImplementedError

    def describe(self) -> str:
        raise NotImplementedError

    def coerce(self, value):
        """The stored form of an accepted input (a Path as str, a list as a tuple); the input when already so."""
        return value

    def metavar(self) -> str | None:
        return None

    def offender(self, value):
        """The part of a refused value to name in the message (an item of a list; the value itself here)."""
        return value

    def __or__(self, other: "Rule") -> "Rule":
        return AnyOf(self, other)


def is_int(value) -> bool:
    """An integer that is not a bool (numpy integers included)."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_number(value) -> bool:
    """A finite real number that is not a bool."""
    return isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Int(Rule):
    """An integer in [low, high] (either bound may be open-ended: None)."""

    low: int | None = None
    high: int | None = None
    cli = int

    def ok(self, value) -> bool:
        return is_int(value) and (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def describe(self) -> str:
        return _bounded("an integer", self.low, self.high, "[", "]")

    def coerce(self, value):
        return int(value) if is_int(value) else value


@dataclass(frozen=True)
class Float(Rule):
    """A finite number in the interval; `low_open`/`high_open` exclude the bound."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    cli = float

    def ok(self, value) -> bool:
        if not is_number(value):
            return False
        if self.low is not None and not (value > self.low if self.low_open else value >= self.low):
            return False
        return self.high is None or (value < self.high if self.high_open else value <= self.high)

    def describe(self) -> str:
        return _bounded("a number", self.low, self.high, "(" if self.low_open else "[", ")" if self.high_open else "]")

    def coerce(self, value):
        return float(value) if is_number(value) else value


@dataclass(frozen=True)
class Choice(Rule):
    """One of the given values (strings or numbers)."""

    values: tuple

    def __init__(self, *values):
        object.__setattr__(self, "values", tuple(values))

    @property
    def cli(self):
        return type(self.values[0]) if self.values and all(type(v) is type(self.values[0]) for v in self.values) else str

    def ok(self, value) -> bool:
        return not isinstance(value, bool) and value in self.values

    def describe(self) -> str:
        return "one of " + ", ".join(map(str, self.values))

    def metavar(self) -> str:
        return "|".join(map(str, self.values))


@dataclass(frozen=True)
class Flag(Rule):
    """True or False."""

    cli = bool

    def ok(self, value) -> bool:
        return isinstance(value, bool)

    def describe(self) -> str:
        return "true or false"


@dataclass(frozen=True)
class Text(Rule):
    """A non-empty string (`empty=True` allows "")."""

    empty: bool = False

    def ok(self, value) -> bool:
        return isinstance(value, str) and (self.empty or bool(value.strip()))

    def describe(self) -> str:
        return "a string" if self.empty else "a non-empty string"


@dataclass(frozen=True)
class File(Rule):
    """A path to a file or folder, or an object-storage URL (given as str or Path; stored as str). Existence is the
    stage's to check, with the file named in its message. The command line takes it as a string: a Path would
    fold `s3://b/x` into `s3:/b/x`."""

    def ok(self, value) -> bool:
        return isinstance(value, (str, Path)) and bool(str(value).strip())

    def coerce(self, value):
        return str(value) if isinstance(value, Path) else value

    def describe(self) -> str:
        return "a file path"

    def metavar(self) -> str:
        return "FILE|URL"


@dataclass(frozen=True)
class Strings(Rule):
    """A tuple of non-empty strings (`choices`: each one of them; `blank`: whitespace is a string too, as a stop
    string "\\n" is). On the command line: comma-separated (`sep`), or the flag repeated (`repeat`). One string
    alone is one entry."""

    sep: str | None = ","
    repeat: bool = False
    choices: tuple = ()
    blank: bool = False

    def ok(self, value) -> bool:
        return isinstance(value, (tuple, list)) and all(self._item_ok(s) for s in value)

    def _item_ok(self, item) -> bool:
        return (isinstance(item, str) and bool(item if self.blank else item.strip())
                and (not self.choices or item in self.choices))

    def describe(self) -> str:
        return "names from: " + ", ".join(self.choices) if self.choices else "non-empty strings"

    def offender(self, value):
        if isinstance(value, (tuple, list)):
            return next((s for s in value if not self._item_ok(s)), value)
        return value

    def coerce(self, value):
        if isinstance(value, str):
            if self.repeat or not self.sep:
                return (value,) if value else ()
            return tuple(p.strip() for p in value.split(self.sep) if p.strip())
        return tuple(value) if isinstance(value, list) else value

    @property
    def cli(self):
        return list[str] if self.repeat else str

    def metavar(self) -> str | None:
        return "|".join(self.choices) if self.repeat and self.choices else None


@dataclass(frozen=True)
class Object(Rule):
    """An object offering the named methods (a reducer object instead of its name, say)."""

    methods: tuple
    what: str

    def ok(self, value) -> bool:
        return not isinstance(value, (str, bool, int, float)) and all(hasattr(value, m) for m in self.methods)

    def describe(self) -> str:
        return self.what


@dataclass(frozen=True)
class AnyOf(Rule):
    """Any of the rules; the command line parses the first's type."""

    rules: tuple

    def __init__(self, *rules):
        object.__setattr__(self, "rules", tuple(rules))

    @property
    def cli(self):
        return self.rules[0].cli

    def ok(self, value) -> bool:
        return any(r.ok(value) for r in self.rules)

    def describe(self) -> str:
        return " or ".join(r.describe() for r in self.rules)

    def coerce(self, value):
        for r in self.rules:
            if r.ok(r.coerce(value)):
                return r.coerce(value)
        return value

    def metavar(self) -> str | None:
        return self.rules[0].metavar()


def _bounded(kind: str, low, high, left: str, right: str) -> str:
    if low is not None and high is not None:
        return f"{kind} in {left}{low}, {high}{right}"
    if low is not None:
        return f"{kind} {'>' if left == '(' else '>='} {low}"
    if high is not None:
        return f"{kind} {'<' if right == ')' else '<='} {high}"
    return "a finite number" if kind == "a number" else kind


# ---------------------------------------------------------------------------------------------------- declaration


@dataclass(frozen=True)
class Spec:
    """One parameter: default, rule, help and how the command line spells it.

    `flag`: the option (default `--name-with-dashes`; a Flag rule gets `--x/--no-x` unless `flag` has a "/");
    `short`: a one-letter alias, used where the command has no other use for it; `none`: the default or value
    None is allowed and means `none` (said in the help); `none_flag`: a switch that sets None (`--keep-noise`);
    `panel`: the help section; `advanced`: shown in the section's "(advanced)" part; `cli=False`: library only;
    `switches`: a Choice whose every value but the default is also a switch of its own (`--assistant-only` for
    `--mode assistant-only`), one at most given."""

    default: Any
    rule: Rule
    help: str
    flag: str | None = None
    short: str | None = None
    none: str | None = None
    none_flag: str | None = None
    none_help: str | None = None
    panel: str | None = None
    advanced: bool = False
    cli: bool = True
    switches: bool = False

    def check(self, name: str, value) -> Any:
        """The stored form of `value`, or a ParameterError naming the parameter and its flag."""
        if value is None and self.none is not None:
            return None
        stored = self.rule.coerce(value)
        if not self.rule.ok(stored):
            shown = self.rule.offender(stored) if isinstance(stored, tuple) else value
            raise ParameterError(name, shown, self.rule.describe(), flag=self.option(name), none=self.none)
        return stored

    def option(self, name: str) -> str:
        """The flag that sets this parameter (the positive one for a switch)."""
        flag = self.flag or "--" + name.replace("_", "-")
        return flag.split("/")[0]


def param(default, rule: Rule, help: str, **spec) -> Any:
    """A dataclass field declared with its rule, help and flag (see `Spec`)."""
    return spec_field(Spec(default, rule, help, **spec))


def spec_field(spec: Spec) -> Any:
    """A dataclass field for a `Spec` declared elsewhere (one parameter shared by several dataclasses)."""
    return dataclasses.field(default=spec.default, metadata={"spec": spec})


class Params:
    """Base of the frozen parameter dataclasses: every declared field is checked once, when the object is built
    (`validate` adds the checks that span fields); changed only by `replace`; recorded in the manifest by `record`."""

    def __post_init__(self) -> None:
        for name, spec in type(self).specs().items():
            value = spec.check(name, getattr(self, name))
            if value is not getattr(self, name):
                object.__setattr__(self, name, value)
        self.validate()

    def validate(self) -> None:
        """Checks that span fields; raise with `self.fail(name, value, expected)`."""

    def fail(self, name: str, value, expected: str) -> None:
        spec = type(self).specs().get(name)
        raise ParameterError(name, value, expected, flag=spec.option(name) if spec else None)

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """The declared fields, in declaration order: name -> Spec."""
        return {f.name: f.metadata["spec"] for f in dataclasses.fields(cls) if "spec" in f.metadata}

    def replace(self, **changes):
        """A copy with `changes`; an unknown name is a ParameterError, not a TypeError."""
        names = {f.name for f in dataclasses.fields(self)}
        for name, value in changes.items():
            if name not in names:
                raise ParameterError(name, value, f"a parameter of {type(self).__name__} ({', '.join(sorted(names))})")
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, **values):
        """`cls(**values)`, with an unknown name reported as a ParameterError."""
        return cls().replace(**values)

    def project(self, cls):
        """The `cls` parameters held here (a stage's parameters carry their core's)."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in self.values().items() if k in names})

    def values(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def record(self) -> dict:
        """The parameters as JSON for the manifest (objects by their name)."""

        def plain(value):
            if value is None or isinstance(value, (bool, int, float, str)):
                return value
            if isinstance(value, (list, tuple)):
                return [plain(v) for v in value]
            if isinstance(value, dict):
                return {str(k): plain(v) for k, v in value.items()}
            return getattr(value, "key", None) or getattr(value, "__name__", None) or type(value).__name__

        return {name: plain(value) for name, value in self.values().items()}


# Parameters several stages share, declared once.
SEED = Spec(0, Int(0), "Seed for every random step.")
