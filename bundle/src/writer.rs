//! Building a bundle.

use std::collections::{HashMap, HashSet};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};
use zerocopy::IntoBytes;
use zerocopy::little_endian::{I64, U16, U32, U64};

use crate::error::{BundleError, clip};
use crate::files::AtomicFile;
use crate::raw::{
    FileHeader, HEADER_CRC_OFFSET, IdentityRecord, NO_TARGET, SectionRecord, StrRef, TableRef,
    TargetRecord, TensorRecord, header_crc,
};
use crate::{
    CpuArch, DType, EngineKind, FORMAT_MAJOR, FORMAT_MINOR, IoMode, Layout, MAGIC, MAX_NAME_LEN,
    MAX_RANK, MAX_SECTIONS, SECTION_ALIGN, SectionKind,
};

/// Identity of a bundle to write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IdentityDesc {
    /// Bundle name; 1..=255 bytes of UTF-8.
    pub name: String,
    /// Model family (e.g. `detect`); at most 255 bytes, may be empty.
    pub family: String,
    /// Model version, free-form; at most 255 bytes, may be empty.
    pub model_version: String,
    /// Version of the tool writing the bundle; at most 255 bytes, may be empty.
    pub tool_version: String,
    /// Creation time, seconds since the Unix epoch (UTC). The writer does not
    /// read the clock, so output is reproducible.
    pub created_unix_s: u64,
}

/// An execution target to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TargetDesc {
    /// Target name; 1..=255 bytes of UTF-8.
    pub name: String,
    /// CPU architecture required.
    pub arch: CpuArch,
    /// CUDA compute capability `(major, minor)` with `major >= 1`; `None` =
    /// no GPU requirement.
    pub sm: Option<(u8, u8)>,
    /// Engine used on this target.
    pub engine: EngineKind,
    /// TensorRT version `MAJOR*10000 + MINOR*100 + PATCH`; 0 = not applicable.
    pub tensorrt_version: u32,
    /// TensorRT hardware-compatibility level; 0 = none.
    pub hardware_compat: u32,
    /// `TARGET_FLAG_*` bits.
    pub flags: u32,
}

/// An engine input or output to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorDesc {
    /// Tensor name; 1..=255 bytes of UTF-8, unique within its section.
    pub name: String,
    /// Input or output.
    pub mode: IoMode,
    /// Element type.
    pub dtype: DType,
    /// Memory layout.
    pub layout: Layout,
    /// Shape: at most [`MAX_RANK`] values, each `>= 0` or `-1` (dynamic).
    pub dims: Vec<i64>,
}

/// What [`BundleWriter::write`] produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WriteSummary {
    /// The final path.
    pub path: PathBuf,
    /// File length in bytes.
    pub file_len: u64,
    /// Number of sections.
    pub sections: u32,
    /// Whole-file CRC-32 (over `[header_size, file_len)`).
    pub file_crc32: u32,
    /// SHA-256 content digest.
    pub content_digest: [u8; 32],
}

#[derive(Clone, Debug)]
struct PendingSection {
    kind: SectionKind,
    name: String,
    target: Option<u32>,
    flags: u32,
    data: Vec<u8>,
    tensors: Vec<TensorDesc>,
    /// Names in `tensors`, for the duplicate check in O(1).
    tensor_names: HashSet<String>,
}

/// Test-only knob: write records as a newer minor would.
#[derive(Clone, Copy, Debug)]
struct NewerMinor {
    minor: u16,
    extra: u32,
    fill: u8,
}

/// Builds a bundle in memory and writes it.
///
/// Inputs are validated as they are added (names, references, ranks), with
/// typed errors; [`to_bytes`](Self::to_bytes) and [`write`](Self::write)
/// compute the layout, every CRC and the content digest.
#[derive(Clone, Debug)]
pub struct BundleWriter {
    identity: IdentityDesc,
    targets: Vec<TargetDesc>,
    sections: Vec<PendingSection>,
    newer_minor: Option<NewerMinor>,
}

/// The file's layout: everything computed before any byte is written.
struct FileLayout {
    header: Vec<u8>,
    manifest_offset: u64,
    manifest: Vec<u8>,
    section_offsets: Vec<u64>,
    file_len: u64,
    file_crc32: u32,
    digest: [u8; 32],
}

