"""ElasticSampler: a distributed sampler that remembers which samples of
the epoch were processed, so that after a reset the job, at its new size,
shares out only the rest of the epoch."""
import math
import random

import torch

from hvdlite.common import basics
from hvdlite.numpy.objects import allgather_object, broadcast_object


class ElasticSampler(torch.utils.data.Sampler):
    """Like DistributedSampler, at whatever size the job has now.

    Call `record_batch(batch_index, batch_size)` after each batch (or
    `record_indices`), `set_epoch(epoch)` at each epoch's start, and keep it
    in the TorchState (`TorchState(..., sampler=sampler)`): a commit saves
    the processed indices, and after a reset every rank gets the union of
    all ranks' processed indices, then its share of the rest.

    Args:
        dataset (Sized): what is sampled; only its length is used.
        shuffle (bool): shuffle the indices at each epoch.
        seed (int): the shuffle's seed, combined with the epoch; the same on every rank.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        super().__init__()
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self.processed_indices = set()
        self.indices = []
        self.num_samples = 0
        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch`: forgets the processed samples and shuffles anew.

        Args:
            epoch (int): seeds the shuffle together with `seed`, the same on every rank.
        """
        self.epoch = epoch
        self.processed_indices = set()
        self.reset()

    def record_batch(self, batch_index, batch_size):
        """Marks the batch_index-th batch of this rank's share as processed.

        Args:
            batch_index (int): the batch's index in this epoch, from 0.
            batch_size (int): the samples per batch.
        """
        start = batch_index * batch_size
        self.record_indices(self.indices[start:start + batch_size])

    def record_indices(self, indices):
        """Marks dataset indices as processed.

        Args:
            indices (Iterable[int]): indices into the dataset (not positions in this rank's share).
        """
        self.processed_indices.update(int(i) for i in indices)

    def state_dict(self):
        """The sampler's state, for `TorchState` and checkpoints.

        Returns:
            dict: `epoch` and `processed_indices` (a copy of the set).
        """
        return {"epoch": self.epoch, "processed_indices": set(self.processed_indices)}

    def load_state_dict(self, state_dict):
        """Loads a `state_dict()` and shares out the epoch's unprocessed samples again.

        Args:
            state_dict (dict): as `state_dict()` returns it.
        """
        self.epoch = state_dict["epoch"]
        self.processed_indices = set(state_dict["processed_indices"])
        self.reset()

    def sync(self, name="elastic.sampler"):
        """Gives every rank every rank's processed indices joined, and rank 0's
        epoch (collective), then shares out the rest anew.

        Args:
            name (str): starts the names of the two object collectives.
        """
        processed = set().union(*allgather_object(self.processed_indices,
                                                  name=f"{name}.processed"))
        state = broadcast_object({"epoch": self.epoch, "processed_indices": processed},
                                 root_rank=0, name=f"{name}.state")
        self.load_state_dict(state)

    def reset(self):
        """Shares out the epoch's unprocessed samples among the ranks there
        are now (padded by repetition to an equal count per rank)."""
        size = basics.size() if basics.is_initialized() else 1
        rank = basics.rank() if basics.is_initialized() else 0
        remaining = [i for i in range(len(self.dataset)) if i not in self.processed_indices]
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(remaining)
        self.num_samples = math.ceil(len(remaining) / size) if remaining else 0
        total = self.num_samples * size
        padded = remaining + remaining[:total - len(remaining)]
        self.indices = padded[rank:total:size]

    def __iter__(self):
        return iter(self.indices)

    def __len__(self):
        return self.num_samples
