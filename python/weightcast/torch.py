"""weightcast with a torch optimizer: a version published after every ``optimizer.step()``.

    pub = weightcast.Publisher("group.yaml", rank=1)
    pub.register_module(model)
    hook = weightcast.torch.hook_optimizer(optimizer, pub)   # publishes the initial weights
    for batch in data:
        loss(model, batch).backward()
        optimizer.step()            # then version hook.version is queued
        optimizer.zero_grad()

Snapshot mode (tensors registered normally): after each step the version is published; the
next step first waits until the publisher has read the tensors (``wait_for_reads``), so the
read overlaps forward and backward. That overlap is safe only while nothing but the optimizer
changes the registered tensors: when the publisher holds module buffers (``register_module``
registers the persistent ones, and a forward pass may update them, as batch norm's running
statistics are), each ``step()`` returns only once the version's reads are done
(``overlap=False``, the default then).

Hooked mode (``pub.register_module(model, hooked=True)``): for optimizers that compute new
values elsewhere and write them into the parameters with a copy (offload optimizers:
``param.data.copy_(master.to(param.dtype))``), each step runs inside ``pub.step(version)``
and every ``Tensor.copy_`` made on the thread calling ``step()`` whose destination lies in a
registered hooked tensor is routed through ``Step.write``: the delta is taken from those writes, with no snapshot of the model.
A hooked tensor the step did not copy into at all (a frozen parameter) is written with its
own values, since a step must write every element. Optimizers that update parameters in
place (torch's own: ``addcdiv_``, ``mul_``) cannot be hooked: the guard refuses the version
naming the tensor. Use snapshot mode for them.
"""

import functools
import threading

import torch as _torch


class OptimizerHook:
    """What ``hook_optimizer`` returns: the last version published and its handle."""

    def __init__(self, optimizer, publisher, version, hooked, overlap):
        self.optimizer = optimizer
        self.publisher = publisher
        self.version = version
        self.hooked = hooked
        self.overlap = overlap  # whether the reads of a version may overlap the next forward
        self.handle = None
        self._original_step = optimizer.step

    def wait_for_reads(self, timeout=None):
        if self.handle is not None:
            self.handle.wait_for_reads(timeout)

    def wait_committed(self, timeout=None):
        """Until the last version published was acked by every live subscriber."""
        if self.handle is not None:
            self.handle.wait_committed(timeout)

    def remove(self):
        """Restores the optimizer's own step()."""
        self.optimizer.step = self._original_step


_routing = threading.local()  # the Step that copies on this thread go through, if any
_original_copy = _torch.Tensor.copy_


def _routed_copy(self, src, non_blocking=False):
    step = getattr(_routing, "step", None)
    owner = step._publisher._registry.owner_of(self) if step is not None else None
    if owner is not None:
        if not isinstance(src, _torch.Tensor):
            src = _torch.as_tensor(src)
        values = src.to(device=self.device, dtype=self.dtype).expand(self.shape).contiguous()
        step.write(self, values)
        _routing.touched.add(owner)
        return self
    return _original_copy(self, src, non_blocking)


def _write_untouched(publisher, step, touched):
    """A hooked step must write every element; tensors the optimizer did not copy into at all
    (frozen parameters, no gradient this step) are written with their own values."""
    for name in publisher.hooked_names:
        if name not in touched:
            t = publisher._registry.tensors[name]
            step.write(t, t.detach().clone())


def _publish_initial(publisher, version, hooked):
    if not hooked:
        return publisher.publish(version)
    with publisher.step(version) as s:
        for name in publisher.hooked_names:
            t = publisher._registry.tensors[name]
            s.write(t, t.detach().clone())
    return s.handle


def hook_optimizer(optimizer, publisher, *, start_version=None, publish_initial=True,
                   read_timeout=None, overlap=None):
    """Wraps ``optimizer.step`` so that each call publishes the next version.

    ``start_version``: the version of the weights as they are now (default: the journal's
    head + 1, or 1); published at once unless ``publish_initial`` is False. Steps then make
    start_version + 1, + 2, ... Hooked mode is chosen when the publisher's tensors were
    registered with ``hooked=True``. ``overlap``: whether a version's reads may go on after
    ``step()`` returns, while the next forward runs (default: unless the publisher holds module
    buffers, which a forward may change). Returns an OptimizerHook."""
    hooked = bool(publisher.hooked_names)
    if start_version is None:
        start_version = (publisher.head or 0) + 1
    if overlap is None:
        overlap = not publisher.buffer_names
    hook = OptimizerHook(optimizer, publisher, start_version, hooked, overlap)

    def reads_done_unless_overlapping():
        if not overlap:
            hook.wait_for_reads(read_timeout)

    if publish_initial:
        hook.handle = _publish_initial(publisher, start_version, hooked)
        reads_done_unless_overlapping()
    original = optimizer.step

    @functools.wraps(original)
    def step(*args, **kwargs):
        hook.wait_for_reads(read_timeout)  # the previous version is no longer being read
        version = hook.version + 1
        if not hooked:
            result = original(*args, **kwargs)
            hook.handle = publisher.publish(version)
        else:
            with publisher.step(version) as s:
                _routing.step, _routing.touched = s, set()
                _torch.Tensor.copy_ = _routed_copy
                try:
                    result = original(*args, **kwargs)
                finally:
                    _routing.step = None
                    _torch.Tensor.copy_ = _original_copy
                _write_untouched(publisher, s, _routing.touched)
            hook.handle = s.handle
        hook.version = version
        reads_done_unless_overlapping()
        return result

    optimizer.step = step
    return hook
