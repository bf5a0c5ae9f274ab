"""The engine's endpoint: ``weightcast.Subscriber`` (include/weightcast/subscriber.h).

    sub = weightcast.Subscriber("group.yaml", rank=2,
                                before_apply=engine.pause, after_apply=engine.resume)
    sub.register_module(model)     # the engine's own tensors, written in place
    sub.connect()
    sub.wait_for_version(5, timeout=60)

Each version is applied in place, only the changed elements written, verified by checksum,
all or nothing. ``before_apply(v)`` and ``after_apply(held)`` run on weightcast's worker
thread (with the GIL) around the only window in which the tensors differ from a verified
version; ``on_version`` callbacks run after ``after_apply`` each time a newer version is held.

A callback that raises does not stop the worker (the C++ endpoint's callbacks cannot refuse a
version): the exception is kept and the next ``wait_for_version`` raises ``CallbackError``
from it, so the failure is loud at the caller (docs/DECISIONS.md "The Python package").
"""

import os
import threading
import weakref

from weightcast import _core, _lifetime
from weightcast._tensors import Registry, array_and_dtype, named_tensors
from weightcast.errors import CallbackError


class Subscriber(_lifetime.Closing):
    """Loads the group config and checks that ``rank`` is a subscriber there; nothing
    connects before ``connect()``."""

    def __init__(self, config, rank, *, threads=0, claimed_version=None, before_apply=None,
                 after_apply=None, log=None):
        self.before_apply = before_apply
        self.after_apply = after_apply
        self._on_version = []
        self._held = None
        self._errors = []  # (callback kind, version, exception) not yet raised
        self._error_count = 0
        self._lock = threading.Lock()
        me = weakref.ref(self)  # the C++ object must not keep this one alive (no GC cycle)

        def events(kind, version):
            obj = me()
            if obj is not None:
                obj._event(kind, version)

        self._core = _core.Subscriber(os.fspath(config), rank, threads, claimed_version, events,
                                      log)
        self._registry = Registry()
        _lifetime.track(self)

    def _event(self, kind, version):
        fn = self.before_apply if kind == "before_apply" else self.after_apply
        self._guarded(kind, version, fn)
        if kind == "after_apply" and (self._held is None or version > self._held):
            self._held = version
            for cb in list(self._on_version):
                self._guarded("on_version", version, cb)

    def _guarded(self, kind, version, fn):
        if fn is None:
            return
        try:
            fn(version)
        except Exception as e:  # noqa: BLE001: kept and raised by wait_for_version
            with self._lock:
                self._errors.append((kind, version, e))
                self._error_count += 1

    def on_version(self, callback):
        """Calls ``callback(version)`` whenever a newer verified version is held."""
        self._on_version.append(callback)
        return callback

    def register(self, name, tensor, *, dtype=None):
        """Registers the engine's tensor (written in place); before connect(). Kept alive.
        ``dtype``: as Publisher.register's (fp8 values held as uint8)."""
        array, own_dtype = array_and_dtype(tensor)
        dtype = dtype or own_dtype
        self._core.register_tensor(name, array, dtype)
        self._registry.add(name, tensor)

    def slice_of(self, name, shape):
        """The block of tensor ``name`` (global ``shape``) this rank holds, as a tuple of slices
        (one per dimension) that indexes the full tensor: every index on a rank without a
        layout, else this rank's part of it (docs/CONFIG.md ``layouts``)."""
        offsets, sizes = self._core.slice_of(name, list(shape))
        return tuple(slice(o, o + n) for o, n in zip(offsets, sizes))

    def register_slice(self, name, tensor, global_shape, *, dtype=None):
        """Registers the engine's shard of a tensor its layout splits: ``tensor`` (host memory)
        holds the block slice_of(name, global_shape) gives, row-major. Kept alive."""
        array, own_dtype = array_and_dtype(tensor)
        dtype = dtype or own_dtype
        self._core.register_slice(name, array, list(global_shape), dtype)
        self._registry.add(name, tensor)

    def register_module(self, module, *, prefix=""):
        """Registers a torch module's parameters and buffers under their state-dict names."""
        for name, t in named_tensors(module, prefix):
            self.register(name, t)

    def register_from_journal(self, timeout=None):
        """For a rank without an engine: tensors allocated from the journal head's list."""
        self._core.register_from_journal(timeout)
        for t in self._core.tensors():
            self._registry.names.append(t["name"])

    @property
    def names(self):
        return list(self._registry.names)

    def connect(self):
        """Starts the worker and joins the group."""
        self._core.connect()

    @property
    def current_version(self):
        """The verified version the tensors hold (None before the first)."""
        return self._core.current_version

    def wait_for_version(self, version, timeout=None):
        """Until ``version`` (or a newer one) is held. Raises DeadlineExceededError at the
        timeout, CallbackError when a callback raised since the last wait, KeyboardInterrupt
        on Ctrl-C."""
        self._raise_callback_error()
        self._core.wait_for_version(version, timeout)
        self._raise_callback_error()

    @property
    def committed_version(self):
        """The newest version the group committed to this rank (None before the first): for a
        rank of an engine replica, once every rank of its replica acked it, so the engine may
        serve it."""
        return self._core.committed_version

    def wait_committed(self, version, timeout=None):
        """Until ``version`` (or a newer one) is committed to this rank (its replica). Raises
        DeadlineExceededError at the timeout."""
        self._core.wait_committed(version, timeout)

    def _raise_callback_error(self):
        with self._lock:
            if not self._errors:
                return
            kind, version, e = self._errors[0]
            self._errors.clear()
        raise CallbackError(f"{kind} callback raised on version {version}: {e!r}") from e

    def checksum(self, name):
        """The weightcast checksum (docs/FORMATS.md) of tensor ``name`` at current_version."""
        if name not in self._registry.names:
            raise KeyError(f"tensor '{name}' is not registered")
        return self._core.checksum(self._registry.index(name))

    def stats(self):
        """Versions applied and nacked, anchors loaded, bytes written, by path (a dict)."""
        s = self._core.stats()
        s["callback_errors"] = self._error_count
        return s

    @property
    def journal_root(self):
        """The group's journal root (for weightcast.journal.open)."""
        return self._core.journal_root

    @property
    def fatal_error(self):
        """Why the subscriber gave up for good (None while it has not)."""
        return self._core.fatal_error

    def close(self, reason="subscriber closed"):
        """Lets an apply in progress finish, leaves the group, disconnects. Idempotent."""
        self._core.close(reason)
