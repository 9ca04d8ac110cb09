//! Opening, validating and reading a bundle.

use std::fmt;
use std::fs::File;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use memmap2::Mmap;
use sha2::{Digest as _, Sha256};
use zerocopy::little_endian::I64;
use zerocopy::{FromBytes, Immutable, KnownLayout};

use crate::error::{BundleError, SectionId, clip};
use crate::files::{FileError, open_regular};
use crate::raw::{
    FileHeader, HEADER_SIZE_V1, IdentityRecord, NO_TARGET, SectionRecord, StrRef, TableRef,
    TargetRecord, TensorRecord, header_crc,
};
use crate::sys::{MapGuard, try_flock};
use crate::{
    ArchCode, DType, EngineCode, FORMAT_MAJOR, FORMAT_MINOR, IoMode, Layout, MAGIC, MAX_NAME_LEN,
    MAX_RANK, MAX_SECTIONS, SECTION_ALIGN, SectionKind, TARGET_FLAG_EXCLUDE_LEAN_RUNTIME,
    TARGET_FLAG_VERSION_COMPATIBLE,
};

/// When section CRCs are checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Verify {
    /// Check every section's CRC-32 in [`Bundle::open`] (reads every payload
    /// byte once). Open fails on the first mismatch.
    #[default]
    Eager,
    /// Check a section's CRC-32 the first time its bytes are requested with
    /// [`Bundle::section_bytes`]; a section that passed is remembered and not
    /// checked again. Open touches only the header and the manifest.
    Lazy,
}

/// Result of [`Bundle::verify_all`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Bytes read and checked: the whole file.
    pub bytes_checked: u64,
    /// Sections whose CRC-32 was checked (all of them).
    pub sections_checked: u32,
}

/// The bundle's identity, borrowed from the manifest.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Identity<'a> {
    /// Bundle name.
    pub name: &'a str,
    /// Model family (e.g. `detect`).
    pub family: &'a str,
    /// Model version (free-form).
    pub model_version: &'a str,
    /// Version of the tool that wrote the bundle.
    pub tool_version: &'a str,
    /// Creation time, seconds since the Unix epoch (UTC).
    pub created_unix_s: u64,
    /// SHA-256 over every section payload in section-table order.
    pub content_digest: [u8; 32],
}

impl Identity<'_> {
    /// The content digest as 64 lower-case hex characters.
    pub fn content_digest_hex(&self) -> String {
        crate::error::hex(&self.content_digest)
    }
}

/// One execution target, decoded from its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target<'a> {
    /// Position in the target table (what [`Section::target`] refers to).
    pub index: u32,
    /// Target name.
    pub name: &'a str,
    /// CPU architecture required (or a code this reader does not know).
    pub arch: ArchCode,
    /// CUDA compute capability `(major, minor)`; `None` = no GPU requirement.
    pub sm: Option<(u8, u8)>,
    /// Engine used on this target (or none, or a code this reader does not
    /// know).
    pub engine: EngineCode,
    /// TensorRT version as `MAJOR*10000 + MINOR*100 + PATCH` (e.g. 100300
    /// for 10.3.0); 0 = not applicable.
    pub tensorrt_version: u32,
    /// TensorRT hardware-compatibility level (0 = none).
    pub hardware_compat: u32,
    /// `TARGET_FLAG_*` bits; unknown bits are kept.
    pub flags: u32,
}

impl Target<'_> {
    /// `flags` has [`TARGET_FLAG_VERSION_COMPATIBLE`].
    pub fn is_version_compatible(&self) -> bool {
        self.flags & TARGET_FLAG_VERSION_COMPATIBLE != 0
    }

    /// `flags` has [`TARGET_FLAG_EXCLUDE_LEAN_RUNTIME`].
    pub fn excludes_lean_runtime(&self) -> bool {
        self.flags & TARGET_FLAG_EXCLUDE_LEAN_RUNTIME != 0
    }

    /// The record as engine selection takes it
    /// ([`tether_targets::select_engine`]); `None` when the architecture or
    /// engine code is not one this reader knows, or the target has no engine
    /// (such a target cannot be chosen).
    pub fn offer(&self) -> Option<tether_targets::Offer> {
        Some(tether_targets::Offer {
            index: self.index,
            engine: self.engine.known()?,
            arch: self.arch.known()?,
            sm: self
                .sm
                .map(|(major, minor)| tether_targets::Sm::new(major, minor)),
            tensorrt_version: self.tensorrt_version,
            hardware_compat: self.hardware_compat,
            flags: self.flags,
        })
    }

    /// `tensorrt_version` split into `(major, minor, patch)`; `None` when 0.
    pub fn tensorrt_version_parts(&self) -> Option<(u32, u32, u32)> {
        let v = self.tensorrt_version;
        (v != 0).then_some((v / 10000, (v / 100) % 100, v % 100))
    }
}

/// One payload section, decoded from its record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Section<'a> {
    /// Position in the section table.
    pub index: u32,
    /// What the section holds.
    pub kind: SectionKind,
    /// Section name (unique in the bundle).
    pub name: &'a str,
    /// Index of the target this section is for; `None` = all targets.
    pub target: Option<u32>,
    /// Section flags (none defined in format 1.0).
    pub flags: u32,
    /// Absolute file offset of the payload (a multiple of 4096).
    pub offset: u64,
    /// Payload length in bytes.
    pub length: u64,
    /// Stored CRC-32 of the payload.
    pub crc32: u32,
}

/// The dimensions of a tensor: `rank` values, `-1` ([`DYNAMIC_DIM`](crate::DYNAMIC_DIM))
/// for a dynamic dimension. Borrowed from the manifest.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Dims<'a>(&'a [I64]);

impl<'a> Dims<'a> {
    /// The raw little-endian values.
    pub fn as_slice(&self) -> &'a [I64] {
        self.0
    }

    /// The dimensions as `i64`.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i64> + 'a {
        self.0.iter().map(|d| d.get())
    }

    /// Number of dimensions (the rank).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Rank 0 (a scalar).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Dimension `axis`, if `axis < rank`.
    pub fn get(&self, axis: usize) -> Option<i64> {
        self.0.get(axis).map(|d| d.get())
    }

    /// Any dimension is dynamic (`-1`).
    pub fn is_dynamic(&self) -> bool {
        self.iter().any(|d| d < 0)
    }

    /// Copies the dimensions into a `Vec`.
    pub fn to_vec(&self) -> Vec<i64> {
        self.iter().collect()
    }
}

impl fmt::Debug for Dims<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

/// One input or output tensor of an engine section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    /// Position in the tensor table.
    pub index: u32,
    /// Index of the section the tensor belongs to.
    pub section: u32,
    /// Tensor name as the engine knows it.
    pub name: &'a str,
    /// Input or output.
    pub mode: IoMode,
    /// Element type.
    pub dtype: DType,
    /// Memory layout.
    pub layout: Layout,
    /// Shape.
    pub dims: Dims<'a>,
}

