//! The crate's error type.

use std::fmt;
use std::path::PathBuf;

use crate::{MAX_NAME_LEN, MAX_RANK, SectionKind};

/// Longest string (in characters) copied from a file or from caller input
/// into an error message; longer strings are cut and end in `…`.
pub const MAX_ERROR_STRING_CHARS: usize = 64;

/// Copies `s` for use in an error message, truncated to
/// [`MAX_ERROR_STRING_CHARS`] characters.
pub(crate) fn clip(s: &str) -> String {
    match s.char_indices().nth(MAX_ERROR_STRING_CHARS) {
        None => s.to_owned(),
        Some((cut, _)) => {
            let mut out = String::with_capacity(cut + 3);
            out.push_str(s.get(..cut).unwrap_or_default());
            out.push('…');
            out
        }
    }
}

/// Lower-case hex of a byte string (used for digests in messages).
pub(crate) fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Names a section in an error: by name where the file's string could be
/// read, always by index.
///
/// Displays as `` `model.onnx` (#3) `` or, without a name, `#3`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionId {
    /// Position in the section table.
    pub index: u32,
    /// The section's name (at most 64 characters), if it could be read.
    pub name: Option<String>,
}

impl SectionId {
    pub(crate) fn new(index: u32, name: Option<&str>) -> Self {
        SectionId {
            index,
            name: name.map(clip),
        }
    }
}

impl fmt::Display for SectionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.name {
            Some(name) => write!(f, "`{name}` (#{})", self.index),
            None => write!(f, "#{}", self.index),
        }
    }
}

