"""A group's filesystem journal from Python, without joining the group
(include/weightcast/journal.h; the layout is docs/FORMATS.md).

    j = weightcast.journal.open("/shared/run7/journal")
    j.versions()                       # [1, 2, 3, ...] committed and on disk
    state = j.materialize(3)           # {name: torch.Tensor} of version 3, verified
    j.catch_up(model)                  # the module's own tensors brought to HEAD in place

Every read is verified as a subscriber's is (part XXH3s, record headers, each tensor's
checksum), falling back to an older anchor when a newer one is damaged.
"""

import collections
import os

from weightcast import _core
from weightcast._tensors import array_and_dtype, named_tensors
from weightcast.errors import InvalidArgumentError, NotFoundError


def open(root):  # noqa: A001: the module's entry point reads as weightcast.journal.open
    """The journal under ``root`` (NotFoundError when there is none)."""
    return Journal(root)


class Journal:
    def __init__(self, root):
        self._core = _core.Journal(os.fspath(root))

    @property
    def root(self):
        return self._core.root

    @property
    def head(self):
        """HEAD's version, re-read each time (None while nothing is committed)."""
        return self._core.head

    def versions(self):
        """The committed versions whose step is still on disk, ascending."""
        return [s["version"] for s in self._core.versions()]

    def steps(self):
        """Per version on disk: anchor or delta, its anchor, stored bytes, changed tensors."""
        return self._core.versions()

    def tensors(self, version=None):
        """Names, dtypes, shapes and checksums of ``version``'s tensors (default HEAD)."""
        return self._core.tensors(version)

    def materialize(self, version=None, *, threads=0):
        """``version`` (default HEAD) as a new state dict of CPU torch tensors, verified."""
        import torch

        state = collections.OrderedDict()
        for t in self._core.tensors(version):
            state[t["name"]] = torch.empty(t["shape"], dtype=getattr(torch, t["dtype"]))
        self._catch_up_named(list(state.items()), version, None, threads)
        return state

    def catch_up(self, module, version=None, *, held=None, threads=0):
        """Writes ``version`` (default HEAD) into a torch module's tensors (or a state dict's) in
        place, by state-dict name. ``held``: the version they hold already, trusted only if
        every checksum matches (then only the deltas since are applied). Returns a report."""
        if isinstance(module, dict):
            named = list(module.items())
        else:
            named = named_tensors(module)
        return self._catch_up_named(named, version, held, threads)

    def _catch_up_named(self, named, version, held, threads):
        by_name = dict(named)
        order = [t["name"] for t in self._core.tensors(version)]
        missing = [n for n in order if n not in by_name]
        if missing:
            raise NotFoundError(f"journal '{self.root}' has tensors the destination lacks: "
                                f"{', '.join(missing[:5])}")
        extra = [n for n in by_name if n not in set(order)]
        if extra:
            raise InvalidArgumentError(f"tensors not in journal '{self.root}': "
                                       f"{', '.join(extra[:5])}")
        dest = []
        for name in order:
            array, dtype = array_and_dtype(by_name[name])
            dest.append((name, array, dtype))
        return self._core.catch_up(dest, version, held, threads)
