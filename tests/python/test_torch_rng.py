"""detcoll.torch.rng against an independent reference: a numpy Philox4x32-10 (checked on the
Random123 known-answer vectors) and the README "Seeds" formulas of every fill, key and
permutation; then splitting, rows, Dropout's per-sample masks and bad input. No init needed."""

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

import detcoll
from detcoll.torch import rng

# ---- The reference: Philox4x32-10 as Random123 defines it --------------------------------------

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
LOW32 = np.uint64(0xFFFFFFFF)
S32 = np.uint64(32)


def philox(ctr, key):
    """Philox4x32-10 of four counter words (scalars or equal-length arrays) under two key words:
    each round (hi0, lo0) = M0 c0, (hi1, lo1) = M1 c2, c = (hi1^c1^k0, lo1, hi0^c3^k1, lo0), then
    the key is bumped by the Weyl constants. Returns an array [..., 4] of uint32."""
    c0, c1, c2, c3 = np.broadcast_arrays(*(np.asarray(c, dtype=np.uint64) for c in ctr))
    k0, k1 = int(key[0]), int(key[1])
    for _ in range(10):
        p0, p1 = c0 * M0, c2 * M1  # < 2^64: exact in uint64
        c0, c1, c2, c3 = ((p1 >> S32) ^ c1 ^ np.uint64(k0), p1 & LOW32,
                          (p0 >> S32) ^ c3 ^ np.uint64(k1), p0 & LOW32)
        k0, k1 = (k0 + W0) & 0xFFFFFFFF, (k1 + W1) & 0xFFFFFFFF
    return np.stack([c0, c1, c2, c3], axis=-1).astype(np.uint32)


def blocks(key, first, count):
    """Blocks first .. first + count - 1 of a key's stream (README: counter = (block mod 2^32,
    block div 2^32, key word 2, key word 3), Philox key = key words 0-1), as [count, 4] uint32."""
    b = [first + j for j in range(count)]
    lo = np.array([x & 0xFFFFFFFF for x in b], dtype=np.uint64)
    hi = np.array([x >> 32 for x in b], dtype=np.uint64)
    w = key.words
    return philox((lo, hi, w[2], w[3]), (w[0], w[1])).reshape(count, 4)


def words(key, first, count):
    """Words first .. first + count - 1 of the stream (word k: word k mod 4 of block k div 4)."""
    b0 = first // 4
    nb = (first + count - 1) // 4 - b0 + 1 if count else 0
    flat = blocks(key, b0, nb).reshape(-1) if nb else np.zeros(0, dtype=np.uint32)
    return flat[first - 4 * b0:first - 4 * b0 + count]


def pairs(w):
    """64-bit x = w[2j] + 2^32 w[2j+1] of consecutive word pairs."""
    w = w.astype(np.uint64)
    return w[0::2] | (w[1::2] << S32)


def ref_uniform32(key, offset, n):
    return (words(key, offset, n) >> 8).astype(np.float32) * np.float32(2.0**-24)


