//! The self-test a bundle carries: one format for every family (section `<family>/selftest`,
//! kind `Reference`, CRC-checked like every section), run by `tether verify --self-test` on
//! the device the bundle is deployed on.
//!
//! A self-test is a reference input, the output recorded for it, and the tolerances of the
//! comparison, each a named entry, plus a `source` saying where the recorded output comes
//! from: the model authors' reference pipeline (a committed golden, when the bundle's model is
//! the pinned one) or the build host's CPU engine (any other model: the self-test then checks
//! that the device agrees with the build host). A family supplies only how to run its input
//! and how to compare its output ([`Report`]); the format, its checks and the reading of
//! entries are here.
//!
//! # Section layout (format version 2, little-endian)
//!
//! | bytes | what |
//! |---|---|
//! | 16 | [`SelfTestHeader`]: `version` (2), `entries`, `source_len`, reserved |
//! | `source_len` | the source, UTF-8 |
//! | per entry, in order | an [`EntryRecord`] (24 bytes: role, element type, rank, name length, up to 4 dimensions, data length), the name (UTF-8, 1 to 64 bytes), the data (`product(dims)` elements; text: `dims[0]` bytes of UTF-8) |
//!
//! Nothing follows the last entry. Version 1 was the per-family layouts of earlier tethers
//! (each began with the same `u16` version field): this build does not read them and says so
//! by name ([`SelfTestError::Version`]); the bundle still opens and runs, and `tether build`
//! writes a current self-test.

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// The format version this build writes and reads.
pub const FORMAT_VERSION: u16 = 2;
/// Most entries a self-test may hold.
pub const MAX_ENTRIES: usize = 64;
/// Longest entry name, in bytes.
pub const MAX_NAME_BYTES: usize = 64;
/// Most dimensions of an entry.
pub const MAX_RANK: usize = 4;

/// The section holding `family`'s self-test (`detect/selftest`).
pub fn section_name(family: &str) -> String {
    format!("{family}/selftest")
}

/// Header of a self-test section (16 bytes).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct SelfTestHeader {
    /// [`FORMAT_VERSION`].
    pub version: U16,
    /// Entries after the source.
    pub entries: U16,
    /// Bytes of the source description.
    pub source_len: U32,
    /// Reserved, zero.
    pub reserved: [u8; 8],
}

/// The fixed part of one entry (24 bytes); its name and data follow it.
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct EntryRecord {
    /// [`Role`] code: 1 input, 2 expected output, 3 tolerance.
    pub role: u8,
    /// Element type code: 1 `u8`, 2 `u32`, 3 `f32`, 4 UTF-8 text.
    pub dtype: u8,
    /// Dimensions used (0 to [`MAX_RANK`]; text: 1).
    pub rank: u8,
    /// Bytes of the name.
    pub name_len: u8,
    /// Dimensions (unused ones zero).
    pub dims: [U32; MAX_RANK],
    /// Bytes of data.
    pub data_len: U32,
}

/// What an entry is to the test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Part of the reference input.
    Input,
    /// Part of the output recorded for it.
    Expected,
    /// A bound of the comparison (an `f32` scalar).
    Tolerance,
}

impl Role {
    fn code(self) -> u8 {
        match self {
            Role::Input => 1,
            Role::Expected => 2,
            Role::Tolerance => 3,
        }
    }
    fn of(code: u8) -> Option<Self> {
        Some(match code {
            1 => Role::Input,
            2 => Role::Expected,
            3 => Role::Tolerance,
            _ => return None,
        })
    }
    /// `input`, `expected`, `tolerance`.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Input => "input",
            Role::Expected => "expected",
            Role::Tolerance => "tolerance",
        }
    }
}

/// An entry's values.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// Bytes (pixels).
    U8(Vec<u8>),
    /// Unsigned integers (class ids, widths, labels).
    U32(Vec<u32>),
    /// Single-precision floats (samples, probabilities, embeddings, boxes).
    F32(Vec<f32>),
    /// UTF-8 text.
    Text(String),
}

