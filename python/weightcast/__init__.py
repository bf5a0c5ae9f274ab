"""weightcast: an RL trainer's new weights to every inference engine after each optimizer step.

``Publisher`` (the trainer), ``ShardPublisher`` (one rank of a sharded trainer) and
``Subscriber`` (an engine) over the C++ endpoints
(include/weightcast/); torch tensors and NumPy arrays cross by DLPack, never copied.
Submodules: ``weightcast.group`` (a rank group on this machine), ``weightcast.torch``
(``hook_optimizer``), ``weightcast.vllm`` (a worker extension in vLLM's shape),
``weightcast.journal`` and ``weightcast.adapter``.
"""

from weightcast import _core
from weightcast.errors import *  # noqa: F401,F403: the exception hierarchy is the API
from weightcast.errors import __all__ as _errors
from weightcast.publisher import PublishHandle, Publisher, Step
from weightcast.shard_publisher import ShardPublisher
from weightcast.subscriber import Subscriber

__version__ = _core.version().split(" ")[0]


def describe(tensor, name="tensor"):
    """How weightcast sees ``tensor``: dtype, shape, strides (elements), address, memory."""
    from weightcast._tensors import array_and_dtype

    array, dtype = array_and_dtype(tensor)
    return _core.describe(name, array, dtype)


def ucx_built():
    """Whether this build can carry versions over UCX (a group's ``ucx`` transport)."""
    return _core.ucx_built()


__all__ = ["Publisher", "PublishHandle", "ShardPublisher", "Step", "Subscriber", "describe",
           "ucx_built", *_errors]