impl TensorInfo<'_> {
    /// Number of elements; `None` if a dimension is dynamic or the product
    /// overflows `u64`.
    pub fn element_count(&self) -> Option<u64> {
        self.dims.iter().try_fold(1u64, |acc, d| {
            u64::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
    }

    /// Size in bytes; `None` if dynamic, of unknown dtype, or overflowing.
    pub fn byte_size(&self) -> Option<u64> {
        let elem = u64::try_from(self.dtype.size_bytes()?).ok()?;
        self.element_count()?.checked_mul(elem)
    }
}

// ---------------------------------------------------------------------------
// Validated layout
// ---------------------------------------------------------------------------

/// A table whose bounds were checked: `count` records at `offset`, `stride`
/// bytes apart, all inside the manifest.
#[derive(Clone, Copy, Debug)]
struct Table {
    offset: usize,
    count: u32,
    stride: usize,
}

/// The numbers open() checked; everything else is read from the bytes on
/// access.
#[derive(Clone, Copy, Debug)]
struct Parsed {
    major: u16,
    minor: u16,
    header_size: usize,
    manifest: (usize, usize),
    manifest_crc32: u32,
    file_crc32: u32,
    header_crc32: u32,
    identity: Table,
    targets: Table,
    sections: Table,
    tensors: Table,
    strings: (usize, usize),
    /// Every tensor record's section index is >= the one before it (the
    /// reference writer's order), so one section's tensors are contiguous.
    tensors_grouped: bool,
}

fn record<'a, T: FromBytes + KnownLayout + Immutable>(
    bytes: &'a [u8],
    t: &Table,
    i: u32,
) -> Option<&'a T> {
    if i >= t.count {
        return None;
    }
    let start = t
        .offset
        .checked_add(usize::try_from(i).ok()?.checked_mul(t.stride)?)?;
    let end = start.checked_add(size_of::<T>())?;
    T::ref_from_bytes(bytes.get(start..end)?).ok()
}

enum StrError {
    OutOfRange,
    TooLong,
    Utf8(usize, String),
}

fn string<'a>(bytes: &'a [u8], strings: (usize, usize), r: &StrRef) -> Result<&'a str, StrError> {
    let len = r.len.get();
    if len as usize > MAX_NAME_LEN {
        return Err(StrError::TooLong);
    }
    let off = r.offset.get() as usize;
    let end = off.checked_add(len as usize).ok_or(StrError::OutOfRange)?;
    if end > strings.1 {
        return Err(StrError::OutOfRange);
    }
    let abs = strings.0.checked_add(off).ok_or(StrError::OutOfRange)?;
    let abs_end = strings.0.checked_add(end).ok_or(StrError::OutOfRange)?;
    let raw = bytes.get(abs..abs_end).ok_or(StrError::OutOfRange)?;
    std::str::from_utf8(raw)
        .map_err(|e| StrError::Utf8(e.valid_up_to(), clip(&String::from_utf8_lossy(raw))))
}

/// Resolves a string for validation, turning failures into typed errors.
fn checked_string<'a>(
    bytes: &'a [u8],
    strings: (usize, usize),
    r: &StrRef,
    table: &'static str,
    index: u32,
    field: &'static str,
) -> Result<&'a str, BundleError> {
    string(bytes, strings, r).map_err(|e| match e {
        StrError::OutOfRange => BundleError::StringOutOfRange {
            table,
            index,
            field,
            offset: r.offset.get(),
            len: r.len.get(),
            strings_len: strings.1 as u64,
        },
        StrError::TooLong => BundleError::StringTooLong {
            table,
            index,
            field,
            len: r.len.get(),
            max: MAX_NAME_LEN,
        },
        StrError::Utf8(valid_up_to, lossy) => BundleError::InvalidUtf8 {
            table,
            index,
            field,
            valid_up_to,
            lossy,
        },
    })
}

fn read_array<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at.checked_add(N)?)?.try_into().ok()
}

fn to_usize(v: u64, what: &'static str) -> Result<usize, BundleError> {
    usize::try_from(v).map_err(|_| BundleError::TooLarge { what })
}

/// Checks a table reference against the manifest bounds.
fn table(
    name: &'static str,
    r: &TableRef,
    min_record: usize,
    manifest: (usize, usize),
) -> Result<Table, BundleError> {
    let count = r.count.get();
    let record_size = r.record_size.get();
    if (record_size as usize) < min_record {
        return Err(BundleError::RecordTooSmall {
            table: name,
            record_size,
            min: min_record as u32,
        });
    }
    let out_of_range = || BundleError::TableOutOfRange {
        table: name,
        offset: r.offset.get(),
        count,
        record_size,
        manifest_start: manifest.0 as u64,
        manifest_end: manifest.1 as u64,
    };
    let offset = r.offset.get();
    let len = u64::from(count) * u64::from(record_size); // cannot overflow: u32 * u32
    let end = offset.checked_add(len).ok_or_else(out_of_range)?;
    if offset < manifest.0 as u64 || end > manifest.1 as u64 {
        return Err(out_of_range());
    }
    Ok(Table {
        offset: to_usize(offset, "table offset")?,
        count,
        stride: record_size as usize,
    })
}

fn table_span(t: &Table) -> Range<usize> {
    // Bounds were checked against the manifest, so these cannot overflow.
    let len = (t.count as usize).saturating_mul(t.stride);
    t.offset..t.offset.saturating_add(len)
}

/// Reads and checks the header, the manifest and the tables' places (FORMAT.md sections
/// 2-3), then every record ([`validate_records`]).
fn parse(bytes: &[u8]) -> Result<Parsed, BundleError> {
    let header = parse_header(bytes)?;
    let hdr = header.fields;
    let manifest = locate_manifest(bytes, hdr, header.size)?;
    let tables = locate_tables(hdr, manifest)?;
    let p = Parsed {
        major: header.major,
        minor: header.minor,
        header_size: header.size,
        manifest,
        manifest_crc32: hdr.manifest_crc32.get(),
        file_crc32: hdr.file_crc32.get(),
        header_crc32: hdr.header_crc32.get(),
        identity: tables.identity,
        targets: tables.targets,
        sections: tables.sections,
        tensors: tables.tensors,
        strings: tables.strings,
        tensors_grouped: false,
    };
    let tensors_grouped = validate_records(bytes, &p)?;
    Ok(Parsed {
        tensors_grouped,
        ..p
    })
}

/// The header, checked: magic, major version, size, CRC and the declared file length.
struct Header<'a> {
    fields: &'a FileHeader,
    major: u16,
    minor: u16,
    /// Its size in bytes (at least [`HEADER_SIZE_V1`]; more from a newer minor).
    size: usize,
}

