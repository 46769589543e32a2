"""Elastic training for PyTorch: `hvdlite.torch.elastic` (see
hvdlite/common/elastic.py for how it works).

    sampler = hvd.elastic.ElasticSampler(dataset)
    loader = torch.utils.data.DataLoader(dataset, batch_size=32, sampler=sampler)
    state = hvd.elastic.TorchState(model, optimizer, sampler=sampler, epoch=0, batch=0)

    @hvd.elastic.run
    def train(state): ...
"""
from hvdlite.common.elastic import State, run
from hvdlite.torch.elastic.sampler import ElasticSampler
from hvdlite.torch.elastic.state import ObjectState, TorchState

__all__ = ["run", "State", "ObjectState", "TorchState", "ElasticSampler"]
