"""Random streams addressed by keys (README "Seeds"): element i of a key's stream is a pure
function of (key, i), the same on every rank, CPU or GPU, however a range is split."""

from . import _detcoll


class Key:
    """A 128-bit stream key. Derive children by domain and path; never by rank unless asked."""

    __slots__ = ("words",)

    def __init__(self, words):
        words = tuple(int(w) for w in words)
        if len(words) != 4 or not all(0 <= w < 2**32 for w in words):
            raise ValueError("a key is four 32-bit words")
        self.words = words

    @staticmethod
    def from_seed(seed):
        return Key(_detcoll.rng_key_from_seed(int(seed)))

    @staticmethod
    def root():
        """The root key of the seed every rank agreed on at init."""
        return Key(_detcoll.rng_root_key())

    def derive(self, domain, *path, purpose=None):
        """The child for a domain name and integer path (step, global sample index, layer ...).
        With `purpose`, the derivation is checked: another purpose deriving the same key in
        this step raises (see begin_step)."""
        path = [int(p) for p in path]
        if any(p < 0 or p >= 2**64 for p in path):
            raise ValueError("path elements are integers in [0, 2^64)")
        if purpose is None:
            return Key(_detcoll.rng_derive(list(self.words), str(domain), path))
        return Key(_detcoll.rng_derive_checked(list(self.words), str(domain), path, str(purpose)))

    def __eq__(self, other):
        return isinstance(other, Key) and self.words == other.words

    def __hash__(self):
        return hash(self.words)

    def __repr__(self):
        return "Key(%s)" % ", ".join("0x%08x" % w for w in self.words)


def begin_step(step):
    """Starts a step of the key check (derive(..., purpose=...))."""
    _detcoll.rng_begin_step(int(step))


def seed(value):
    """Sets the root seed on every rank (collective; every rank must pass the same value)."""
    _detcoll.rng_seed(int(value))


def get_seed():
    return _detcoll.rng_get_seed()


def counter(name):
    return _detcoll.rng_counter_get(str(name))


def set_counter(name, value):
    _detcoll.rng_counter_set(str(name), int(value))


def next_counter(name):
    """The counter's value, which then advances by one."""
    return _detcoll.rng_counter_next(str(name))


def state_dict():
    """The checkpointable random state (root seed and counters) as bytes."""
    return _detcoll.rng_state_save()


def load_state_dict(state):
    """Restores a state_dict() on every rank (collective; every rank must restore the same)."""
    _detcoll.rng_state_restore(bytes(state))