fn parse_header(bytes: &[u8]) -> Result<Header<'_>, BundleError> {
    let actual = bytes.len() as u64;
    let truncated = |what, needed: u64| BundleError::Truncated {
        what,
        needed,
        actual,
    };

    // Magic and version come first: a different major may lay out the rest
    // of the header differently.
    let magic: [u8; 8] = read_array(bytes, 0).ok_or_else(|| truncated("magic", 8))?;
    if magic != MAGIC {
        return Err(BundleError::BadMagic { found: magic });
    }
    let ver: [u8; 4] = read_array(bytes, 8).ok_or_else(|| truncated("format version", 12))?;
    let major = u16::from_le_bytes([ver[0], ver[1]]);
    let minor = u16::from_le_bytes([ver[2], ver[3]]);
    if major != FORMAT_MAJOR {
        return Err(BundleError::UnsupportedVersion {
            found_major: major,
            found_minor: minor,
            supported_major: FORMAT_MAJOR,
            supported_minor: FORMAT_MINOR,
        });
    }
    let hs: [u8; 4] = read_array(bytes, 12).ok_or_else(|| truncated("header size", 16))?;
    let header_size_raw = u32::from_le_bytes(hs);
    if (header_size_raw as usize) < HEADER_SIZE_V1 {
        return Err(BundleError::HeaderTooSmall {
            header_size: header_size_raw,
            min: HEADER_SIZE_V1 as u32,
        });
    }
    let header_size = to_usize(u64::from(header_size_raw), "header size")?;
    let header_bytes = bytes
        .get(..header_size)
        .ok_or_else(|| truncated("header", u64::from(header_size_raw)))?;
    let (hdr, _) = FileHeader::ref_from_prefix(header_bytes)
        .map_err(|_| truncated("header", HEADER_SIZE_V1 as u64))?;
    let computed = header_crc(header_bytes).unwrap_or_default();
    if computed != hdr.header_crc32.get() {
        return Err(BundleError::HeaderCrcMismatch {
            stored: hdr.header_crc32.get(),
            computed,
        });
    }

    let declared = hdr.file_length.get();
    if declared > actual {
        return Err(truncated("file", declared));
    }
    if declared < actual {
        return Err(BundleError::FileLengthMismatch { declared, actual });
    }
    if minor > FORMAT_MINOR {
        log::debug!(
            "bundle format {major}.{minor} is newer than this reader's {FORMAT_MAJOR}.{FORMAT_MINOR}; \
             reading the fields it knows"
        );
    }
    Ok(Header {
        fields: hdr,
        major,
        minor,
        size: header_size,
    })
}

/// The manifest's byte range `(start, end)`, after the header and inside the file, its CRC
/// checked.
fn locate_manifest(
    bytes: &[u8],
    hdr: &FileHeader,
    header_size: usize,
) -> Result<(usize, usize), BundleError> {
    let actual = bytes.len() as u64;
    let m_off = hdr.manifest_offset.get();
    let m_len = hdr.manifest_length.get();
    let m_end = m_off.checked_add(m_len);
    let manifest = match m_end {
        Some(end) if m_off >= header_size as u64 && end <= actual => {
            (to_usize(m_off, "manifest")?, to_usize(end, "manifest")?)
        }
        _ => {
            return Err(BundleError::ManifestOutOfRange {
                offset: m_off,
                length: m_len,
                min_offset: header_size as u64,
                file_len: actual,
            });
        }
    };
    let manifest_bytes = bytes.get(manifest.0..manifest.1).unwrap_or_default();
    let computed = crc32fast::hash(manifest_bytes);
    if computed != hdr.manifest_crc32.get() {
        return Err(BundleError::ManifestCrcMismatch {
            stored: hdr.manifest_crc32.get(),
            computed,
        });
    }
    Ok(manifest)
}

/// The tables' places in the manifest, as the header declares them.
struct Tables {
    identity: Table,
    targets: Table,
    sections: Table,
    tensors: Table,
    /// The string table's `(offset, length)`.
    strings: (usize, usize),
}

/// Each table inside the manifest with records at least this version's size, at most
/// [`MAX_SECTIONS`] sections, one identity record, a byte-record string table, and no two
/// tables overlapping.
fn locate_tables(hdr: &FileHeader, manifest: (usize, usize)) -> Result<Tables, BundleError> {
    let sec_count = hdr.sections.count.get();
    if sec_count as usize > MAX_SECTIONS {
        return Err(BundleError::TooManySections {
            count: u64::from(sec_count),
            max: MAX_SECTIONS as u32,
        });
    }
    let identity = table(
        "identity",
        &hdr.identity,
        size_of::<IdentityRecord>(),
        manifest,
    )?;
    let targets = table("targets", &hdr.targets, size_of::<TargetRecord>(), manifest)?;
    let sections = table(
        "sections",
        &hdr.sections,
        size_of::<SectionRecord>(),
        manifest,
    )?;
    let tensors = table("tensors", &hdr.tensors, size_of::<TensorRecord>(), manifest)?;
    if hdr.strings.record_size.get() != 1 {
        return Err(BundleError::BadStringTable {
            record_size: hdr.strings.record_size.get(),
        });
    }
    let strings_t = table("strings", &hdr.strings, 1, manifest)?;
    let strings = (strings_t.offset, strings_t.count as usize);
    if identity.count != 1 {
        return Err(BundleError::BadIdentityCount {
            count: identity.count,
        });
    }
    let named = [
        ("identity", identity),
        ("targets", targets),
        ("sections", sections),
        ("tensors", tensors),
        ("strings", strings_t),
    ];
    for (i, (a_name, a)) in named.iter().enumerate() {
        for (b_name, b) in named.iter().skip(i + 1) {
            let (ra, rb) = (table_span(a), table_span(b));
            if !ra.is_empty() && !rb.is_empty() && ra.start < rb.end && rb.start < ra.end {
                return Err(BundleError::TableOverlap {
                    first: a_name,
                    second: b_name,
                });
            }
        }
    }

    Ok(Tables {
        identity,
        targets,
        sections,
        tensors,
        strings,
    })
}

