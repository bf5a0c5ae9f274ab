"""How Python arrays reach the C++ endpoints: by DLPack (or the buffer protocol), never copied.

torch tensors are detached first (DLPack refuses tensors that require grad; ``detach()``
shares the storage) and carry torch's dtype name; bool and float8 tensors, which not every
torch exports by DLPack, cross as uint8 views of the same bytes with their own dtype name.
NumPy arrays carry NumPy's dtype name.
"""

import bisect


def array_and_dtype(tensor):
    """(an object nanobind reads by DLPack or the buffer protocol, weightcast's dtype name)."""
    detach = getattr(tensor, "detach", None)
    if detach is not None and type(tensor).__module__.startswith("torch"):
        name = str(tensor.dtype).replace("torch.", "")
        t = detach()
        if name == "bool" or name.startswith("float8"):
            # Not exported by every torch's DLPack (1.13 refuses bool): the same bytes as uint8.
            t = t.view(__import__("torch").uint8)
        return t, name
    dtype = getattr(tensor, "dtype", None)
    name = getattr(dtype, "name", None)
    return tensor, name if isinstance(name, str) else None


def named_tensors(module, prefix=""):
    """A torch module's parameters and persistent buffers by state-dict name.

    Tied tensors (one tensor under several names, such as tied embeddings) appear once, under
    their first state-dict name: both endpoints of a group list the same names.
    """
    seen = set()
    out = []
    for name, t in module.state_dict(keep_vars=True).items():
        key = (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.dtype)
        if key in seen:
            continue
        seen.add(key)
        out.append((prefix + name, t))
    return out


class Registry:
    """The tensors registered with one endpoint, by name, kept alive while registered.

    ``owner_of(view)`` finds the registered tensor whose memory holds a view (for messages).
    """

    def __init__(self):
        self.tensors = {}
        self.names = []
        self._spans = None  # sorted (start address, end address, name), built on demand

    def add(self, name, tensor):
        self.tensors[name] = tensor
        self.names.append(name)
        self._spans = None

    def index(self, name):
        return self.names.index(name)

    def owner_of(self, view):
        ptr = _address(view)
        if ptr is None:
            return None
        if self._spans is None:
            spans = []
            for name, t in self.tensors.items():
                start = _address(t)
                if start is not None:
                    spans.append((start, start + _extent_bytes(t), name))
            spans.sort()
            self._spans = spans
        i = bisect.bisect_right(self._spans, (ptr, float("inf"), "")) - 1
        if i >= 0 and self._spans[i][0] <= ptr < self._spans[i][1]:
            return self._spans[i][2]
        return None


def _address(t):
    if hasattr(t, "data_ptr"):
        return t.data_ptr()
    iface = getattr(t, "__array_interface__", None)
    return iface["data"][0] if iface else None


def _extent_bytes(t):
    """Bytes from the first element to one past the last (strided views included)."""
    if hasattr(t, "stride") and callable(t.stride):
        if t.numel() == 0:
            return 0
        last = sum((s - 1) * st for s, st in zip(t.shape, t.stride()))
        return (last + 1) * t.element_size()
    return getattr(t, "nbytes", 0)