impl Values {
    fn code(&self) -> u8 {
        match self {
            Values::U8(_) => 1,
            Values::U32(_) => 2,
            Values::F32(_) => 3,
            Values::Text(_) => 4,
        }
    }
    /// `u8`, `u32`, `f32`, `text`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Values::U8(_) => "u8",
            Values::U32(_) => "u32",
            Values::F32(_) => "f32",
            Values::Text(_) => "text",
        }
    }
    /// Elements (text: bytes).
    pub fn len(&self) -> usize {
        match self {
            Values::U8(v) => v.len(),
            Values::U32(v) => v.len(),
            Values::F32(v) => v.len(),
            Values::Text(t) => t.len(),
        }
    }
    /// No elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn bytes(&self) -> Vec<u8> {
        match self {
            Values::U8(v) => v.clone(),
            Values::U32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Values::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            Values::Text(t) => t.as_bytes().to_vec(),
        }
    }
}

/// One named entry.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    /// Input, expected output or tolerance.
    pub role: Role,
    /// Its name (`pcm`, `probabilities`, `max_abs_diff`), unique within its role.
    pub name: String,
    /// Dimensions (`[height, width, channels]`; `[n]` for a list; `[]` for a scalar).
    pub shape: Vec<u32>,
    /// The values, `product(shape)` of them (text: its bytes).
    pub values: Values,
}

/// Why a self-test section cannot be read, or an entry is not what a family asks for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelfTestError {
    /// The section is in a format version this build does not read.
    #[error(
        "self-test format version {version}{}; this tether reads version {FORMAT_VERSION}: rebuild the bundle with `tether build` to embed a current self-test",
        if *version == 1 { " (the per-family layout of earlier tethers)" } else { "" }
    )]
    Version {
        /// The version found.
        version: u16,
    },
    /// The bytes do not form a valid section.
    #[error("self-test section malformed: {0}")]
    Malformed(String),
    /// An entry a family needs is absent.
    #[error("self-test has no {role} entry `{name}`", role = role.as_str())]
    Missing {
        /// Its role.
        role: Role,
        /// Its name.
        name: String,
    },
    /// The bundle carries no self-test section.
    #[error("the bundle has no self-test section `{section}`")]
    Absent {
        /// The section looked for.
        section: String,
    },
    /// An entry has another element type or size than the family needs.
    #[error("self-test {role} entry `{name}`: {what}", role = role.as_str())]
    Entry {
        /// Its role.
        role: Role,
        /// Its name.
        name: String,
        /// What is wrong (`f32 expected, found u8`).
        what: String,
    },
}

fn malformed(what: impl Into<String>) -> SelfTestError {
    SelfTestError::Malformed(what.into())
}

/// A self-test: a source and named entries.
#[derive(Clone, Debug, PartialEq)]
pub struct SelfTest {
    /// Where the expected output comes from (the reference pipeline and its version, or the
    /// build host's CPU engine), for reports.
    pub source: String,
    /// The entries, in order.
    pub entries: Vec<Entry>,
}

impl SelfTest {
    /// An empty self-test whose expected output comes from `source`.
    pub fn new(source: impl Into<String>) -> Self {
        SelfTest {
            source: source.into(),
            entries: Vec::new(),
        }
    }

    /// Add (or replace) the entry `role`/`name`.
    #[must_use]
    pub fn with(mut self, role: Role, name: &str, shape: &[u32], values: Values) -> Self {
        self.set(role, name, shape, values);
        self
    }

    /// Set the entry `role`/`name`, replacing one of the same role and name. A text entry's
    /// shape is its length in bytes, whatever `shape` says.
    pub fn set(&mut self, role: Role, name: &str, shape: &[u32], values: Values) {
        let shape = match &values {
            Values::Text(t) => vec![t.len() as u32],
            _ => shape.to_vec(),
        };
        let e = Entry {
            role,
            name: name.to_string(),
            shape,
            values,
        };
        match self
            .entries
            .iter_mut()
            .find(|x| x.role == role && x.name == name)
        {
            Some(x) => *x = e,
            None => self.entries.push(e),
        }
    }

    /// The entry `role`/`name`.
    ///
    /// # Errors
    /// [`SelfTestError::Missing`].
    pub fn entry(&self, role: Role, name: &str) -> Result<&Entry, SelfTestError> {
        self.entries
            .iter()
            .find(|e| e.role == role && e.name == name)
            .ok_or_else(|| SelfTestError::Missing {
                role,
                name: name.to_string(),
            })
    }