/// The string table and the reference of every name in it, in table order.
struct Names {
    /// Name, family, model version, tool version.
    identity: [StrRef; 4],
    targets: Vec<StrRef>,
    sections: Vec<StrRef>,
    /// Every section's tensors, in section order.
    tensors: Vec<StrRef>,
    /// The string table's bytes.
    strings: Vec<u8>,
}

/// Where the manifest and each of its tables lie in the file.
struct Tables {
    /// The manifest's first byte (after the header, 8-aligned).
    offset: u64,
    /// One past its last byte.
    end: u64,
    identity: TableRef,
    targets: TableRef,
    sections: TableRef,
    tensors: TableRef,
    strings: TableRef,
}

/// Where each section lies in the file, its CRC, the file's length and the content digest.
struct Sections {
    offsets: Vec<u64>,
    crcs: Vec<crc32fast::Hasher>,
    file_len: u64,
    digest: [u8; 32],
}

/// The rule every name the writer stores obeys (bundle, model, version, section, tensor and
/// target names): at most [`crate::MAX_NAME_LEN`] bytes, and not empty where `required`.
/// Public so that a tool can refuse a name before any work with the writer's own rule.
///
/// # Errors
/// [`BundleError::EmptyName`] (`required` and empty) or [`BundleError::NameTooLong`], each
/// naming `what` (`"bundle name"`).
pub fn check_name(what: &'static str, name: &str, required: bool) -> Result<(), BundleError> {
    if required && name.is_empty() {
        return Err(BundleError::EmptyName { what });
    }
    if name.len() > MAX_NAME_LEN {
        return Err(BundleError::NameTooLong {
            what,
            name: clip(name),
            len: name.len(),
        });
    }
    Ok(())
}

fn align_up(v: u64, align: u64) -> Result<u64, BundleError> {
    v.checked_next_multiple_of(align)
        .ok_or(BundleError::TooLarge { what: "bundle" })
}

fn u32_of(v: usize, what: &'static str) -> Result<u32, BundleError> {
    u32::try_from(v).map_err(|_| BundleError::TooLarge { what })
}

fn add(a: u64, b: u64) -> Result<u64, BundleError> {
    a.checked_add(b)
        .ok_or(BundleError::TooLarge { what: "bundle" })
}

const ZEROS: [u8; 4096] = [0; 4096];

fn write_zeros(w: &mut impl Write, mut n: u64) -> io::Result<()> {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        w.write_all(ZEROS.get(..k).unwrap_or_default())?;
        n -= k as u64;
    }
    Ok(())
}

fn crc_zeros(h: &mut crc32fast::Hasher, mut n: u64) {
    while n > 0 {
        let k = n.min(ZEROS.len() as u64) as usize;
        h.update(ZEROS.get(..k).unwrap_or_default());
        n -= k as u64;
    }
}

struct Strings {
    bytes: Vec<u8>,
    seen: HashMap<String, StrRef>,
}

impl Strings {
    fn intern(&mut self, s: &str) -> Result<StrRef, BundleError> {
        if let Some(r) = self.seen.get(s) {
            return Ok(*r);
        }
        let r = StrRef {
            offset: U32::new(u32_of(self.bytes.len(), "string table")?),
            len: U32::new(u32_of(s.len(), "string")?),
        };
        self.bytes.extend_from_slice(s.as_bytes());
        u32_of(self.bytes.len(), "string table")?;
        self.seen.insert(s.to_owned(), r);
        Ok(r)
    }
}

impl BundleWriter {
    /// Starts a bundle with `identity` (validated when writing).
    pub fn new(identity: IdentityDesc) -> Self {
        BundleWriter {
            identity,
            targets: Vec::new(),
            sections: Vec::new(),
            newer_minor: None,
        }
    }

    /// Adds a target and returns its index (0, 1, ...).
    ///
    /// # Errors
    /// [`BundleError::EmptyName`], [`BundleError::NameTooLong`],
    /// [`BundleError::InvalidSm`] (major 0), [`BundleError::TooLarge`].
    pub fn add_target(&mut self, t: TargetDesc) -> Result<u32, BundleError> {
        check_name("target name", &t.name, true)?;
        if let Some((major, minor)) = t.sm
            && major == 0
        {
            return Err(BundleError::InvalidSm {
                target: clip(&t.name),
                major,
                minor,
            });
        }
        let index = u32_of(self.targets.len(), "target count")?;
        if index == NO_TARGET {
            return Err(BundleError::TooLarge {
                what: "target count",
            });
        }
        self.targets.push(t);
        Ok(index)
    }

