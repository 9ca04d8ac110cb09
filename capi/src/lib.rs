//! tether's C ABI: `libtether.so` / `libtether.a` and the header `include/tether/tether.h`
//! (generated from this source by cbindgen; `tests/header.rs` checks it is current).
//!
//! One opaque handle, [`tether_model`], holds a family pipeline opened from a bundle (a path
//! or bytes in memory): detection ([`tether_detect()`], the staging buffer for frames written
//! in place), text recognition ([`tether_ocr()`]), voice activity ([`tether_vad_push`]) and
//! text embeddings ([`tether_embed()`]).
//! A second handle, [`tether_generator`], generates text from an `llm` bundle with pieces
//! streamed to a callback ([`tether_generate`]) and cancel from any thread. A third,
//! [`tether_network`], runs one network of a bundle on the caller's named tensors (the
//! runtime's `NetworkSession`).
//! Every function returns a [`tether_status`]; on failure the calling thread's last-error
//! message ([`tether_last_error`]) holds the Rust error's text. No Rust panic crosses the
//! boundary: each entry point catches it and returns [`tether_status::TETHER_ERR_PANIC`].
//! Results go into caller-provided storage; a detection or a VAD chunk on the prepared path
//! allocates nothing in this layer (what the engine allocates is the engine's: nothing on a
//! GPU, tract's intermediates on the CPU).
//!
//! Ownership and lifetime of every pointer are documented on each function (and so in the
//! header's comments). `docs/cpp.md` is the guide.

// The C names (`tether_model`, `TETHER_OK`) are the ABI; cbindgen writes them as spelled.
#![allow(non_camel_case_types)]
#![warn(missing_docs)]

mod detect;
mod embed;
mod error;
mod generate;
mod model;
mod network;
mod ocr;
mod options;
mod vad;

pub use detect::*;
pub use embed::*;
pub use error::*;
pub use generate::*;
pub use model::*;
pub use network::*;
pub use ocr::*;
pub use options::*;
pub use vad::*;

/// The version of this C ABI: incremented when a function's signature or a struct's
/// layout changes incompatibly (structs with a `struct_size` field may grow without it).
pub const TETHER_ABI_VERSION: u32 = 1;

/// The library's version, `major.minor.patch` (the crate version), as a static
/// NUL-terminated string owned by the library (never freed).
#[unsafe(no_mangle)]
pub extern "C" fn tether_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}

/// The ABI version this library implements ([`TETHER_ABI_VERSION`]); compare with the
/// header's `TETHER_ABI_VERSION` to detect a header/library mismatch at run time.
#[unsafe(no_mangle)]
pub extern "C" fn tether_abi_version() -> u32 {
    TETHER_ABI_VERSION
}
