# SPDX-License-Identifier: Apache-2.0
"""Writes the low-precision goldens of tests/lowp: what ml_dtypes (the
reference, independent of loom) gives for each conversion.

Run in this folder: `pip install numpy ml_dtypes && python3 make_goldens.py`.
CI reads the committed .npy files and never needs ml_dtypes.

Files (F is e4m3fn, e5m2 or e8m0fnu):
  decode_F.npy       float32[256]: code c (0..255) decoded
  bf16_to_F.npy      uint8[65536]: the code of bf16 bit pattern b (0..65535) cast to F
  f32_inputs.npy     float32[n]: boundaries, subnormals, infinities, NaNs, random bits
  f32_to_F.npy       uint8[n]: the codes of f32_inputs cast to F
  f64_inputs.npy     float64[m]: values a hair off the rounding midpoints
  f64_to_F.npy       uint8[m]: the codes of f64_inputs cast to F (rounded once)
  codes_e4m3fn.npy   float8_e4m3fn[256] as ml_dtypes saves it ('<V1'): codes 0..255
"""
import ml_dtypes
import numpy as np

FORMATS = {"e4m3fn": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e8m0fnu": ml_dtypes.float8_e8m0fnu}


def codes(x, t):
    with np.errstate(invalid="ignore", over="ignore"):
        return x.astype(t).view(np.uint8)


def f32_inputs(rng):
    vals = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1.0, -1.0]
    nan_payloads = np.array([0x7F800001, 0xFFC00000, 0x7FFFFFFF, 0x7FA00000], np.uint32).view(np.float32)
    for t in FORMATS.values():
        fin = ml_dtypes.finfo(t)
        for v in (float(fin.max), float(fin.smallest_normal), float(fin.smallest_subnormal)):
            # the value, its float neighbours, the midpoints to the next code
            f = np.float32(v)
            vals += [f, np.nextafter(f, np.float32(np.inf)), np.nextafter(f, np.float32(0))]
            vals += [f * 1.5, f * 0.5, f * 0.75, f * 1.25, f * 1.0625, f * 1.125]
    # every midpoint between consecutive codes of each format, and a float ulp either side
    for t in FORMATS.values():
        dec = np.arange(256, dtype=np.uint8).view(t).astype(np.float64)
        dec = np.unique(dec[np.isfinite(dec)])
        mids = ((dec[:-1] + dec[1:]) / 2).astype(np.float32)
        vals += list(mids) + list(np.nextafter(mids, np.float32(np.inf))) + list(np.nextafter(mids, np.float32(-np.inf)))
    vals += list(np.array([1e-45, 1e-40, 2.0**-126, 2.0**-127, 1.5 * 2.0**-127, 3.4e38, -3.4e38], np.float32))
    rand = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32).view(np.float32)
    x = np.concatenate([np.array(vals, np.float32), nan_payloads, rand])
    return np.concatenate([x, -x])


def f64_inputs():
    vals = []
    for t in FORMATS.values():
        dec = np.arange(256, dtype=np.uint8).view(t).astype(np.float64)
        dec = np.unique(dec[np.isfinite(dec) & (dec > 0)])
        mids = (dec[:-1] + dec[1:]) / 2
        # a hair above and below each midpoint: rounding through float first would land on it
        vals += list(mids * (1 + 2.0**-40)) + list(mids * (1 - 2.0**-40)) + list(mids)
    x = np.array(vals, np.float64)
    return np.concatenate([x, -x])


def main():
    rng = np.random.default_rng(34)
    bf16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    f32 = f32_inputs(rng)
    f64 = f64_inputs()
    np.save("f32_inputs.npy", f32)
    np.save("f64_inputs.npy", f64)
    np.save("codes_e4m3fn.npy", np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn))
    for name, t in FORMATS.items():
        np.save(f"decode_{name}.npy", np.arange(256, dtype=np.uint8).view(t).astype(np.float32))
        np.save(f"bf16_to_{name}.npy", codes(bf16, t))
        np.save(f"f32_to_{name}.npy", codes(f32, t))
        np.save(f"f64_to_{name}.npy", codes(f64, t))


if __name__ == "__main__":
    main()
