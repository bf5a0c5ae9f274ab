"""A worker extension in vLLM's shape: ``--worker-extension-cls weightcast.vllm.WorkerExtension``.

The trainer drives it through ``collective_rpc`` (vLLM pauses generation around the call):

    llm.collective_rpc("weightcast_init", args=("group.yaml", rank))
    ...
    llm.collective_rpc("weightcast_update", args=(version, 60.0))   # after each publication
    llm.collective_rpc("weightcast_status")

It works on ``self.model_runner.model``. Tensors whose state-dict name, dtype and shape match
one of the journal's are registered directly: versions are applied into the engine's own
memory, in place, verified. On an engine rank of a layout (docs/CONFIG.md ``layouts``), a
tensor whose shape is the block the layout gives the rank is registered as that slice: the
rank applies and verifies only its elements (host memory; a CUDA shard is refused by name). The others (vLLM fuses q/k/v into ``qkv_proj`` and gate/up into
``gate_up_proj``) are received into staging tensors of the published shape and handed to the
model's own ``load_weights`` after each update.

Versions are applied only inside ``weightcast_update``: the subscriber's worker waits in
``before_apply`` (before it writes anything) until an update call opens the window, so the
weights never change under a running batch. vLLM itself is not installed in this project's
environment (it needs a GPU): this class is tested against a stand-in worker object holding a
torch module (tests/python/test_torch_vllm.py), never inside vLLM.
"""

import threading
import time

from weightcast import journal as _journal
from weightcast.errors import DeadlineExceededError
from weightcast.subscriber import Subscriber


class WorkerExtension:
    """Mixed into vLLM's worker class; every method runs on the worker's own thread."""

    def weightcast_init(self, config, rank, timeout=60.0, claimed_version=None, threads=0):
        """Joins the group as subscriber ``rank``: waits (up to ``timeout`` s) for the journal's
        first version to learn the published names and shapes, registers the model's tensors,
        connects. Returns weightcast_status()."""
        model = self.model_runner.model
        self._wc_window = threading.Condition()
        self._wc_open = False
        self._wc_closing = False
        self._wc_applying = False
        sub = Subscriber(config, rank, threads=threads, claimed_version=claimed_version,
                         before_apply=self._wc_before_apply, after_apply=self._wc_after_apply)
        published = self._wc_published_tensors(sub.journal_root, timeout)
        own = dict(model.state_dict(keep_vars=True))
        self._wc_staged = {}
        direct, sliced = [], []
        for t in published:
            mine = own.get(t["name"])
            same_dtype = mine is not None and str(mine.dtype).replace("torch.", "") == t["dtype"]
            block = sub.slice_of(t["name"], t["shape"])
            block_shape = tuple(b.stop - b.start for b in block)
            if same_dtype and tuple(mine.shape) == tuple(t["shape"]):
                sub.register(t["name"], mine)
                direct.append(t["name"])
            elif same_dtype and block_shape != tuple(t["shape"]) and tuple(mine.shape) == block_shape:
                # A tensor-parallel engine rank's shard of it, as the rank's layout cuts it.
                sub.register_slice(t["name"], mine, t["shape"])
                sliced.append(t["name"])
            else:
                staging = self._wc_empty(t, model)
                sub.register(t["name"], staging)
                self._wc_staged[t["name"]] = staging
        if self._wc_staged and not hasattr(model, "load_weights"):
            sub.close()
            raise TypeError("the model has tensors under other names than the publisher's ("
                            + ", ".join(list(self._wc_staged)[:3]) + ") and no load_weights")
        self._wc_direct = direct
        self._wc_sliced = sliced
        self._wc_sub = sub
        self._wc_loaded = None
        sub.connect()
        return self.weightcast_status()

    def weightcast_update(self, version, timeout=None):
        """Lets versions up to ``version`` be applied, waits until it is held (``timeout`` s),
        then loads the staged tensors through the model's load_weights. Returns the status."""
        with self._wc_window:
            self._wc_open = True
            self._wc_window.notify_all()
        try:
            self._wc_sub.wait_for_version(version, timeout)
        finally:
            with self._wc_window:
                self._wc_open = False
                while self._wc_applying:  # a newer version already begun finishes first
                    self._wc_window.wait()
        held = self._wc_sub.current_version
        if self._wc_staged and held != self._wc_loaded:
            self.model_runner.model.load_weights(list(self._wc_staged.items()))
            self._wc_loaded = held
        return self.weightcast_status()

    def weightcast_status(self):
        """The held version, the subscriber's stats, which tensors are direct or staged."""
        sub = self._wc_sub if hasattr(self, "_wc_sub") else None
        if sub is None:
            return {"version": None}
        return {"version": sub.current_version, "stats": sub.stats(),
                "direct": list(self._wc_direct), "sliced": list(self._wc_sliced),
                "staged": list(self._wc_staged)}

    def weightcast_close(self):
        """Leaves the group (an apply waiting for a window is let through first)."""
        with self._wc_window:
            self._wc_closing = True
            self._wc_window.notify_all()
        self._wc_sub.close("worker extension closed")

    # The subscriber's worker thread.
    def _wc_before_apply(self, version):
        with self._wc_window:
            while not (self._wc_open or self._wc_closing):
                self._wc_window.wait()
            self._wc_applying = True

    def _wc_after_apply(self, held):
        with self._wc_window:
            self._wc_applying = False
            self._wc_window.notify_all()

    @staticmethod
    def _wc_published_tensors(root, timeout):
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while True:
            try:
                j = _journal.open(root)
                if j.head is not None:
                    return j.tensors()
            except Exception:  # noqa: BLE001: no journal yet; retried until the deadline
                pass
            if time.monotonic() >= deadline:
                raise DeadlineExceededError(f"journal '{root}' has no version after {timeout} s")
            time.sleep(0.05)

    @staticmethod
    def _wc_empty(t, model):
        import torch

        device = next(model.parameters()).device
        return torch.empty(t["shape"], dtype=getattr(torch, t["dtype"]), device=device)
