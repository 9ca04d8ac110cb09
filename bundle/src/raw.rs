//! The on-disk records, exactly as they lie in the file.
//!
//! Every struct here is `#[repr(C)]`, built only from `u8` arrays and
//! zerocopy's little-endian integer wrappers, so it has alignment 1, no
//! padding, and the same layout on every host. The reader borrows these
//! records straight out of the file bytes (the memory map) with zerocopy; the
//! writer serialises them with [`IntoBytes`].
//!
//! The byte layout of each record is specified field by field in
//! `FORMAT.md`; the compile-time assertions at the bottom of this module pin
//! the sizes stated there.
//!
//! Most users want [`Bundle`](crate::Bundle) and
//! [`BundleWriter`](crate::BundleWriter) instead. This module is public for
//! tooling, tests and fuzzing (see [`reseal`]).

use zerocopy::little_endian::{I64, U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::MAX_RANK;

/// Size in bytes of [`FileHeader`] as defined by format 1.0.
pub const HEADER_SIZE_V1: usize = 144;
/// Size in bytes of [`TableRef`].
pub const TABLE_REF_SIZE: usize = 16;
/// Size in bytes of [`StrRef`].
pub const STR_REF_SIZE: usize = 8;
/// Size in bytes of [`IdentityRecord`] as defined by format 1.0.
pub const IDENTITY_RECORD_SIZE_V1: usize = 72;
/// Size in bytes of [`TargetRecord`] as defined by format 1.0.
pub const TARGET_RECORD_SIZE_V1: usize = 32;
/// Size in bytes of [`SectionRecord`] as defined by format 1.0.
pub const SECTION_RECORD_SIZE_V1: usize = 40;
/// Size in bytes of [`TensorRecord`] as defined by format 1.0.
pub const TENSOR_RECORD_SIZE_V1: usize = 80;

/// Byte offset of [`FileHeader::header_crc32`] inside the header. The header
/// CRC is computed with these four bytes taken as zero.
pub const HEADER_CRC_OFFSET: usize = 16;

/// `SectionRecord::target` value meaning "this section belongs to no target".
pub const NO_TARGET: u32 = u32::MAX;

/// Location of one table inside the manifest.
///
/// Layout (16 bytes): `offset: u64` at 0, `count: u32` at 8,
/// `record_size: u32` at 12.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct TableRef {
    /// Absolute file offset of the first record, in bytes.
    pub offset: U64,
    /// Number of records (for the string table: number of bytes).
    pub count: U32,
    /// Stride between records, in bytes. At least the record size this
    /// reader knows; a newer minor may make it larger (the reader reads the
    /// known prefix of each record). Always 1 for the string table.
    pub record_size: U32,
}

/// Reference to a UTF-8 string in the string table.
///
/// Layout (8 bytes): `offset: u32` at 0 (relative to the start of the string
/// table), `len: u32` at 4 (bytes, not characters). No terminator.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, Default)]
#[repr(C)]
pub struct StrRef {
    /// Offset of the first byte, relative to the start of the string table.
    pub offset: U32,
    /// Length in bytes.
    pub len: U32,
}

/// The fixed header at file offset 0 (144 bytes in format 1.0).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct FileHeader {
    /// [`MAGIC`](crate::MAGIC).
    pub magic: [u8; 8],
    /// Format major version; a reader rejects any major it does not know.
    pub major: U16,
    /// Format minor version; a reader accepts any minor of its major.
    pub minor: U16,
    /// Size of this header in bytes (>= 144; a newer minor may append fields).
    pub header_size: U32,
    /// CRC-32 of bytes `[0, header_size)` with this field taken as zero.
    pub header_crc32: U32,
    /// Reserved header flags; none are defined in 1.0 (written as 0, ignored).
    pub flags: U32,
    /// Total file length in bytes.
    pub file_length: U64,
    /// Absolute offset of the manifest (>= `header_size`).
    pub manifest_offset: U64,
    /// Length of the manifest in bytes.
    pub manifest_length: U64,
    /// CRC-32 of the manifest bytes.
    pub manifest_crc32: U32,
    /// CRC-32 of file bytes `[header_size, file_length)`.
    pub file_crc32: U32,
    /// Identity table (exactly one [`IdentityRecord`]).
    pub identity: TableRef,
    /// Target table ([`TargetRecord`]s).
    pub targets: TableRef,
    /// Section table ([`SectionRecord`]s).
    pub sections: TableRef,
    /// Tensor table ([`TensorRecord`]s).
    pub tensors: TableRef,
    /// String table (`count` = byte length, `record_size` = 1).
    pub strings: TableRef,
    /// Reserved, written as zero, ignored by readers.
    pub reserved: [u8; 8],
}

/// Who the bundle is (72 bytes in format 1.0).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct IdentityRecord {
    /// Bundle name, e.g. `yolo-nano-coco`.
    pub name: StrRef,
    /// Model family, e.g. `detect`.
    pub family: StrRef,
    /// Model version, free-form (e.g. `2.1.0`).
    pub model_version: StrRef,
    /// Version of the tool that wrote the bundle.
    pub tool_version: StrRef,
    /// Creation time, seconds since the Unix epoch (UTC).
    pub created_unix_s: U64,
    /// SHA-256 over every section payload, concatenated in table order.
    pub content_digest: [u8; 32],
}