    /// Whether the entry `role`/`name` exists.
    pub fn has(&self, role: Role, name: &str) -> bool {
        self.entry(role, name).is_ok()
    }

    fn wrong(e: &Entry, what: String) -> SelfTestError {
        SelfTestError::Entry {
            role: e.role,
            name: e.name.clone(),
            what,
        }
    }

    /// The `f32` values of `role`/`name`.
    ///
    /// # Errors
    /// [`SelfTestError::Missing`], or [`SelfTestError::Entry`] for another element type.
    pub fn f32s(&self, role: Role, name: &str) -> Result<&[f32], SelfTestError> {
        let e = self.entry(role, name)?;
        match &e.values {
            Values::F32(v) => Ok(v),
            other => Err(Self::wrong(
                e,
                format!("f32 needed, found {}", other.type_name()),
            )),
        }
    }

    /// The `u32` values of `role`/`name`.
    ///
    /// # Errors
    /// As [`SelfTest::f32s`].
    pub fn u32s(&self, role: Role, name: &str) -> Result<&[u32], SelfTestError> {
        let e = self.entry(role, name)?;
        match &e.values {
            Values::U32(v) => Ok(v),
            other => Err(Self::wrong(
                e,
                format!("u32 needed, found {}", other.type_name()),
            )),
        }
    }

    /// The bytes of `role`/`name` and its shape.
    ///
    /// # Errors
    /// As [`SelfTest::f32s`].
    pub fn u8s(&self, role: Role, name: &str) -> Result<(&[u8], &[u32]), SelfTestError> {
        let e = self.entry(role, name)?;
        match &e.values {
            Values::U8(v) => Ok((v, &e.shape)),
            other => Err(Self::wrong(
                e,
                format!("u8 needed, found {}", other.type_name()),
            )),
        }
    }

    /// The text of `role`/`name`.
    ///
    /// # Errors
    /// As [`SelfTest::f32s`].
    pub fn text(&self, role: Role, name: &str) -> Result<&str, SelfTestError> {
        let e = self.entry(role, name)?;
        match &e.values {
            Values::Text(t) => Ok(t),
            other => Err(Self::wrong(
                e,
                format!("text needed, found {}", other.type_name()),
            )),
        }
    }

    /// The one `u32` of `role`/`name`.
    ///
    /// # Errors
    /// As [`SelfTest::f32s`], and [`SelfTestError::Entry`] when it holds not exactly one value.
    pub fn u32_scalar(&self, role: Role, name: &str) -> Result<u32, SelfTestError> {
        match self.u32s(role, name)? {
            [v] => Ok(*v),
            v => Err(Self::wrong(
                self.entry(role, name)?,
                format!("one value needed, found {}", v.len()),
            )),
        }
    }

    /// The one `f32` of `role`/`name`.
    ///
    /// # Errors
    /// As [`SelfTest::u32_scalar`].
    pub fn f32_scalar(&self, role: Role, name: &str) -> Result<f32, SelfTestError> {
        match self.f32s(role, name)? {
            [v] => Ok(*v),
            v => Err(Self::wrong(
                self.entry(role, name)?,
                format!("one value needed, found {}", v.len()),
            )),
        }
    }

    /// The tolerance `name`: a finite, non-negative `f32`.
    ///
    /// # Errors
    /// As [`SelfTest::f32_scalar`], and [`SelfTestError::Entry`] for a negative or non-finite
    /// value.
    pub fn tolerance(&self, name: &str) -> Result<f32, SelfTestError> {
        let v = self.f32_scalar(Role::Tolerance, name)?;
        if v.is_finite() && v >= 0.0 {
            Ok(v)
        } else {
            Err(Self::wrong(
                self.entry(Role::Tolerance, name)?,
                format!("{v} is not a finite non-negative bound"),
            ))
        }
    }

