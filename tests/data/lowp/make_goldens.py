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
  quant_x.npy        bfloat16[37, 96] ('<V2'): the quantization input (row 0 zeros,
                     row 1 with bf16's largest values, row 2 subnormal, others random)
  quant_tensor_{scale,q}.npy      per-tensor e4m3: float32[1] scale, uint8 codes
  quant_rows_F_{scale,q}.npy      per-row, F = e4m3fn or e5m2: float32[37, 1] scales, codes
  quant_mx32_{scale,q}.npy        MXFP8 (e4m3 values, e8m0 scales over 32): uint8 codes
  quant_b16e4m3_{scale,q}.npy     e4m3 values with e4m3 scales over 16: uint8 codes
  decode_e2m1fn.npy  float32[16]: fp4 code c decoded
  bf16_to_e2m1fn.npy uint8[65536]: the fp4 code of bf16 bit pattern b (NaN inputs: not compared)
  quant_nvfp4_{scale,q}.npy       fp4 values with e4m3 scales over 16; q packed [37, 48]
  quant_mxfp4_{scale,q}.npy       fp4 values with e8m0 scales over 32; q packed [37, 48]
  quant_int4_rows_{scale,q}.npy   int4 values with a float scale per row; q packed [37, 48]
  (packed: two 4-bit codes per byte, the even-indexed value in the low nibble)
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


def quant_input(rng):
    x = (rng.standard_normal((37, 96)) * np.exp(rng.uniform(-8, 8, (37, 1)))).astype(np.float32)
    x[0] = 0
    x[1, :5] = [3.3e38, -3.3e38, 1e38, 7, -1e-3]
    x[2] = rng.standard_normal(96) * 1e-39
    x[5, 7] = 1e5
    return x.astype(ml_dtypes.bfloat16)


def sat_cast(v, t):
    m = np.float32(float(ml_dtypes.finfo(t).max))
    return np.clip(v.astype(np.float32), -m, m).astype(t)


def amax_scale(a, t):
    a = a.astype(np.float32)
    return np.where(a == 0, np.float32(1), a / np.float32(float(ml_dtypes.finfo(t).max))).astype(np.float32)


def mx_scales(blocks, emax):
    """OCP MX 1.0 shared scales of the last axis: e8m0 codes and their values,
    2^(floor(log2 amax) - emax) clamped to e8m0's range; 1 for an amax of 0."""
    amax = np.max(np.abs(blocks), axis=-1, keepdims=True)
    _, e = np.frexp(amax)
    code = np.where(amax == 0, 127, np.clip(e - 1 - emax + 127, 0, 254)).astype(np.uint8)
    return code, np.ldexp(np.float32(1), code.astype(np.int32) - 127).astype(np.float32)


def write_quant(rng):
    xb = quant_input(rng)
    np.save("quant_x.npy", xb)
    x = xb.astype(np.float32)
    E4, E5 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2
    s = amax_scale(np.max(np.abs(x)).reshape(1), E4)
    np.save("quant_tensor_scale.npy", s)
    np.save("quant_tensor_q.npy", sat_cast(x / s[0], E4).view(np.uint8))
    for name, t in (("e4m3fn", E4), ("e5m2", E5)):
        s = amax_scale(np.max(np.abs(x), axis=1, keepdims=True), t)
        np.save(f"quant_rows_{name}_scale.npy", s)
        np.save(f"quant_rows_{name}_q.npy", sat_cast(x / s, t).view(np.uint8))
    # MX (OCP MX 1.0): scale 2^(floor(log2 amax) - 8), e8m0; 1 for amax 0
    xb32 = x.reshape(37, 3, 32)
    code, scale = mx_scales(xb32, 8)
    np.save("quant_mx32_scale.npy", code.reshape(37, 3))
    np.save("quant_mx32_q.npy", sat_cast(xb32 / scale, E4).view(np.uint8).reshape(37, 96))
    # e4m3 scales over 16: amax / 448 rounded to e4m3 with saturation, at least 2^-9; 1 for amax 0
    xb16 = x.reshape(37, 6, 16)
    amax = np.max(np.abs(xb16), axis=2, keepdims=True)
    s8 = sat_cast(amax / np.float32(448), E4).astype(np.float32)
    s8 = np.where(amax == 0, np.float32(1), np.maximum(s8, np.float32(2.0**-9))).astype(np.float32)
    np.save("quant_b16e4m3_scale.npy", s8.astype(E4).view(np.uint8).reshape(37, 6))
    np.save("quant_b16e4m3_q.npy", sat_cast(xb16 / s8, E4).view(np.uint8).reshape(37, 96))
    return xb


def pack(codes):
    c = codes.astype(np.uint8) & 0xF
    return (c[..., 0::2] | (c[..., 1::2] << 4)).astype(np.uint8)


def write_4bit(xb):
    F4, E4 = ml_dtypes.float4_e2m1fn, ml_dtypes.float8_e4m3fn
    np.save("decode_e2m1fn.npy", np.arange(16, dtype=np.uint8).view(F4).astype(np.float32))
    bf16 = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(ml_dtypes.bfloat16)
    np.save("bf16_to_e2m1fn.npy", codes(bf16, F4))
    x = xb.astype(np.float32)
    # NVFP4-style: e4m3 scale over 16 = amax / 6 rounded with saturation, at least 2^-9; 1 for amax 0
    xb = x.reshape(37, 6, 16)
    amax = np.max(np.abs(xb), axis=2, keepdims=True)
    s8 = sat_cast(amax / np.float32(6), E4).astype(np.float32)
    s8 = np.where(amax == 0, np.float32(1), np.maximum(s8, np.float32(2.0**-9))).astype(np.float32)
    np.save("quant_nvfp4_scale.npy", s8.astype(E4).view(np.uint8).reshape(37, 6))
    np.save("quant_nvfp4_q.npy", pack(sat_cast(xb / s8, F4).view(np.uint8).reshape(37, 96)))
    # MXFP4: e8m0 scale 2^(floor(log2 amax) - 2) over 32
    xb = x.reshape(37, 3, 32)
    code, scale = mx_scales(xb, 2)
    np.save("quant_mxfp4_scale.npy", code.reshape(37, 3))
    np.save("quant_mxfp4_q.npy", pack(sat_cast(xb / scale, F4).view(np.uint8).reshape(37, 96)))
    # int4, one float scale per row: amax / 7 (1 for amax 0), round half to even, clamp to [-8, 7]
    amax = np.max(np.abs(x), axis=1, keepdims=True)
    s = np.where(amax == 0, np.float32(1), amax / np.float32(7)).astype(np.float32)
    np.save("quant_int4_rows_scale.npy", s)
    np.save("quant_int4_rows_q.npy", pack(np.clip(np.rint(x / s), -8, 7).astype(np.int8)))


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
    write_4bit(write_quant(rng))


if __name__ == "__main__":
    main()
