#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""DLPack round trips between loom and NumPy, without copies and without torch.

Usage: test_numpy_dlpack.py LIBRARY, where LIBRARY is the shared library built
from numpy_shim.cpp (C functions around loom::to_dlpack and loom::from_dlpack).
An object with __dlpack__ / __dlpack_device__ hands loom's exports to
numpy.from_dlpack in PyCapsules made with ctypes; NumPy's own __dlpack__
capsules go to loom, consumed as the DLPack Python specification says (the
capsule is renamed "used_..." before loom takes the tensor). Exits 77 (ctest:
Skipped) when NumPy is not installed.
"""
import ctypes
import gc
import sys

try:
    import numpy as np
except ImportError:
    print("numpy is not installed: the NumPy DLPack round trips are skipped")
    sys.exit(77)

lib = ctypes.CDLL(sys.argv[1])
lib.shim_export.restype = ctypes.c_void_p
lib.shim_export.argtypes = [ctypes.c_int64, ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int]
lib.shim_import.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]
lib.shim_import_float32.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t]
lib.shim_held_data.restype = ctypes.c_void_p
lib.shim_held_extent.restype = ctypes.c_int64
lib.shim_held_copy.argtypes = [ctypes.c_void_p]


# The DLPack ABI as the specification lays it out (an independent check of loom's structs).
class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


DELETER = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
VERSIONED, USED_VERSIONED = b"dltensor_versioned", b"used_dltensor_versioned"
LEGACY, USED_LEGACY = b"dltensor", b"used_dltensor"

api = ctypes.pythonapi
api.PyCapsule_New.restype = ctypes.py_object
api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
api.PyCapsule_IsValid.restype = ctypes.c_int
api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
api.PyCapsule_GetPointer.restype = ctypes.c_void_p
api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
api.PyCapsule_GetName.restype = ctypes.c_char_p
api.PyCapsule_GetName.argtypes = [ctypes.py_object]
api.PyCapsule_SetName.restype = ctypes.c_int
api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
# The same function, for a capsule given as a raw pointer (in its destructor).
raw_capsule_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_GetPointer", api))


@ctypes.CFUNCTYPE(None, ctypes.c_void_p)
def capsule_destructor(capsule):
    """A capsule nobody consumed still owns its tensor: call the deleter (the capsule arrives as a raw pointer)."""
    for name, struct in ((VERSIONED, DLManagedTensorVersioned), (LEGACY, DLManagedTensor)):
        if api.PyCapsule_IsValid(capsule, name):
            managed = raw_capsule_pointer(capsule, name)
            DELETER(struct.from_address(managed).deleter)(managed)


failures = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)


class LoomArray:
    """A loom float32 tensor behind the Python DLPack protocol (a CPU array: stream must be None)."""

    def __init__(self, rows, cols, transposed=False, read_only=False, legacy_only=False):
        self.args = (rows, cols, transposed, read_only)
        self.legacy_only = legacy_only
        self.data_pointers = []

    def __dlpack_device__(self):
        return (1, 0)  # kDLCPU, device 0

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        if stream is not None:
            raise BufferError("a CPU array takes no stream")
        legacy = self.legacy_only or max_version is None or max_version[0] < 1
        managed = lib.shim_export(*self.args, int(legacy))
        struct = DLManagedTensor if legacy else DLManagedTensorVersioned
        self.data_pointers.append(struct.from_address(managed).dl_tensor.data)
        return api.PyCapsule_New(managed, LEGACY if legacy else VERSIONED, ctypes.cast(capsule_destructor, ctypes.c_void_p))


def expected_values(rows, cols):
    i, j = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return (1000 * i + j).astype(np.float32)


def loom_to_numpy():
    for legacy_only in (False, True):
        kind = "legacy" if legacy_only else "versioned"
        src = LoomArray(7, 33, legacy_only=legacy_only)
        arr = np.from_dlpack(src)
        check(lib.shim_live_exports() == 1, f"{kind}: numpy holds loom's export")
        check(arr.__array_interface__["data"][0] == src.data_pointers[-1], f"{kind}: numpy reads loom's memory (same pointer)")
        check(arr.dtype == np.float32 and arr.shape == (7, 33) and arr.strides == (33 * 4, 4), f"{kind}: dtype, shape, strides")
        check(np.array_equal(arr, expected_values(7, 33)), f"{kind}: values")
        del arr
        gc.collect()
        check(lib.shim_live_exports() == 0, f"{kind}: numpy called loom's deleter when the array went")

    src = LoomArray(5, 3, transposed=True)
    arr = np.from_dlpack(src)
    check(arr.shape == (3, 5) and arr.strides == (4, 3 * 4), "a transposed view exports its strides")
    check(np.array_equal(arr, expected_values(5, 3).T), "a transposed view's values")
    del arr

    arr = np.from_dlpack(LoomArray(2, 4, read_only=True))
    check(not arr.flags.writeable, "a view of const elements reaches numpy read-only")
    del arr

    capsule = LoomArray(3, 3).__dlpack__(max_version=(1, 0))
    check(lib.shim_live_exports() == 1, "an unconsumed capsule holds the export")
    del capsule
    gc.collect()
    check(lib.shim_live_exports() == 0, "an unconsumed capsule calls loom's deleter when it goes")


def consume(capsule, name, used):
    """Takes the managed tensor out of a capsule as the specification says: rename it first, so it is not deleted twice."""
    managed = api.PyCapsule_GetPointer(capsule, name)
    check(api.PyCapsule_SetName(capsule, used) == 0, "capsule renamed " + used.decode())
    return managed


def numpy_to_loom():
    rng = np.random.default_rng(20261204)
    base = rng.standard_normal((9, 31))
    for versioned in (True, False):
        kind = "versioned" if versioned else "legacy"
        arr = base[1::2, ::-3]  # strided, reversed columns: 4 x 11
        refs = sys.getrefcount(arr)
        capsule = arr.__dlpack__(max_version=(1, 0)) if versioned else arr.__dlpack__()
        check(api.PyCapsule_GetName(capsule) == (VERSIONED if versioned else LEGACY), f"{kind}: numpy's capsule name")
        managed = consume(capsule, VERSIONED if versioned else LEGACY, USED_VERSIONED if versioned else USED_LEGACY)
        error = ctypes.create_string_buffer(512)
        check(lib.shim_import(managed, int(not versioned), 1, error, len(error)) == 0, f"{kind}: loom imports numpy's array: {error.value.decode()}")
        del capsule
        check(sys.getrefcount(arr) == refs + 1, f"{kind}: loom holds numpy's array")
        check(lib.shim_held_data() == arr.__array_interface__["data"][0], f"{kind}: loom reads numpy's memory (same pointer)")
        check((lib.shim_held_extent(0), lib.shim_held_extent(1)) == arr.shape, f"{kind}: extents")
        out = np.empty(arr.shape)
        lib.shim_held_copy(out.ctypes.data)
        check(np.array_equal(out, arr), f"{kind}: values read through numpy's strides")
        before = arr.copy()
        lib.shim_held_double()
        check(np.array_equal(arr, before * 2), f"{kind}: loom's assignment wrote numpy's memory")
        lib.shim_release()
        check(sys.getrefcount(arr) == refs, f"{kind}: loom called numpy's deleter once")

    ro = base.copy()
    ro.flags.writeable = False
    refs = sys.getrefcount(ro)
    managed = consume(ro.__dlpack__(max_version=(1, 0)), VERSIONED, USED_VERSIONED)
    flags = DLManagedTensorVersioned.from_address(managed).flags
    check(flags & 1 == 1, "numpy flags a read-only array READ_ONLY")
    error = ctypes.create_string_buffer(512)
    check(lib.shim_import(managed, 0, 1, error, len(error)) == 1, "loom refuses a read-only array as writable")
    check(b"is read-only (flag READ_ONLY)" in error.value, "with loom's message: " + error.value.decode())
    check(sys.getrefcount(ro) == refs, "the refused tensor was deleted once")
    managed = consume(ro.__dlpack__(max_version=(1, 0)), VERSIONED, USED_VERSIONED)
    check(lib.shim_import(managed, 0, 0, error, len(error)) == 0, "loom imports a read-only array as const")
    lib.shim_release()
    check(sys.getrefcount(ro) == refs, "and deletes it once")

    refs = sys.getrefcount(base)
    managed = consume(base.__dlpack__(max_version=(1, 0)), VERSIONED, USED_VERSIONED)
    check(lib.shim_import_float32(managed, error, len(error)) == 1, "a float64 array is no float32 tensor")
    check(error.value.decode() == "loom: from_dlpack<float32, 2, host>: the DLPack tensor holds float64 "
          "(code 2 = kDLFloat, 64 bits, 1 lane); expected float32 (code 2 = kDLFloat, 32 bits, 1 lane)",
          "with loom's message: " + error.value.decode())
    check(sys.getrefcount(base) == refs, "the refused tensor was deleted once")


print(f"numpy {np.__version__}")
loom_to_numpy()
numpy_to_loom()
gc.collect()
check(lib.shim_live_exports() == 0, "no export left")
if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("all NumPy DLPack checks passed")
