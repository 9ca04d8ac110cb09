//! The tether `.bundle` file format.
//!
//! A bundle is one file holding the models (ONNX, TensorRT plans) and assets
//! (labels, configs, ...) of one model, for one or more execution targets.
//! It is laid out so that a loader can `mmap` it and use it in place:
//!
//! * a fixed little-endian header (magic, format version, CRCs) at offset 0;
//! * a manifest of fixed-size `#[repr(C)]` records ([`raw`]) that the reader
//!   borrows straight from the mapping through zerocopy — nothing is parsed
//!   into owned structures;
//! * payload sections, each starting on a [`SECTION_ALIGN`] (4096-byte)
//!   boundary, so a TensorRT plan can be handed to the engine from the
//!   mapping without a copy.
//!
//! Integrity: a CRC-32 over the header, one over the manifest, one per
//! section (checked at open with [`Verify::Eager`], or on first access with
//! [`Verify::Lazy`]), one over the whole file after the header, and a
//! SHA-256 content digest over all payloads ([`Bundle::verify_all`]).
//!
//! The byte-level specification is `FORMAT.md` in this crate.
//!
//! ```
//! use tether_bundle::*;
//!
//! let mut w = BundleWriter::new(IdentityDesc {
//!     name: "demo".into(),
//!     family: "detect".into(),
//!     ..Default::default()
//! });
//! let cpu = w.add_target(TargetDesc {
//!     name: "cpu".into(),
//!     arch: CpuArch::Any,
//!     sm: None,
//!     engine: EngineKind::TractCpu,
//!     tensorrt_version: 0,
//!     hardware_compat: 0,
//!     flags: 0,
//! })?;
//! let model = w.add_section(SectionKind::Onnx, "model.onnx", Some(cpu), b"onnx bytes".to_vec())?;
//! w.add_tensor(model, TensorDesc {
//!     name: "images".into(),
//!     mode: IoMode::Input,
//!     dtype: DType::F32,
//!     layout: Layout::Nchw,
//!     dims: vec![DYNAMIC_DIM, 3, 640, 640],
//! })?;
//! let bundle = Bundle::from_vec(w.to_bytes()?, Verify::Eager)?;
//! let s = bundle.section("model.onnx")?;
//! assert_eq!(bundle.section_bytes(&s)?, b"onnx bytes");
//! let t = bundle.tensors(s.index).next().unwrap();
//! assert_eq!(t.dims.to_vec(), [-1, 3, 640, 640]);
//! bundle.verify_all()?;
//! # Ok::<(), BundleError>(())
//! ```
//!
//! # Memory-mapped files that change
//!
//! [`Bundle::open`] maps the file. If another process *truncates* a mapped
//! file (`cp new.bundle old.bundle` does), touching the lost pages raises
//! `SIGBUS`, which kills a process by default. This crate does not let that
//! happen to a bundle it mapped:
//!
//! * every mapping is registered with a process-wide `SIGBUS` handler
//!   (installed on first open; faults outside our mappings go to the
//!   previous handler, or kill the process as before). A fault inside a
//!   bundle mapping replaces the lost pages with zero pages and flags that
//!   bundle; the checks that read the file ([`Bundle::section_bytes`],
//!   [`Bundle::section_vec`], [`Bundle::verify_all`], [`Bundle::open`]
//!   itself) then return [`BundleError::ChangedWhileOpen`];
//! * an open [`Bundle`] holds a shared `flock` on its file. A program that
//!   must rewrite a bundle *in place* takes an exclusive `flock` first (it
//!   then waits until no process has the bundle open);
//! * writers should not rewrite in place at all (the rule is section 12 of
//!   `FORMAT.md`): [`BundleWriter::write`]
//!   writes a new file and renames it over the old one ([`files::AtomicFile`]),
//!   which leaves every open mapping of the old file intact.
//!
//! After load, copy what is used later ([`Bundle::section_vec`]) instead of
//! borrowing from the mapping, so that nothing on a hot path can observe a
//! change.
//!
//! The `unsafe` code is that `mmap` call and the operating-system glue in
//! one private module (signal handlers, `flock`, `fcntl`, `kill`), each
//! block with its `SAFETY` argument. Unix only.
//!
//! # Hostile input
//!
//! Every failure is a typed [`BundleError`]; the reader never panics on
//! file contents, uses checked arithmetic for every offset, and never
//! allocates an amount chosen by the file (the section "verified" bits are a
//! fixed bitset of [`MAX_SECTIONS`] bits).

#![deny(unsafe_code)]
#![warn(missing_docs)]

mod error;
pub mod files;
mod network;
pub mod raw;
mod reader;
mod sys;
mod types;
mod writer;

pub use error::{BundleError, MAX_ERROR_STRING_CHARS, SectionId};
pub use network::{DEFAULT_NETWORK, network_of, network_section_name};
pub use reader::{
    Bundle, Dims, Identity, Section, Sections, Target, Targets, TensorInfo, Tensors, Verify,
    VerifyReport,
};
pub use types::{
    ArchCode, CpuArch, DType, EngineCode, EngineKind, IoMode, Layout, ParseEnumError, SectionKind,
    arch_code, engine_code,
};
pub use writer::{BundleWriter, IdentityDesc, TargetDesc, TensorDesc, WriteSummary, check_name};

/// The first 8 bytes of every bundle (PNG-style: a high-bit byte, `TBND`,
/// CR LF, and ^Z, so text-mode transfers and `type` on DOS are detected).
pub const MAGIC: [u8; 8] = [0x89, b'T', b'B', b'N', b'D', b'\r', b'\n', 0x1a];
/// Format major version this crate reads and writes. Files with another
/// major are rejected with [`BundleError::UnsupportedVersion`].
pub const FORMAT_MAJOR: u16 = 1;
/// Newest format minor version this crate knows. Files with a newer minor
/// are read (unknown trailing record fields are ignored).
pub const FORMAT_MINOR: u16 = 1;
/// Every section payload starts at a file offset that is a multiple of this
/// (bytes).
pub const SECTION_ALIGN: u64 = 4096;
/// Maximum tensor rank.
pub const MAX_RANK: usize = 8;
/// Dimension value marking a dynamic (unknown until run time) dimension.
pub const DYNAMIC_DIM: i64 = -1;
/// Maximum number of sections in a bundle (reader and writer).
pub const MAX_SECTIONS: usize = 4096;
/// Maximum length in bytes of every string in the manifest (names, identity
/// fields). Enforced by the reader and the writer.
pub const MAX_NAME_LEN: usize = 255;
/// Target flag bit 0: the TensorRT plan was built version-compatible
/// (`kVERSION_COMPATIBLE`) and can run on a newer TensorRT runtime. The
/// platform vocabulary's [`tether_targets::FLAG_VERSION_COMPATIBLE`].
pub const TARGET_FLAG_VERSION_COMPATIBLE: u32 = tether_targets::FLAG_VERSION_COMPATIBLE;
/// Target flag bit 1: the version-compatible plan was built without its
/// embedded lean runtime (`kEXCLUDE_LEAN_RUNTIME`), so it needs a TensorRT of
/// its own version. The platform vocabulary's
/// [`tether_targets::FLAG_EXCLUDE_LEAN_RUNTIME`].
pub const TARGET_FLAG_EXCLUDE_LEAN_RUNTIME: u32 = tether_targets::FLAG_EXCLUDE_LEAN_RUNTIME;
