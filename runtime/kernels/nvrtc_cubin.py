#!/usr/bin/env python3
"""Compile a kernel source to one cubin per SM with NVRTC (libnvrtc.so.N from a PyPI wheel).

The program is named after the source file (`native.cu`, `detect.cu`): NVRTC records the
name with the line info, so the name is part of the image.

Used by build-kernels.sh for the CUDA 12 images: PyPI's `nvidia-cuda-nvcc-cu12` 12.9 wheel
ships ptxas and libnvvm but no `nvcc` driver, while `nvidia-cuda-nvrtc-cu12` 12.9 compiles
straight to SASS (nvrtcGetCUBIN) with no GPU and no host compiler. The options mirror the
nvcc build (-fmad=false, -O3 is NVRTC's default, -lineinfo).

usage: nvrtc_cubin.py LIBNVRTC SRC OUT_PREFIX SM...   -> OUT_PREFIX.sm_XX.cubin
"""
import ctypes, os, sys

lib_path, src_path, prefix, *sms = sys.argv[1:]
nvrtc = ctypes.CDLL(lib_path)
major, minor = ctypes.c_int(), ctypes.c_int()
nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
print(f"== NVRTC {major.value}.{minor.value} ({lib_path})", file=sys.stderr)
src = open(src_path, "rb").read()
name = os.path.basename(src_path).encode()

def check(rc, what, prog=None):
    if rc != 0:
        log = ""
        if prog is not None:
            n = ctypes.c_size_t()
            nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
            buf = ctypes.create_string_buffer(n.value)
            nvrtc.nvrtcGetProgramLog(prog, buf)
            log = buf.value.decode(errors="replace")
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what} failed: {nvrtc.nvrtcGetErrorString(rc).decode()}\n{log}")

for sm in sms:
    prog = ctypes.c_void_p()
    check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, name, 0, None, None), "nvrtcCreateProgram")
    opts = [f"--gpu-architecture=sm_{sm}".encode(), b"--fmad=false", b"--std=c++17", b"--generate-line-info"]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    check(nvrtc.nvrtcCompileProgram(prog, len(opts), arr), f"compile sm_{sm}", prog)
    n = ctypes.c_size_t()
    check(nvrtc.nvrtcGetCUBINSize(prog, ctypes.byref(n)), "nvrtcGetCUBINSize")
    buf = ctypes.create_string_buffer(n.value)
    check(nvrtc.nvrtcGetCUBIN(prog, buf), "nvrtcGetCUBIN")
    out = f"{prefix}.sm_{sm}.cubin"
    open(out, "wb").write(buf.raw)
    print(f"   sm_{sm}: {n.value} bytes -> {out}", file=sys.stderr)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
