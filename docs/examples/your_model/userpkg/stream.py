"""A streaming dataset (torch's IterableDataset), written against torch only.

It stands for data read in order from shards, a socket or a database cursor: there is
no __len__ and no index. Three things make it train well on several ranks and resume
exactly after a preemption:

* each rank and each loader worker reads its own share: the rank from
  torch.distributed (set up before the dataset is built; rank 0 of 1 without it, as in
  `jzk check`), the worker from torch.utils.data.get_worker_info();
* state_dict() / load_state_dict() (torchdata's Stateful protocol) say where the stream
  stands; the toolkit saves them per rank with every checkpoint;
* set_epoch(epoch) reshuffles the order when the stream starts again.
"""

import torch
import torch.distributed as dist
from torch.utils.data import IterableDataset, get_worker_info


class ImageStream(IterableDataset):
    """`size` 8x8 noise images per epoch, in an order shuffled per epoch; the label is the
    quadrant made brighter (as userpkg.images.RandomImages). Image number i is made
    from (seed, i) alone, so any reader produces the same image."""

    def __init__(self, size: int = 2000, seed: int = 0):
        self.size, self.seed = size, seed
        self.epoch = 0
        self.taken = 0  # samples of this reader's share already yielded this epoch
        if dist.is_available() and dist.is_initialized():
            self.rank, self.ranks = dist.get_rank(), dist.get_world_size()
        else:
            self.rank, self.ranks = 0, 1

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.taken = epoch, 0

    def _my_share(self) -> torch.Tensor:
        worker = get_worker_info()
        workers, wid = (worker.num_workers, worker.id) if worker else (1, 0)
        order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.epoch))
        readers, me = self.ranks * workers, self.rank * workers + wid
        return order[me::readers]

    def __iter__(self):
        share = self._my_share()
        while self.taken < len(share):
            number = int(share[self.taken])
            self.taken += 1
            yield self._image(number)

    def _image(self, number: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + number)
        image = torch.rand(1, 8, 8, generator=g)
        label = int(torch.randint(0, 4, (), generator=g))
        row, col = divmod(label, 2)
        image[0, 4 * row : 4 * row + 4, 4 * col : 4 * col + 4] += 0.5
        return image, label

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "taken": self.taken}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.taken = state["epoch"], state["taken"]
