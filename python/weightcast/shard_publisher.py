"""A trainer rank's endpoint when several ranks publish the model together, each its own shard:
``weightcast.ShardPublisher`` (include/weightcast/shard_publisher.h). No rank gathers the model.

    model = {name: (param.dtype, global_shape) for every tensor}      # the same on every rank
    mine = [(name, first_element, local_flat_tensor), ...]            # this rank's elements
    # or, for a tensor-parallel shard, the block's offsets in the global tensor:
    mine = [(name, (0, rank * cols_per_rank), local_shard), ...]
    pub = weightcast.ShardPublisher("group.yaml", rank, model, mine)
    for v in range(1, steps + 1):
        optimizer.step()
        pub.publish(v)          # every rank, the same versions; returns once this part is durable

The config's publisher ranks, in rank order, are the shards; the first is the lead, which commits
each version and offers it to the group. A range is ``first`` .. ``first + numel`` of the
tensor's row-major elements, held contiguous on the host (an FSDP flat-parameter shard; a
dim-0 shard of ``[rows, *rest]`` starting at row ``r`` starts at ``r * prod(rest)``). A block is
a contiguous tensor of the shard's shape placed at ``offsets`` (one per dimension) in the global
tensor: a tensor-parallel shard along any dimension, as torch holds it. A rank
that fails a version leaves it uncommitted everywhere; the lead's next version is an anchor.
"""

import os

from weightcast import _core, _lifetime
from weightcast._tensors import array_and_dtype


def _dtype_name(dtype):
    return dtype if isinstance(dtype, str) else str(dtype).replace("torch.", "")


class ShardPublisher(_lifetime.Closing):
    """Loads the group config, checks that ``rank`` is a publisher rank there and that every range
    lies inside its tensor (refused by name), and connects to the coordinator in the background.

    ``model``: ``{name: (dtype, shape)}`` of every tensor (dtype a torch dtype or weightcast's
    name, "bfloat16"), in the same order on every rank. ``ranges``: ``[(name, first, tensor)]``,
    this rank's elements, ``first`` an element index or a tuple of block offsets; the publisher keeps a reference to each tensor and reads it at every
    ``publish``. ``parts_wait``: seconds the lead waits for the other ranks' parts (and they for
    its plan); default the config's ack timeout."""

    def __init__(self, config, rank, model, ranges, *, threads=0, parts_wait=None,
                 credit_timeout=None, log=None):
        spec = [(name, _dtype_name(dtype), [int(d) for d in shape])
                for name, (dtype, shape) in model.items()]
        arrays = []
        self._tensors = []
        for name, first, tensor in ranges:
            array, _ = array_and_dtype(tensor)
            if isinstance(first, (tuple, list)):
                arrays.append((name, 0, [int(o) for o in first], array))
            else:
                arrays.append((name, int(first), [], array))
            self._tensors.append(tensor)
        self._core = _core.ShardPublisher(os.fspath(config), rank, spec, arrays, threads,
                                          parts_wait, credit_timeout, log)
        _lifetime.track(self)

    @property
    def shard(self):
        """This rank's place among the publisher ranks (0: the lead)."""
        return self._core.shard

    @property
    def shards(self):
        return self._core.shards

    @property
    def lead(self):
        return self._core.lead

    def publish(self, version, *, force_anchor=False):
        """Publishes ``version`` from the ranges' bytes now; returns a dict (version, anchor,
        stored_bytes of this part, committed_here on the lead). ``force_anchor`` counts on the
        lead; the others follow its plan."""
        return self._core.publish(version, force_anchor)

    @property
    def committed(self):
        """The last version the group committed (None before the first)."""
        return self._core.committed

    def wait_committed(self, version, timeout=None):
        self._core.wait_committed(version, timeout)

    def close(self, reason="publisher closed"):
        """Leaves the group. Idempotent."""
        self._core.close(reason)