    /// The section payload.
    ///
    /// # Panics
    /// When the test breaks the format's limits (more than [`MAX_ENTRIES`] entries, a name of
    /// more than [`MAX_NAME_BYTES`] bytes, more than [`MAX_RANK`] dimensions, a shape that
    /// does not match its values): a recipe defect, caught by its tests.
    pub fn to_section(&self) -> Vec<u8> {
        assert!(
            self.entries.len() <= MAX_ENTRIES,
            "too many self-test entries"
        );
        let header = SelfTestHeader {
            version: FORMAT_VERSION.into(),
            entries: (self.entries.len() as u16).into(),
            source_len: (self.source.len() as u32).into(),
            reserved: [0; 8],
        };
        let mut out = header.as_bytes().to_vec();
        out.extend_from_slice(self.source.as_bytes());
        for e in &self.entries {
            assert!(
                (1..=MAX_NAME_BYTES).contains(&e.name.len()),
                "self-test entry name `{}`",
                e.name
            );
            let shape = &e.shape;
            assert!(
                shape.len() <= MAX_RANK,
                "entry `{}`: rank {}",
                e.name,
                shape.len()
            );
            assert_eq!(
                shape.iter().map(|&d| d as usize).product::<usize>(),
                e.values.len(),
                "entry `{}`: shape {:?} for {} values",
                e.name,
                e.shape,
                e.values.len()
            );
            let data = e.values.bytes();
            let mut dims = [U32::new(0); MAX_RANK];
            for (d, &s) in dims.iter_mut().zip(shape) {
                *d = s.into();
            }
            let rec = EntryRecord {
                role: e.role.code(),
                dtype: e.values.code(),
                rank: shape.len() as u8,
                name_len: e.name.len() as u8,
                dims,
                data_len: (data.len() as u32).into(),
            };
            out.extend_from_slice(rec.as_bytes());
            out.extend_from_slice(e.name.as_bytes());
            out.extend_from_slice(&data);
        }
        out
    }

    /// Read a section payload.
    ///
    /// # Errors
    /// [`SelfTestError::Version`] for another format version (1: the per-family layouts of
    /// earlier tethers); [`SelfTestError::Malformed`] naming what is short, unknown,
    /// inconsistent or not UTF-8.
    pub fn from_section(bytes: &[u8]) -> Result<Self, SelfTestError> {
        // Every version begins with its u16 version: read that first, so an old section is
        // named as such even when it is shorter than this version's header.
        let version = match bytes {
            [a, b, ..] => u16::from_le_bytes([*a, *b]),
            _ => return Err(malformed(format!("{} bytes", bytes.len()))),
        };
        if version != FORMAT_VERSION {
            return Err(SelfTestError::Version { version });
        }
        let (h, mut rest) = SelfTestHeader::ref_from_prefix(bytes).map_err(|_| {
            malformed(format!(
                "{} bytes, the header needs {}",
                bytes.len(),
                size_of::<SelfTestHeader>()
            ))
        })?;
        let n = usize::from(h.entries.get());
        if n > MAX_ENTRIES {
            return Err(malformed(format!("{n} entries (at most {MAX_ENTRIES})")));
        }
        let source_len = h.source_len.get() as usize;
        let source = take(&mut rest, source_len, "the source")?;
        let source = utf8(source, "the source")?;
        let mut entries = Vec::with_capacity(n);
        for i in 0..n {
            let (rec, tail) = EntryRecord::read_from_prefix(rest)
                .map_err(|_| malformed(format!("entry {i}: truncated record")))?;
            rest = tail;
            let role = Role::of(rec.role)
                .ok_or_else(|| malformed(format!("entry {i}: unknown role {}", rec.role)))?;
            let name_len = usize::from(rec.name_len);
            if name_len == 0 || name_len > MAX_NAME_BYTES {
                return Err(malformed(format!("entry {i}: a {name_len}-byte name")));
            }
            let name = utf8(take(&mut rest, name_len, "a name")?, "a name")?;
            let rank = usize::from(rec.rank);
            if rank > MAX_RANK {
                return Err(malformed(format!("entry `{name}`: rank {rank}")));
            }
            let shape: Vec<u32> = rec.dims[..rank].iter().map(|d| d.get()).collect();
            let count = shape
                .iter()
                .try_fold(1usize, |a, &d| a.checked_mul(d as usize))
                .ok_or_else(|| malformed(format!("entry `{name}`: shape {shape:?} overflows")))?;
            let size = match rec.dtype {
                1 | 4 => 1,
                2 | 3 => 4,
                t => return Err(malformed(format!("entry `{name}`: element type {t}"))),
            };
            let data_len = rec.data_len.get() as usize;
            if count.checked_mul(size) != Some(data_len) || (rec.dtype == 4 && rank != 1) {
                return Err(malformed(format!(
                    "entry `{name}`: {data_len} data bytes for shape {shape:?} of element type {}",
                    rec.dtype
                )));
            }
            let data = take(&mut rest, data_len, "entry data")?;
            let values = match rec.dtype {
                1 => Values::U8(data.to_vec()),
                2 => Values::U32(
                    data.chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                ),
                3 => Values::F32(
                    data.chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                        .collect(),
                ),
                _ => Values::Text(utf8(data, "a text entry")?),
            };
            if entries
                .iter()
                .any(|e: &Entry| e.role == role && e.name == name)
            {
                return Err(malformed(format!("two {} entries `{name}`", role.as_str())));
            }
            entries.push(Entry {
                role,
                name,
                shape,
                values,
            });
        }
        if !rest.is_empty() {
            return Err(malformed(format!(
                "{} bytes after the last entry",
                rest.len()
            )));
        }
        Ok(SelfTest { source, entries })
    }

