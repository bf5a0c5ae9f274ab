"""The trainer's endpoint: ``weightcast.Publisher`` (include/weightcast/publisher.h).

    pub = weightcast.Publisher("group.yaml", rank=1)
    pub.register_module(model)              # every parameter and buffer, once
    for v in range(1, steps + 1):
        optimizer.step()
        pub.publish(v).wait_for_reads()      # the model may change again after this

Hooked mode (include/weightcast/step.h), no snapshot of the hooked tensors kept:

    pub.register_module(model, hooked=True)
    with pub.step(v) as s:
        s.write(param_or_view, new_values)  # instead of param_or_view.copy_(new_values)
    s.handle.wait_committed(timeout=30)
"""

import os

from weightcast import _core, _lifetime
from weightcast._tensors import Registry, array_and_dtype, named_tensors


class PublishHandle:
    """One queued publication (returned by ``publish``); waits take ``timeout`` in seconds."""

    def __init__(self, core):
        self._core = core

    @property
    def version(self):
        return self._core.version

    def wait_for_reads(self, timeout=None):
        """Until the registered tensors were read for the last time: the trainer may change them."""
        self._core.wait_for_reads(timeout)

    def wait_published(self, timeout=None):
        """Until written to the journal and offered; returns the report (a dict of bytes, counts)."""
        return self._core.wait_published(timeout)

    def wait_committed(self, timeout=None):
        """Until every live subscriber acked this version with matching checksums."""
        self._core.wait_committed(timeout)


class Step:
    """A hooked step (``Publisher.step``): writes go through ``write``; leaving the ``with``
    block without an exception publishes the version (``handle`` is then its PublishHandle),
    with an exception drops the step unpublished (the next version is then an anchor)."""

    def __init__(self, publisher, version, force_anchor):
        self._publisher = publisher
        self.version = version
        self._force_anchor = force_anchor
        self._core = None
        self.handle = None

    def __enter__(self):
        self._core = self._publisher._core.begin_step(self.version, self._force_anchor)
        return self

    def write(self, live_view, new_values):
        """Writes ``new_values`` into ``live_view`` (a registered hooked tensor or a view of a run
        of its consecutive elements) and records the change. Same dtype and element count;
        ``new_values`` contiguous (host views may be strided)."""
        if self._core is None:
            raise RuntimeError("Step.write outside its `with` block")
        live, live_dtype = array_and_dtype(live_view)
        values, values_dtype = array_and_dtype(new_values)
        name = self._publisher._registry.owner_of(live_view) or "unregistered view"
        self._core.write(live, live_dtype, values, values_dtype, name)

    def progress(self):
        return self._core.progress() if self._core is not None else {}

    def __exit__(self, exc_type, exc, tb):
        step, self._core = self._core, None
        if exc_type is None:
            self.handle = PublishHandle(self._publisher._core.publish_step(step))
        return False


class Publisher(_lifetime.Closing):
    """Loads the group config (YAML, docs/CONFIG.md), checks that ``rank`` is a publisher there,
    opens the journal and connects to the coordinator in the background."""

    def __init__(self, config, rank, *, threads=0, credit_timeout=None, log=None):
        self._core = _core.Publisher(os.fspath(config), rank, threads, credit_timeout, log)
        self._registry = Registry()
        self._hooked = []
        self._buffers = []
        _lifetime.track(self)

    def register(self, name, tensor, *, hooked=False, dtype=None):
        """Registers ``tensor`` (torch or NumPy, host or CUDA, strided views included) under
        ``name``, before the first publication. The publisher keeps a reference to it.
        ``dtype``: weightcast's name of the element type when the array's own says otherwise
        ("float8_e4m3fn" for fp8 values held as uint8 by a torch without float8)."""
        array, own_dtype = array_and_dtype(tensor)
        dtype = dtype or own_dtype
        self._core.register_tensor(name, array, dtype, hooked)
        self._registry.add(name, tensor)
        if hooked:
            self._hooked.append(name)

    def register_module(self, module, *, prefix="", hooked=False):
        """Registers a torch module's parameters and buffers under their state-dict names.
        ``hooked`` applies to the parameters (what an optimizer writes); buffers are read at
        publish (snapshot mode), since no step writes them."""
        params = {id(p) for p in module.parameters()}
        for name, t in named_tensors(module, prefix):
            self.register(name, t, hooked=hooked and id(t) in params)
            if id(t) not in params:
                self._buffers.append(name)

    @property
    def names(self):
        return list(self._registry.names)

    @property
    def buffer_names(self):
        """The module buffers registered by ``register_module`` (forward may change them)."""
        return list(self._buffers)

    @property
    def hooked_names(self):
        """The tensors registered with ``hooked=True`` (published only through steps)."""
        return list(self._hooked)

    def publish(self, version, *, force_anchor=False):
        """Queues ``version`` (snapshot mode; returns at once): the registered tensors hold it now."""
        return PublishHandle(self._core.publish(version, force_anchor))

    def step(self, version, *, force_anchor=False):
        """The hooked step whose writes make ``version`` (a context manager, see Step)."""
        return Step(self, version, force_anchor)

    @property
    def head(self):
        """The last version in the journal (None before the first)."""
        return self._core.head

    @property
    def committed(self):
        """The last version the group committed (None before the first)."""
        return self._core.committed

    def wait_committed(self, version, timeout=None):
        self._core.wait_committed(version, timeout)

    @property
    def journal_root(self):
        """The group's journal root (for weightcast.journal.open)."""
        return self._core.journal_root

    def serves(self, path):
        """Whether versions are served on live path ``path`` ("ucx", "nccl")."""
        return self._core.serves(path)

    def close(self, reason="publisher closed"):
        """Finishes queued publications, leaves the group. Idempotent."""
        self._core.close(reason)