/// Checks every record so that accessors can decode without failing.
/// Returns whether the tensor records are grouped by section in section
/// order.
fn validate_records(bytes: &[u8], p: &Parsed) -> Result<bool, BundleError> {
    let truncated = || BundleError::Truncated {
        what: "manifest record",
        needed: 0,
        actual: bytes.len() as u64,
    };
    let id: &IdentityRecord = record(bytes, &p.identity, 0).ok_or_else(truncated)?;
    for (field, r) in [
        ("name", &id.name),
        ("family", &id.family),
        ("model_version", &id.model_version),
        ("tool_version", &id.tool_version),
    ] {
        checked_string(bytes, p.strings, r, "identity", 0, field)?;
    }

    for i in 0..p.targets.count {
        let t: &TargetRecord = record(bytes, &p.targets, i).ok_or_else(truncated)?;
        checked_string(bytes, p.strings, &t.name, "targets", i, "name")?;
    }

    let file_len = bytes.len() as u64;
    let payload_start = p.manifest.1 as u64;
    let mut prev: Option<(u32, u64)> = None; // (index, end)
    for i in 0..p.sections.count {
        let s: &SectionRecord = record(bytes, &p.sections, i).ok_or_else(truncated)?;
        let name = checked_string(bytes, p.strings, &s.name, "sections", i, "name")?;
        let id = || SectionId::new(i, Some(name));
        let target = s.target.get();
        if target != NO_TARGET && target >= p.targets.count {
            return Err(BundleError::BadTargetRef {
                section: id(),
                target,
                count: p.targets.count,
            });
        }
        let (offset, length) = (s.offset.get(), s.length.get());
        if offset % SECTION_ALIGN != 0 {
            return Err(BundleError::SectionMisaligned {
                section: id(),
                offset,
                align: SECTION_ALIGN,
            });
        }
        let end = match offset.checked_add(length) {
            Some(end) if offset >= payload_start && end <= file_len => end,
            _ => {
                return Err(BundleError::SectionOutOfRange {
                    section: id(),
                    offset,
                    length,
                    min_offset: payload_start,
                    file_len,
                });
            }
        };
        if let Some((pi, pend)) = prev
            && offset < pend
        {
            let pname = record::<SectionRecord>(bytes, &p.sections, pi)
                .and_then(|r| string(bytes, p.strings, &r.name).ok());
            return Err(BundleError::SectionOverlap {
                section: id(),
                offset,
                previous: SectionId::new(pi, pname),
                previous_end: pend,
            });
        }
        prev = Some((i, end));
    }
    check_unique_names(bytes, p)?;

    let mut grouped = true;
    let mut prev_section = 0u32;
    for i in 0..p.tensors.count {
        let t: &TensorRecord = record(bytes, &p.tensors, i).ok_or_else(truncated)?;
        let name = checked_string(bytes, p.strings, &t.name, "tensors", i, "name")?;
        let section = t.section.get();
        grouped &= section >= prev_section;
        prev_section = section;
        if section >= p.sections.count {
            return Err(BundleError::BadTensorSection {
                index: i,
                name: clip(name),
                section,
                count: p.sections.count,
            });
        }
        let rank = usize::from(t.rank);
        if rank > MAX_RANK {
            return Err(BundleError::RankTooLarge {
                tensor: clip(name),
                rank,
            });
        }
        for (axis, d) in t.dims.iter().take(rank).enumerate() {
            if d.get() < crate::DYNAMIC_DIM {
                return Err(BundleError::InvalidDim {
                    tensor: clip(name),
                    axis,
                    value: d.get(),
                });
            }
        }
    }
    Ok(grouped)
}

/// Rejects duplicate section names in O(n log n) with a fixed stack buffer
/// (no allocation sized by the file).
fn check_unique_names(bytes: &[u8], p: &Parsed) -> Result<(), BundleError> {
    let n = p.sections.count as usize; // <= MAX_SECTIONS, checked earlier
    let mut order = [0u16; MAX_SECTIONS];
    let order = order.get_mut(..n).unwrap_or_default();
    for (i, slot) in order.iter_mut().enumerate() {
        *slot = i as u16;
    }
    let name_of = |i: u16| -> &[u8] {
        record::<SectionRecord>(bytes, &p.sections, u32::from(i))
            .and_then(|r| string(bytes, p.strings, &r.name).ok())
            .unwrap_or_default()
            .as_bytes()
    };
    order.sort_unstable_by(|&a, &b| name_of(a).cmp(name_of(b)).then(a.cmp(&b)));
    for w in order.windows(2) {
        if let [a, b] = *w
            && name_of(a) == name_of(b)
        {
            return Err(BundleError::DuplicateSection {
                name: clip(&String::from_utf8_lossy(name_of(a))),
                first: u32::from(a),
                second: u32::from(b),
            });
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Bundle
// ---------------------------------------------------------------------------

/// A memory-mapped bundle file.
struct Mapped {
    // Field order matters: the guard is unregistered before the mapping is
    // unmapped (fields drop in declaration order).
    guard: Option<MapGuard>,
    map: Mmap,
    /// Kept open for the shared `flock` and for `fstat`.
    file: File,
    /// Length and modification time at open.
    len: u64,
    modified: Option<SystemTime>,
}

impl Mapped {
    /// The file changed under the mapping: a read faulted, or its length or
    /// modification time is not what it was at open.
    fn changed(&self) -> bool {
        if self.guard.as_ref().is_some_and(MapGuard::faulted) {
            return true;
        }
        match self.file.metadata() {
            Ok(m) => m.len() != self.len || m.modified().ok() != self.modified,
            Err(_) => false,
        }
    }
}

enum Backing {
    Mmap(Mapped),
    Vec(Vec<u8>),
}

impl Backing {
    fn bytes(&self) -> &[u8] {
        match self {
            Backing::Mmap(m) => &m.map,
            Backing::Vec(v) => v,
        }
    }

    /// Cheap: only the fault flag (an atomic load), no system call.
    fn faulted(&self) -> bool {
        match self {
            Backing::Mmap(m) => m.guard.as_ref().is_some_and(MapGuard::faulted),
            Backing::Vec(_) => false,
        }
    }

    fn changed(&self) -> bool {
        match self {
            Backing::Mmap(m) => m.changed(),
            Backing::Vec(_) => false,
        }
    }
}

const BITSET_WORDS: usize = MAX_SECTIONS / 64;

/// How long [`Bundle::open`] waits for a writer holding an exclusive `flock`
/// on the file (an in-place rewrite in progress).
pub(crate) const LOCK_WAIT: Duration = Duration::from_secs(2);

/// Tensor indices grouped by section (a counting sort of the tensor table),
/// built on first use for a file whose tensor records are not already
/// grouped. `starts[s]..starts[s + 1]` indexes `order` for section `s`.
struct TensorIndex {
    starts: Box<[u32]>,
    order: Box<[u32]>,
}

/// An open bundle: the file's bytes (memory-mapped, or an owned `Vec`) plus
/// the few numbers that [`open`](Self::open) validated.
///
/// Every accessor borrows from the file bytes; no table is copied. All
/// records were validated at open, so accessors do not fail (except the
/// lookups by name or index, and [`section_bytes`](Self::section_bytes)
/// in [`Verify::Lazy`] mode, which checks the section's CRC on first use).
///
/// `Bundle` is `Send + Sync`; the "section verified" bits are atomics.
///
/// # A file changed while open
///
/// A bundle from [`open`](Self::open) holds a shared `flock` on its file
/// for its whole life, and its mapping is registered with a `SIGBUS`
/// handler: if the file is truncated while mapped, the lost pages read as
/// zeros instead of killing the process, and the bundle remembers it.
/// [`section_bytes`](Self::section_bytes), [`section_vec`](Self::section_vec),
/// [`verify_all`](Self::verify_all) and [`ensure_unchanged`](Self::ensure_unchanged)
/// then fail with [`BundleError::ChangedWhileOpen`]; the borrowing accessors
/// ([`identity`](Self::identity), [`sections`](Self::sections), ...) return
/// what is there (empty strings and zeros). Copy what is needed after load
/// ([`section_vec`](Self::section_vec)) and do not touch the mapping on a
/// hot path.
pub struct Bundle {
    backing: Backing,
    path: Option<PathBuf>,
    p: Parsed,
    mode: Verify,
    verified: [AtomicU64; BITSET_WORDS],
    tensor_index: OnceLock<TensorIndex>,
}

impl fmt::Debug for Bundle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bundle")
            .field("path", &self.path)
            .field("file_len", &self.file_len())
            .field("format_version", &self.format_version())
            .field("name", &self.identity().name)
            .field("targets", &self.p.targets.count)
            .field("sections", &self.p.sections.count)
            .field("tensors", &self.p.tensors.count)
            .field("verify", &self.mode)
            .finish()
    }
}

/// Takes a shared `flock` on `file`, waiting up to [`LOCK_WAIT`] while a
/// writer holds an exclusive one. File systems without `flock` are read
/// without the lock.
fn lock_shared(file: &File, path: &Path) -> Result<(), BundleError> {
    let t0 = Instant::now();
    loop {
        match try_flock(file, false) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if t0.elapsed() >= LOCK_WAIT {
                    return Err(FileError::Locked {
                        path: path.to_path_buf(),
                        waited_ms: t0.elapsed().as_millis() as u64,
                    }
                    .into());
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                log::debug!("{}: no shared lock ({e}); reading unlocked", path.display());
                return Ok(());
            }
        }
    }
}

