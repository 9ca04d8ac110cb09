#!/usr/bin/env bash
# Build libtether (the C API, crate tether-capi) and install it for C and C++ consumers:
#
#   PREFIX/include/tether/tether.h, tether.hpp
#   PREFIX/lib/libtether.so            (SONAME libtether.so)
#   PREFIX/lib/libtether.a
#   PREFIX/lib/cmake/tether/tetherConfig.cmake, tetherConfigVersion.cmake
#                                       (find_package(tether): tether::tether, tether::tether_static)
#   PREFIX/lib/pkgconfig/tether.pc      (pkg-config tether; --static adds the system libraries
#                                       libtether.a needs, but -ltether still picks the .so: see
#                                       docs/cpp.md)
#
# Usage: capi/install.sh PREFIX [--target aarch64-unknown-linux-gnu] [--from DIR]
#   --target T   cross-build for T (Jetson / DRIVE: aarch64-unknown-linux-gnu; the cross
#                toolchain of cross/README.md); the layout is the same.
#   --from DIR   do not build: install DIR/libtether_capi.{so,a} (what cargo built, e.g.
#                target/release, or target/release/deps for `cargo test`'s build).
# Environment: CARGO (default cargo), CARGO_TARGET_DIR (default <repo>/target), CARGO_FLAGS
# (extra flags for cargo build, e.g. "--locked --no-default-features --features tract-cpu").
set -euo pipefail

usage() { echo "usage: capi/install.sh PREFIX [--target TRIPLE] [--from DIR]" >&2; exit 2; }

[ $# -ge 1 ] || usage
PREFIX=""
TARGET=""
FROM=""
while [ $# -gt 0 ]; do
  case "$1" in
    --target) [ $# -ge 2 ] || usage; TARGET="$2"; shift 2 ;;
    --from) [ $# -ge 2 ] || usage; FROM="$2"; shift 2 ;;
    -*) usage ;;
    *) [ -z "$PREFIX" ] || usage; PREFIX="$1"; shift ;;
  esac
done
[ -n "$PREFIX" ] || usage

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
CARGO="${CARGO:-cargo}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}"
case "$TARGET_DIR" in /*) ;; *) TARGET_DIR="$REPO/$TARGET_DIR" ;; esac
read -r -a FLAGS <<< "${CARGO_FLAGS:-}"

if [ -n "$TARGET" ]; then
  OUT="$TARGET_DIR/$TARGET/release"
  TARGET_ARGS=(--target "$TARGET")
else
  OUT="$TARGET_DIR/release"
  TARGET_ARGS=()
fi

if [ -n "$FROM" ]; then
  OUT="$FROM"
else
  (cd "$REPO" && "$CARGO" build "${FLAGS[@]}" --release -p tether-capi --lib "${TARGET_ARGS[@]}")
fi
for f in libtether_capi.so libtether_capi.a; do
  [ -f "$OUT/$f" ] || { echo "install.sh: $OUT/$f is missing (build it, or drop --from)" >&2; exit 1; }
done

VERSION="$(sed -n 's/^version = "\(.*\)"/\1/p' "$REPO/Cargo.toml" | head -n1)"
# What libtether.a needs from the system when linked statically (rustc's
# `--print native-static-libs` for the *-linux-gnu targets; libdl for the GPU libraries
# loaded at run time).
STATIC_LIBS="-lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"

mkdir -p "$PREFIX"
PREFIX="$(cd "$PREFIX" && pwd)"
install -d "$PREFIX/include/tether" "$PREFIX/lib/cmake/tether" "$PREFIX/lib/pkgconfig"
install -m 0644 "$HERE/include/tether/tether.h" "$HERE/include/tether/tether.hpp" "$PREFIX/include/tether/"
install -m 0755 "$OUT/libtether_capi.so" "$PREFIX/lib/libtether.so"
install -m 0644 "$OUT/libtether_capi.a" "$PREFIX/lib/libtether.a"

cat > "$PREFIX/lib/pkgconfig/tether.pc" <<EOF
prefix=$PREFIX
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: tether
Description: tether C API: bundles run allocation-free on Jetson, DRIVE and data-center GPUs (detect, vad, embed)
Version: $VERSION
Libs: -L\${libdir} -ltether
Libs.private: $STATIC_LIBS
Cflags: -I\${includedir}
EOF

cat > "$PREFIX/lib/cmake/tether/tetherConfig.cmake" <<'EOF'
# find_package(tether) for libtether (installed by tether's capi/install.sh).
#   tether::tether         the shared library (libtether.so) with its include directory
#   tether::tether_static  the static library (libtether.a) and the system libraries it needs
# C++ users include <tether/tether.hpp> (C++17); C users <tether/tether.h>.
get_filename_component(_tether_prefix "${CMAKE_CURRENT_LIST_DIR}/../../.." ABSOLUTE)
if(NOT TARGET tether::tether)
  add_library(tether::tether SHARED IMPORTED)
  set_target_properties(tether::tether PROPERTIES
    IMPORTED_LOCATION "${_tether_prefix}/lib/libtether.so"
    IMPORTED_SONAME "libtether.so"
    INTERFACE_INCLUDE_DIRECTORIES "${_tether_prefix}/include")
endif()
if(NOT TARGET tether::tether_static)
  add_library(tether::tether_static STATIC IMPORTED)
  set_target_properties(tether::tether_static PROPERTIES
    IMPORTED_LOCATION "${_tether_prefix}/lib/libtether.a"
    INTERFACE_INCLUDE_DIRECTORIES "${_tether_prefix}/include"
    INTERFACE_LINK_LIBRARIES "gcc_s;util;rt;pthread;m;dl")
endif()
set(tether_INCLUDE_DIRS "${_tether_prefix}/include")
set(tether_LIBRARIES tether::tether)
unset(_tether_prefix)
EOF

cat > "$PREFIX/lib/cmake/tether/tetherConfigVersion.cmake" <<EOF
# The installed version is $VERSION; compatible with requests of the same major version
# (0.x: the same minor version, as Cargo's rule for 0.x).
set(PACKAGE_VERSION "$VERSION")
set(PACKAGE_VERSION_COMPATIBLE FALSE)
if(NOT PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  if("$VERSION" MATCHES "^0\\\\.")
    if(PACKAGE_FIND_VERSION_MAJOR EQUAL 0 AND PACKAGE_FIND_VERSION_MINOR EQUAL "$(echo "$VERSION" | cut -d. -f2)")
      set(PACKAGE_VERSION_COMPATIBLE TRUE)
    endif()
  elseif(PACKAGE_FIND_VERSION_MAJOR EQUAL "$(echo "$VERSION" | cut -d. -f1)")
    set(PACKAGE_VERSION_COMPATIBLE TRUE)
  endif()
endif()
if(PACKAGE_FIND_VERSION STREQUAL PACKAGE_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
EOF

echo "installed libtether $VERSION${TARGET:+ ($TARGET)} into $PREFIX"