def ref_uniform64(key, offset, n):
    return (pairs(words(key, 2 * offset, 2 * n)) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def threshold(p):
    """ceil(p 2^32), in exact rational arithmetic."""
    return math.ceil(Fraction(p) * 2**32)


def ref_bernoulli(key, offset, n, p):
    return words(key, offset, n).astype(np.int64) < threshold(p)


def ref_normal_z32(key, offset, n):
    """z of float32 elements: element i uses the word pair 2 (i div 2), 2 (i div 2) + 1 of the
    stream (= words 2j, 2j + 1, j = (i div 2) mod 2, of block i div 4); numpy's log, cos, sin."""
    i = np.arange(offset, offset + n)
    first = 2 * (offset // 2)
    w = words(key, first, 2 * ((offset + n + 1) // 2) - first).astype(np.float64)
    k = 2 * (i // 2) - first
    u1, u2 = (w[k] + 1.0) * 2.0**-32, w[k + 1] * 2.0**-32
    r = np.sqrt(-2.0 * np.log(u1))
    return np.where(i % 2 == 0, r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2))


def ref_normal_z64(key, offset, n):
    """z of float64 elements: block i div 2, u1 from words 0-1, u2 from words 2-3."""
    i = np.arange(offset, offset + n)
    b0 = offset // 2
    blk = blocks(key, b0, (offset + n - 1) // 2 - b0 + 1)[i // 2 - b0]
    x01 = pairs(blk[:, 0:2].reshape(-1))
    x23 = pairs(blk[:, 2:4].reshape(-1))
    u1 = ((x01 >> np.uint64(11)) + np.uint64(1)).astype(np.float64) * 2.0**-53
    u2 = (x23 >> np.uint64(11)).astype(np.float64) * 2.0**-53
    r = np.sqrt(-2.0 * np.log(u1))
    return np.where(i % 2 == 0, r * np.cos(2 * np.pi * u2), r * np.sin(2 * np.pi * u2))


def ref_randint(key, offset, count, n, attempts=None):
    """Lemire with rejection, README layout: attempt a of element i takes the 64-bit word pair
    a mod 2 of block i + (a div 2) 2^48; x n = hi 2^64 + lo, accept hi unless lo < (2^64 - n) mod n.
    `attempts`, a list, receives the attempt count of each element."""
    reject = (2**64 - n) % n
    first = blocks(key, offset, count)
    out = []
    for j in range(count):
        blk, a = first[j], 0
        while True:
            if a and a % 2 == 0:
                blk = blocks(key, offset + j + (a // 2) * 2**48, 1)[0]
            x = int(blk[2 * (a % 2)]) | int(blk[2 * (a % 2) + 1]) << 32
            a += 1
            if (x * n) % 2**64 >= reject:
                out.append((x * n) >> 64)
                break
        if attempts is not None:
            attempts.append(a)
    return out


def ref_permutation(key, n):
    """Fisher-Yates from the top: position j swapped with element j of randint(j + 1)."""
    p = list(range(n))
    for j in range(n - 1, 0, -1):
        r = ref_randint(key, j, 1, j + 1)[0]
        p[j], p[r] = p[r], p[j]
    return p


# ---- Keys (README "Keys", kernels/rng/key.h): Davies-Meyer over the reference Philox ----------

def mix(h, m):
    out = philox(h, (m & 0xFFFFFFFF, m >> 32))
    return tuple(int(o) ^ x for o, x in zip(out, h))


def iv(tag):
    b = tag.encode().ljust(16, b"\0")
    return tuple(int.from_bytes(b[4 * k:4 * k + 4], "little") for k in range(4))


def ref_name_hash(data):
    h = iv("detcoll/name")
    for s in range(0, len(data), 8):
        h = mix(h, int.from_bytes(data[s:s + 8].ljust(8, b"\0"), "little"))
    return mix(h, len(data))


def ref_root(seed):
    return mix(mix(iv("detcoll/root"), seed), 1)


def ref_derive(parent, domain, path):
    d = ref_name_hash(domain.encode())
    h = parent
    for m in [d[0] | d[1] << 32, d[2] | d[3] << 32, *path]:
        h = mix(h, m)
    return mix(h, len(path) + 2)


# ---- Helpers -----------------------------------------------------------------------------------

def gen(label):
    return np.random.default_rng(list(label.encode()))


def random_key(g):
    """A key of four arbitrary words (not a derived one: every word of the layout matters)."""
    return rng.Key(g.integers(0, 2**32, size=4, dtype=np.uint64).tolist())


def bits(t):
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    return t.contiguous().view(width)


def np_bits(a):
    return a.view({4: np.int32, 8: np.int64}[a.itemsize])


# ---- Philox ------------------------------------------------------------------------------------

def test_reference_philox_matches_the_random123_known_answers():
    kat = [((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
           ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
           ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1))]
    for ctr, key, expected in kat:
        assert tuple(int(w) for w in philox(ctr, key)) == expected
    # The array form agrees with the scalar form, lane by lane.
    ctrs = np.array([k[0] for k in kat], dtype=np.uint64).T
    assert philox(ctrs, (0xA4093822, 0x299F31D0))[2].tolist() == list(kat[2][2])


def test_keys_follow_the_readme_construction():
    g = gen("keys")
    for _ in range(5):
        seed = int(g.integers(0, 2**64, dtype=np.uint64))
        root = rng.Key.from_seed(seed)
        assert root.words == ref_root(seed)
        domain = "".join(chr(c) for c in g.integers(97, 123, size=int(g.integers(0, 20))))
        path = [int(p) for p in g.integers(0, 2**64, size=int(g.integers(0, 4)), dtype=np.uint64)]
        assert root.derive(domain, *path).words == ref_derive(root.words, domain, path)
    k = rng.Key.from_seed(3)
    assert k.derive("dropout\u00e9", 1).words == ref_derive(k.words, "dropout\u00e9", [1])
    assert k.derive("a", 1) != k.derive("a", 2) and k.derive("a", 1) != k.derive("b", 1)


# ---- Fills against the formulas ----------------------------------------------------------------

def test_uniform_bits_equal_the_formula():
    g = gen("uniform")
    for _ in range(4):
        key, n = random_key(g), int(g.integers(1, 700))
        offset = int(g.integers(1, 2**61))
        t32 = rng.uniform_(torch.empty(n, dtype=torch.float32), key, offset=offset)
        assert np.array_equal(np_bits(t32.numpy()), np_bits(ref_uniform32(key, offset, n)))
        t64 = rng.uniform_(torch.empty(n, dtype=torch.float64), key, offset=offset)
        assert np.array_equal(np_bits(t64.numpy()), np_bits(ref_uniform64(key, offset, n)))
        assert 0.0 <= t64.min() and t64.max() < 1.0 and 0.0 <= t32.min() and t32.max() < 1.0


def test_large_fills_and_block_counter_carries_equal_the_formula():
    """A fill large enough for several threads; and ranges whose block index crosses 2^32 (the
    low counter word wraps, the high one carries) inside one vectorised chunk."""
    g = gen("large")
    key, n = random_key(g), 2**18 + 13
    offset = int(g.integers(1, 2**20))
    t = rng.uniform_(torch.empty(n), key, offset=offset)
    assert np.array_equal(np_bits(t.numpy()), np_bits(ref_uniform32(key, offset, n)))
    p = float(g.uniform(0.05, 0.95))
    b = rng.bernoulli_(torch.empty(n, dtype=torch.int64), key, p=p, offset=offset)
    assert np.array_equal(b.numpy(), ref_bernoulli(key, offset, n, p).astype(np.int64))
    for block in [2**32 - 21, 7 * 2**32 - 5, 2**61 - 3]:
        offset = 4 * block + int(g.integers(0, 4))
        t = rng.uniform_(torch.empty(4 * 70), key, offset=offset)
        assert np.array_equal(np_bits(t.numpy()), np_bits(ref_uniform32(key, offset, 4 * 70)))
        t = rng.uniform_(torch.empty(2 * 70, dtype=torch.float64), key, offset=2 * block + 1)
        ref = ref_uniform64(key, 2 * block + 1, 2 * 70)
        assert np.array_equal(np_bits(t.numpy()), np_bits(ref))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                   torch.int32, torch.int64])
def test_bernoulli_is_the_threshold_formula(dtype):
    g = gen(f"bernoulli{dtype}")
    for p in [float(g.uniform(0, 1)), float(g.uniform(0, 1e-6)), 1 - float(g.uniform(0, 1e-6)),
              0.0, 1.0, 2.0**-32 * 0.5]:
        key, n, offset = random_key(g), int(g.integers(1, 900)), int(g.integers(1, 2**62))
        t = rng.bernoulli_(torch.full((n,), 7, dtype=dtype), key, p=p, offset=offset)
        expected = torch.from_numpy(ref_bernoulli(key, offset, n, p)).to(dtype)
        assert torch.equal(bits(t), bits(expected)), p


def test_bernoulli_threshold_is_the_ceiling_at_the_boundary():
    """p placed on a drawn word: p = w 2^-32 gives 0 (w is not below w), p just above gives 1."""
    g = gen("ceil")
    key, offset = random_key(g), int(g.integers(1, 2**50))
    w = words(key, offset, 8).astype(np.int64)
    for j in range(8):
        for p, bit in [(w[j] * 2.0**-32, 0), ((w[j] + 0.5) * 2.0**-32, 1),
                       ((w[j] + 2.0**-20) * 2.0**-32, 1), ((w[j] + 1) * 2.0**-32, 1)]:
            t = rng.bernoulli_(torch.empty(1, dtype=torch.float64), key, p=p, offset=offset + j)
            assert t.item() == bit, (j, p)


# Normal: detcoll computes ln, sin and cos itself; numpy's differ by a few double ulp, so a value
# may land on the other side of a float32 rounding boundary. Stated bounds: float32 within one
# float32 ulp of the double reference plus 2^-44 (|mean| + stddev |z|); float64 within
# 2^-47 (|mean| + stddev (|z| + 1)) (32 double ulp of the scale; 7 seen).
def test_normal_is_box_muller_on_the_stream_words():
    g = gen("normal")
    for _ in range(4):
        key, n = random_key(g), int(g.integers(1, 600))
        offset = int(g.integers(1, 2**60))
        mean = float(g.uniform(-1, 1) * 10.0 ** g.uniform(-3, 4))
        std = float(10.0 ** g.uniform(-3, 3))
        t = rng.normal_(torch.empty(n), key, mean=mean, std=std, offset=offset).numpy()
        z = ref_normal_z32(key, offset, n)
        ref = mean + std * z
        tol = np.spacing(np.abs(ref).astype(np.float32)) + 2.0**-44 * (abs(mean) + std * abs(z))
        assert np.all(np.abs(t.astype(np.float64) - ref) <= tol)
        assert np.all(np.abs(z) <= 6.67)
        t = rng.normal_(torch.empty(n, dtype=torch.float64), key, mean, std, offset).numpy()
        z = ref_normal_z64(key, offset, n)
        ref = mean + std * z
        assert np.all(np.abs(t - ref) <= 2.0**-47 * (abs(mean) + std * (np.abs(z) + 1)))
    # Not the uniform words: the fills differ in kind.
    u = rng.uniform_(torch.empty(64), key)
    assert (rng.normal_(torch.empty(64), key) < 0).any() and not (u < 0).any()


def test_randint_is_lemire_with_rejection_on_the_readme_attempt_layout():
    g = gen("randint")
    # n with 2^64 mod n a large share of 2^64: about 1 attempt in 4 rejected, so some elements go
    # to the blocks 2^48 on (attempt 2 and later).
    n_big = int(2**64 * g.uniform(0.35, 0.4))
    attempts = []
    cases = [(n_big, torch.int64, 1500), (int(g.integers(2, 2**31)), torch.int32, 300),
             (2**31, torch.int32, 200), (2**63, torch.int64, 200),
             (int(g.integers(2, 50)), torch.int64, 300), (1, torch.int32, 20)]
    for n, dtype, count in cases:
        key, offset = random_key(g), int(g.integers(1, 2**48 - 2000))
        t = rng.randint_(torch.empty(count, dtype=dtype), key, high=n, offset=offset)
        expected = ref_randint(key, offset, count, n, attempts if n == n_big else None)
        assert t.tolist() == expected
        assert int(t.min()) >= 0 and int(t.max()) < n
    assert max(attempts) >= 3, "the test should reach the second block of some elements"


# ---- Offsets and splitting ---------------------------------------------------------------------

FILLS = [
    ("uniform32", lambda t, k, o: rng.uniform_(t, k, offset=o), torch.float32),
    ("uniform64", lambda t, k, o: rng.uniform_(t, k, offset=o), torch.float64),
    ("normal32", lambda t, k, o: rng.normal_(t, k, -2.7181, 0.0371, offset=o), torch.float32),
    ("normal64", lambda t, k, o: rng.normal_(t, k, 31.41, 2.718, offset=o), torch.float64),
    ("bernoulli16", lambda t, k, o: rng.bernoulli_(t, k, 0.3141, offset=o), torch.float16),
    ("bernoullibf", lambda t, k, o: rng.bernoulli_(t, k, 0.8271, offset=o), torch.bfloat16),
    ("randint32", lambda t, k, o: rng.randint_(t, k, 1234567, offset=o), torch.int32),
    ("randint64", lambda t, k, o: rng.randint_(t, k, int(2**64 * 0.37), offset=o), torch.int64),
]


@pytest.mark.parametrize("name,fill,dtype", FILLS, ids=[f[0] for f in FILLS])
def test_one_call_equals_the_pieces_at_their_offsets(name, fill, dtype):
    g = gen(name)
    key, n = random_key(g), 1031
    base = int(g.integers(1, 2**40))
    whole = fill(torch.empty(n, dtype=dtype), key, base)
    cuts = sorted(set([0, n] + g.integers(1, n, size=9).tolist() + [1, 2, 3, 5]))
    pieces = [fill(torch.empty(b - a, dtype=dtype), key, base + a) for a, b in zip(cuts, cuts[1:])]
    assert torch.equal(bits(torch.cat(pieces)), bits(whole))
    # A contiguous view inside a larger buffer is filled in place, nothing around it.
    buf = torch.zeros(n + 20, dtype=dtype)
    fill(buf[7:7 + n], key, base)
    assert torch.equal(bits(buf[7:7 + n]), bits(whole))
    assert not buf[:7].any() and not buf[7 + n:].any()
    # The offset moves along the stream: another offset gives other values.
    assert not torch.equal(bits(fill(torch.empty(n, dtype=dtype), key, base + 1)[:-1]),
                           bits(whole[:-1]))
    assert fill(torch.empty(0, dtype=dtype), key, base).numel() == 0


# ---- Rows --------------------------------------------------------------------------------------

def test_rows_equal_the_single_key_fills():
    g = gen("rows")
    keys = [random_key(g) for _ in range(6)]
    shape = (6, 3, 7)
    mean, std, p = float(g.uniform(-50, 50)), float(g.uniform(0.1, 9)), float(g.uniform(0, 1))
    for dtype in [torch.float32, torch.float64]:
        u = rng.uniform_rows_(torch.empty(shape, dtype=dtype), keys)
        nr = rng.normal_rows_(torch.empty(shape, dtype=dtype), keys, mean=mean, std=std)
        for r, k in enumerate(keys):
            assert torch.equal(bits(u[r]), bits(rng.uniform_(torch.empty(3, 7, dtype=dtype), k)))
            single = rng.normal_(torch.empty(3, 7, dtype=dtype), k, mean=mean, std=std)
            assert torch.equal(bits(nr[r]), bits(single))
    for dtype in [torch.float16, torch.int32]:
        b = rng.bernoulli_rows_(torch.empty(shape, dtype=dtype), keys, p=p)
        for r, k in enumerate(keys):
            expected = torch.from_numpy(ref_bernoulli(k, 0, 21, p)).to(dtype).reshape(3, 7)
            assert torch.equal(bits(b[r]), bits(expected))
    u = rng.uniform_rows_(torch.empty(6, dtype=torch.float64), keys)  # one element a row
    assert u.tolist() == [float(ref_uniform64(k, 0, 1)[0]) for k in keys]


def test_rows_need_one_key_a_row():
    keys = [rng.Key.from_seed(s) for s in (11, 12, 13)]
    for call in [rng.uniform_rows_, rng.normal_rows_, rng.bernoulli_rows_]:
        t = torch.full((4, 5), 2.5)
        with pytest.raises(detcoll.InvalidArgumentError, match="3 keys for a tensor of shape"):
            call(t, keys)
        assert torch.equal(t, torch.full((4, 5), 2.5))
        with pytest.raises(detcoll.InvalidArgumentError, match="one key a row"):
            call(torch.tensor(1.0), keys[:1])
    with pytest.raises(detcoll.InvalidArgumentError, match="Key"):
        rng.uniform_rows_(torch.empty(2, 2), [keys[0], keys[1].words])
    with pytest.raises(detcoll.InvalidArgumentError, match="probability"):
        rng.bernoulli_rows_(torch.empty(3, 2), keys, p=1.5)


# ---- Permutations ------------------------------------------------------------------------------

def test_permutation_is_fisher_yates_on_the_randint_stream():
    g = gen("permutation")
    for n in [0, 1, 2, 3, 17, int(g.integers(200, 400))]:
        key = random_key(g)
        p = rng.permutation(key, n)
        assert p.dtype == torch.int64 and sorted(p.tolist()) == list(range(n))
        assert p.tolist() == ref_permutation(key, n)
    key = rng.Key.from_seed(int(g.integers(0, 2**63)))
    orders = {tuple(rng.permutation(key.derive("data-order", e), 50).tolist()) for e in range(8)}
    assert len(orders) == 8
    assert torch.equal(rng.permutation(key, 50), rng.permutation(key, 50))
    with pytest.raises(detcoll.InvalidArgumentError, match="outside"):
        rng.permutation(key, -1)
    with pytest.raises(detcoll.InvalidArgumentError, match="Key"):
        rng.permutation(key.words, 5)


# ---- Sample keys and the samples context -------------------------------------------------------

def test_sample_keys_and_the_samples_context():
    root = rng.Key.from_seed(987654321987)
    idx = [5, 3, 2**40 + 1]
    keys = rng.sample_keys(root, "sample", 7, indices=torch.tensor(idx))
    assert [k.words for k in keys] == [ref_derive(root.words, "sample", [7, i]) for i in idx]
    assert rng.sample_keys(root, "sample", 7, indices=idx[1:]) == keys[1:]
    with pytest.raises(detcoll.InvalidArgumentError, match="Key"):
        rng.sample_keys(root.words, "sample", indices=idx)
    assert rng.current_samples() is None
    with rng.samples(keys):
        assert rng.current_samples() == keys
        with pytest.raises(KeyError):
            with rng.samples(keys[:1]):
                assert rng.current_samples() == keys[:1]
                raise KeyError("leaves the block")
        assert rng.current_samples() == keys
    assert rng.current_samples() is None


# ---- Dropout -----------------------------------------------------------------------------------

def dropout_batch(g, rows, cols=(4, 5)):
    mag = torch.from_numpy(g.uniform(0.5, 1.5, size=(rows, *cols)) * 10.0 ** g.uniform(-5, 5))
    sign = torch.from_numpy(np.where(g.uniform(size=(rows, *cols)) < 0.5, -1.0, 1.0))
    return (mag * sign).float()


def test_dropout_masks_are_per_sample():
    g = gen("dropout")
    p, layer = float(g.uniform(0.2, 0.7)), int(g.integers(0, 1000))
    root = rng.Key.from_seed(int(g.integers(0, 2**63)))
    keys = rng.sample_keys(root, "sample", 3, indices=g.integers(0, 10**6, size=8).tolist())
    drop = rng.Dropout(p, layer=layer)
    x = dropout_batch(g, 8)
    with rng.samples(keys):
        y = drop(x)
    keep = y != 0
    for r, k in enumerate(keys):  # the mask of row r: bernoulli(1 - p) of the sample's layer key
        ref = ref_bernoulli(k.derive("dropout", layer), 0, 20, 1.0 - p).reshape(4, 5)
        assert np.array_equal(keep[r].numpy(), ref)
    assert 0 < keep.sum() < keep.numel()
    # Kept values are x / (1 - p): two float32 roundings (the scale, the product) from exact.
    torch.testing.assert_close(y[keep].double(), x[keep].double() / (1.0 - p), rtol=2.5e-7, atol=0)
    # The same samples at other rows, with other samples around them: the same row masks.
    others = rng.sample_keys(root, "sample", 4, indices=[1, 2, 3])
    order = [5, 0, 7, 2]
    keys2 = [keys[order[0]], others[0], keys[order[1]], others[1], others[2], keys[order[2]],
             keys[order[3]]]
    x2 = dropout_batch(g, 7)
    with rng.samples(keys2):
        y2 = drop(x2)
    for row2, row in zip([0, 2, 5, 6], order):
        assert torch.equal(y2[row2] != 0, keep[row])
    # Another layer draws another mask.
    with rng.samples(keys):
        assert not torch.equal(rng.Dropout(p, layer=layer + 1)(x) != 0, keep)


def test_dropout_gradient_eval_and_errors():
    g = gen("dropout-grad")
    p = float(g.uniform(0.1, 0.9))
    keys = [random_key(g) for _ in range(5)]
    drop = rng.Dropout(p, layer=2)
    x = dropout_batch(g, 5).requires_grad_()
    with rng.samples(keys):
        y = drop(x)
    y.sum().backward()
    mask = (y != 0).float()
    torch.testing.assert_close(x.grad, mask * (1.0 / (1.0 - p)), rtol=1e-7, atol=0)
    drop.eval()
    assert torch.equal(drop(x.detach()), x.detach())  # no keys needed outside training
    drop.train()
    with pytest.raises(detcoll.InvalidArgumentError, match="samples"):
        drop(x)
    with rng.samples(keys[:3]), pytest.raises(detcoll.InvalidArgumentError, match="3 keys"):
        drop(x)
    for bad in [1.0, -0.25, 1.5, float("nan")]:
        with pytest.raises(detcoll.InvalidArgumentError, match="p must be in"):
            rng.Dropout(bad)
    assert torch.equal(rng.Dropout(0.0)(x.detach()), x.detach())


# ---- Bad input ---------------------------------------------------------------------------------

def test_bad_input_raises_a_clear_error_and_leaves_the_tensor():
    key = rng.Key.from_seed(42)
    base = torch.full((6, 4), -7.25)
    with pytest.raises(detcoll.InvalidArgumentError, match="not contiguous"):
        rng.uniform_(base.t(), key)
    with pytest.raises(detcoll.InvalidArgumentError, match="unsupported dtype torch.uint8"):
        rng.bernoulli_(torch.zeros(4, dtype=torch.uint8), key)
    with pytest.raises(detcoll.InvalidArgumentError, match="unsupported dtype torch.bool"):
        rng.bernoulli_(torch.zeros(4, dtype=torch.bool), key)
    with pytest.raises(detcoll.InvalidArgumentError, match="expected a torch.Tensor"):
        rng.uniform_(np.zeros(4, dtype=np.float32), key)
    ints = torch.full((8,), -3, dtype=torch.int32)
    with pytest.raises(detcoll.InvalidArgumentError, match="uniform fills float32 or float64"):
        rng.uniform_(ints, key)
    with pytest.raises(detcoll.InvalidArgumentError, match="normal fills float32 or float64"):
        rng.normal_(torch.zeros(4, dtype=torch.float16), key)
    with pytest.raises(detcoll.InvalidArgumentError, match="randint fills int32 or int64"):
        rng.randint_(base, key, 10)
    for p in [1.5, -1e-300, float("nan")]:
        with pytest.raises(detcoll.InvalidArgumentError, match="probability"):
            rng.bernoulli_(base, key, p=p)
    with pytest.raises(detcoll.InvalidArgumentError, match="finite stddev"):
        rng.normal_(base, key, std=-0.5)
    with pytest.raises(detcoll.InvalidArgumentError, match="finite mean"):
        rng.normal_(base, key, mean=float("inf"))
    with pytest.raises(detcoll.InvalidArgumentError, match=r"high must be in \[1, 2\^63\], got 0"):
        rng.randint_(ints, key, 0)
    with pytest.raises(detcoll.InvalidArgumentError, match="must be in"):
        rng.randint_(ints, key, 2**31 + 1)
    with pytest.raises(detcoll.InvalidArgumentError, match="2\\^48"):
        rng.randint_(ints, key, 5, offset=2**48 - 4)
    with pytest.raises(detcoll.InvalidArgumentError, match="expected a detcoll.rng.Key"):
        rng.uniform_(base, key.words)
    with pytest.raises(detcoll.InvalidArgumentError, match=r"offset -1 is outside \[0, 2\^64\)"):
        rng.uniform_(base, key, offset=-1)
    with pytest.raises(detcoll.InvalidArgumentError, match="below 2\\^64"):
        rng.uniform_(base, key, offset=2**64 - 8)
    assert torch.equal(base, torch.full((6, 4), -7.25))
    assert torch.equal(ints, torch.full((8,), -3, dtype=torch.int32))


def test_out_of_range_integers_raise_invalid_argument():
    t = torch.zeros(4, dtype=torch.int64)
    with pytest.raises(detcoll.InvalidArgumentError, match="offset"):
        rng.uniform_(torch.zeros(4), rng.Key.from_seed(1), offset=2**64)
    with pytest.raises(detcoll.InvalidArgumentError, match="high"):
        rng.randint_(t, rng.Key.from_seed(1), 2**64)
    assert torch.equal(t, torch.zeros(4, dtype=torch.int64))
