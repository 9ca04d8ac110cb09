#!/usr/bin/env python3
"""Compile state.cu to PTX with NVRTC (libnvrtc.so.12 from a PyPI wheel; no GPU, no host
compiler): compute_75, so the driver JIT-compiles it for any newer GPU. NVRTC 12.0 writes PTX
ISA 8.0, which every CUDA 12 and 13 driver reads (a newer NVRTC's ISA would shut out older
drivers, such as JetPack 6's CUDA 12.2).

usage: state-ptx.py LIBNVRTC SRC OUT
"""
import ctypes, os, sys

lib_path, src_path, out_path = sys.argv[1:]
nvrtc = ctypes.CDLL(lib_path)
major, minor = ctypes.c_int(), ctypes.c_int()
nvrtc.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
print(f"== NVRTC {major.value}.{minor.value} ({lib_path})", file=sys.stderr)
src = open(src_path, "rb").read()
prog = ctypes.c_void_p()

def check(rc, what):
    if rc != 0:
        n = ctypes.c_size_t()
        nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value)
        nvrtc.nvrtcGetProgramLog(prog, buf)
        nvrtc.nvrtcGetErrorString.restype = ctypes.c_char_p
        sys.exit(f"{what} failed: {nvrtc.nvrtcGetErrorString(rc).decode()}\n{buf.value.decode(errors='replace')}")

check(nvrtc.nvrtcCreateProgram(ctypes.byref(prog), src, os.path.basename(src_path).encode(), 0, None, None), "nvrtcCreateProgram")
opts = [b"--gpu-architecture=compute_75", b"--std=c++17"]
check(nvrtc.nvrtcCompileProgram(prog, len(opts), (ctypes.c_char_p * len(opts))(*opts)), "compile")
n = ctypes.c_size_t()
check(nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(n)), "nvrtcGetPTXSize")
buf = ctypes.create_string_buffer(n.value)
check(nvrtc.nvrtcGetPTX(prog, buf), "nvrtcGetPTX")
open(out_path, "wb").write(buf.value)
print(f"   {len(buf.value)} bytes -> {out_path}", file=sys.stderr)