/// One execution target (32 bytes in format 1.0).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct TargetRecord {
    /// Target name, e.g. `orin-sm87-trt10`.
    pub name: StrRef,
    /// [`ArchCode`](crate::ArchCode) raw value (table 5.2).
    pub arch: U16,
    /// [`EngineCode`](crate::EngineCode) raw value (table 5.3).
    pub engine: U16,
    /// CUDA compute capability major; 0 = no GPU requirement.
    pub sm_major: u8,
    /// CUDA compute capability minor.
    pub sm_minor: u8,
    /// Reserved, written as zero.
    pub reserved0: [u8; 2],
    /// TensorRT version `MAJOR*10000 + MINOR*100 + PATCH`; 0 = not applicable.
    pub tensorrt_version: U32,
    /// TensorRT hardware-compatibility level (0 = none / same SM only).
    pub hardware_compat: U32,
    /// `TARGET_FLAG_*` bits.
    pub flags: U32,
    /// Reserved, written as zero.
    pub reserved1: [u8; 4],
}

/// One payload section (40 bytes in format 1.0).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct SectionRecord {
    /// Section name, unique within the bundle.
    pub name: StrRef,
    /// [`SectionKind`](crate::SectionKind) raw value.
    pub kind: U32,
    /// Index into the target table, or [`NO_TARGET`].
    pub target: U32,
    /// Absolute offset of the payload; a multiple of 4096.
    pub offset: U64,
    /// Payload length in bytes.
    pub length: U64,
    /// CRC-32 of the payload bytes.
    pub crc32: U32,
    /// Section flags; none are defined in 1.0 (opaque to the reader).
    pub flags: U32,
}

/// One input or output tensor of an engine section (80 bytes in format 1.0).
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug)]
#[repr(C)]
pub struct TensorRecord {
    /// Tensor name as the engine knows it.
    pub name: StrRef,
    /// Index of the section (engine) this tensor belongs to.
    pub section: U32,
    /// [`IoMode`](crate::IoMode) raw value.
    pub mode: u8,
    /// [`DType`](crate::DType) raw value.
    pub dtype: u8,
    /// [`Layout`](crate::Layout) raw value.
    pub layout: u8,
    /// Number of dimensions, 0..=8.
    pub rank: u8,
    /// Dimensions; the first `rank` are used, `-1` marks a dynamic dimension,
    /// the rest are written as 0 and ignored.
    pub dims: [I64; MAX_RANK],
}

const _: () = {
    assert!(size_of::<FileHeader>() == HEADER_SIZE_V1);
    assert!(size_of::<TableRef>() == TABLE_REF_SIZE);
    assert!(size_of::<StrRef>() == STR_REF_SIZE);
    assert!(size_of::<IdentityRecord>() == IDENTITY_RECORD_SIZE_V1);
    assert!(size_of::<TargetRecord>() == TARGET_RECORD_SIZE_V1);
    assert!(size_of::<SectionRecord>() == SECTION_RECORD_SIZE_V1);
    assert!(size_of::<TensorRecord>() == TENSOR_RECORD_SIZE_V1);
    assert!(align_of::<FileHeader>() == 1);
    assert!(align_of::<IdentityRecord>() == 1);
    assert!(align_of::<TargetRecord>() == 1);
    assert!(align_of::<SectionRecord>() == 1);
    assert!(align_of::<TensorRecord>() == 1);
};

/// CRC-32 of a header (`bytes[..header_size]`) with the `header_crc32` field
/// taken as zero. Returns `None` if `header` is shorter than 20 bytes.
pub fn header_crc(header: &[u8]) -> Option<u32> {
    let before = header.get(..HEADER_CRC_OFFSET)?;
    let after = header.get(HEADER_CRC_OFFSET + 4..)?;
    let mut h = crc32fast::Hasher::new();
    h.update(before);
    h.update(&[0u8; 4]);
    h.update(after);
    Some(h.finalize())
}

/// Recomputes, in place, the three file-level checksums of a bundle image:
/// the whole-file CRC (over `[header_size, len)`), the manifest CRC (if the
/// manifest range lies inside `bytes`) and finally the header CRC.
///
/// Section CRCs and the content digest are left alone. Nothing else is
/// validated; this exists so that tests and fuzzers can make a deliberate
/// change deep inside a file and still get past the outer checksums.
/// Returns `false` (and changes nothing) when the header cannot be read.
pub fn reseal(bytes: &mut [u8]) -> bool {
    let Ok((hdr, _)) = FileHeader::ref_from_prefix(bytes) else {
        return false;
    };
    let Ok(header_size) = usize::try_from(hdr.header_size.get()) else {
        return false;
    };
    if header_size < HEADER_SIZE_V1 || header_size > bytes.len() {
        return false;
    }
    let m_off = usize::try_from(hdr.manifest_offset.get()).ok();
    let m_len = usize::try_from(hdr.manifest_length.get()).ok();
    let manifest_crc = match (m_off, m_len) {
        (Some(o), Some(l)) => o
            .checked_add(l)
            .and_then(|end| bytes.get(o..end))
            .map(crc32fast::hash),
        _ => None,
    };
    let file_crc = bytes.get(header_size..).map(crc32fast::hash);
    let Ok((hdr, _)) = FileHeader::mut_from_prefix(bytes) else {
        return false;
    };
    if let Some(c) = manifest_crc {
        hdr.manifest_crc32 = U32::new(c);
    }
    if let Some(c) = file_crc {
        hdr.file_crc32 = U32::new(c);
    }
    let Some(crc) = bytes.get(..header_size).and_then(header_crc) else {
        return false;
    };
    let Ok((hdr, _)) = FileHeader::mut_from_prefix(bytes) else {
        return false;
    };
    hdr.header_crc32 = U32::new(crc);
    true
}
