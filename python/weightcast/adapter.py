"""LoRA adapters published compactly and loaded back (include/weightcast/adapter.h).

    weightcast.adapter.publish(peft_state_dict, adapter_config, "/shared/adapters/step-40")
    state = weightcast.adapter.load("/shared/adapters/step-40", dtype=torch.bfloat16)

Exact duplicates (same dtype, shape and bytes) are stored once: the directory then holds
``adapter_model.bin`` (a torch.save zip that ``torch.load(weights_only=True)`` reads, aliases
sharing one storage), else ``adapter_model.safetensors``; plus ``adapter_config.json``.
Views of one storage that are not byte-identical (a transpose, a slice) are written as
copies: the C++ writer stores whole tensors only.
"""

import collections
import json
import os

from weightcast import _core
from weightcast._tensors import array_and_dtype


def _state_dict_from(source):
    if isinstance(source, (str, os.PathLike)):
        path = os.fspath(source)
        if path.endswith(".safetensors"):
            import safetensors.torch

            return safetensors.torch.load_file(path)
        import torch

        return torch.load(path, map_location="cpu", weights_only=True)
    return source


def _config_json(config):
    if config is None:
        return "{}"
    if isinstance(config, (str, os.PathLike)) and os.path.isfile(os.fspath(config)):
        with open(os.fspath(config)) as f:
            return f.read()
    if isinstance(config, str):
        json.loads(config)  # must be JSON: refused here rather than written
        return config
    if hasattr(config, "to_dict"):  # a peft.LoraConfig
        config = config.to_dict()
    return json.dumps(config, default=str)


def publish(state_dict_or_path, config, out_dir, *, threads=0):
    """Publishes an adapter (a state dict, or a .safetensors / torch.save file) with its config
    (a dict, JSON text, a path to adapter_config.json, or an object with ``to_dict``) into
    ``out_dir``. Returns the report: format, model_path, keys, logical/unique bytes, file_bytes."""
    state = _state_dict_from(state_dict_or_path)
    tensors = []
    for name, t in state.items():
        if hasattr(t, "is_contiguous"):
            t = t.detach().cpu()
            if not t.is_contiguous():
                t = t.contiguous()
        array, dtype = array_and_dtype(t)
        tensors.append((name, array, dtype))
    return _core.publish_adapter(os.fspath(out_dir), tensors, _config_json(config), threads)


def load(path, dtype=None):
    """The adapter in ``path`` (a directory or a model file) as a state dict of CPU torch
    tensors, each with its own storage. ``dtype=torch.bfloat16`` converts floating keys while
    loading (round to nearest even); another floating dtype converts them after."""
    import torch

    loaded = _core.load_adapter(os.fspath(path), dtype == torch.bfloat16)
    state = collections.OrderedDict()
    for name, dt, shape, data in loaded["tensors"]:
        tdtype = getattr(torch, dt)
        if len(data) == 0:
            t = torch.empty(shape, dtype=tdtype)
        else:
            t = torch.frombuffer(bytearray(data), dtype=torch.uint8).view(tdtype).reshape(shape)
        if dtype is not None and dtype != torch.bfloat16 and t.is_floating_point():
            t = t.to(dtype)
        state[name] = t
    return state


def config(path):
    """The adapter directory's adapter_config.json as a dict (empty when there is none)."""
    p = os.path.join(os.fspath(path), "adapter_config.json")
    if not os.path.isfile(p):
        return {}
    with open(p) as f:
        return json.load(f)
