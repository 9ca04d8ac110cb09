//! Feeds arbitrary bytes to the bundle reader: open (both verification
//! modes), every accessor, and `verify_all`. A second pass re-seals the
//! input (recomputes the header, manifest and whole-file CRCs) so that
//! mutations reach the table and record validation behind the checksums.
//! The work is in `../exercise.rs`, which the replay test shares.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../exercise.rs"]
mod exercise;

fuzz_target!(|data: &[u8]| exercise::run(data));
