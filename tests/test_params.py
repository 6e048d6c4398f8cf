"""Each parameter is declared once, and every command that offers it takes it from that declaration.

The parameter dataclasses (`erroranalysis.core.params.Params`) hold each parameter's rule, default, help and flag; the
CLI derives its options from them (`erroranalysis.cli.options`). These tests hold the rules a reader relies on:
every field is declared and its default obeys its own rule; a command's options are exactly its groups' fields,
with the declared flag, default and help; no command declares by hand a flag a parameter owns; every stage
parameter is settable from `run`, `analyze`, `watch` and the Trainer callback as from the stage's own command; a
bad value is refused by its declaration, naming the flag the user typed.
"""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from erroranalysis import stages
from erroranalysis.checklist.overfit import OverfitParams
from erroranalysis.cli import app as cli_app
from erroranalysis.cli import options
from erroranalysis.cli import stage_groups as groups
from erroranalysis.cluster import ClusteringParams, NamingParams
from erroranalysis.compare import CompareParams
from erroranalysis.core.errors import ParameterError
from erroranalysis.core.params import Params
from erroranalysis.engines import Engine
from erroranalysis.infer.generation import GenerationParams
from erroranalysis.infer.scorers import ScorerParams
from erroranalysis.integrations.trackers import TrackerParams
from erroranalysis.labels.matching import MatchParams
from erroranalysis.sft import SftParams
from erroranalysis.slices import FeatureParams, SearchParams
from erroranalysis.sources.generations import SourceParams
from erroranalysis.sources.table import DataOptions
from erroranalysis.timeline import TrackParams

DECLARED = [ClusteringParams, NamingParams, SearchParams, FeatureParams, stages.ClusterParams, stages.SliceParams,
            stages.CheckParams, stages.MetricsParams, stages.InferParams, GenerationParams, DataOptions, Engine,
            OverfitParams, CompareParams, MatchParams, TrackParams, ScorerParams, SourceParams, TrackerParams,
            SftParams]
# The stages that follow the predictions, and where `run`, `analyze` and `watch` take their parameters.
AFTER = {"metrics": stages.MetricsParams, "checks": stages.CheckParams, "slices": stages.SliceParams,
         "cluster": stages.ClusterParams}


def command(name: str):
    return cli_app.load(name)