/// Everything that can go wrong reading, verifying or writing a bundle.
///
/// Variants carry the values that were seen (offsets and lengths in bytes,
/// CRCs as `u32`), so that a message alone says what is wrong and where.
/// Strings copied from a file or from caller input are truncated to
/// [`MAX_ERROR_STRING_CHARS`] characters.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    // ----- I/O -----------------------------------------------------------
    /// An operating-system call failed (`op` says which, e.g. "opening").
    #[error("I/O error {op} `{}`: {source}", path.display())]
    Io {
        /// The file (or temporary file) involved.
        path: PathBuf,
        /// What was being done, e.g. `"opening"`, `"mapping"`, `"renaming"`.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// The path is not a regular file, or a destination cannot be written
    /// (see [`FileError`](crate::files::FileError)).
    #[error(transparent)]
    File(crate::files::FileError),
    /// The file was truncated or rewritten in place while this process had
    /// it open: a read of the mapping faulted (the lost pages now read as
    /// zeros), or its length or modification time changed. Whatever was
    /// read from it since may be wrong. Replace bundles by renaming a new
    /// file over them (as [`BundleWriter::write`](crate::BundleWriter::write)
    /// does), never by rewriting them in place.
    #[error(
        "`{}` was truncated or rewritten in place while it was open; replace a bundle by \
         renaming a new file over it (as `tether build` does), never by copying over it",
        path.display()
    )]
    ChangedWhileOpen {
        /// The bundle file.
        path: PathBuf,
    },

    // ----- header --------------------------------------------------------
    /// The file ends before the structure named by `what`.
    #[error("file truncated: the {what} needs {needed} bytes but the file has {actual}")]
    Truncated {
        /// What could not be read: `"magic"`, `"format version"`,
        /// `"header size"`, `"header"` or `"file"` (the header's
        /// `file_length`).
        what: &'static str,
        /// Bytes needed.
        needed: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The first 8 bytes are not [`MAGIC`](crate::MAGIC).
    #[error("not a tether bundle: magic is {}, expected {}", hex(found), hex(&crate::MAGIC))]
    BadMagic {
        /// The first 8 bytes of the file.
        found: [u8; 8],
    },
    /// The file's major version is not [`FORMAT_MAJOR`](crate::FORMAT_MAJOR).
    #[error(
        "unsupported bundle format version {found_major}.{found_minor}: this reader \
         supports major version {supported_major} (up to {supported_major}.{supported_minor})"
    )]
    UnsupportedVersion {
        /// Major version in the file.
        found_major: u16,
        /// Minor version in the file.
        found_minor: u16,
        /// The major this reader supports.
        supported_major: u16,
        /// The newest minor this reader knows (newer minors are accepted).
        supported_minor: u16,
    },
    /// `header_size` is smaller than the header this reader knows.
    #[error("header size {header_size} is smaller than the {min} bytes this reader needs")]
    HeaderTooSmall {
        /// `header_size` from the file.
        header_size: u32,
        /// The minimum (144).
        min: u32,
    },
    /// The header CRC does not match the header bytes.
    #[error("header CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    HeaderCrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed from the bytes.
        computed: u32,
    },
    /// The file is longer than the header's `file_length` (a shorter file is
    /// [`Truncated`](Self::Truncated)).
    #[error("file is {actual} bytes but the header says {declared}")]
    FileLengthMismatch {
        /// `file_length` from the header.
        declared: u64,
        /// Actual length.
        actual: u64,
    },

    // ----- manifest --------------------------------------------------------
    /// The manifest range is not inside `[header_size, file_length)`.
    #[error(
        "manifest at offset {offset} length {length} lies outside the file body \
         [{min_offset}, {file_len})"
    )]
    ManifestOutOfRange {
        /// `manifest_offset`.
        offset: u64,
        /// `manifest_length`.
        length: u64,
        /// `header_size`.
        min_offset: u64,
        /// File length.
        file_len: u64,
    },
    /// The manifest CRC does not match the manifest bytes.
    #[error("manifest CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    ManifestCrcMismatch {
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed from the bytes.
        computed: u32,
    },
    /// A table's `record_size` is smaller than the record this reader knows.
    #[error(
        "{table} table: record_size {record_size} is smaller than the {min} bytes this reader needs"
    )]
    RecordTooSmall {
        /// `"identity"`, `"targets"`, `"sections"` or `"tensors"`.
        table: &'static str,
        /// `record_size` from the file.
        record_size: u32,
        /// The record size this reader knows.
        min: u32,
    },
    /// The string table's `record_size` is not 1.
    #[error("strings table: record_size is {record_size}, must be 1")]
    BadStringTable {
        /// `record_size` from the file.
        record_size: u32,
    },
    /// A table does not lie inside the manifest.
    #[error(
        "{table} table ({count} records of {record_size} bytes at offset {offset}) \
         lies outside the manifest [{manifest_start}, {manifest_end})"
    )]
    TableOutOfRange {
        /// Which table.
        table: &'static str,
        /// Table offset.
        offset: u64,
        /// Record count.
        count: u32,
        /// Record size.
        record_size: u32,
        /// Manifest start offset.
        manifest_start: u64,
        /// Manifest end offset (exclusive).
        manifest_end: u64,
    },
    /// Two tables share bytes.
    #[error("{first} table and {second} table overlap")]
    TableOverlap {
        /// One table.
        first: &'static str,
        /// The other table.
        second: &'static str,
    },
    /// The identity table does not hold exactly one record.
    #[error("identity table must hold exactly 1 record, found {count}")]
    BadIdentityCount {
        /// Record count in the file.
        count: u32,
    },
    /// More sections than [`MAX_SECTIONS`](crate::MAX_SECTIONS).
    #[error("too many sections: {count} (maximum {max})")]
    TooManySections {
        /// Number of sections in the file (or added to the writer).
        count: u64,
        /// [`MAX_SECTIONS`](crate::MAX_SECTIONS).
        max: u32,
    },
    /// A string reference points outside the string table.
    #[error(
        "{table} record #{index}: {field} string at offset {offset} length {len} is \
         outside the string table ({strings_len} bytes)"
    )]
    StringOutOfRange {
        /// Table of the record holding the reference.
        table: &'static str,
        /// Index of that record.
        index: u32,
        /// Which field, e.g. `"name"`.
        field: &'static str,
        /// Offset relative to the string table.
        offset: u32,
        /// Length in bytes.
        len: u32,
        /// String table length in bytes.
        strings_len: u64,
    },
    /// A string is longer than [`MAX_NAME_LEN`].
    #[error("{table} record #{index}: {field} is {len} bytes, more than the maximum {max}")]
    StringTooLong {
        /// Table of the record holding the reference.
        table: &'static str,
        /// Index of that record.
        index: u32,
        /// Which field.
        field: &'static str,
        /// Length in bytes.
        len: u32,
        /// [`MAX_NAME_LEN`].
        max: usize,
    },
    /// A string is not valid UTF-8.
    #[error(
        "{table} record #{index}: {field} is not valid UTF-8 (bad byte at {valid_up_to}; \
         lossy: {lossy:?})"
    )]
    InvalidUtf8 {
        /// Table of the record holding the reference.
        table: &'static str,
        /// Index of that record.
        index: u32,
        /// Which field.
        field: &'static str,
        /// Length of the valid prefix in bytes.
        valid_up_to: usize,
        /// Lossy decoding (at most 64 characters).
        lossy: String,
    },

    // ----- sections --------------------------------------------------------
    /// A section offset is not a multiple of [`SECTION_ALIGN`](crate::SECTION_ALIGN).
    #[error("section {section}: offset {offset} is not a multiple of {align}")]
    SectionMisaligned {
        /// The section.
        section: SectionId,
        /// Its offset.
        offset: u64,
        /// [`SECTION_ALIGN`](crate::SECTION_ALIGN).
        align: u64,
    },
    /// A section's bytes are not inside the payload area (after the manifest,
    /// before the end of the file).
    #[error(
        "section {section}: offset {offset} length {length} lies outside the payload \
         area [{min_offset}, {file_len})"
    )]
    SectionOutOfRange {
        /// The section.
        section: SectionId,
        /// Its offset.
        offset: u64,
        /// Its length.
        length: u64,
        /// End of the manifest.
        min_offset: u64,
        /// File length.
        file_len: u64,
    },
    /// A section starts before the previous section (in table order) ends.
    #[error(
        "section {section} at offset {offset} overlaps section {previous}, which ends at \
         {previous_end} (sections must be stored in increasing offset order)"
    )]
    SectionOverlap {
        /// The section.
        section: SectionId,
        /// Its offset.
        offset: u64,
        /// The section before it in the table.
        previous: SectionId,
        /// End offset (exclusive) of `previous`.
        previous_end: u64,
    },
    /// A section's CRC-32 does not match its bytes.
    #[error("section {section} CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    SectionCrcMismatch {
        /// The section.
        section: SectionId,
        /// CRC stored in the section table.
        stored: u32,
        /// CRC computed from the bytes.
        computed: u32,
    },
    /// Two sections share a name (reader and writer both reject this).
    #[error("duplicate section name `{name}` (sections #{first} and #{second})")]
    DuplicateSection {
        /// The name.
        name: String,
        /// Index of one section with that name.
        first: u32,
        /// Index of another.
        second: u32,
    },
    /// A section refers to a target that does not exist.
    #[error("section {section} refers to target #{target}, but there are only {count} targets")]
    BadTargetRef {
        /// The section.
        section: SectionId,
        /// Target index in the record.
        target: u32,
        /// Number of targets.
        count: u32,
    },

    // ----- tensors ---------------------------------------------------------
    /// A tensor refers to a section that does not exist.
    #[error(
        "tensor #{index} `{name}` refers to section #{section}, but there are only {count} sections"
    )]
    BadTensorSection {
        /// Tensor index in the tensor table.
        index: u32,
        /// Tensor name.
        name: String,
        /// Section index in the record.
        section: u32,
        /// Number of sections.
        count: u32,
    },
    /// A tensor's rank exceeds [`MAX_RANK`].
    #[error("tensor `{tensor}`: rank {rank} exceeds the maximum {max}", max = MAX_RANK)]
    RankTooLarge {
        /// Tensor name.
        tensor: String,
        /// Rank seen.
        rank: usize,
    },
    /// A dimension is below -1.
    #[error(
        "tensor `{tensor}`: dimension {axis} is {value}; dimensions are >= 0, or -1 for dynamic"
    )]
    InvalidDim {
        /// Tensor name.
        tensor: String,
        /// Axis (0-based).
        axis: usize,
        /// Value seen.
        value: i64,
    },

    // ----- full verification -------------------------------------------------
    /// The whole-file CRC does not match.
    #[error(
        "whole-file CRC mismatch over bytes [{start}, {end}): stored {stored:#010x}, \
         computed {computed:#010x}"
    )]
    FileCrcMismatch {
        /// First byte covered (`header_size`).
        start: u64,
        /// End (file length).
        end: u64,
        /// CRC stored in the header.
        stored: u32,
        /// CRC computed.
        computed: u32,
    },
    /// A byte that must be zero padding is not.
    #[error("nonzero padding byte {value:#04x} at file offset {offset} ({region})")]
    NonZeroPadding {
        /// File offset of the first nonzero byte.
        offset: u64,
        /// Its value.
        value: u8,
        /// Where, e.g. ``"before section `b.bin` (#1)"``.
        region: String,
    },
    /// The SHA-256 content digest does not match the section payloads.
    #[error(
        "content digest mismatch: stored {}, computed {}",
        hex(stored),
        hex(computed)
    )]
    DigestMismatch {
        /// Digest stored in the identity.
        stored: [u8; 32],
        /// Digest computed.
        computed: [u8; 32],
    },

    // ----- lookups -------------------------------------------------------------
    /// No section has this name.
    #[error("no section named `{name}`")]
    MissingSection {
        /// The name asked for (at most 64 characters).
        name: String,
    },
    /// No section has this index.
    #[error("no section #{index} (the bundle has {count})")]
    SectionNotFound {
        /// Index asked for.
        index: u32,
        /// Number of sections.
        count: u32,
    },
    /// No target has this index.
    #[error("no target #{index} (the bundle has {count})")]
    TargetNotFound {
        /// Index asked for.
        index: u32,
        /// Number of targets.
        count: u32,
    },

    // ----- writer input ----------------------------------------------------------
    /// A name or identity string is longer than [`MAX_NAME_LEN`] bytes.
    #[error("{what} `{name}` is {len} bytes, more than the maximum {max}", max = MAX_NAME_LEN)]
    NameTooLong {
        /// What kind of name, e.g. `"section name"`.
        what: &'static str,
        /// The name (at most 64 characters).
        name: String,
        /// Its length in bytes.
        len: usize,
    },
    /// A required name is empty.
    #[error("{what} must not be empty")]
    EmptyName {
        /// What kind of name.
        what: &'static str,
    },
    /// A target's SM version has major 0.
    #[error(
        "target `{target}`: SM version {major}.{minor} is invalid (major must be >= 1; use None for no GPU)"
    )]
    InvalidSm {
        /// Target name.
        target: String,
        /// Major given.
        major: u8,
        /// Minor given.
        minor: u8,
    },
    /// Tensors can only be attached to engine sections.
    #[error(
        "section `{section}` is a {kind} section; only onnx and tensorrt-plan sections carry tensors"
    )]
    NotAnEngineSection {
        /// Section name.
        section: String,
        /// Its kind.
        kind: SectionKind,
    },
    /// Two tensors of one section share a name.
    #[error("section `{section}`: duplicate tensor name `{tensor}`")]
    DuplicateTensor {
        /// Section name.
        section: String,
        /// Tensor name.
        tensor: String,
    },
    /// A count or size does not fit the on-disk integer type.
    #[error("{what} is too large for the bundle format")]
    TooLarge {
        /// What overflowed.
        what: &'static str,
    },
}

impl From<crate::files::FileError> for BundleError {
    /// [`FileError::Io`](crate::files::FileError::Io) becomes
    /// [`BundleError::Io`]; every other case [`BundleError::File`].
    fn from(e: crate::files::FileError) -> Self {
        match e {
            crate::files::FileError::Io { path, op, source } => {
                BundleError::Io { path, op, source }
            }
            other => BundleError::File(other),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_truncates_on_char_boundary() {
        assert_eq!(clip("abc"), "abc");
        let long = "é".repeat(100);
        let c = clip(&long);
        assert_eq!(c.chars().count(), MAX_ERROR_STRING_CHARS + 1);
        assert!(c.ends_with('…'));
    }

    #[test]
    fn section_id_display() {
        assert_eq!(
            SectionId::new(3, Some("a.onnx")).to_string(),
            "`a.onnx` (#3)"
        );
        assert_eq!(SectionId::new(3, None).to_string(), "#3");
    }
}
