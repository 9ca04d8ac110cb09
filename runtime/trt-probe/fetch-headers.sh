#!/usr/bin/env bash
# Fetch the official TensorRT C++ headers (Apache-2.0) that the ABI test
# (runtime/tests/trt_abi.rs) compiles the probe against. Nothing fetched here is
# committed: the cache lives in the ignored folder `.assets/trt-headers/`.
#
# Usage: runtime/trt-probe/fetch-headers.sh [DEST]
#   DEST defaults to <repo>/.assets/trt-headers. One folder per TensorRT
#   version is made: DEST/<MAJOR.MINOR.PATCH>/ with the headers, plus a
#   `SOURCE` file saying where they came from.
#
# Sources, in the order used:
#  1. crates.io (what CI reaches): the crate `trtx-sys` ships NVIDIA's
#     unmodified "TRT-Enterprise" header sets. Pinned versions:
#        TensorRT 10.16.0.72  <- trtx-sys 0.5.0         (TensorRT-Headers/TRT-Enterprise-10.16)
#        TensorRT 11.0.0.114  <- trtx-sys 0.7.1+rtx1.5  (TensorRT-Headers/TRT-Enterprise-11.0)
#        TensorRT 11.1.0.106  <- trtx-sys 0.8.1+rtx1.6  (TensorRT-Headers/TRT-Enterprise-11.1)
#        TensorRT 11.4.0.106  <- trtx-sys 0.9.1+rtx1.7  (TensorRT-Headers/TRT-Enterprise-11.4)
#     The crate is downloaded by cargo itself (`cargo fetch` in a throwaway
#     project under DEST/.cargo-fetch), so cargo checks its checksum against
#     the registry index; the headers are then unpacked from the cached
#     `.crate` archive with tar.
#  2. Optional, never needed by CI: a git clone of NVIDIA's public TensorRT
#     repository named by TETHER_TRT_GIT_DIR (a bare or normal git dir). The
#     tags listed in TETHER_TRT_GIT_TAGS (default "v10.1.0 v10.3.0 v10.10.0")
#     are exported with `git archive`. This is how the JetPack 6 (10.3) and
#     DRIVE OS 7 (10.10) header sets are checked on a developer machine.
#
# Exit status: 0 when every pinned crates.io version is in DEST, non-zero
# (with a message naming the version) otherwise.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dest="${1:-$repo/.assets/trt-headers}"
cargo_bin="${CARGO:-cargo}"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"

# "<trtx-sys version> <header folder in the crate> <TensorRT version>"
pins=(
  "0.5.0 TRT-Enterprise-10.16 10.16.0"
  "0.7.1+rtx1.5 TRT-Enterprise-11.0 11.0.0"
  "0.8.1+rtx1.6 TRT-Enterprise-11.1 11.1.0"
  "0.9.1+rtx1.7 TRT-Enterprise-11.4 11.4.0"
)

mkdir -p "$dest"

# Reads MAJOR.MINOR.PATCH from an NvInferVersion.h (10.x defines the numbers
# directly, 11.x through TRT_*_ENTERPRISE).
header_version() {
  local f="$1/NvInferVersion.h" maj min pat
  maj=$(awk '/#define (TRT_MAJOR_ENTERPRISE|NV_TENSORRT_MAJOR) [0-9]/{print $3; exit}' "$f")
  min=$(awk '/#define (TRT_MINOR_ENTERPRISE|NV_TENSORRT_MINOR) [0-9]/{print $3; exit}' "$f")
  pat=$(awk '/#define (TRT_PATCH_ENTERPRISE|NV_TENSORRT_PATCH) [0-9]/{print $3; exit}' "$f")
  echo "$maj.$min.$pat"
}

find_crate() {
  local ver="$1"
  [[ -d "$cargo_home/registry/cache" ]] || return 0
  find "$cargo_home/registry/cache" -maxdepth 2 -name "trtx-sys-$ver.crate" 2>/dev/null | head -n 1 || true
}

fetch_crate() {
  local ver="$1"
  local proj="$dest/.cargo-fetch/trtx-sys-$ver"
  mkdir -p "$proj/src"
  : >"$proj/src/lib.rs"
  cat >"$proj/Cargo.toml" <<EOF
[package]
name = "tether-trt-headers-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[workspace]

[dependencies]
trtx-sys = "=$ver"
EOF
  # Only the download matters; nothing is built.
  (cd "$proj" && CARGO_TARGET_DIR="$proj/target" "$cargo_bin" fetch --quiet >&2)
}

status=0
for pin in "${pins[@]}"; do
  read -r crate_ver folder trt_ver <<<"$pin"
  out="$dest/$trt_ver"
  if [[ -f "$out/NvInferImpl.h" && -f "$out/SOURCE" ]]; then
    continue
  fi
  crate="$(find_crate "$crate_ver")"
  if [[ -z "$crate" ]]; then
    if ! fetch_crate "$crate_ver"; then
      echo "fetch-headers: cargo could not download trtx-sys $crate_ver (TensorRT $trt_ver headers)" >&2
      status=1
      continue
    fi
    crate="$(find_crate "$crate_ver")"
  fi
  if [[ -z "$crate" ]]; then
    echo "fetch-headers: trtx-sys-$crate_ver.crate not found under $cargo_home/registry/cache after cargo fetch" >&2
    status=1
    continue
  fi
  tmp="$(mktemp -d "$dest/.unpack.XXXXXX")"
  tar -xzf "$crate" -C "$tmp" "trtx-sys-$crate_ver/TensorRT-Headers/$folder"
  got="$(header_version "$tmp/trtx-sys-$crate_ver/TensorRT-Headers/$folder")"
  if [[ "$got" != "$trt_ver" ]]; then
    echo "fetch-headers: trtx-sys $crate_ver $folder holds TensorRT $got, expected $trt_ver" >&2
    rm -rf "$tmp"
    status=1
    continue
  fi
  rm -rf "$out"
  mv "$tmp/trtx-sys-$crate_ver/TensorRT-Headers/$folder" "$out"
  rm -rf "$tmp"
  echo "crates.io trtx-sys $crate_ver TensorRT-Headers/$folder ($(basename "$crate"))" >"$out/SOURCE"
  echo "fetch-headers: TensorRT $trt_ver headers from trtx-sys $crate_ver" >&2
done

if [[ -n "${TETHER_TRT_GIT_DIR:-}" ]]; then
  for tag in ${TETHER_TRT_GIT_TAGS:-v10.1.0 v10.3.0 v10.10.0}; do
    tmp="$(mktemp -d "$dest/.unpack.XXXXXX")"
    if ! git --git-dir="$TETHER_TRT_GIT_DIR" archive "$tag" include | tar -x -C "$tmp"; then
      echo "fetch-headers: tag $tag not in $TETHER_TRT_GIT_DIR" >&2
      rm -rf "$tmp"
      status=1
      continue
    fi
    ver="$(header_version "$tmp/include")"
    out="$dest/$ver"
    if [[ ! -f "$out/SOURCE" ]]; then
      rm -rf "$out"
      mv "$tmp/include" "$out"
      echo "git NVIDIA/TensorRT tag $tag" >"$out/SOURCE"
      echo "fetch-headers: TensorRT $ver headers from git tag $tag" >&2
    fi
    rm -rf "$tmp"
  done
fi

exit "$status"
