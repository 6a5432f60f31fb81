"""The study's bookkeeping on a real journal file: which trial a task takes, how many the
study hands out, what is told of a killed task's trial, and a journal cut mid-write."""

from __future__ import annotations

from pathlib import Path

import pytest
from optuna.trial import TrialState

from jeanzay_kit.config.sections import TuneSettings
from jeanzay_kit.errors import JzkError
from jeanzay_kit.rundir.run_directory import RunDir
from jeanzay_kit.tune.space import parse_space
from jeanzay_kit.tune.study import finish_trial, next_trial, open_study, reap_orphans
from jeanzay_kit.tune.task import Allocation, owner_of, requeue_for_more
from jeanzay_kit.tune.view import load_study_dir

SPACE = parse_space([("optim.lr", "tag(log, interval(1e-4, 1e-1))")])


def study_in(path: Path):  # noqa: ANN201
    return open_study(TuneSettings("eval_loss", "auto", seed=0), path, "minimize")


def test_a_task_takes_its_own_unfinished_trial_before_a_new_one(tmp_path: Path) -> None:
    study = study_in(tmp_path)
    first = next_trial(study, SPACE, 5, "task-0", tmp_path, "pid:h:1")
    other = next_trial(study, SPACE, 5, "task-1", tmp_path, "pid:h:2")
    assert (first.number, other.number, first.resumed) == (0, 1, False)
    again = next_trial(study, SPACE, 5, "task-0", tmp_path, "pid:h:3")  # restarted
    assert (again.number, again.resumed, again.values) == (0, True, first.values)
    assert study.trials[0].user_attrs["jzk_owner"] == "pid:h:3"


def test_the_study_hands_out_n_trials_and_no_more(tmp_path: Path) -> None:
    study = study_in(tmp_path)
    for task in range(3):
        ticket = next_trial(study, SPACE, 3, f"task-{task}", tmp_path)
        finish_trial(study, ticket, 0.5, "")
    assert next_trial(study, SPACE, 3, "task-0", tmp_path) is None
    assert next_trial(study, SPACE, 4, "task-0", tmp_path).number == 3  # extended


def test_only_a_gone_tasks_running_trial_is_told_failed(tmp_path: Path) -> None:
    study = study_in(tmp_path)
    mine = next_trial(study, SPACE, 9, "task-0", tmp_path, "slurm:7_0")
    next_trial(study, SPACE, 9, "task-1", tmp_path, "slurm:7_1")  # killed
    next_trial(study, SPACE, 9, "task-2", tmp_path, "slurm:7_2")  # requeued, pending
    told = reap_orphans(study, "task-0", tmp_path, lambda owner: owner == "slurm:7_1")
    assert told == [1]
    states = [t.state for t in study.get_trials()]
    assert states == [TrialState.RUNNING, TrialState.FAIL, TrialState.RUNNING]
    assert "slurm:7_1" in study.trials[1].user_attrs["jzk_reason"]
    assert mine.number == 0  # its own trial is never reaped
    # `jzk tune` here, once its tasks ended: only those that died, not one stopped by a
    # signal (its trial waits to be resumed).
    told = reap_orphans(study, "", tmp_path, lambda owner: True, only={"task-2"})
    assert told == [2]
    assert study.trials[0].state == TrialState.RUNNING


def test_a_journal_cut_in_the_middle_of_a_write_still_loads(tmp_path: Path) -> None:
    study = study_in(tmp_path)
    finish_trial(study, next_trial(study, SPACE, 3, "task-0", tmp_path), 0.25, "")
    with (tmp_path / "study.journal").open("a") as journal:
        journal.write('{"op_code": 6, "worker_id": "killed", "trial_id": 0, "sta')
    loaded = load_study_dir(tmp_path)
    assert [(t.number, t.value) for t in loaded.get_trials()] == [(0, 0.25)]


@pytest.mark.parametrize(
    "counted, start, end, expected",
    [
        (3, 0, 3600, False),  # the study has its trials: the task ends
        (2, 0, 3600, True),  # it wants more: requeued, for a new allocation
        (2, 0, 300, JzkError),  # an allocation too short for any trial: said, not looped
    ],
)
def test_a_task_out_of_time_requeues_only_for_trials_it_can_run(counted, start, end, expected):
    needed = 120 + 60
    allocation = Allocation(start, end)
    if expected is JzkError:
        with pytest.raises(JzkError, match="resources.time gives each task 300 s"):
            requeue_for_more(counted, 3, allocation, needed)
    else:
        assert requeue_for_more(counted, 3, allocation, needed) is expected


