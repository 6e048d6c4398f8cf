"""A command's options, derived from the parameter dataclasses it takes: each parameter is declared once
(`erroranalysis.core.params`), and its flag, type, default and help reach every command that offers it from there.

    @app.command("cluster")
    @common.handle_errors
    @options.takes(options.Group("cluster", ClusterParams))
    def cluster(run_dir: common.RunDir, *, cluster: ClusterParams) -> None: ...

The command's own arguments stay in its signature; `takes` adds one option per declared field of each group
(shared declarations, such as the seed, become one option that sets every group) and calls the command with each
group built, so a bad value is refused by its dataclass with the flag the user typed. A group with a `switch`
(`--cluster/--no-cluster`) is passed as None when switched off.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from erroranalysis.core.params import Flag, Params, Spec, Strings


@dataclass(frozen=True)
class Group:
    """The parameters of one dataclass, passed to the command as the keyword `name`. `exclude`: fields the command
    does not offer (it sets them itself); `switch`: an option that turns the whole group off (`--no-cluster`), on
    unless `on` is False; `panel`: the help section of every option of the group that names none."""

    name: str
    params: type[Params]
    exclude: tuple[str, ...] = ()
    switch: str | None = None
    switch_help: str = ""
    on: bool = True
    panel: str | None = None
    deprecated: dict[str, str] = field(default_factory=dict)  # old flag -> the field it sets, for one release
    deprecated_off: str | None = None  # an old flag that switched the group off (`--no-checks`), for one release


@dataclass
class _Option:
    key: str  # the keyword in the generated signature
    spec: Spec | None
    targets: list[tuple[str, str]]  # (group, field) this option sets
    kind: str = "value"  # value | none (sets None when given) | switch (turns a group off) | off | deprecated
    #                      | choice (a switch for one value of a Choice)


def takes(*groups: Group):
    """Add the groups' options to the command and build the groups from them before it runs."""

    def decorate(command):
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name not in {g.name for g in groups}]
        taken = _flags_of(own)
        options, parameters = _options(groups, taken)

        @functools.wraps(command)
        def wrapper(*args, **kwargs):
            built = _build(groups, options, {k: kwargs.pop(k) for k in list(kwargs) if k in options})
            return command(*args, **kwargs, **built)

        wrapper.__signature__ = signature.replace(parameters=_ordered(own + parameters))
        wrapper.__annotations__ = {p.name: p.annotation for p in wrapper.__signature__.parameters.values()}
        wrapper.flags = {target: o.spec.option(target[1]) for o in options.values() if o.kind == "value"
                         for target in o.targets}
        return wrapper

    return decorate


def flags_of(command) -> dict[tuple[str, str], str]:
    """(group, field) -> flag, for the commands built by `takes` (tests compare them with the declarations)."""
    return dict(getattr(command, "flags", {}))


def _options(groups, taken: set[str]) -> tuple[dict[str, _Option], list[inspect.Parameter]]:
    options: dict[str, _Option] = {}
    by_flag: dict[str, _Option] = {}
    parameters: list[inspect.Parameter] = []
    for group in groups:
        if group.switch:
            key = f"{group.name}__switch"
            options[key] = _Option(key, None, [(group.name, "")], "switch")
            parameters.append(_parameter(key, bool, group.on, (group.switch,), group.switch_help, group.panel))
        if group.deprecated_off:
            key = f"{group.name}__off"
            options[key] = _Option(key, None, [(group.name, group.switch.split("/")[-1])], "off")
            parameters.append(_parameter(key, bool, False, (group.deprecated_off,), "", None, hidden=True))
        for name, spec in group.params.specs().items():
            if name in group.exclude or not spec.cli:
                continue
            flag = spec.option(name)
            if flag in by_flag:
                if by_flag[flag].spec is not spec:
                    raise TypeError(f"{flag} is declared twice with different meanings ({by_flag[flag].targets[0]} "
                                    f"and {(group.name, name)}): give one of them another flag")
                by_flag[flag].targets.append((group.name, name))
                continue
            if flag in taken:
                raise TypeError(f"{flag} of {group.params.__name__}.{name} is also one of the command's own options")
            key = f"{group.name}__{name}"
            option = options[key] = by_flag[flag] = _Option(key, spec, [(group.name, name)])
            parameters.append(_value_parameter(key, name, spec, taken, group.panel))
            taken.update(_decls(option))
            if spec.switches:
                parameters.extend(_choice_switches(options, key, name, spec, group, taken))
            if spec.none_flag:
                none_key = f"{key}__none"
                options[none_key] = _Option(none_key, spec, [(group.name, name)], "none")
                parameters.append(_parameter(none_key, bool, False, (spec.none_flag,), spec.none_help or "",
                                             spec.panel or group.panel))
        for old, name in group.deprecated.items():
            key = f"{group.name}__{name}__{old.strip('-').replace('-', '_')}"
            spec = group.params.specs()[name]
            options[key] = _Option(key, spec, [(group.name, name)], "deprecated")
            parameters.append(_parameter(key, Optional[_cli_type(spec)], None, (old,),
                                         f"Old name of {spec.option(name)}; removed in the next release.",
                                         None, hidden=True))
    return options, parameters


