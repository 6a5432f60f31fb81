"""Streaming datasets (train/stream.py): torchdata's StatefulDataLoader over a torch
IterableDataset, its position saved and restored, epochs, and when a resume is refused."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import IterableDataset, get_worker_info

from jeanzay_kit.config.sections import LoaderSettings
from jeanzay_kit.errors import ContractError, ResumeError
from jeanzay_kit.train.stream import StreamBatches, build_stream_loader, is_stateful, is_stream
from jeanzay_kit.train.stream_rules import stream_restore

SETTINGS = LoaderSettings(None, False, False, None, None)


class Counting(IterableDataset):
    """0..size-1 in an order that depends on the epoch, split across loader workers; says
    where it stands (torchdata's Stateful protocol)."""

    def __init__(self, size: int = 40):
        self.size, self.epoch, self.taken = size, 0, 0
        self.epochs_set: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs_set.append(epoch)
        if epoch != self.epoch:
            self.epoch, self.taken = epoch, 0

    def __iter__(self):
        info = get_worker_info()
        workers, me = (info.num_workers, info.id) if info else (1, 0)
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.epoch))
        share = order[me::workers]
        while self.taken < len(share):
            self.taken += 1
            yield torch.tensor([float(share[self.taken - 1]), float(self.epoch)])

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "taken": self.taken}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.taken = state["epoch"], state["taken"]


class Plain(IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([float(i)]) for i in range(3))


def batches(size: int, workers: int, accum: int = 2) -> StreamBatches:
    loader = build_stream_loader(
        Counting(size), SETTINGS, workers=workers, device_type="cpu", micro_batch=4, seed=0
    )
    made = StreamBatches(loader, accum, torch.device("cpu"), "data._target_=Counting")
    made.restore(None)
    return made


def take(made: StreamBatches, steps: int) -> list[list[float]]:
    return [b.flatten().tolist() for _ in range(steps) for b in made.next_step()]


def test_streams_are_told_apart_from_map_style_datasets() -> None:
    assert is_stream(Counting()) and is_stateful(Counting())
    assert is_stream(Plain()) and not is_stateful(Plain())
    assert not is_stream([1, 2, 3])


@pytest.mark.timeout(60)
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("cut", [3, 5], ids=["mid_epoch", "at_the_epoch_end"])
def test_a_restored_stream_goes_on_exactly_across_epochs(workers: int, cut: int) -> None:
    """40 samples, micro-batches of 4, 2 per step: 5 steps an epoch. Saved at step `cut`
    and restored, the steps up to 10 (through the second epoch) are the ones a run without
    the stop takes; each epoch reads every sample once."""
    straight = batches(40, workers)
    taken = take(straight, cut)
    state = straight.state_dict()
    rest = take(straight, 10 - cut)
    straight.close()
    assert straight.epoch == 1  # the stream ended once and started again
    pairs = [zip(row[::2], row[1::2], strict=True) for row in taken + rest]
    samples = [(int(v), int(e)) for pair in pairs for v, e in pair]
    assert [e for _, e in samples] == [0] * 40 + [1] * 40
    for epoch in (0, 1):
        assert sorted(v for v, e in samples if e == epoch) == list(range(40))

    again = batches(40, workers)
    again.restore(state)
    assert take(again, 10 - cut) == rest
    again.close()


def test_the_state_is_plain_enough_for_a_weights_only_load(tmp_path) -> None:
    made = batches(40, 2)
    take(made, 2)
    torch.save(made.state_dict(), tmp_path / "data-0.pt")
    made.close()
    state = torch.load(tmp_path / "data-0.pt", weights_only=True)
    assert state["stateful"] is True and state["workers"] == 2 and state["epoch"] == 0


def test_a_stream_shorter_than_a_micro_batch_is_named() -> None:
    made = batches(3, 0, accum=1)
    with pytest.raises(ContractError, match="fewer than one micro-batch"):
        made.next_step()


SAVED = {"epoch": 0, "workers": 2, "stateful": True, "loader": {}}


@pytest.mark.parametrize(
    ("mode", "saved", "saved_dp", "workers", "expect"),
    [
        ("exact", SAVED, 2, 2, "restored"),
        ("replay", {**SAVED, "stateful": False}, 2, 2, "restored"),
        ("restart", SAVED, 4, 1, "restart"),
        ("restart", None, 2, 2, "restart"),
        ("exact", SAVED, 4, 2, "saved by 4 data-parallel rank(s)"),
        ("replay", SAVED, 1, 2, "saved by 1 data-parallel rank(s)"),
        ("exact", None, 2, 2, "holds no stream position for data-parallel rank 1"),
        ("exact", {**SAVED, "stateful": False}, 2, 2, "without state_dict()/load_state_dict()"),
        ("exact", SAVED, 2, 3, "loader.num_workers=2"),
    ],
)
def test_when_a_stream_resumes_and_when_it_is_refused(
    mode: str, saved: dict | None, saved_dp: int, workers: int, expect: str
) -> None:
    def choose():
        return stream_restore(
            mode,
            saved,
            saved_dp,
            dp_size=2,
            dp_rank=1,
            workers=workers,
            folder="step-8",
            data_key="data._target_=S",
        )

    if expect == "restored":
        assert choose() is saved
    elif expect == "restart":
        assert choose() is None
    else:
        with pytest.raises(ResumeError, match="HINT") as err:
            choose()
        assert expect in str(err.value)
