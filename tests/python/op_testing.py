"""What the op tests share: PyTorch on one thread, seeded generators, wide-range values and bit
comparisons."""

import math
import zlib

import numpy as np
import pytest
import torch

from detcoll.torch import ops

INTS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


@pytest.fixture(autouse=True)
def one_torch_thread():
    """PyTorch's CPU ops on one thread (their order is then fixed); detcoll back to every core."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
    ops.set_num_threads(0)


# The loop references' arithmetic: values widened exactly to the accumulation type (float32 for
# float32, float16 and bfloat16; float64 for float64), and the one rounding at the end.
def acc_of(dtype):
    return np.float64 if dtype == torch.float64 else np.float32


def widen(t):
    """t's values in its accumulation type, exactly (float16 and bfloat16 widen to float32)."""
    wider = torch.float64 if t.dtype == torch.float64 else torch.float32
    return t.to(wider).numpy().copy()


def narrow(a, dtype):
    """The one rounding at the end (round to nearest even)."""
    return torch.from_numpy(np.ascontiguousarray(a)).to(dtype)


def generator(label):
    return torch.Generator().manual_seed(zlib.crc32(label.encode()))


def wide(g, shape, dtype=torch.float32, k=None):
    """Random signs times a mantissa in [1, 2) times 2^e, e uniform in [-k, k]: k = 20, or 8 for
    float16 (whose largest value is 65504)."""
    k = (8 if dtype == torch.float16 else 20) if k is None else k
    n = math.prod(shape)
    mantissa = 1 + torch.rand(n, generator=g, dtype=torch.float64)
    exponent = torch.randint(-k, k + 1, (n,), generator=g).to(torch.float64)
    sign = torch.where(torch.rand(n, generator=g) < 0.5, -1.0, 1.0).to(torch.float64)
    return (sign * mantissa * torch.pow(2.0, exponent)).to(dtype).reshape(shape)


def bits(t):
    return t.contiguous().view(INTS[t.element_size()])


def assert_bits(actual, expected):
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        f"{actual.dtype} {tuple(actual.shape)} vs {expected.dtype} {tuple(expected.shape)}"
    same = bits(actual) == bits(expected)
    assert bool(same.all()), f"{int((~same).sum())} of {same.numel()} elements differ"