def test_the_allocation_is_read_from_slurms_variables() -> None:
    env = {"SLURM_JOB_START_TIME": "1000", "SLURM_JOB_END_TIME": "4600"}
    assert Allocation.of(env) == Allocation(1000.0, 4600.0)
    assert Allocation.of({}) is None
    assert owner_of({"SLURM_ARRAY_JOB_ID": "7", "SLURM_ARRAY_TASK_ID": "2"}, "n1", 5) == "slurm:7_2"
    assert owner_of({}, "n1", 5) == "pid:n1:5"


def test_an_rdb_url_is_the_studys_storage_instead_of_the_journal(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'studies.db'}"
    settings = TuneSettings("eval_loss", "auto", storage=url, study_name="lr")
    study = open_study(settings, tmp_path, "minimize")
    finish_trial(study, next_trial(study, SPACE, 2, "task-0", tmp_path), 0.5, "")
    import optuna

    again = optuna.load_study(study_name="lr", storage=url)  # Optuna's own reader
    assert [t.value for t in again.get_trials()] == [0.5]
    assert not (tmp_path / "study.journal").exists()


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_restarted_or_extended_seeded_task_never_draws_again_what_it_drew(
    tmp_path: Path, sampler: str
) -> None:
    """Each start of a task opens the study anew (a new sampler, the same seed), as a
    rerun, an extension of n_trials or a Slurm requeue does: before issue 45 its first
    trial of every start drew the same value."""
    settings = TuneSettings("eval_loss", "auto", seed=7, sampler=sampler)
    drawn = []
    for n_trials in (2, 4, 6):  # three starts of one task, each extending the study
        study = open_study(settings, tmp_path / "a", "minimize")
        while (ticket := next_trial(study, SPACE, n_trials, "task-0", tmp_path / "a")) is not None:
            drawn.append(ticket.values["optim.lr"])
            finish_trial(study, ticket, drawn[-1], "")
    assert len(drawn) == 6 and len(set(drawn)) == 6, drawn
    # Reproducible as a study: the same seed, started once, draws the same values.
    study = open_study(settings, tmp_path / "b", "minimize")
    again = []
    while (ticket := next_trial(study, SPACE, 6, "task-0", tmp_path / "b")) is not None:
        again.append(ticket.values["optim.lr"])
        finish_trial(study, ticket, again[-1], "")
    assert again == drawn


def test_a_space_the_study_cannot_take_is_refused_before_any_trial(tmp_path: Path) -> None:
    from jeanzay_kit.errors import SpecError
    from jeanzay_kit.tune.study import check_space

    first = parse_space(
        [("optim.weight_decay", "choice(0.0, 0.1)"), *[("optim.lr", "interval(1e-4, 1e-2)")]]
    )
    study = study_in(tmp_path)
    finish_trial(study, next_trial(study, first, 2, "task-0", tmp_path), 0.5, "")
    # A wider interval is a space Optuna takes; other choices are not.
    check_space(study, parse_space([("optim.lr", "interval(1e-5, 1e-1)")]), tmp_path)
    changed = parse_space([("optim.weight_decay", "choice(0.0, 0.2)")])
    with pytest.raises(SpecError) as refused:
        check_space(study, changed, tmp_path)
    words = str(refused.value)
    assert "tune.params.optim.weight_decay" in words and "choice(0.0, 0.1)" in words
    assert "tune.study_name=<new name>" in words
    assert [t.state.name for t in study.get_trials()] == ["COMPLETE"]  # nothing wedged


def test_fail_stuck_tells_fail_what_no_live_task_holds(tmp_path: Path) -> None:
    study = study_in(tmp_path)
    live = next_trial(study, SPACE, 5, "task-0", tmp_path, "pid:h:1")
    dead = next_trial(study, SPACE, 5, "task-1", tmp_path, "pid:h:2")
    foreign = study.ask()  # asked by plain Optuna: no task of jzk finishes it
    told = reap_orphans(study, "", tmp_path, lambda owner: owner == "pid:h:2", ownerless=True)
    assert told == [dead.number, foreign.number]
    states = {t.number: t.state.name for t in study.get_trials()}
    assert states == {live.number: "RUNNING", dead.number: "FAIL", foreign.number: "FAIL"}
    assert "fail-stuck" in study.trials[foreign.number].user_attrs["jzk_reason"]


def test_a_journal_of_another_study_is_refused_in_one_line(tmp_path: Path) -> None:
    from jeanzay_kit.errors import SpecError

    study_in(tmp_path / "jzk")
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "study.journal").write_bytes(
        (tmp_path / "jzk" / "study.journal").read_bytes()
    )
    with pytest.raises(SpecError, match=r"tune.study_name=copy is not the study .* holds \(jzk\)"):
        open_study(
            TuneSettings("eval_loss", "auto", study_name="copy"), tmp_path / "copy", "minimize"
        )


