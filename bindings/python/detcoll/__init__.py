"""detcoll: bit-reproducible collectives for data-parallel training.

The framework-neutral layer over the C API: errors, constants and the random streams
(detcoll.rng). Framework bindings live in detcoll.torch.
"""

from . import _detcoll

__all__ = [
    "Error", "InvalidArgumentError", "MismatchError", "TimeoutError", "BackendError",
    "NotInitializedError", "InternalError", "MODE_NATIVE", "MODE_ORDERED", "MODE_INVARIANT",
]


class Error(RuntimeError):
    """A failed detcoll call; the message is the library's."""


class InvalidArgumentError(Error, ValueError):
    pass


class MismatchError(Error):
    pass


class TimeoutError(Error):  # noqa: A001 (the library's status name)
    pass


class BackendError(Error):
    pass


class NotInitializedError(Error):
    pass


class InternalError(Error):
    pass


# detcoll_status_t -> the exception raised for it.
_detcoll._set_errors({
    _detcoll.ERR_INVALID_ARGUMENT: InvalidArgumentError,
    _detcoll.ERR_MISMATCH: MismatchError,
    _detcoll.ERR_TIMEOUT: TimeoutError,
    _detcoll.ERR_BACKEND: BackendError,
    _detcoll.ERR_NOT_INITIALIZED: NotInitializedError,
    _detcoll.ERR_INTERNAL: InternalError,
})

# detcoll_mode_t, as the extension exports it.
MODE_NATIVE, MODE_ORDERED, MODE_INVARIANT = (
    _detcoll.MODE_NATIVE, _detcoll.MODE_ORDERED, _detcoll.MODE_INVARIANT)
_MODES = {"native": MODE_NATIVE, "ordered": MODE_ORDERED, "invariant": MODE_INVARIANT}


def set_mode(mode):
    """Overrides DETCOLL_DETERMINISM: "native", "ordered" or "invariant" (or MODE_*)."""
    if isinstance(mode, str):
        if mode not in _MODES:
            raise InvalidArgumentError(
                f"unknown determinism mode {mode!r}: expected native, ordered or invariant")
        mode = _MODES[mode]
    _detcoll.set_mode(int(mode))


def get_mode():
    """The determinism mode in force, as its name."""
    return {v: k for k, v in _MODES.items()}[_detcoll.get_mode()]