impl Bundle {
    /// Opens and memory-maps the bundle at `path`, validates its header,
    /// manifest and every record, and (with [`Verify::Eager`]) every
    /// section CRC.
    ///
    /// Only a regular file is opened (symbolic links are followed): a FIFO,
    /// device or directory is refused before anything could block. The
    /// bundle then holds a shared `flock` on the file until it is dropped;
    /// if a writer holds an exclusive one (an in-place rewrite following the
    /// rule in `FORMAT.md`), `open` waits up to 2 s for it.
    ///
    /// # Errors
    /// [`BundleError::Io`] if the file cannot be opened or mapped;
    /// [`BundleError::File`] for a path that is not a regular file or a
    /// lock that was not released in time; [`BundleError::ChangedWhileOpen`]
    /// if the file was truncated or rewritten during the open; any of the
    /// format errors for a malformed file (see [`BundleError`]).
    ///
    /// Replacing the file by rename, as
    /// [`BundleWriter::write`](crate::BundleWriter::write) does, leaves an
    /// open `Bundle` reading the old file. Rewriting it in place is detected
    /// (see [A file changed while open](Self#a-file-changed-while-open)),
    /// never a crash.
    pub fn open(path: impl AsRef<Path>, verify: Verify) -> Result<Bundle, BundleError> {
        let path = path.as_ref();
        let io = |op: &'static str| {
            move |source| BundleError::Io {
                path: path.to_path_buf(),
                op,
                source,
            }
        };
        let file = open_regular(path)?;
        lock_shared(&file, path)?;
        let meta = file.metadata().map_err(io("reading metadata of"))?;
        let len = meta.len();
        let backing = if len == 0 {
            // Mapping an empty file is not portable; it is rejected as
            // truncated by parse() anyway.
            Backing::Vec(Vec::new())
        } else {
            // SAFETY: `Mmap::map` is unsafe because the mapping aliases a
            // file that another process could modify or truncate while we
            // hold `&[u8]` borrows into it. Modification only makes us read
            // different bytes: every read is bounds-checked against the
            // mapping length, which never changes, and every CRC-checked
            // result is re-checked against the fault flag. Truncation makes
            // touching the lost pages raise SIGBUS; the mapping is registered
            // with the crate's SIGBUS handler (below, before any byte is
            // read), which maps zero pages there and flags the bundle as
            // changed. Writers that follow FORMAT.md (including
            // `BundleWriter::write`) replace files by rename, which leaves
            // this mapping intact.
            #[allow(unsafe_code)]
            let map = unsafe { Mmap::map(&file) }.map_err(io("mapping"))?;
            let guard = MapGuard::register(map.as_ptr(), map.len());
            Backing::Mmap(Mapped {
                guard,
                map,
                file,
                len,
                modified: meta.modified().ok(),
            })
        };
        Self::from_backing(backing, Some(path.to_path_buf()), verify)
    }

    /// Validates a bundle held in memory. Same checks as [`open`](Self::open).
    ///
    /// A `Vec`'s buffer is not 4096-aligned, so section slices are not
    /// either; use [`open`](Self::open) when the alignment matters.
    pub fn from_vec(bytes: Vec<u8>, verify: Verify) -> Result<Bundle, BundleError> {
        Self::from_backing(Backing::Vec(bytes), None, verify)
    }

    fn from_backing(
        backing: Backing,
        path: Option<PathBuf>,
        mode: Verify,
    ) -> Result<Bundle, BundleError> {
        let changed = |backing: &Backing, e: BundleError| {
            if backing.changed() {
                BundleError::ChangedWhileOpen {
                    path: path.clone().unwrap_or_default(),
                }
            } else {
                e
            }
        };
        let p = match parse(backing.bytes()) {
            Ok(p) => p,
            Err(e) => return Err(changed(&backing, e)),
        };
        let b = Bundle {
            backing,
            path,
            p,
            mode,
            verified: [const { AtomicU64::new(0) }; BITSET_WORDS],
            tensor_index: OnceLock::new(),
        };
        if mode == Verify::Eager {
            for i in 0..b.p.sections.count {
                b.check_section(i)?;
            }
        }
        b.ensure_not_faulted()?;
        log::debug!(
            "opened bundle {}: format {}.{}, {} bytes, {} sections, {} targets",
            b.path
                .as_deref()
                .map_or_else(|| "(in memory)".into(), |p| p.display().to_string()),
            b.p.major,
            b.p.minor,
            b.file_len(),
            b.p.sections.count,
            b.p.targets.count
        );
        Ok(b)
    }

    /// The whole file.
    pub fn as_bytes(&self) -> &[u8] {
        self.backing.bytes()
    }

    /// The path given to [`open`](Self::open); `None` for
    /// [`from_vec`](Self::from_vec).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// File length in bytes.
    pub fn file_len(&self) -> u64 {
        self.as_bytes().len() as u64
    }

    /// `(major, minor)` format version of the file (the minor may be newer
    /// than [`FORMAT_MINOR`]).
    pub fn format_version(&self) -> (u16, u16) {
        (self.p.major, self.p.minor)
    }

    /// The verification mode given at open.
    pub fn verify_mode(&self) -> Verify {
        self.mode
    }

    /// The bundle's identity.
    pub fn identity(&self) -> Identity<'_> {
        let bytes = self.as_bytes();
        let Some(r) = record::<IdentityRecord>(bytes, &self.p.identity, 0) else {
            return Identity::default();
        };
        Identity {
            name: self.str(&r.name),
            family: self.str(&r.family),
            model_version: self.str(&r.model_version),
            tool_version: self.str(&r.tool_version),
            created_unix_s: r.created_unix_s.get(),
            content_digest: r.content_digest,
        }
    }

    /// Number of targets.
    pub fn target_count(&self) -> u32 {
        self.p.targets.count
    }

    /// All targets in table order.
    pub fn targets(&self) -> Targets<'_> {
        Targets {
            bundle: self,
            range: 0..self.p.targets.count,
        }
    }

    /// The target at `index`.
    ///
    /// # Errors
    /// [`BundleError::TargetNotFound`] if `index >= target_count()`.
    pub fn target(&self, index: u32) -> Result<Target<'_>, BundleError> {
        self.target_at(index).ok_or(BundleError::TargetNotFound {
            index,
            count: self.p.targets.count,
        })
    }

    /// Number of sections.
    pub fn section_count(&self) -> u32 {
        self.p.sections.count
    }

    /// All sections in table order (which is also file order).
    pub fn sections(&self) -> Sections<'_> {
        Sections {
            bundle: self,
            range: 0..self.p.sections.count,
        }
    }

    /// The section named `name`.
    ///
    /// # Errors
    /// [`BundleError::MissingSection`] if there is none.
    pub fn section(&self, name: &str) -> Result<Section<'_>, BundleError> {
        self.sections()
            .find(|s| s.name == name)
            .ok_or_else(|| BundleError::MissingSection { name: clip(name) })
    }

    /// The section at table position `index`.
    ///
    /// # Errors
    /// [`BundleError::SectionNotFound`] if `index >= section_count()`.
    pub fn section_at(&self, index: u32) -> Result<Section<'_>, BundleError> {
        self.section_rec(index).ok_or(BundleError::SectionNotFound {
            index,
            count: self.p.sections.count,
        })
    }

    /// The first section (in table order) of `kind` whose target equals
    /// `target` exactly (`None` matches only sections without a target).
    pub fn find_section(&self, kind: SectionKind, target: Option<u32>) -> Option<Section<'_>> {
        self.sections()
            .find(|s| s.kind == kind && s.target == target)
    }

    /// The payload of `section`, borrowed from the file (for a bundle from
    /// [`open`](Self::open), its address is a multiple of 4096).
    ///
    /// The section is identified by `section.index`. In [`Verify::Lazy`]
    /// mode the CRC is checked on the first successful call for each
    /// section.
    ///
    /// The bytes are the file's, not a copy: if the file is truncated or
    /// rewritten in place while they are being read, they read as zeros (or
    /// as the new contents). Call [`ensure_unchanged`](Self::ensure_unchanged)
    /// after consuming them (e.g. after an engine has deserialized a plan),
    /// or use [`section_vec`](Self::section_vec) for a checked copy.
    ///
    /// # Errors
    /// [`BundleError::SectionNotFound`] for an index out of range;
    /// [`BundleError::SectionCrcMismatch`] if the payload is corrupt;
    /// [`BundleError::ChangedWhileOpen`] if the file changed under the
    /// mapping.
    pub fn section_bytes(&self, section: &Section<'_>) -> Result<&[u8], BundleError> {
        let index = section.index;
        if !self.is_section_verified(index) {
            self.check_section(index)?;
        }
        let data = self.raw_section(index).map(|(_, b)| b).unwrap_or_default();
        self.ensure_not_faulted()?;
        Ok(data)
    }

    /// An owned copy of `section`'s payload, whose CRC-32 is checked on the
    /// copy itself (whatever the verification mode, and even if the section
    /// was verified before). The copy stays valid whatever happens to the
    /// file afterwards: use it for the small assets (labels, configuration)
    /// that are used after load.
    ///
    /// # Errors
    /// [`BundleError::SectionNotFound`] for an index out of range;
    /// [`BundleError::SectionCrcMismatch`] if the copy does not match the
    /// stored CRC; [`BundleError::ChangedWhileOpen`] if the file changed
    /// under the mapping.
    pub fn section_vec(&self, section: &Section<'_>) -> Result<Vec<u8>, BundleError> {
        let index = section.index;
        let (r, data) = self
            .raw_section(index)
            .ok_or(BundleError::SectionNotFound {
                index,
                count: self.p.sections.count,
            })?;
        let stored = r.crc32.get();
        let copy = data.to_vec();
        let computed = crc32fast::hash(&copy);
        // Checked after the copy: a fault while copying zeroed what we read.
        self.ensure_not_faulted()?;
        if computed != stored {
            return Err(self.changed_or(BundleError::SectionCrcMismatch {
                section: SectionId::new(index, Some(self.str(&r.name))),
                stored,
                computed,
            }));
        }
        self.mark_verified(index);
        Ok(copy)
    }

    /// Whether the file was truncated or rewritten in place since
    /// [`open`](Self::open): a read of the mapping faulted, or the file's
    /// length or modification time changed (one `fstat`). Always `false` for
    /// [`from_vec`](Self::from_vec).
    pub fn changed_while_open(&self) -> bool {
        self.backing.changed()
    }

    /// `Ok` unless [`changed_while_open`](Self::changed_while_open).
    ///
    /// # Errors
    /// [`BundleError::ChangedWhileOpen`] naming the file.
    pub fn ensure_unchanged(&self) -> Result<(), BundleError> {
        if self.changed_while_open() {
            Err(self.changed_error())
        } else {
            Ok(())
        }
    }

    /// Shorthand for `section_bytes(&section(name)?)`.
    pub fn section_data(&self, name: &str) -> Result<&[u8], BundleError> {
        let s = self.section(name)?;
        self.section_bytes(&s)
    }

    /// Whether section `index`'s CRC has been checked and matched.
    pub fn is_section_verified(&self, index: u32) -> bool {
        let (word, bit) = (index as usize / 64, index % 64);
        self.verified
            .get(word)
            .is_some_and(|w| w.load(Ordering::Acquire) & (1u64 << bit) != 0)
    }

    /// Number of tensors in the tensor table (all sections).
    pub fn tensor_count(&self) -> u32 {
        self.p.tensors.count
    }

    /// The I/O tensors of section `section_index`, in table order. Empty for
    /// a section without tensors or an index out of range.
    ///
    /// Cost: when the tensor table is grouped by section in section order
    /// (as the reference writer lays it out), a binary search, O(log T) for
    /// T tensors, then O(1) per tensor. Otherwise the first call builds an
    /// index of the whole table in O(T + S) time and 4 bytes per tensor (S
    /// sections), and later calls cost O(1) per tensor. Listing every
    /// section's tensors is linear in the table either way.
    pub fn tensors(&self, section_index: u32) -> Tensors<'_> {
        let inner = if section_index >= self.p.sections.count {
            TensorsInner::Range(0..0)
        } else if self.p.tensors_grouped {
            TensorsInner::Range(self.grouped_tensor_range(section_index))
        } else {
            let idx = self.tensor_index.get_or_init(|| self.build_tensor_index());
            let s = section_index as usize;
            let from = idx.starts.get(s).copied().unwrap_or(0) as usize;
            let to = idx.starts.get(s + 1).copied().unwrap_or(0) as usize;
            TensorsInner::Indexed(idx.order.get(from..to).unwrap_or_default().iter())
        };
        Tensors {
            bundle: self,
            inner,
        }
    }

    /// Every tensor of every section, in table order.
    pub fn all_tensors(&self) -> Tensors<'_> {
        Tensors {
            bundle: self,
            inner: TensorsInner::Range(0..self.p.tensors.count),
        }
    }

    /// Full verification: re-checks the header and manifest CRCs, checks
    /// every section CRC, that every byte outside the header, manifest and
    /// sections is zero, the whole-file CRC, and the SHA-256 content digest.
    /// Reads the whole file once. Marks every section verified.
    ///
    /// # Errors
    /// The first failure found: [`BundleError::HeaderCrcMismatch`],
    /// [`BundleError::ManifestCrcMismatch`],
    /// [`BundleError::SectionCrcMismatch`], [`BundleError::NonZeroPadding`],
    /// [`BundleError::FileCrcMismatch`] or [`BundleError::DigestMismatch`];
    /// [`BundleError::ChangedWhileOpen`] instead of any of these if the
    /// file changed under the mapping.
    pub fn verify_all(&self) -> Result<VerifyReport, BundleError> {
        match self.verify_all_inner() {
            Ok(r) => self.ensure_not_faulted().map(|()| r),
            Err(e) => Err(self.changed_or(e)),
        }
    }

    fn verify_all_inner(&self) -> Result<VerifyReport, BundleError> {
        const CHUNK: usize = 1 << 20;
        let bytes = self.as_bytes();
        let p = &self.p;

        let header = bytes.get(..p.header_size).unwrap_or_default();
        let computed = header_crc(header).unwrap_or_default();
        if computed != p.header_crc32 {
            return Err(BundleError::HeaderCrcMismatch {
                stored: p.header_crc32,
                computed,
            });
        }
        let manifest = bytes.get(p.manifest.0..p.manifest.1).unwrap_or_default();
        let computed = crc32fast::hash(manifest);
        if computed != p.manifest_crc32 {
            return Err(BundleError::ManifestCrcMismatch {
                stored: p.manifest_crc32,
                computed,
            });
        }

        let mut file_crc = crc32fast::Hasher::new();
        let mut sha = Sha256::new();
        let gap = |from: usize, to: usize, region: &dyn Fn() -> String| {
            let g = bytes.get(from..to).unwrap_or_default();
            match g.iter().position(|&b| b != 0) {
                None => Ok(g),
                Some(pos) => Err(BundleError::NonZeroPadding {
                    offset: (from + pos) as u64,
                    value: g.get(pos).copied().unwrap_or_default(),
                    region: region(),
                }),
            }
        };
        file_crc.update(gap(p.header_size, p.manifest.0, &|| {
            "between the header and the manifest".to_owned()
        })?);
        file_crc.update(manifest);
        let mut cursor = p.manifest.1;
        for i in 0..p.sections.count {
            let Some((s, data)) = self.raw_section(i) else {
                continue;
            };
            let start = usize::try_from(s.offset.get()).unwrap_or(cursor);
            let id = || SectionId::new(i, Some(self.str(&s.name)));
            file_crc.update(gap(cursor, start, &|| format!("before section {}", id()))?);
            let mut h = crc32fast::Hasher::new();
            for chunk in data.chunks(CHUNK) {
                h.update(chunk);
                sha.update(chunk);
            }
            file_crc.combine(&h);
            let computed = h.finalize();
            if computed != s.crc32.get() {
                return Err(BundleError::SectionCrcMismatch {
                    section: id(),
                    stored: s.crc32.get(),
                    computed,
                });
            }
            self.mark_verified(i);
            cursor = start.saturating_add(data.len()).max(cursor);
        }
        file_crc.update(gap(cursor, bytes.len(), &|| {
            "after the last section".to_owned()
        })?);

        let computed = file_crc.finalize();
        if computed != p.file_crc32 {
            return Err(BundleError::FileCrcMismatch {
                start: p.header_size as u64,
                end: bytes.len() as u64,
                stored: p.file_crc32,
                computed,
            });
        }
        let computed: [u8; 32] = sha.finalize().into();
        let stored = self.identity().content_digest;
        if computed != stored {
            return Err(BundleError::DigestMismatch { stored, computed });
        }
        Ok(VerifyReport {
            bytes_checked: bytes.len() as u64,
            sections_checked: p.sections.count,
        })
    }

    // ----- internals -------------------------------------------------------

    /// A validated string; "" is unreachable after open's validation.
    fn str(&self, r: &StrRef) -> &str {
        string(self.as_bytes(), self.p.strings, r).unwrap_or_default()
    }

    fn target_at(&self, index: u32) -> Option<Target<'_>> {
        let r: &TargetRecord = record(self.as_bytes(), &self.p.targets, index)?;
        Some(Target {
            index,
            name: self.str(&r.name),
            arch: ArchCode::from_raw(r.arch.get()),
            sm: (r.sm_major != 0).then_some((r.sm_major, r.sm_minor)),
            engine: EngineCode::from_raw(r.engine.get()),
            tensorrt_version: r.tensorrt_version.get(),
            hardware_compat: r.hardware_compat.get(),
            flags: r.flags.get(),
        })
    }

    fn section_rec(&self, index: u32) -> Option<Section<'_>> {
        let r: &SectionRecord = record(self.as_bytes(), &self.p.sections, index)?;
        let target = r.target.get();
        Some(Section {
            index,
            kind: SectionKind::from_raw(r.kind.get()),
            name: self.str(&r.name),
            target: (target != NO_TARGET).then_some(target),
            flags: r.flags.get(),
            offset: r.offset.get(),
            length: r.length.get(),
            crc32: r.crc32.get(),
        })
    }

    fn raw_section(&self, index: u32) -> Option<(&SectionRecord, &[u8])> {
        let bytes = self.as_bytes();
        let r: &SectionRecord = record(bytes, &self.p.sections, index)?;
        let start = usize::try_from(r.offset.get()).ok()?;
        let end = start.checked_add(usize::try_from(r.length.get()).ok()?)?;
        Some((r, bytes.get(start..end)?))
    }

    fn check_section(&self, index: u32) -> Result<(), BundleError> {
        let (r, data) = self
            .raw_section(index)
            .ok_or(BundleError::SectionNotFound {
                index,
                count: self.p.sections.count,
            })?;
        let computed = crc32fast::hash(data);
        if computed != r.crc32.get() {
            return Err(self.changed_or(BundleError::SectionCrcMismatch {
                section: SectionId::new(index, Some(self.str(&r.name))),
                stored: r.crc32.get(),
                computed,
            }));
        }
        // A fault while hashing zeroed what was hashed: do not remember it.
        self.ensure_not_faulted()?;
        self.mark_verified(index);
        Ok(())
    }

    fn changed_error(&self) -> BundleError {
        BundleError::ChangedWhileOpen {
            path: self.path.clone().unwrap_or_default(),
        }
    }

    /// `e`, or [`BundleError::ChangedWhileOpen`] when the file changed under
    /// us (then `e` is a consequence, not the file's own defect).
    fn changed_or(&self, e: BundleError) -> BundleError {
        if self.changed_while_open() {
            self.changed_error()
        } else {
            e
        }
    }

    /// Only the fault flag (an atomic load): what must hold after every
    /// read whose result is trusted.
    fn ensure_not_faulted(&self) -> Result<(), BundleError> {
        if self.backing.faulted() {
            Err(self.changed_error())
        } else {
            Ok(())
        }
    }

    fn tensor_section(&self, i: u32) -> Option<u32> {
        record::<TensorRecord>(self.as_bytes(), &self.p.tensors, i).map(|r| r.section.get())
    }

    /// The contiguous run of section `s`'s tensors in a grouped table.
    fn grouped_tensor_range(&self, s: u32) -> Range<u32> {
        // First index whose section is >= `key` (records are in
        // non-decreasing section order; an unreadable record sorts last).
        let lower_bound = |key: u32| {
            let (mut lo, mut hi) = (0u32, self.p.tensors.count);
            while lo < hi {
                let mid = lo + (hi - lo) / 2;
                if self.tensor_section(mid).is_some_and(|x| x < key) {
                    lo = mid + 1;
                } else {
                    hi = mid;
                }
            }
            lo
        };
        let from = lower_bound(s);
        let to = s.checked_add(1).map_or(self.p.tensors.count, lower_bound);
        from..to.max(from)
    }

    /// Counting sort of the tensor table by section: O(T + S).
    fn build_tensor_index(&self) -> TensorIndex {
        let sections = self.p.sections.count as usize;
        let count = self.p.tensors.count;
        let mut starts = vec![0u32; sections + 1].into_boxed_slice();
        for i in 0..count {
            if let Some(slot) = self
                .tensor_section(i)
                .and_then(|s| starts.get_mut(s as usize + 1))
            {
                *slot += 1;
            }
        }
        for k in 1..starts.len() {
            let prev = starts.get(k - 1).copied().unwrap_or(0);
            if let Some(x) = starts.get_mut(k) {
                *x += prev;
            }
        }
        let total = starts.last().copied().unwrap_or(0) as usize;
        let mut order = vec![0u32; total].into_boxed_slice();
        let mut next: Vec<u32> = starts.iter().take(sections).copied().collect();
        for i in 0..count {
            let Some(s) = self.tensor_section(i) else {
                continue;
            };
            if let Some(pos) = next.get_mut(s as usize) {
                if let Some(o) = order.get_mut(*pos as usize) {
                    *o = i;
                }
                *pos += 1;
            }
        }
        TensorIndex { starts, order }
    }

    fn mark_verified(&self, index: u32) {
        if let Some(w) = self.verified.get(index as usize / 64) {
            w.fetch_or(1u64 << (index % 64), Ordering::Release);
        }
    }
}

