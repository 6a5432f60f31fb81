"""tune.params in Hydra's sweep syntax as search dimensions, and a trial's values as
overrides; the tune.* keys' checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from jeanzay_kit.config.compose import compose_config
from jeanzay_kit.config.spec import build_job_spec
from jeanzay_kit.errors import SpecError
from jeanzay_kit.tune.space import SearchParam, parse_space, trial_overrides


@pytest.mark.parametrize(
    "text, expected",
    [
        ("tag(log, interval(1e-4, 1e-1))", SearchParam("k", "float", 1e-4, 1e-1, log=True)),
        ("interval(0, 1)", SearchParam("k", "float", 0.0, 1.0)),
        ("tag(int, interval(1, 8))", SearchParam("k", "int", 1, 8, step=1)),
        ("range(100, 400, step=100)", SearchParam("k", "int", 100, 300, step=100)),
        ("choice(2, 4, 6)", SearchParam("k", "categorical", choices=(2, 4, 6))),
        ("adam,sgd", SearchParam("k", "categorical", choices=("adam", "sgd"))),
        ("0.5", SearchParam("k", "fixed", choices=(0.5,))),
    ],
)
def test_a_sweep_is_one_dimension_of_the_search(text: str, expected: SearchParam) -> None:
    assert parse_space([("k", text)]) == [expected]


@pytest.mark.parametrize(
    "text, says",
    [
        ("interval(1e-4", "is not a sweep Hydra reads"),
        ("range(0.1, 1.0)", "whole numbers"),
        ("range(5, 5)", "is empty"),
        ("[1, 2]", "use .choice.1, 2.."),
        # The user's own words, not an internal object (issue 45).
        (
            "interval(0.01, 0.001)",
            "'interval.0.01, 0.001.' has its low bound above its high one. "
            "HINT: use .interval.0.001, 0.01..",
        ),
        ("tag(log, interval(0, 0.1))", "is a log interval from 0 or below"),
    ],
)
def test_what_is_not_a_search_is_refused_naming_the_key(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=f"tune.params.k=.*{says}"):
        parse_space([("k", text)])


def test_a_trials_values_are_overrides_hydra_reads_back() -> None:
    values = {"optim.lr": 0.003, "model.n_layer": 4, "+model.act": "gelu, tanh", "x": None}
    overrides = trial_overrides(values)
    assert overrides == [
        "optim.lr=0.003",
        "model.n_layer=4",
        "+model.act='gelu, tanh'",
        "x=null",
    ]
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parsed = OverridesParser.create().parse_overrides(overrides)
    assert [o.value() for o in parsed] == [0.003, 4, "gelu, tanh", None]


def spec(*overrides: str):  # noqa: ANN201
    return build_job_spec(compose_config(list(overrides), None), local_gpus=0, local_cpus=2)


def test_tune_keys_have_defaults_and_take_a_mapping_with_dotted_keys() -> None:
    tune = spec(
        'tune.params={optim.lr: "interval(0.001, 0.1)", model.hidden: "choice(8, 16)"}'
    ).tune
    assert tune.params == (("optim.lr", "interval(0.001, 0.1)"), ("model.hidden", "choice(8, 16)"))
    assert (tune.n_trials, tune.tasks, tune.sampler, tune.storage) == (20, 1, "tpe", None)
    assert (tune.study_name, tune.dir) == ("jzk", "tune/jzk")  # ${job.name}


@pytest.mark.parametrize(
    "override, key",
    [
        ("tune.n_trials=0", "tune.n_trials"),
        ("tune.tasks=-1", "tune.tasks"),
        ("tune.sampler=grid", "tune.sampler"),
        ("tune.seed=-3", "tune.seed"),
    ],
)
def test_a_bad_tune_key_is_refused_before_anything_runs(override: str, key: str) -> None:
    with pytest.raises(SpecError, match=key):
        spec(override)


def test_a_scripts_options_are_added_to_its_args_with_their_interpolations() -> None:
    space = parse_space([("--lr", "tag(log, interval(1e-4, 1e-1))"), ("optim.name", "adamw")])
    assert space[0] == SearchParam("--lr", "float", 1e-4, 1e-1, log=True)
    words = trial_overrides(
        {"--lr": 0.0031, "--width": 64, "optim.name": "adamw"},
        ("--tag=x", "--out_dir=${job.run_dir}"),
    )
    assert words == [
        "optim.name='adamw'",
        "job.args=['--tag=x','--out_dir=${job.run_dir}','--lr=0.0031','--width=64']",
    ]
    cfg = compose_config(["job.entry=train.py", "job.run_dir=/runs/trial-3", *words])
    assert cfg["job"]["args"] == ["--tag=x", "--out_dir=/runs/trial-3", "--lr=0.0031", "--width=64"]


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        ([], "tune.params.--lr=--lr is an option of your own script, and job.entry is the"),
        (
            ["job.entry=train.py", "job.args=[--lr=0.1]"],
            "tune.params.--lr=--lr is given by job.args too (--lr=0.1): a trial would get two",
        ),
    ],
)
def test_an_option_without_a_script_or_given_twice_is_refused(
    overrides: list[str], says: str
) -> None:
    from jeanzay_kit.tune.setup import check_options

    spec = build_job_spec(compose_config(overrides))
    with pytest.raises(SpecError) as caught:
        check_options(parse_space([("--lr", "interval(0.1, 1)")]), spec)
    assert says in str(caught.value)


def test_a_study_folder_that_cannot_be_written_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As root no permission bit stops a write: sysfs refuses a new folder to anyone.
    place = Path("/sys/jzk-study")
    if _takes_folders(place):  # pragma: no cover
        pytest.skip("/sys takes new folders here")
    from jeanzay_kit.errors import RunDirError
    from jeanzay_kit.tune.setup import prepare_study

    monkeypatch.chdir(tmp_path)
    space = 'tune.params={optim.lr: "interval(0.001, 0.1)"}'
    with pytest.raises(RunDirError) as caught:
        prepare_study([space, f"tune.dir={place}"], None)
    assert str(caught.value).startswith(f"tune.dir={place} is not writable by this user"), str(
        caught.value
    )
    assert "HINT: set tune.dir to a directory you can write" in str(caught.value)


def test_a_report_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from jeanzay_kit.cli import main

    place = Path("/sys/jzk-report")
    if _takes_folders(place):  # pragma: no cover
        pytest.skip("/sys takes new folders here")
    code = main(["report", str(tmp_path), "-o", str(place)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"jzk report --out={place} is not writable by this user" in err
    assert "HINT: set jzk report --out to a directory you can write" in err


def _takes_folders(place: Path) -> bool:
    try:
        place.mkdir()
    except OSError:
        return False
    place.rmdir()
    return True
