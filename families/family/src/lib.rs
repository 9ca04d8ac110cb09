//! What tether's model families share, and nothing else.
//!
//! - [`io`]: which of a network's tensors plays a role (by name, then by shape; ambiguous
//!   refused), the one rule every family applies to its network's inputs and outputs.
//! - [`vision`]: borrowed 8-bit images ([`vision::ImageView`]) and their pixel formats, for
//!   every family that takes an image (detection, OCR).
//! - [`recipe`]: what every build recipe shares ([`recipe::BuildCommon`]: the bundle
//!   identity's name, version and time) and the digests that recognise pinned models.
//! - [`model`]: opening a family's bundle, the family check, and the errors every family's
//!   API shares ([`model::ModelError`], carried by each family's own error type).
//! - [`selftest`]: the one self-test format every family writes into its bundles (reference
//!   input, recorded output, tolerances, source) and the report of a run.
//! - [`annotate`] (feature `cli`): annotated copies of image inputs (`run --annotate`).
//! - [`args`] (feature `cli`): declaring and reading the families' command-line options
//!   (numbers, switches, range checks as usage errors, input files named by an option).
//! - [`family`] (feature `cli`): the [`family::Family`] interface a family implements for
//!   tools — `tether build --family NAME` arguments and recipe, the `inspect` description,
//!   `run`/`bench` on input files with text and JSON output and annotation — and the
//!   registry type the CLI dispatches on. Device builds leave it out.
//!
//! Something moves here only when two families need the very same contract.
#![warn(missing_docs)]

pub mod io;
pub mod model;
pub mod recipe;
pub mod selftest;
pub mod sniff;
pub mod vision;

#[cfg(feature = "cli")]
pub mod annotate;
#[cfg(feature = "cli")]
pub mod args;
#[cfg(feature = "cli")]
pub mod decode;
#[cfg(feature = "cli")]
pub mod family;