/// Iterator over the targets of a bundle ([`Bundle::targets`]).
#[derive(Clone, Debug)]
pub struct Targets<'a> {
    bundle: &'a Bundle,
    range: Range<u32>,
}

impl<'a> Iterator for Targets<'a> {
    type Item = Target<'a>;
    fn next(&mut self) -> Option<Target<'a>> {
        self.range.next().and_then(|i| self.bundle.target_at(i))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }
}

impl ExactSizeIterator for Targets<'_> {}

impl DoubleEndedIterator for Targets<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.range
            .next_back()
            .and_then(|i| self.bundle.target_at(i))
    }
}

/// Iterator over the sections of a bundle ([`Bundle::sections`]).
#[derive(Clone, Debug)]
pub struct Sections<'a> {
    bundle: &'a Bundle,
    range: Range<u32>,
}

impl<'a> Iterator for Sections<'a> {
    type Item = Section<'a>;
    fn next(&mut self) -> Option<Section<'a>> {
        self.range.next().and_then(|i| self.bundle.section_rec(i))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        self.range.size_hint()
    }
}

impl ExactSizeIterator for Sections<'_> {}

impl DoubleEndedIterator for Sections<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        self.range
            .next_back()
            .and_then(|i| self.bundle.section_rec(i))
    }
}

