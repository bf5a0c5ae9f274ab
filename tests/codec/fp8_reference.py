"""The FP8 block quantiser's reference, in NumPy and ml_dtypes (codec/fp8_quantize.h):

  fp8_reference.py CASES_JSON

CASES_JSON lists cases {"name", "dtype" ("F32" or "BF16"), "rows", "cols", "input", "q",
"scale_inv"}: raw files of the input matrix (row-major), and of what weightcast made of it.
Each is recomputed here, per 128 x 128 block: s = max(amax of the finite |x|, 1e-4) / 448 in
float32, q = float8_e4m3fn(clip(x / s, -448, 448)) with the division in float32, and compared
byte for byte. Exits 1 naming the first case, block and element that differ."""

import json
import sys

import ml_dtypes
import numpy as np

BLOCK = 128
F32 = np.float32


def reference(x):
    rows, cols = x.shape
    grid = ((rows + BLOCK - 1) // BLOCK, (cols + BLOCK - 1) // BLOCK)
    q = np.zeros(x.shape, dtype=np.uint8)
    scale = np.zeros(grid, dtype=F32)
    for br in range(grid[0]):
        for bc in range(grid[1]):
            b = x[br * BLOCK:(br + 1) * BLOCK, bc * BLOCK:(bc + 1) * BLOCK]
            finite = np.abs(b[np.isfinite(b)])
            amax = finite.max() if finite.size else F32(0)
            s = F32(np.maximum(amax, F32(1e-4))) / F32(448)
            with np.errstate(invalid="ignore", over="ignore"):
                v = np.clip(np.divide(b, s, dtype=F32), F32(-448), F32(448))
            qb = v.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
            q[br * BLOCK:(br + 1) * BLOCK, bc * BLOCK:(bc + 1) * BLOCK] = qb
            scale[br, bc] = s
    return q, scale


def load_input(case):
    raw = np.fromfile(case["input"], dtype=np.uint8)
    if case["dtype"] == "BF16":
        x = raw.view(ml_dtypes.bfloat16).astype(F32)
    else:
        x = raw.view(F32)
    return x.reshape(case["rows"], case["cols"])


def main():
    with open(sys.argv[1]) as f:
        cases = json.load(f)
    values = scales = 0
    for case in cases:
        x = load_input(case)
        q_ref, s_ref = reference(x)
        q = np.fromfile(case["q"], dtype=np.uint8).reshape(x.shape)
        s = np.fromfile(case["scale_inv"], dtype=F32).reshape(s_ref.shape)
        if not np.array_equal(s.view(np.uint32), s_ref.view(np.uint32)):
            at = tuple(int(i) for i in np.argwhere(s.view(np.uint32) != s_ref.view(np.uint32))[0])
            print(f"{case['name']}: scale of block {at} is {s[at]!r}, the reference {s_ref[at]!r}")
            return 1
        if not np.array_equal(q, q_ref):
            at = tuple(int(i) for i in np.argwhere(q != q_ref)[0])
            print(f"{case['name']}: element {at} (x = {x[at]!r}) is 0x{q[at]:02x}, "
                  f"the reference 0x{q_ref[at]:02x}")
            return 1
        values += q.size
        scales += s.size
    print(f"{len(cases)} cases: {values} values and {scales} scales equal the reference")
    return 0


if __name__ == "__main__":
    sys.exit(main())