    /// The self-test `family` writes in `bundle` (section [`section_name`]): `Ok(None)` when
    /// the bundle carries none.
    ///
    /// # Errors
    /// [`SelfTestError`] as [`SelfTest::from_section`]; the section's own read error (a
    /// CRC mismatch) as [`SelfTestError::Malformed`] naming it.
    pub fn of_bundle(
        bundle: &tether_bundle::Bundle,
        family: &str,
    ) -> Result<Option<Self>, SelfTestError> {
        let name = section_name(family);
        if bundle.section(&name).is_err() {
            return Ok(None);
        }
        let bytes = bundle
            .section_data(&name)
            .map_err(|e| malformed(format!("section `{name}`: {e}")))?;
        Self::from_section(bytes).map(Some)
    }

    /// Add this self-test to `writer` as `family`'s section ([`section_name`], kind
    /// `Reference`).
    ///
    /// # Errors
    /// The writer's ([`tether_bundle::BundleError`]).
    pub fn add_to(
        &self,
        writer: &mut tether_bundle::BundleWriter,
        family: &str,
    ) -> Result<(), tether_bundle::BundleError> {
        writer.add_section(
            tether_bundle::SectionKind::Reference,
            &section_name(family),
            None,
            self.to_section(),
        )?;
        Ok(())
    }

    /// As [`SelfTest::of_bundle`], a missing section being an error too.
    ///
    /// # Errors
    /// [`SelfTestError::Absent`], and as [`SelfTest::of_bundle`].
    pub fn required(bundle: &tether_bundle::Bundle, family: &str) -> Result<Self, SelfTestError> {
        Self::of_bundle(bundle, family)?.ok_or_else(|| SelfTestError::Absent {
            section: section_name(family),
        })
    }
}

fn take<'a>(rest: &mut &'a [u8], n: usize, what: &str) -> Result<&'a [u8], SelfTestError> {
    if rest.len() < n {
        return Err(malformed(format!(
            "{what} needs {n} bytes, {} remain",
            rest.len()
        )));
    }
    let (a, b) = rest.split_at(n);
    *rest = b;
    Ok(a)
}

fn utf8(b: &[u8], what: &str) -> Result<String, SelfTestError> {
    String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{what} is not UTF-8")))
}

/// A bound a measured value is held to.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Bound {
    /// At most this (a difference).
    AtMost(f64),
    /// At least this (a cosine, an IoU).
    AtLeast(f64),
}

/// One measured quantity of a self-test run and its bound.
#[derive(Clone, Debug, PartialEq)]
pub struct Check {
    /// What was measured (`max |probability diff|`, `cosine`, `min IoU`).
    pub name: String,
    /// The value seen (NaN: the output was not a number, which fails).
    pub value: f64,
    /// Its bound.
    pub bound: Bound,
    /// Where the value was seen: the index of the worst element (a chunk, a component, a
    /// detection) when the value is a worst case over a list.
    pub at: Option<usize>,
}

