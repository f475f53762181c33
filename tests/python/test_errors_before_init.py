"""detcoll.torch before init(), in one process without mpirun: every call that needs the world
raises NotInitializedError naming itself and init(); compression needs no world."""

import pytest
import torch

import detcoll
import detcoll.torch as hvd


def state_dict():
    return torch.nn.Linear(3, 2).state_dict()


CALLS = {
    "allreduce": lambda: hvd.allreduce(torch.ones(4)),
    "allreduce_": lambda: hvd.allreduce_(torch.ones(4)),
    "allreduce_async": lambda: hvd.allreduce_async(torch.ones(4)),
    "broadcast": lambda: hvd.broadcast(torch.ones(4), root_rank=0),
    "allgather": lambda: hvd.allgather(torch.ones(2, 2)),
    "grouped_allreduce": lambda: hvd.grouped_allreduce([torch.ones(4), torch.ones(2)]),
    "broadcast_parameters": lambda: hvd.broadcast_parameters(state_dict(), root_rank=0),
    "broadcast_object": lambda: hvd.broadcast_object({"epoch": 3}, root_rank=0),
    "broadcast_optimizer_state": lambda: hvd.broadcast_optimizer_state(
        torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1), root_rank=0),
    "DistributedOptimizer": lambda: hvd.DistributedOptimizer(
        torch.optim.SGD(torch.nn.Linear(3, 2).parameters(), lr=0.1)),
    "rank": hvd.rank,
    "size": hvd.size,
}


def test_not_initialized():
    assert hvd.is_initialized() is False


@pytest.mark.parametrize("call", sorted(CALLS))
def test_call_before_init_raises_not_initialized(call):
    with pytest.raises(detcoll.NotInitializedError):
        CALLS[call]()
    assert hvd.is_initialized() is False


@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_message_names_the_call_and_init(call):
    with pytest.raises(detcoll.NotInitializedError) as error:
        CALLS[call]()
    message = str(error.value)
    assert f"{call}()" in message and "init()" in message, message


def test_fp16_compression_round_trips_the_dtype():
    t = torch.tensor([1.0, -2.5, 1e-3, 3.0e4], dtype=torch.float32)
    compressed, ctx = hvd.Compression.fp16.compress(t)
    assert compressed.dtype == torch.float16
    restored = hvd.Compression.fp16.decompress(compressed, ctx)
    assert restored.dtype == torch.float32
    assert torch.equal(restored, t.half().float())
    assert torch.equal(t, torch.tensor([1.0, -2.5, 1e-3, 3.0e4])), "compress changed its input"


def test_fp16_compression_leaves_integers_alone():
    t = torch.arange(5, dtype=torch.int64) * (1 << 40)  # beyond float16's range
    compressed, ctx = hvd.Compression.fp16.compress(t)
    assert compressed is t
    restored = hvd.Compression.fp16.decompress(compressed, ctx)
    assert restored.dtype == torch.int64 and torch.equal(restored, t)


def test_no_compression_is_the_identity():
    t = torch.ones(3)
    compressed, ctx = hvd.Compression.none.compress(t)
    assert compressed is t and hvd.Compression.none.decompress(compressed, ctx) is t


def test_duplicate_parameter_names_are_refused_before_init_as_in_horovod():
    """Horovod checks DistributedOptimizer's names before anything needs the world."""
    layer = torch.nn.Linear(3, 2)
    named = list(layer.named_parameters())
    with pytest.raises(ValueError, match="must be unique. Found duplicates: weight"):
        hvd.DistributedOptimizer(torch.optim.SGD(layer.parameters(), lr=0.1),
                                 named_parameters=named + [("weight", torch.nn.Parameter(
                                     torch.zeros(1)))])
    assert hvd.is_initialized() is False