@pytest.mark.parametrize("sampler", ["tpe", "random", "cmaes", "qmc", "gp"])
def test_every_sampler_runs_a_seeded_study_that_a_restart_does_not_repeat(
    tmp_path: Path, sampler: str
) -> None:
    space = parse_space(
        [("optim.lr", "tag(log, interval(1e-4, 1e-1))"), ("wd", "interval(0, 0.2)")]
    )
    settings = TuneSettings("eval_loss", "auto", seed=3, sampler=sampler)
    drawn = []
    for n_trials in (3, 6):  # a second start extends the study
        study = open_study(settings, tmp_path, "minimize")
        while (ticket := next_trial(study, space, n_trials, "task-0", tmp_path)) is not None:
            drawn.append(tuple(ticket.values.values()))
            finish_trial(study, ticket, abs(ticket.values["optim.lr"] - 0.003), "")
    assert len(set(drawn)) == 6, drawn


def test_a_sampler_option_it_does_not_take_is_named() -> None:
    from jeanzay_kit.errors import SpecError
    from jeanzay_kit.tune.study import check_sampler

    check_sampler("tpe", [("n_startup_trials", 3)])
    with pytest.raises(SpecError, match=r"tune.sampler_options.n_startup=3 is not an option of"):
        check_sampler("tpe", [("n_startup", 3)])


def test_a_study_of_two_objectives_keeps_its_pareto_front(tmp_path: Path) -> None:
    from jeanzay_kit.tune.study import summary_lines
    from jeanzay_kit.tune.view import trial_rows

    settings = TuneSettings(
        "eval_loss",
        "minimize",
        seed=0,
        objectives=("eval_loss", "eval_accuracy"),
        directions=("minimize", "maximize"),
    )
    study = open_study(settings, tmp_path, settings.directions)
    # (loss, accuracy): trial 2 is beaten by trial 0 on both, the others trade off.
    for values in [(0.5, 0.8), (0.3, 0.6), (0.6, 0.7), (0.9, 0.9)]:
        finish_trial(study, next_trial(study, SPACE, 4, "task-0", tmp_path), values, "")
    again = load_study_dir(tmp_path)  # as jzk status and optuna-dashboard read it
    assert again.metric_names == ["eval_loss", "eval_accuracy"]
    lines = summary_lines(again, 4)
    assert lines[1] == "Pareto front: 3 trial(s) (minimize eval_loss, maximize eval_accuracy)"
    assert [ln.split(":")[0].strip() for ln in lines[2:5]] == ["trial 0", "trial 1", "trial 3"]
    assert "values 0.5, 0.8, optim.lr=" in lines[2]
    assert [row[2] for row in trial_rows(again)[1:]] == ["0.5,0.8", "0.3,0.6", "0.6,0.7", "0.9,0.9"]
    # The same study asked with one objective is refused, naming what it has.
    with pytest.raises(JzkError, match=r"which minimizes/maximizes 2 objective\(s\)"):
        open_study(TuneSettings("eval_loss", "minimize"), tmp_path, "minimize")


def test_a_trial_without_every_objective_fails_naming_the_missing_one(tmp_path: Path) -> None:
    import json

    from jeanzay_kit.tune.task import _result_end

    record = {"eval_loss": 0.4, "objective": "eval_loss", "value": 0.4, "direction": "minimize"}
    several = {**record, "objectives": ["eval_loss", "eval_f1"], "values": [0.4, None]}
    (tmp_path / "result.json").write_text(json.dumps(several))
    both = ("eval_loss", "eval_f1")
    end = _result_end(RunDir(tmp_path), both)
    assert end.values is None and "tune.objective=eval_f1" in end.reason
    several["values"] = [0.4, 0.7]
    (tmp_path / "result.json").write_text(json.dumps(several))
    assert _result_end(RunDir(tmp_path), both).values == (0.4, 0.7)
    (tmp_path / "result.json").write_text(json.dumps(record))
    assert _result_end(RunDir(tmp_path), ("eval_loss",)).values == (0.4,)
    short = _result_end(RunDir(tmp_path), both)  # a script that wrote one value for two
    assert short.values is None and "has 1 value(s) for the 2 of tune.objective" in short.reason
    # A script's own file: `values` alone, in tune.objective's order.
    (tmp_path / "result.json").write_text(json.dumps({"values": [1.5, 2]}))
    assert _result_end(RunDir(tmp_path), ("loss", "size")).values == (1.5, 2.0)
