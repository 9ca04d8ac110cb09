//! What tether's model families share, and nothing else.
//!
//! - [`io`]: which of a network's tensors plays a role (by name, then by shape; ambiguous
//!   refused), the one rule every family applies to its network's inputs and outputs.
//! - [`vision`]: borrowed 8-bit images ([`vision::ImageView`]) and their pixel formats, for
//!   every family that takes an image (detection, OCR).
//! - [`family`] (feature `cli`): the [`family::Family`] interface a family implements for
//!   tools — `tether build --family NAME` arguments and recipe, the `inspect` description,
//!   `run`/`bench` on input files with text and JSON output and annotation — and the
//!   registry type the CLI dispatches on. Device builds leave it out.
//!
//! Something moves here only when two families need the very same contract.
#![warn(missing_docs)]

pub mod io;
pub mod vision;

#[cfg(feature = "cli")]
pub mod decode;
#[cfg(feature = "cli")]
pub mod family;