impl Check {
    /// `name` at most `limit`.
    pub fn at_most(name: &str, value: f64, limit: f64) -> Self {
        Check {
            name: name.into(),
            value,
            bound: Bound::AtMost(limit),
            at: None,
        }
    }
    /// `name` at least `limit`.
    pub fn at_least(name: &str, value: f64, limit: f64) -> Self {
        Check {
            name: name.into(),
            value,
            bound: Bound::AtLeast(limit),
            at: None,
        }
    }
    /// The same check, seen at element `index`.
    #[must_use]
    pub fn at(mut self, index: usize) -> Self {
        self.at = Some(index);
        self
    }
    /// Within the bound (a NaN never is).
    pub fn passed(&self) -> bool {
        match self.bound {
            Bound::AtMost(l) => self.value <= l,
            Bound::AtLeast(l) => self.value >= l,
        }
    }
}

/// What one run of a self-test found.
#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    /// The family (`vad`), for messages.
    pub family: &'static str,
    /// Every check within its bound, and every exact comparison (counts, classes, text)
    /// equal.
    pub passed: bool,
    /// The family's one line: what was compared, where it ran, the worst deviation and its
    /// bound.
    pub summary: String,
    /// The measured quantities.
    pub checks: Vec<Check>,
    /// Where the expected output comes from ([`SelfTest::source`]).
    pub source: String,
}

impl Report {
    /// A report of `family`'s run of `test`: passed when `exact` holds (the comparisons
    /// that must be equal) and every check is within its bound.
    pub fn new(
        family: &'static str,
        test: &SelfTest,
        exact: bool,
        checks: Vec<Check>,
        summary: String,
    ) -> Self {
        Report {
            family,
            passed: exact && checks.iter().all(Check::passed),
            summary,
            checks,
            source: test.source.clone(),
        }
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} self-test {}: {}; expected values from {}",
            self.family,
            if self.passed { "passed" } else { "FAILED" },
            self.summary,
            self.source
        )
    }
}

/// The self-test a recipe embeds, and its run on the build host's CPU engine (`run` on
/// `engine`, the family's semantic API opened on the CPU).
///
/// When the bundle's model is the pinned one (`pinned`), `reference` (the model authors'
/// reference pipeline's output, a committed golden) is embedded as it is, and must pass on the
/// CPU engine (else the error `mismatch` makes of the report: the build fails). For any other
/// model no reference exists: `host` turns `reference` into the build host's payload (the
/// same input, the CPU engine's output as the expected values, a source that says so, see
/// [`host_source`]), which the device then agrees with or not.
///
/// # Errors
/// `run`'s and `host`'s, and `mismatch`'s for a pinned model the CPU does not reproduce.
pub fn for_recipe<T, E>(
    pinned: bool,
    reference: SelfTest,
    engine: &mut T,
    run: impl Fn(&mut T, &SelfTest) -> Result<Report, E>,
    host: impl FnOnce(&mut T, SelfTest) -> Result<SelfTest, E>,
    mismatch: impl FnOnce(Report) -> E,
) -> Result<(SelfTest, Report), E> {
    if pinned {
        let report = run(engine, &reference)?;
        if !report.passed {
            return Err(mismatch(report));
        }
        Ok((reference, report))
    } else {
        let payload = host(engine, reference)?;
        let report = run(engine, &payload)?;
        Ok((payload, report))
    }
}

/// The `source` of a payload whose expected values the build host's CPU engine computed:
/// `why` says which model it is (`model SHA-256 ..., not the pinned ... file`).
pub fn host_source(why: &str) -> String {
    format!("the tract CPU engine at build time ({why})")
}