def flags_of(click_command) -> set[str]:
    return {opt for p in click_command.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("cls", DECLARED, ids=lambda c: c.__name__)
def test_every_field_is_declared_and_its_default_obeys_its_rule(cls):
    fields = [f.name for f in dataclasses.fields(cls)]
    specs = cls.specs()
    assert list(specs) == fields, f"{cls.__name__}: fields without a declaration: {set(fields) - set(specs)}"
    for name, spec in specs.items():
        if spec.default is None:
            assert spec.none, f"{cls.__name__}.{name}: a None default must say what None means"
        else:
            assert spec.check(name, spec.default) == spec.default
        assert spec.help.strip().endswith("."), f"{cls.__name__}.{name}: help is one or more full sentences"
    cls()  # the defaults together pass the checks that span fields too


@pytest.mark.parametrize("name", list(cli_app.COMMANDS))
def test_a_commands_options_are_its_declarations(name):
    """Each option a command derives has the declaration's flag, default and help; and no option written by hand
    in any command spells a flag that a declared parameter owns (one declaration per parameter)."""
    cmd = command(name)
    commands = [cmd] if not hasattr(cmd, "commands") else list(cmd.commands.values())
    owned = {spec.option(field): (cls, field) for cls in DECLARED for field, spec in cls.specs().items()}
    for c in commands:
        derived = options.flags_of(c.callback)
        by_flag = {p.opts[0]: p for p in c.params if p.opts}
        for (group, field), flag in derived.items():
            assert flag in by_flag, (name, group, field, flag)
        derived_flags = set(derived.values())
        for p in c.params:
            if p.opts and p.opts[0] in owned and p.opts[0] not in derived_flags and not p.hidden:
                cls, field = owned[p.opts[0]]
                pytest.fail(f"{name}: {p.opts[0]} is declared by hand; it is {cls.__name__}.{field}'s: take it "
                            "with options.takes")


def _spec_of(group_name: str, cls: type[Params], command_name: str):
    cmd = command(command_name)
    derived = options.flags_of(cmd.callback)
    by_flag = {p.opts[0]: p for p in cmd.params if p.opts}
    for field, spec in cls.specs().items():
        yield field, spec, derived.get((group_name, field)), by_flag


@pytest.mark.parametrize("command_name", ["run", "analyze", "compare", "watch", "timeline"])
def test_log_to_is_one_declaration_taken_by_each_command(command_name):
    """--log-to (and its companions) come from TrackerParams on every command that logs to a tracker."""
    for field, spec, flag, by_flag in _spec_of("trackers", TrackerParams, command_name):
        assert flag == spec.option(field) and flag in by_flag, (command_name, field)


def test_analyze_takes_the_output_checks_but_not_the_decoding():
    derived = options.flags_of(command("analyze").callback)
    taken = {f for (group, f) in derived if group == "generation"}
    assert {"output_checks", "regex", "reference_column", "f1_threshold", "rouge_threshold"} <= taken
    assert not taken & {"max_new_tokens", "temperature", "do_sample", "precision"}


@pytest.mark.parametrize("command_name, groups_taken", [
    ("run", {"data_options": DataOptions, "infer": stages.InferParams, "generation": GenerationParams, **AFTER}),
    ("analyze", {"data_options": DataOptions, "source": SourceParams, **AFTER}),
    ("watch", {"data_options": DataOptions, "infer": stages.InferParams, "generation": GenerationParams, **AFTER}),
    ("cluster", {"cluster": stages.ClusterParams}),
    ("slices", {"slices": stages.SliceParams}),
    ("data-checks", {"checks": stages.CheckParams}),
    ("metrics", {"metrics": stages.MetricsParams}),
])
def test_every_stage_parameter_is_settable(command_name, groups_taken):
    """`run`, `analyze` and `watch` offer every parameter of every stage they run, as the stage's own command
    does; `watch` sets hidden-state keeping itself (`--keep-hidden`, float16 or none)."""
    left_out = {("watch", "infer", "hidden")}
    for group, cls in groups_taken.items():
        for field, spec, flag, by_flag in _spec_of(group, cls, command_name):
            if (command_name, group, field) in left_out or not spec.cli:
                continue
            assert flag == spec.option(field), (command_name, group, field)
            option = by_flag[flag]
            default = None if isinstance(spec.default, tuple) else spec.default
            assert option.default == default, (command_name, flag, option.default, spec.default)
            assert spec.help.split(".")[0] in " ".join(option.help.split()), (command_name, flag)


def test_the_trainer_callback_takes_every_stage_parameter(tmp_path):
    """The callback takes the same dataclasses: a value given there reaches the stage (the reducer is replaced by
    the incremental one that keeps the layout across steps, built from the given reducer's parameters)."""
    pytest.importorskip("transformers")
    from conftest import eval_rows, write_jsonl

    from erroranalysis.integrations.trainer import ErrorAnalysisCallback

    data = write_jsonl(tmp_path / "eval.jsonl", eval_rows(12))
    cluster = stages.ClusterParams(min_cluster_size=7, n_keywords=3, group_purity=0.4, n_neighbors=9)
    after = stages.AfterParams(checks=stages.CheckParams(near_threshold=0.9), slices=stages.SliceParams(top_k=4),
                               cluster=cluster)
    callback = ErrorAnalysisCallback(data, tmp_path / "runs", after=after)
    kept = callback.after
    assert kept.checks == after.checks and kept.slices == after.slices
    assert kept.cluster.replace(reducer="umap") == cluster
    assert kept.cluster.reducer.n_neighbors == 9


@pytest.mark.parametrize("argv, flag", [
    (["cluster", "RUN", "--min-cluster-size", "1"], "--min-cluster-size"),
    (["cluster", "RUN", "--keywords", "0"], "--keywords"),
    (["run", "--model", "M", "--data", "D", "--out", "O", "--max-slices", "0"], "--max-slices"),
    (["run", "--model", "M", "--data", "D", "--out", "O", "--top-k", "-1"], "--top-k"),
    (["run", "--model", "M", "--data", "D", "--out", "O", "--neighbors", "1"], "--neighbors"),
    (["run", "--model", "M", "--data", "D", "--out", "O", "--duplicate-neighbors", "0"], "--duplicate-neighbors"),
    (["run", "--model", "M", "--data", "D", "--out", "O", "--precision", "fp8"], "--precision"),
    (["analyze", "--predictions", "P", "--out", "O", "--check-embedder", "bert"], "--check-embedder"),
    (["slices", "RUN", "--slice-alpha", "0"], "--slice-alpha"),
    (["compare", "A", "B", "--resamples", "0"], "--resamples"),
    (["apply-taxonomy", "T", "RUN", "--k", "0"], "--k"),
    (["overfit", "--model", "M", "--data", "D", "--freeze", "("], "--freeze"),
    (["watch", "OUT", "--data", "D", "--alpha", "2"], "--alpha"),
])
def test_a_bad_value_is_refused_by_its_flag_before_anything_is_read(argv, flag):
    """Refused when the options are built, before a file is opened (the paths here do not exist)."""
    result = CliRunner().invoke(cli_app.app, argv)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {flag} "), result.stderr


def test_a_flag_shared_by_groups_sets_each_of_them():
    """--seed is one declaration shared by the stages: `run --seed 7` seeds each of them; so does --device for
    inference and generation."""
    built = {}

    @options.takes(groups.METRICS, groups.CHECKS, groups.CLUSTER, groups.INFER, groups.GENERATION_GROUP)
    def probe(*, metrics, checks, cluster, infer, generation):
        built.update(metrics=metrics, checks=checks, cluster=cluster, infer=infer, generation=generation)

    import typer

    app = typer.Typer()
    app.command()(probe)
    result = CliRunner().invoke(app, ["--seed", "7", "--device", "cpu", "--no-cluster"])
    assert result.exit_code == 0, result.output
    assert built["metrics"].seed == built["checks"].seed == built["generation"].seed == 7
    assert built["cluster"] is None  # switched off
    assert built["infer"].device == built["generation"].device == "cpu"


def test_two_meanings_of_one_flag_are_refused_when_the_command_is_built():
    from erroranalysis.core.params import Int, param

    @dataclasses.dataclass(frozen=True)
    class Other(Params):
        n_neighbors: int = param(3, Int(1), "Another neighbourhood.", flag="--neighbors")

    with pytest.raises(TypeError, match="--neighbors is declared twice"):
        options.takes(groups.CLUSTER, options.Group("other", Other))(lambda *, cluster, other: None)


def test_parameter_errors_name_the_parameter_in_python_and_the_flag_on_the_command_line():
    with pytest.raises(ParameterError) as info:
        stages.ClusterParams(min_cluster_size=1)
    assert str(info.value) == ("min_cluster_size=1 is invalid: expected an integer >= 2, or None (scales with the "
                               "failures: max(5, sqrt(n)/2) for n failures, per tier with --error-aware).")
    assert info.value.flag == "--min-cluster-size"
    with pytest.raises(ParameterError, match=r"^output_checks='jsn' is invalid: expected names from: exact"):
        GenerationParams(output_checks="json,jsn")  # a list is refused by the item that is wrong


def test_old_flags_still_work_for_one_release_with_a_warning(tmp_path):
    """`--checks` (the generation output checks) and `--no-checks` (the data checks) were one word for two things;
    their new names are --output-checks and --no-data-checks, and the old ones warn."""
    built = {}

    @options.takes(options.Group("generation", GenerationParams, deprecated={"--checks": "output_checks"}),
                   options.Group("checks", stages.CheckParams, switch="--data-checks/--no-data-checks",
                                 deprecated_off="--no-checks"))
    def probe(*, generation, checks):
        built.update(generation=generation, checks=checks)

    import typer

    app = typer.Typer()
    app.command()(probe)
    result = CliRunner().invoke(app, ["--checks", "json", "--no-checks"])
    assert result.exit_code == 0, result.output
    assert built["generation"].output_checks == ("json",) and built["checks"] is None
    assert "--checks is deprecated; use --output-checks" in result.stderr
    assert "--no-checks is deprecated; use --no-data-checks" in result.stderr


def test_help_texts_reach_the_terminal_as_written():
    """A declaration's help is plain text: the brackets of `erroranalysis-ml[ray]` are not taken for rich markup."""
    result = CliRunner().invoke(cli_app.app, ["run", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "pip install 'erroranalysis-ml[ray]'" in result.output


def test_a_choice_with_switches_takes_one_switch_per_value():
    """`--assistant-only` is `--mode assistant-only`; two of them, or one against --mode, are refused."""
    import typer
    from typer.testing import CliRunner

    seen = {}
    app = typer.Typer()

    @app.command()
    @options.takes(options.Group("sft", SftParams))
    def main(*, sft) -> None:
        seen["mode"] = sft.mode

    runner = CliRunner()
    for args, mode in [([], "trl"), (["--assistant-only"], "assistant-only"), (["--all-tokens"], "all-tokens"),
                       (["--mode", "completion-only"], "completion-only"),
                       (["--mode", "assistant-only", "--assistant-only"], "assistant-only")]:
        assert runner.invoke(app, args).exit_code == 0 and seen["mode"] == mode, args
    for args in (["--assistant-only", "--all-tokens"], ["--mode", "all-tokens", "--completion-only"]):
        result = runner.invoke(app, args)
        assert result.exit_code != 0 and "at most one" in str(result.exception), args