    /// Adds a section holding `data` and returns its index. Sections are
    /// laid out in the order added.
    ///
    /// # Errors
    /// [`BundleError::EmptyName`], [`BundleError::NameTooLong`],
    /// [`BundleError::DuplicateSection`], [`BundleError::TargetNotFound`],
    /// [`BundleError::TooManySections`] (more than [`MAX_SECTIONS`]).
    pub fn add_section(
        &mut self,
        kind: SectionKind,
        name: &str,
        target: Option<u32>,
        data: Vec<u8>,
    ) -> Result<u32, BundleError> {
        self.add_section_with_flags(kind, name, target, 0, data)
    }

    /// [`add_section`](Self::add_section) with explicit section flags (none
    /// are defined in format 1.0; readers pass them through).
    pub fn add_section_with_flags(
        &mut self,
        kind: SectionKind,
        name: &str,
        target: Option<u32>,
        flags: u32,
        data: Vec<u8>,
    ) -> Result<u32, BundleError> {
        check_name("section name", name, true)?;
        if let Some(first) = self.sections.iter().position(|s| s.name == name) {
            return Err(BundleError::DuplicateSection {
                name: clip(name),
                first: first as u32,
                second: self.sections.len() as u32,
            });
        }
        if let Some(t) = target
            && t as usize >= self.targets.len()
        {
            return Err(BundleError::TargetNotFound {
                index: t,
                count: self.targets.len() as u32,
            });
        }
        if self.sections.len() >= MAX_SECTIONS {
            return Err(BundleError::TooManySections {
                count: self.sections.len() as u64 + 1,
                max: MAX_SECTIONS as u32,
            });
        }
        let index = self.sections.len() as u32;
        self.sections.push(PendingSection {
            kind,
            name: name.to_owned(),
            target,
            flags,
            data,
            tensors: Vec::new(),
            tensor_names: HashSet::new(),
        });
        Ok(index)
    }

    /// Describes an input or output of engine section `section`.
    ///
    /// # Errors
    /// [`BundleError::SectionNotFound`], [`BundleError::NotAnEngineSection`]
    /// (only [`SectionKind::Onnx`] and [`SectionKind::TensorRtPlan`] carry
    /// tensors), [`BundleError::EmptyName`], [`BundleError::NameTooLong`],
    /// [`BundleError::DuplicateTensor`], [`BundleError::RankTooLarge`],
    /// [`BundleError::InvalidDim`].
    pub fn add_tensor(&mut self, section: u32, t: TensorDesc) -> Result<(), BundleError> {
        let count = self.sections.len() as u32;
        let s = self
            .sections
            .get_mut(section as usize)
            .ok_or(BundleError::SectionNotFound {
                index: section,
                count,
            })?;
        if !s.kind.is_engine() {
            return Err(BundleError::NotAnEngineSection {
                section: clip(&s.name),
                kind: s.kind,
            });
        }
        check_name("tensor name", &t.name, true)?;
        if s.tensor_names.contains(&t.name) {
            return Err(BundleError::DuplicateTensor {
                section: clip(&s.name),
                tensor: clip(&t.name),
            });
        }
        if t.dims.len() > MAX_RANK {
            return Err(BundleError::RankTooLarge {
                tensor: clip(&t.name),
                rank: t.dims.len(),
            });
        }
        if let Some((axis, &value)) = t
            .dims
            .iter()
            .enumerate()
            .find(|&(_, &d)| d < crate::DYNAMIC_DIM)
        {
            return Err(BundleError::InvalidDim {
                tensor: clip(&t.name),
                axis,
                value,
            });
        }
        s.tensor_names.insert(t.name.clone());
        s.tensors.push(t);
        Ok(())
    }

    /// Test hook: writes the file as a hypothetical newer minor would —
    /// `minor` in the header, and the header and every fixed-size record
    /// `extra` bytes longer, the extra bytes filled with `fill`. A reader
    /// must read such a file exactly like a 1.0 file.
    #[doc(hidden)]
    pub fn emulate_newer_minor(&mut self, minor: u16, extra: u32, fill: u8) {
        self.newer_minor = Some(NewerMinor { minor, extra, fill });
    }