/// The largest `|got - expected|` and where, over the common length; a NaN difference counts
/// as infinite (and fails any bound).
pub fn max_abs_diff(got: &[f32], expected: &[f32]) -> (f32, usize) {
    let mut worst = (0f32, 0usize);
    for (i, (g, e)) in got.iter().zip(expected).enumerate() {
        let d = (g - e).abs();
        let d = if d.is_nan() { f32::INFINITY } else { d };
        if d > worst.0 {
            worst = (d, i);
        }
    }
    worst
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SelfTest {
        SelfTest::new("a reference pipeline 1.0")
            .with(Role::Input, "pcm", &[3], Values::F32(vec![0.5, -1.0, 2.0]))
            .with(
                Role::Input,
                "pixels",
                &[1, 2, 3],
                Values::U8(vec![1, 2, 3, 4, 5, 6]),
            )
            .with(
                Role::Input,
                "text",
                &[],
                Values::Text("A man is eating.".into()),
            )
            .with(Role::Expected, "classes", &[2], Values::U32(vec![7, 9]))
            .with(
                Role::Tolerance,
                "max_abs_diff",
                &[],
                Values::F32(vec![1e-4]),
            )
    }

    #[test]
    fn a_section_round_trips_and_entries_are_typed() {
        let t = sample();
        let b = t.to_section();
        let back = SelfTest::from_section(&b).expect("parse");
        assert_eq!(back, t);
        // Text entries are stored with their byte length as shape.
        assert_eq!(back.entry(Role::Input, "text").unwrap().shape, vec![16]);
        assert_eq!(back.text(Role::Input, "text"), Ok("A man is eating."));
        assert_eq!(back.f32s(Role::Input, "pcm"), Ok(&[0.5, -1.0, 2.0][..]));
        assert_eq!(back.u8s(Role::Input, "pixels").unwrap().1, &[1, 2, 3]);
        assert_eq!(back.u32s(Role::Expected, "classes"), Ok(&[7, 9][..]));
        assert_eq!(back.tolerance("max_abs_diff"), Ok(1e-4));
        assert_eq!(back.source, t.source);
        assert!(matches!(
            back.f32s(Role::Expected, "classes"),
            Err(SelfTestError::Entry { .. })
        ));
        let e = back.f32s(Role::Expected, "scores").unwrap_err();
        assert_eq!(e.to_string(), "self-test has no expected entry `scores`");
        assert!(back.u32_scalar(Role::Expected, "classes").is_err());
    }

    #[test]
    fn truncated_and_corrupt_sections_are_named() {
        let b = sample().to_section();
        for n in [0, 1, 10, 16, 30, b.len() - 1] {
            let e = SelfTest::from_section(&b[..n]).unwrap_err();
            assert!(matches!(e, SelfTestError::Malformed(_)), "{n}: {e}");
        }
        let mut long = b.clone();
        long.push(0);
        assert!(
            SelfTest::from_section(&long)
                .unwrap_err()
                .to_string()
                .contains("1 bytes after the last entry")
        );
        // An unknown element type in the first entry (after the 16-byte header and source).
        let mut bad = b.clone();
        bad[16 + sample().source.len() + 1] = 9;
        assert!(
            SelfTest::from_section(&bad)
                .unwrap_err()
                .to_string()
                .contains("element type 9")
        );
    }

    #[test]
    fn old_per_family_sections_are_refused_by_version() {
        // The first bytes of a version-1 `vad/selftest` section (its 32-byte header began
        // with u16 version 1, then u16 reserved, u32 chunks = 8).
        let mut old = vec![1u8, 0, 0, 0, 8, 0, 0, 0];
        old.resize(32 + 8 * 513 * 4, 0);
        let e = SelfTest::from_section(&old).unwrap_err();
        assert_eq!(e, SelfTestError::Version { version: 1 });
        let msg = e.to_string();
        assert!(
            msg.contains("format version 1 (the per-family layout"),
            "{msg}"
        );
        assert!(
            msg.contains("rebuild the bundle with `tether build`"),
            "{msg}"
        );
        assert_eq!(
            SelfTest::from_section(&[3, 0]).unwrap_err(),
            SelfTestError::Version { version: 3 }
        );
    }

    #[test]
    fn checks_and_worst_differences() {
        assert_eq!(max_abs_diff(&[1.0, 2.0, 3.0], &[1.0, 2.5, 3.1]), (0.5, 1));
        assert_eq!(max_abs_diff(&[1.0, f32::NAN], &[1.0, 2.0]).0, f32::INFINITY);
        assert!(Check::at_most("d", 1e-5, 1e-4).passed());
        assert!(!Check::at_most("d", f64::NAN, 1e-4).passed());
        assert!(Check::at_least("cos", 0.9995, 0.999).passed());
        assert!(!Check::at_least("cos", f64::NAN, 0.999).passed());
        let t = sample();
        let r = Report::new(
            "x",
            &t,
            true,
            vec![Check::at_most("d", 0.0, 0.1)],
            "ok".into(),
        );
        assert!(r.passed);
        assert_eq!(
            r.to_string(),
            "x self-test passed: ok; expected values from a reference pipeline 1.0"
        );
        assert!(!Report::new("x", &t, false, Vec::new(), String::new()).passed);
    }
}