def _choice_switches(options, key: str, name: str, spec: Spec, group: Group, taken: set[str]) -> list:
    """`--assistant-only` for `--mode assistant-only`: one switch per value of a Choice but its default."""
    made = []
    for value in spec.rule.values:
        if value == spec.default:
            continue
        flag = f"--{value}"
        if flag in taken:
            raise TypeError(f"{flag} (a value of {group.params.__name__}.{name}) is also another option's flag")
        switch_key = f"{key}__is__{str(value).replace('-', '_')}"
        options[switch_key] = _Option(switch_key, spec, [(group.name, name)], "choice")
        made.append(_parameter(switch_key, bool, False, (flag,), f"The same as {spec.option(name)} {value}.",
                               spec.panel or group.panel))
        taken.add(flag)
    return made


def _value_parameter(key: str, name: str, spec: Spec, taken: set[str], panel: str | None) -> inspect.Parameter:
    decls = _decls(_Option(key, spec, [("", name)]))
    if spec.short and spec.short not in taken:
        decls = (*decls, spec.short)
    default = spec.default
    if isinstance(spec.rule, Strings):
        default = None  # a tuple default is "not given" on the command line; the dataclass keeps its own
    kind = _cli_type(spec)
    kind = Optional[kind] if default is None and kind is not bool else kind
    panel = spec.panel or panel
    if spec.advanced:
        panel = f"{panel or 'Options'} (advanced)"
    return _parameter(key, kind, default, decls, _help(spec), panel, metavar=spec.rule.metavar())


def _decls(option: _Option) -> tuple[str, ...]:
    spec, name = option.spec, option.targets[0][1]
    if option.kind == "none":
        return (spec.none_flag,)
    flag = spec.flag or "--" + name.replace("_", "-")
    if isinstance(spec.rule, Flag) and "/" not in flag and spec.default is True:
        flag = f"{flag}/--no-{flag[2:]}"
    return (flag,)


def _cli_type(spec: Spec):
    return spec.rule.cli


def _help(spec: Spec) -> str:
    from rich.markup import escape

    text = spec.help
    if spec.default is None and spec.none:
        text += f" Default: {spec.none}."
    return escape(text)


def _parameter(key, kind, default, decls, help, panel, metavar=None, hidden=False) -> inspect.Parameter:
    info = typer.Option(*decls, help=help, rich_help_panel=panel, metavar=metavar, hidden=hidden,
                        show_default=default is not None and default != ())
    return inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=Annotated[kind, info])


def _flags_of(parameters) -> set[str]:
    flags: set[str] = set()
    for p in parameters:
        for meta in getattr(p.annotation, "__metadata__", ()):
            for decl in getattr(meta, "param_decls", None) or ():
                flags.update(d for d in str(decl).split("/") if d.startswith("-"))
            if getattr(meta, "default", ...) not in (..., None) and isinstance(meta.default, str):
                flags.update(d for d in meta.default.split("/") if d.startswith("-"))
    return flags


def _ordered(parameters: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """Positional parameters first (typer's arguments), then every keyword option, in the order given."""
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                  and p.default is p.empty]
    rest = [p.replace(kind=p.KEYWORD_ONLY) for p in parameters if p not in positional]
    return positional + rest


def _build(groups, options: dict[str, _Option], given: dict[str, Any]) -> dict[str, Params | None]:
    values: dict[str, dict[str, Any]] = {g.name: {} for g in groups}
    off: set[str] = set()
    for key, option in options.items():
        value = given.get(key)
        for group, name in option.targets:
            if option.kind == "switch":
                if not value:
                    off.add(group)
            elif option.kind == "off":
                if value:
                    _warn(_decls_of_off(key, groups), name)
                    off.add(group)
            elif option.kind == "none":
                if value:
                    values[group][name] = None
            elif option.kind == "choice":
                if value:
                    _choose(values[group], name, option.spec, key.rsplit("__is__", 1)[1].replace("_", "-"))
            elif option.kind == "deprecated":
                if value is not None:
                    _warn(_old_flag(key, groups), option.spec.option(name))
                    values[group][name] = _stored(option.spec, value)
            elif name not in values[group]:
                values[group][name] = _stored(option.spec, value)
    return {g.name: None if g.name in off else g.params(**values[g.name]) for g in groups}


def _choose(values: dict, name: str, spec: Spec, chosen: str) -> None:
    """A value switch given (`--assistant-only`): it sets the parameter, and refuses a second switch or a different
    value of the option itself."""
    from erroranalysis.core.errors import ParameterError

    value = next(v for v in spec.rule.values if str(v).replace("_", "-") == chosen)
    if values.get(name, spec.default) not in (spec.default, value):
        raise ParameterError(name, f"--{value} with {values[name]}", "one of " + ", ".join(
            f"--{v}" for v in spec.rule.values if v != spec.default) + ", at most one", flag=f"--{value}")
    values[name] = value


def _stored(spec: Spec, value):
    """What the command line gave, as the dataclass takes it: a Strings option not given keeps its default."""
    if value is None and isinstance(spec.rule, Strings):
        return spec.default
    if isinstance(value, Path) and not isinstance(spec.rule.cli, type(Path)) and spec.rule.cli is not Path:
        return str(value)
    return value


def _old_flag(key: str, groups) -> str:
    group, name, _ = key.split("__")
    found = next(g for g in groups if g.name == group)
    return next(old for old, field_name in found.deprecated.items()
                if key == f"{group}__{field_name}__{old.strip('-').replace('-', '_')}")


def _decls_of_off(key: str, groups) -> str:
    return next(g for g in groups if g.name == key.split("__")[0]).deprecated_off


def _warn(old: str, new: str) -> None:
    import sys

    print(f"warning: {old} is deprecated; use {new} (the old name goes in the next release).", file=sys.stderr)