/// Iterator over tensors ([`Bundle::tensors`], [`Bundle::all_tensors`]).
///
/// Every step decodes exactly one tensor record; the length is known up
/// front.
#[derive(Clone, Debug)]
pub struct Tensors<'a> {
    bundle: &'a Bundle,
    inner: TensorsInner<'a>,
}

#[derive(Clone, Debug)]
enum TensorsInner<'a> {
    /// Consecutive records, all of the wanted section (or all of them).
    Range(Range<u32>),
    /// Record indices from [`TensorIndex`].
    Indexed(std::slice::Iter<'a, u32>),
}

impl<'a> Tensors<'a> {
    fn info(&self, i: u32) -> Option<TensorInfo<'a>> {
        let b = self.bundle;
        let r = record::<TensorRecord>(b.as_bytes(), &b.p.tensors, i)?;
        let rank = usize::from(r.rank).min(MAX_RANK);
        Some(TensorInfo {
            index: i,
            section: r.section.get(),
            name: b.str(&r.name),
            mode: IoMode::from_raw(r.mode),
            dtype: DType::from_raw(r.dtype),
            layout: Layout::from_raw(r.layout),
            dims: Dims(r.dims.get(..rank).unwrap_or_default()),
        })
    }
}

impl<'a> Iterator for Tensors<'a> {
    type Item = TensorInfo<'a>;
    fn next(&mut self) -> Option<TensorInfo<'a>> {
        // Records were validated at open, so `info` does not fail.
        let i = match &mut self.inner {
            TensorsInner::Range(r) => r.next()?,
            TensorsInner::Indexed(it) => *it.next()?,
        };
        self.info(i)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match &self.inner {
            TensorsInner::Range(r) => r.len(),
            TensorsInner::Indexed(it) => it.len(),
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for Tensors<'_> {}

impl DoubleEndedIterator for Tensors<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let i = match &mut self.inner {
            TensorsInner::Range(r) => r.next_back()?,
            TensorsInner::Indexed(it) => *it.next_back()?,
        };
        self.info(i)
    }
}
