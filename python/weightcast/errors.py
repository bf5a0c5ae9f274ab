"""weightcast's exceptions: one class per status code of the C++ API (include/weightcast/status.h).

Every error the endpoints report is an instance of ``weightcast.Error``; its message names what
failed (the tensor, the file, the version, the peer). Each subclass also derives from the
built-in exception a Python caller would expect (``DeadlineExceededError`` is a
``TimeoutError``, ``InvalidArgumentError`` a ``ValueError``...), so ``except TimeoutError``
works too.
"""


class Error(Exception):
    """Base of every weightcast error; ``code`` is the C++ status code's name."""

    code = "UNKNOWN"


class InvalidArgumentError(Error, ValueError):
    """The caller passed something that can never work."""

    code = "INVALID_ARGUMENT"


class DataLossError(Error):
    """Bytes read back are corrupt or truncated."""

    code = "DATA_LOSS"


class FailedPreconditionError(Error, RuntimeError):
    """The state does not allow it (call order, a version not newer)."""

    code = "FAILED_PRECONDITION"


class ChecksumMismatchError(Error):
    """A result did not verify; nothing was left changed."""

    code = "CHECKSUM_MISMATCH"


class OutOfRangeError(Error, IndexError):
    """A limit was exceeded."""

    code = "OUT_OF_RANGE"


class NotFoundError(Error, LookupError):
    """A file, a tensor or a version does not exist."""

    code = "NOT_FOUND"


class IoError(Error, OSError):
    """An operating-system I/O call failed."""

    code = "IO_ERROR"


class DeadlineExceededError(Error, TimeoutError):
    """A wait ran past its deadline."""

    code = "DEADLINE_EXCEEDED"


class UnimplementedError(Error, NotImplementedError):
    """Not supported by this build or this endpoint."""

    code = "UNIMPLEMENTED"


class InternalError(Error):
    """A bug in weightcast."""

    code = "INTERNAL"


class UnavailableError(Error, ConnectionError):
    """A connection failed earlier and stays broken; a new one is needed."""

    code = "UNAVAILABLE"


class CallbackError(Error):
    """A Python callback (before_apply, after_apply, on_version) raised on weightcast's thread.

    Raised by the next ``Subscriber.wait_for_version``; the callback's exception is the
    ``__cause__``.
    """

    code = "CALLBACK"


_BY_CODE = {
    cls.code: cls
    for cls in (
        InvalidArgumentError,
        DataLossError,
        FailedPreconditionError,
        ChecksumMismatchError,
        OutOfRangeError,
        NotFoundError,
        IoError,
        DeadlineExceededError,
        UnimplementedError,
        InternalError,
        UnavailableError,
    )
}


def class_for_code(code: str) -> type:
    """The exception class of a C++ status code name ("NOT_FOUND"); Error for an unknown one."""
    return _BY_CODE.get(code, Error)


__all__ = [c.__name__ for c in (Error, CallbackError, *_BY_CODE.values())]