    /// The whole bundle in memory.
    ///
    /// # Errors
    /// Identity validation errors ([`BundleError::EmptyName`],
    /// [`BundleError::NameTooLong`]) and [`BundleError::TooLarge`].
    pub fn to_bytes(&self) -> Result<Vec<u8>, BundleError> {
        let layout = self.file_layout()?;
        let mut out = Vec::with_capacity(usize::try_from(layout.file_len).unwrap_or(0));
        self.emit(&layout, &mut out)
            .map_err(|source| BundleError::Io {
                path: PathBuf::new(),
                op: "writing to memory",
                source,
            })?;
        Ok(out)
    }

    /// Writes the bundle to `path` atomically, through a
    /// [`files::AtomicFile`](crate::files::AtomicFile): into a temporary
    /// file in the same directory, flushed and synced, then renamed over
    /// `path`. A reader never sees a partial file, and a bundle mapped by
    /// another `Bundle` keeps its old contents. The destination must be a
    /// regular file or not exist; a symbolic link is followed; an existing
    /// file's permissions are kept. On any error the temporary file is
    /// removed and `path` is untouched; on a terminating signal too when the
    /// application asked for it
    /// ([`files::remove_temp_files_on_signal`](crate::files::remove_temp_files_on_signal)).
    ///
    /// The destination is checked before the layout is computed, so an
    /// impossible destination fails fast.
    ///
    /// # Errors
    /// As [`to_bytes`](Self::to_bytes); [`BundleError::File`] for a
    /// destination that is not a regular file or whose directory is
    /// missing; [`BundleError::Io`] (naming `path`) when writing fails.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<WriteSummary, BundleError> {
        let path = path.as_ref();
        let mut out = AtomicFile::create(path)?;
        let layout = self.file_layout()?;
        self.emit(&layout, &mut out)
            .map_err(|e| BundleError::from(out.io_error("writing", e)))?;
        out.persist()?;
        Ok(self.summary(&layout, path.to_path_buf()))
    }

    /// Writes the bundle to `w` (e.g. standard output) in one pass, without
    /// holding it in memory. Nothing is atomic here: on error `w` has
    /// received part of the file. The summary's `path` is empty.
    ///
    /// # Errors
    /// As [`to_bytes`](Self::to_bytes); [`BundleError::Io`] (with an empty
    /// path) when `w` fails.
    pub fn write_to(&self, mut w: impl Write) -> Result<WriteSummary, BundleError> {
        let layout = self.file_layout()?;
        let io = |source| BundleError::Io {
            path: PathBuf::new(),
            op: "writing",
            source,
        };
        let mut buf = BufWriter::with_capacity(1 << 20, &mut w);
        self.emit(&layout, &mut buf).map_err(io)?;
        buf.flush().map_err(io)?;
        Ok(self.summary(&layout, PathBuf::new()))
    }

    fn summary(&self, layout: &FileLayout, path: PathBuf) -> WriteSummary {
        WriteSummary {
            path,
            file_len: layout.file_len,
            sections: self.sections.len() as u32,
            file_crc32: layout.file_crc32,
            content_digest: layout.digest,
        }
    }

    /// The file's layout: names checked, strings interned, the manifest's tables and the
    /// sections placed, every CRC and the content digest computed, the header encoded
    /// (FORMAT.md sections 2-4). Nothing is written.
    fn file_layout(&self) -> Result<FileLayout, BundleError> {
        let id = &self.identity;
        check_name("bundle name", &id.name, true)?;
        check_name("family", &id.family, false)?;
        check_name("model version", &id.model_version, false)?;
        check_name("tool version", &id.tool_version, false)?;

        let (extra, fill, minor) = match self.newer_minor {
            Some(n) => (n.extra as usize, n.fill, n.minor),
            None => (0, 0, FORMAT_MINOR),
        };
        let names = self.intern_names()?;
        let header_size = crate::raw::HEADER_SIZE_V1 + extra;
        let tables = self.place_tables(header_size, extra, &names)?;
        let sections = self.place_sections(tables.end)?;
        let manifest = self.manifest_bytes(&tables, &names, &sections, extra, fill);
        debug_assert_eq!(manifest.len() as u64, tables.end - tables.offset);
        let manifest_crc32 = crc32fast::hash(&manifest);

        // Whole-file CRC over [header_size, file_len), without re-reading
        // the payloads: combine the per-section CRCs.
        let mut fh = crc32fast::Hasher::new();
        crc_zeros(&mut fh, tables.offset - header_size as u64);
        fh.update(&manifest);
        let mut pos = tables.end;
        for (off, h) in sections.offsets.iter().zip(&sections.crcs) {
            crc_zeros(&mut fh, off - pos);
            fh.combine(h);
            pos = off + h.total_len();
        }
        let file_crc32 = fh.finalize();

        let hdr = FileHeader {
            magic: MAGIC,
            major: U16::new(FORMAT_MAJOR),
            minor: U16::new(minor),
            header_size: U32::new(u32_of(header_size, "header")?),
            header_crc32: U32::new(0),
            flags: U32::new(0),
            file_length: U64::new(sections.file_len),
            manifest_offset: U64::new(tables.offset),
            manifest_length: U64::new(tables.end - tables.offset),
            manifest_crc32: U32::new(manifest_crc32),
            file_crc32: U32::new(file_crc32),
            identity: tables.identity,
            targets: tables.targets,
            sections: tables.sections,
            tensors: tables.tensors,
            strings: tables.strings,
            reserved: [0; 8],
        };
        let mut header = hdr.as_bytes().to_vec();
        header.resize(header_size, fill);
        let crc = header_crc(&header).unwrap_or_default();
        if let Some(slot) = header.get_mut(HEADER_CRC_OFFSET..HEADER_CRC_OFFSET + 4) {
            slot.copy_from_slice(&crc.to_le_bytes());
        }

        Ok(FileLayout {
            header,
            manifest_offset: tables.offset,
            manifest,
            section_offsets: sections.offsets,
            file_len: sections.file_len,
            file_crc32,
            digest: sections.digest,
        })
    }

    /// Every name into the string table, each once, in the order the tables list them.
    fn intern_names(&self) -> Result<Names, BundleError> {
        let id = &self.identity;
        let mut strings = Strings {
            bytes: Vec::new(),
            seen: HashMap::new(),
        };
        let identity = [
            strings.intern(&id.name)?,
            strings.intern(&id.family)?,
            strings.intern(&id.model_version)?,
            strings.intern(&id.tool_version)?,
        ];
        let targets = self
            .targets
            .iter()
            .map(|t| strings.intern(&t.name))
            .collect::<Result<Vec<_>, _>>()?;
        let sections = self
            .sections
            .iter()
            .map(|s| strings.intern(&s.name))
            .collect::<Result<Vec<_>, _>>()?;
        let mut tensors = Vec::new();
        for s in &self.sections {
            for t in &s.tensors {
                tensors.push(strings.intern(&t.name)?);
            }
        }
        Ok(Names {
            identity,
            targets,
            sections,
            tensors,
            strings: strings.bytes,
        })
    }

    /// The manifest's tables after the header, each 8-aligned, records `extra` bytes longer
    /// than this version's when writing as a newer minor.
    fn place_tables(
        &self,
        header_size: usize,
        extra: usize,
        names: &Names,
    ) -> Result<Tables, BundleError> {
        let rs = |base: usize| base + extra;
        let offset = align_up(header_size as u64, 8)?;
        let mut cursor = offset;
        let mut place = |count: usize, record_size: usize| -> Result<TableRef, BundleError> {
            let offset = align_up(cursor, 8)?;
            let len = (count as u64)
                .checked_mul(record_size as u64)
                .ok_or(BundleError::TooLarge { what: "manifest" })?;
            cursor = add(offset, len)?;
            Ok(TableRef {
                offset: U64::new(offset),
                count: U32::new(u32_of(count, "table")?),
                record_size: U32::new(u32_of(record_size, "record size")?),
            })
        };
        let identity = place(1, rs(size_of::<IdentityRecord>()))?;
        let targets = place(self.targets.len(), rs(size_of::<TargetRecord>()))?;
        let sections = place(self.sections.len(), rs(size_of::<SectionRecord>()))?;
        let tensors = place(names.tensors.len(), rs(size_of::<TensorRecord>()))?;
        let strings = place(names.strings.len(), 1)?;
        Ok(Tables {
            offset,
            end: cursor,
            identity,
            targets,
            sections,
            tensors,
            strings,
        })
    }

    /// The sections after the manifest (from `manifest_end`), each at [`SECTION_ALIGN`], with
    /// the CRC of each and the SHA-256 content digest over all their bytes.
    fn place_sections(&self, manifest_end: u64) -> Result<Sections, BundleError> {
        let mut offsets = Vec::with_capacity(self.sections.len());
        let mut crcs = Vec::with_capacity(self.sections.len());
        let mut sha = Sha256::new();
        let mut pos = manifest_end;
        for s in &self.sections {
            let offset = align_up(pos, SECTION_ALIGN)?;
            let mut h = crc32fast::Hasher::new();
            h.update(&s.data);
            sha.update(&s.data);
            crcs.push(h);
            offsets.push(offset);
            pos = add(offset, s.data.len() as u64)?;
        }
        Ok(Sections {
            offsets,
            crcs,
            file_len: pos,
            digest: sha.finalize().into(),
        })
    }

    /// The manifest's bytes: every record at its table's place (`extra` bytes of `fill` after
    /// each record when writing as a newer minor), then the string table.
    fn manifest_bytes(
        &self,
        tables: &Tables,
        names: &Names,
        sections: &Sections,
        extra: usize,
        fill: u8,
    ) -> Vec<u8> {
        let mut manifest = Vec::new();
        let mut put = |table: &TableRef, index: usize, rec: &[u8], with_extra: bool| {
            let at = table.offset.get() + index as u64 * u64::from(table.record_size.get());
            let target = (at - tables.offset) as usize;
            if manifest.len() < target {
                manifest.resize(target, 0);
            }
            manifest.extend_from_slice(rec);
            if with_extra {
                manifest.resize(manifest.len() + extra, fill);
            }
        };
        let id = &self.identity;
        let [n, f, mv, tv] = names.identity;
        let idr = IdentityRecord {
            name: n,
            family: f,
            model_version: mv,
            tool_version: tv,
            created_unix_s: U64::new(id.created_unix_s),
            content_digest: sections.digest,
        };
        put(&tables.identity, 0, idr.as_bytes(), true);
        for (i, (t, name)) in self.targets.iter().zip(&names.targets).enumerate() {
            let (sm_major, sm_minor) = t.sm.unwrap_or((0, 0));
            let r = TargetRecord {
                name: *name,
                arch: U16::new(crate::arch_code(t.arch)),
                engine: U16::new(crate::engine_code(t.engine)),
                sm_major,
                sm_minor,
                reserved0: [0; 2],
                tensorrt_version: U32::new(t.tensorrt_version),
                hardware_compat: U32::new(t.hardware_compat),
                flags: U32::new(t.flags),
                reserved1: [0; 4],
            };
            put(&tables.targets, i, r.as_bytes(), true);
        }
        for (i, s) in self.sections.iter().enumerate() {
            let r = SectionRecord {
                name: names.sections.get(i).copied().unwrap_or_default(),
                kind: U32::new(s.kind.raw()),
                target: U32::new(s.target.unwrap_or(NO_TARGET)),
                offset: U64::new(sections.offsets.get(i).copied().unwrap_or_default()),
                length: U64::new(s.data.len() as u64),
                crc32: U32::new(
                    sections
                        .crcs
                        .get(i)
                        .map(|h| h.clone().finalize())
                        .unwrap_or(0),
                ),
                flags: U32::new(s.flags),
            };
            put(&tables.sections, i, r.as_bytes(), true);
        }
        let mut ti = 0usize;
        for (si, s) in self.sections.iter().enumerate() {
            for t in &s.tensors {
                let mut dims = [I64::new(0); MAX_RANK];
                for (d, v) in dims.iter_mut().zip(&t.dims) {
                    *d = I64::new(*v);
                }
                let r = TensorRecord {
                    name: names.tensors.get(ti).copied().unwrap_or_default(),
                    section: U32::new(si as u32),
                    mode: t.mode.raw(),
                    dtype: t.dtype.raw(),
                    layout: t.layout.raw(),
                    rank: t.dims.len() as u8,
                    dims,
                };
                put(&tables.tensors, ti, r.as_bytes(), true);
                ti += 1;
            }
        }
        put(&tables.strings, 0, &names.strings, false);
        manifest
    }

    fn emit(&self, layout: &FileLayout, w: &mut impl Write) -> io::Result<()> {
        w.write_all(&layout.header)?;
        write_zeros(w, layout.manifest_offset - layout.header.len() as u64)?;
        w.write_all(&layout.manifest)?;
        let mut pos = layout.manifest_offset + layout.manifest.len() as u64;
        for (s, &off) in self.sections.iter().zip(&layout.section_offsets) {
            write_zeros(w, off - pos)?;
            w.write_all(&s.data)?;
            pos = off + s.data.len() as u64;
        }
        Ok(())
    }
}
