"""How tensors cross into weightcast (DLPack, never copied) and the exception hierarchy; no
rank group needed."""

import numpy as np
import pytest
import torch

import weightcast
from weightcast import errors

TORCH_DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                torch.float16, torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
def test_torch_dtypes_keep_their_names_and_memory(dtype):
    t = torch.zeros(3, 5, dtype=dtype)
    d = weightcast.describe(t, "w")
    assert d["dtype"] == str(dtype).replace("torch.", "")
    assert d["shape"] == (3, 5)
    assert d["strides"] == (5, 1)
    assert d["data"] == t.data_ptr()
    assert d["memory"] == "host"


@pytest.mark.parametrize("dtype", ["bool", "uint8", "int16", "int64", "float16", "float32",
                                   "float64"])
def test_numpy_arrays(dtype):
    a = np.zeros((4, 6), dtype=dtype)
    d = weightcast.describe(a[:, 1:4])
    assert d["dtype"] == dtype
    assert d["shape"] == (4, 3)
    assert d["strides"] == (6, 1)
    assert d["data"] == a.ctypes.data + a.itemsize


def test_strided_views_and_parameters_are_not_copied():
    packed = torch.nn.Parameter(torch.randn(12, 8))  # requires grad: detached, same storage
    q = packed[4:8]
    k_t = packed.t()[2:5]
    assert weightcast.describe(packed)["data"] == packed.data_ptr()
    dq = weightcast.describe(q)
    assert dq["data"] == packed.data_ptr() + 4 * 8 * 4
    assert dq["strides"] == (8, 1)
    dk = weightcast.describe(k_t)
    assert dk["shape"] == (3, 12)
    assert dk["strides"] == (1, 8)
    assert dk["data"] == packed.data_ptr() + 2 * 4


def test_unsupported_dtypes_are_refused_naming_the_tensor():
    with pytest.raises(weightcast.InvalidArgumentError, match="tensor 'z'.*complex64"):
        weightcast.describe(torch.zeros(2, dtype=torch.complex64), "z")
    with pytest.raises(weightcast.InvalidArgumentError, match="'x'.*8-byte.*4"):
        weightcast._core.describe("x", torch.zeros(2, dtype=torch.int32), "float64")


def test_every_status_code_has_its_class():
    codes = ["INVALID_ARGUMENT", "DATA_LOSS", "FAILED_PRECONDITION", "CHECKSUM_MISMATCH",
             "OUT_OF_RANGE", "NOT_FOUND", "IO_ERROR", "DEADLINE_EXCEEDED", "UNIMPLEMENTED",
             "INTERNAL"]
    classes = {errors.class_for_code(c) for c in codes}
    assert len(classes) == len(codes)
    for c in codes:
        cls = errors.class_for_code(c)
        assert issubclass(cls, weightcast.Error) and cls.code == c
    assert errors.class_for_code("NO_SUCH_CODE") is weightcast.Error
    assert issubclass(weightcast.DeadlineExceededError, TimeoutError)
    assert issubclass(weightcast.InvalidArgumentError, ValueError)
    assert issubclass(weightcast.IoError, OSError)


def test_a_config_that_does_not_exist_names_the_file(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(weightcast.Error, match="nope.yaml"):
        weightcast.Publisher(missing, 1)
