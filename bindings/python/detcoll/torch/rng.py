"""detcoll.torch.rng: the keys of detcoll.rng, and torch tensors filled from them.

Element i of a key's stream is a pure function of (key, i), the same on every rank and however
a tensor is split (README "Seeds"). Derive one key per sample from its global index, not from
the rank, and what the sample draws does not depend on the world size:

    root = rng.Key.root()
    keys = rng.sample_keys(root, "sample", step, indices=batch_indices)
    x = rng.normal_rows_(torch.empty(len(keys), 64), keys)   # row r from keys[r]
    with rng.samples(keys):
        out = model(x)                                        # rng.Dropout draws per sample
"""

import contextlib

import torch

import detcoll
from detcoll import _detcoll
from detcoll.rng import (  # noqa: F401  (re-exported)
    Key, begin_step, counter, get_seed, load_state_dict, next_counter, seed, set_counter,
    state_dict)
from detcoll.torch._tensors import checked_dtype, use_current_stream

__all__ = [
    "Key", "begin_step", "seed", "get_seed", "counter", "set_counter", "next_counter",
    "state_dict", "load_state_dict", "uniform_", "normal_", "bernoulli_", "randint_",
    "uniform_rows_", "normal_rows_", "bernoulli_rows_", "permutation", "sample_keys", "samples",
    "current_samples", "Dropout",
]

def _target(tensor, call):
    return checked_dtype(tensor, call, "fills")


def _on_device(tensor):
    """A CUDA tensor is filled on torch's current stream, without waiting (detcoll_set_cuda_stream);
    a CPU tensor at once."""
    use_current_stream(tensor.device if tensor.device.type == "cuda" else None)


def _key(key, call):
    if not isinstance(key, Key):
        raise detcoll.InvalidArgumentError(f"{call}: expected a detcoll.rng.Key, got {type(key)}")
    return list(key.words)


def _fill(call, kind, tensor, key, offset, a=0.0, b=0.0, n=0):
    dtype = _target(tensor, call)
    if not 0 <= int(offset) < 2**64:
        raise detcoll.InvalidArgumentError(f"{call}: offset {offset} is outside [0, 2^64)")
    _on_device(tensor)
    _detcoll.rng_fill(kind, _key(key, call), int(offset), tensor.data_ptr(), tensor.numel(), dtype,
                      float(a), float(b), int(n))
    return tensor


def uniform_(tensor, key, offset=0):
    """Fills a float32 or float64 tensor with uniform [0, 1) values: elements offset, offset+1,
    ... of the key's stream. Returns the tensor."""
    return _fill("uniform_", "uniform", tensor, key, offset)


def normal_(tensor, key, mean=0.0, std=1.0, offset=0):
    """Fills a float32 or float64 tensor with normal values (Box-Muller, computed in double)."""
    return _fill("normal_", "normal", tensor, key, offset, mean, std)


def bernoulli_(tensor, key, p=0.5, offset=0):
    """Fills a tensor of any supported dtype with 1 (probability ceil(p 2^32) / 2^32) or 0."""
    return _fill("bernoulli_", "bernoulli", tensor, key, offset, p)


def randint_(tensor, key, high, offset=0):
    """Fills an int32 or int64 tensor with integers in [0, high), without modulo bias."""
    if not 1 <= int(high) <= 2**63:
        raise detcoll.InvalidArgumentError(f"randint_: high must be in [1, 2^63], got {high}")
    return _fill("randint_", "randint", tensor, key, offset, n=high)


def _fill_rows(call, kind, tensor, keys, a=0.0, b=0.0):
    dtype = _target(tensor, call)
    keys = list(keys)
    if tensor.dim() == 0 or tensor.shape[0] != len(keys):
        raise detcoll.InvalidArgumentError(
            f"{call}: {len(keys)} keys for a tensor of shape {tuple(tensor.shape)}; one key a row "
            "(dimension 0)")
    words = [_key(k, call) for k in keys]
    row = tensor.numel() // len(keys) if keys else 0
    _on_device(tensor)
    _detcoll.rng_fill_rows(kind, words, tensor.data_ptr(), row, dtype, float(a), float(b), 0)
    return tensor


def uniform_rows_(tensor, keys):
    """Row r (tensor[r], everything after dimension 0) from keys[r], offsets 0, 1, ...: one key
    per sample, whichever rank or batch position the sample has."""
    return _fill_rows("uniform_rows_", "uniform", tensor, keys)


def normal_rows_(tensor, keys, mean=0.0, std=1.0):
    """normal_ by rows: row r from keys[r]."""
    return _fill_rows("normal_rows_", "normal", tensor, keys, mean, std)


def bernoulli_rows_(tensor, keys, p=0.5):
    """bernoulli_ by rows: row r from keys[r]."""
    return _fill_rows("bernoulli_rows_", "bernoulli", tensor, keys, p)


def permutation(key, n):
    """A permutation of range(n) as an int64 tensor, a pure function of (key, n): Fisher-Yates
    from the top, position j swapped with element j of the key's randint(j + 1) stream."""
    n = int(n)
    if n < 0 or n >= 2**48:
        raise detcoll.InvalidArgumentError(f"permutation: n = {n} is outside [0, 2^48)")
    out = torch.empty(n, dtype=torch.int64)
    _detcoll.rng_permutation(_key(key, "permutation"), out.data_ptr(), n)
    return out


def sample_keys(parent, domain, *path, indices):
    """[parent.derive(domain, *path, i) for i in indices]: the keys of samples by global index."""
    if not isinstance(parent, Key):
        raise detcoll.InvalidArgumentError(
            f"sample_keys: expected a detcoll.rng.Key, got {type(parent)}")
    if isinstance(indices, torch.Tensor):
        indices = indices.tolist()
    return [parent.derive(domain, *path, int(i)) for i in indices]


_current = []


@contextlib.contextmanager
def samples(keys):
    """The sample keys of the batch being computed, row by row, for rng.Dropout inside."""
    _current.append(list(keys))
    try:
        yield
    finally:
        _current.pop()


def current_samples():
    """The keys given to the innermost samples(...) block, or None outside one."""
    return _current[-1] if _current else None


class Dropout(torch.nn.Module):
    """Dropout with one mask per sample: row r of the input is masked from
    keys[r].derive("dropout", layer), keys being those of the enclosing samples(...) block. The
    mask of a sample is the same on any rank, in any batch position, at any world size. Outside
    training it passes its input through."""

    def __init__(self, p=0.5, layer=0):
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise detcoll.InvalidArgumentError(f"Dropout: p must be in [0, 1), got {p}")
        self.p, self.layer = float(p), int(layer)

    def forward(self, x):
        if not self.training or self.p == 0.0:
            return x
        keys = current_samples()
        if keys is None:
            raise detcoll.InvalidArgumentError(
                f"detcoll.torch.rng.Dropout (layer {self.layer}) in training needs the batch's "
                "sample keys: run the model inside `with rng.samples(keys):`")
        masks = [k.derive("dropout", self.layer) for k in keys]
        keep = bernoulli_rows_(torch.empty(x.shape, dtype=x.dtype, device=x.device), masks,
                               1.0 - self.p)
        return x * keep * (1.0 / (1.0 - self.p))

    def extra_repr(self):
        return f"p={self.p}, layer={self.layer}"
