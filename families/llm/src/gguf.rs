//! GGUF reader (versions 2 and 3): metadata of every value type, tensor infos, and
//! zero-copy tensor data in a read-only memory map.
//!
//! Source: the GGUF specification (`docs/gguf.md` in ggml / llama.cpp): little-endian;
//! header `GGUF`, `u32` version, `u64` tensor count, `u64` metadata count; metadata as
//! `(string key, u32 type, value)`; tensor infos as `(string name, u32 n_dims, u64 ne[n_dims],
//! u32 ggml_type, u64 offset)`; then padding to `general.alignment` (default 32) and the
//! tensor data, each tensor at `data_start + offset` with `offset` a multiple of the
//! alignment. Strings are `u64` length + UTF-8 bytes (no NUL).
//!
//! Every length and count is checked against the bytes that remain before anything is
//! allocated from it, so a hostile or truncated file gets a [`GgufError`] naming the field,
//! its offset and the values seen, never a panic or an allocation the file cannot back.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::quant::TensorType;
use crate::tensor::tensor_bytes;

/// The four bytes every GGUF file starts with.
pub const MAGIC: [u8; 4] = *b"GGUF";
/// Alignment of the tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;
/// Most dimensions of a tensor (ggml's `GGML_MAX_DIMS`).
pub const MAX_DIMS: usize = 4;
/// Deepest nesting of arrays accepted (arrays of arrays of ...).
pub const MAX_ARRAY_DEPTH: u32 = 4;

/// `bytes` as `0x5b 0x7b ...`.
fn hex_bytes(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing (an empty file)".into();
    }
    bytes
        .iter()
        .map(|b| format!("{b:#04x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// A malformed GGUF file, or one using something this build does not read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// The file could not be opened or mapped.
    #[error("{op} `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file is not a regular file, or cannot be opened.
    #[error(transparent)]
    File(#[from] tether_bundle::files::FileError),
    /// The first four bytes are not `GGUF`.
    #[error(
        "not a GGUF file: its magic (first bytes) is {}{} where a GGUF file has `GGUF` (0x47 0x47 0x55 0x46)",
        hex_bytes(found),
        if found.starts_with(&tether_bundle::MAGIC[..4]) { " (a tether bundle's)" } else { "" }
    )]
    Magic {
        /// The bytes seen.
        found: Vec<u8>,
    },
    /// A GGUF version other than 2 or 3.
    #[error("GGUF version {version} is not supported (this build reads 2 and 3)")]
    Version {
        /// The version seen.
        version: u32,
    },
    /// The file ends inside a field.
    #[error("truncated GGUF: {what} at byte {offset} needs {need} bytes, the file has {len}")]
    Truncated {
        /// The field.
        what: String,
        /// Its offset.
        offset: u64,
        /// Bytes it needs from there.
        need: u64,
        /// File length.
        len: u64,
    },
    /// A metadata value type code not in the specification.
    #[error("metadata `{key}`: unknown value type {code}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The code seen.
        code: u32,
    },
    /// Arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    #[error("metadata `{key}`: arrays nested deeper than {MAX_ARRAY_DEPTH}")]
    ArrayDepth {
        /// The key.
        key: String,
    },
    /// A string is not valid UTF-8.
    #[error("{what} at byte {offset} is not valid UTF-8")]
    Utf8 {
        /// Which string (`metadata key`, `tensor name`, the key of a value).
        what: String,
        /// Its offset.
        offset: u64,
    },
    /// A key or tensor name appears twice.
    #[error("{what} `{name}` appears twice")]
    Duplicate {
        /// `metadata key` or `tensor`.
        what: &'static str,
        /// The name.
        name: String,
    },
    /// `general.alignment` is not a power of two of type u32.
    #[error("general.alignment: {value} (must be a u32 power of two)")]
    Alignment {
        /// The value seen.
        value: String,
    },
    /// A tensor's ggml type is one this build does not read.
    #[error(
        "tensor `{tensor}`: ggml type {code} ({name}) is not supported (this build reads f32, f16, bf16, q8_0, q4_0, q4_1, q4_K, q6_K)"
    )]
    UnsupportedType {
        /// The tensor.
        tensor: String,
        /// The `ggml_type` code.
        code: u32,
        /// ggml's name for it, or `unknown`.
        name: &'static str,
    },
    /// A tensor's dimensions are invalid: more than [`MAX_DIMS`], zero, a row that is not a
    /// whole number of blocks, or a byte size that overflows.
    #[error("tensor `{tensor}`: dimensions {dims:?} are invalid for {ty}: {reason}")]
    Dims {
        /// The tensor.
        tensor: String,
        /// The dimensions seen (`ne`, innermost first).
        dims: Vec<u64>,
        /// Its type's name.
        ty: &'static str,
        /// Why.
        reason: &'static str,
    },
    /// A tensor's data offset is not aligned, lies outside the file, or overlaps another.
    #[error(
        "tensor `{tensor}`: data at offset {offset} (+{size} bytes) {reason} (alignment {alignment}, data section {data_len} bytes)"
    )]
    Offset {
        /// The tensor.
        tensor: String,
        /// Its offset relative to the start of the data section.
        offset: u64,
        /// Its size in bytes.
        size: u64,
        /// The alignment in force.
        alignment: u64,
        /// Bytes from the start of the data section to the end of the file.
        data_len: u64,
        /// `is not aligned`, `runs past the end of the file`, `overlaps tensor ...`.
        reason: String,
    },
    /// A required metadata key is absent.
    #[error("metadata `{key}` is missing")]
    MissingKey {
        /// The key.
        key: String,
    },
    /// A metadata value has another type than the one its key needs.
    #[error("metadata `{key}` is {found}; expected {expected}")]
    KeyType {
        /// The key.
        key: String,
        /// What was expected.
        expected: &'static str,
        /// The type seen.
        found: &'static str,
    },
}

type Result<T> = std::result::Result<T, GgufError>;

/// A metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Type 0.
    U8(u8),
    /// Type 1.
    I8(i8),
    /// Type 2.
    U16(u16),
    /// Type 3.
    I16(i16),
    /// Type 4.
    U32(u32),
    /// Type 5.
    I32(i32),
    /// Type 6.
    F32(f32),
    /// Type 7 (one byte, 0 or 1; other values read as true, as ggml does).
    Bool(bool),
    /// Type 8.
    String(String),
    /// Type 9: elements of one type.
    Array(Vec<Value>),
    /// Type 10.
    U64(u64),
    /// Type 11.
    I64(i64),
    /// Type 12.
    F64(f64),
}

impl Value {
    /// The specification's name of the value's type.
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::U8(_) => "u8",
            Value::I8(_) => "i8",
            Value::U16(_) => "u16",
            Value::I16(_) => "i16",
            Value::U32(_) => "u32",
            Value::I32(_) => "i32",
            Value::F32(_) => "f32",
            Value::Bool(_) => "bool",
            Value::String(_) => "string",
            Value::Array(_) => "array",
            Value::U64(_) => "u64",
            Value::I64(_) => "i64",
            Value::F64(_) => "f64",
        }
    }

    /// The value as an unsigned integer, for any integer type holding a non-negative value.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// The value as f64, for the float and integer types.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v.into()),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The string, for a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }
}

/// One tensor's description.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    /// Name (GGUF naming: `blk.0.attn_q.weight`, ...).
    pub name: String,
    /// Element type.
    pub ty: TensorType,
    /// `ne`, innermost first (1 to [`MAX_DIMS`] entries, each >= 1).
    pub dims: Vec<u64>,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    /// Byte size of the data.
    pub size: u64,
}

/// The parsed header of a GGUF file: version, metadata, tensor infos.
#[derive(Clone, Debug)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Alignment of the tensor data.
    pub alignment: u64,
    /// Metadata in file order.
    pub metadata: Vec<(String, Value)>,
    index: HashMap<String, usize>,
    /// Tensors in file order.
    pub tensors: Vec<TensorInfo>,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let avail = (self.b.len() - self.pos) as u64;
        if n > avail {
            return Err(GgufError::Truncated {
                what: what(),
                offset: self.pos as u64,
                need: n,
                len: self.b.len() as u64,
            });
        }
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn remaining(&self) -> u64 {
        (self.b.len() - self.pos) as u64
    }

    fn arr<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let s = self.take(N as u64, what)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.arr::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.arr::<8>(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<String> {
        let len = self.u64(&|| format!("length of {}", what()))?;
        let at = self.pos as u64;
        let bytes = self.take(len, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::Utf8 {
            what: what(),
            offset: at,
        })
    }

    fn value(&mut self, key: &str, code: u32, depth: u32) -> Result<Value> {
        let what = || format!("value of `{key}`");
        Ok(match code {
            0 => Value::U8(self.arr::<1>(&what)?[0]),
            1 => Value::I8(self.arr::<1>(&what)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.arr(&what)?)),
            3 => Value::I16(i16::from_le_bytes(self.arr(&what)?)),
            4 => Value::U32(u32::from_le_bytes(self.arr(&what)?)),
            5 => Value::I32(i32::from_le_bytes(self.arr(&what)?)),
            6 => Value::F32(f32::from_le_bytes(self.arr(&what)?)),
            7 => Value::Bool(self.arr::<1>(&what)?[0] != 0),
            8 => Value::String(self.string(&what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::ArrayDepth {
                        key: key.to_owned(),
                    });
                }
                let elem = self.u32(&|| format!("array type of `{key}`"))?;
                let count = self.u64(&|| format!("array length of `{key}`"))?;
                // Every element takes at least one byte (strings and arrays: 8+): a count the
                // remaining bytes cannot hold is a truncated file, caught before allocating.
                let min = match elem {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    code => {
                        return Err(GgufError::UnknownValueType {
                            key: key.to_owned(),
                            code,
                        });
                    }
                };
                if count.checked_mul(min).is_none_or(|n| n > self.remaining()) {
                    return Err(GgufError::Truncated {
                        what: format!("array `{key}` of {count} elements"),
                        offset: self.pos as u64,
                        need: count.saturating_mul(min),
                        len: self.b.len() as u64,
                    });
                }
                let mut v = Vec::with_capacity(count as usize);
                for _ in 0..count {
                    v.push(self.value(key, elem, depth + 1)?);
                }
                Value::Array(v)
            }
            10 => Value::U64(u64::from_le_bytes(self.arr(&what)?)),
            11 => Value::I64(i64::from_le_bytes(self.arr(&what)?)),
            12 => Value::F64(f64::from_le_bytes(self.arr(&what)?)),
            code => {
                return Err(GgufError::UnknownValueType {
                    key: key.to_owned(),
                    code,
                });
            }
        })
    }
}

/// ggml's name for a `ggml_type` code (`ggml.c`, `type_traits`), for error messages.
pub fn ggml_type_name(code: u32) -> &'static str {
    match code {
        0 => "f32",
        1 => "f16",
        2 => "q4_0",
        3 => "q4_1",
        6 => "q5_0",
        7 => "q5_1",
        8 => "q8_0",
        9 => "q8_1",
        10 => "q2_K",
        11 => "q3_K",
        12 => "q4_K",
        13 => "q5_K",
        14 => "q6_K",
        15 => "q8_K",
        16 => "iq2_xxs",
        17 => "iq2_xs",
        18 => "iq3_xxs",
        19 => "iq1_s",
        20 => "iq4_nl",
        21 => "iq3_s",
        22 => "iq2_s",
        23 => "iq4_xs",
        24 => "i8",
        25 => "i16",
        26 => "i32",
        27 => "i64",
        28 => "f64",
        29 => "iq1_m",
        30 => "bf16",
        34 => "tq1_0",
        35 => "tq2_0",
        39 => "mxfp4",
        _ => "unknown",
    }
}

impl GgufHeader {
    /// Parse the header of a GGUF file held in `bytes` (the whole file: tensor ranges are
    /// checked against its length).
    ///
    /// # Errors
    /// Every [`GgufError`] but `Io`, `MissingKey` and `KeyType`.
    pub fn parse(bytes: &[u8]) -> Result<GgufHeader> {
        let mut c = Cursor { b: bytes, pos: 0 };
        let magic = c
            .take(4, &|| "magic".into())
            .map_err(|_| GgufError::Magic {
                found: bytes[..bytes.len().min(4)].to_vec(),
            })?;
        if magic != MAGIC {
            return Err(GgufError::Magic {
                found: magic.to_vec(),
            });
        }
        let version = c.u32(&|| "version".into())?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::Version { version });
        }
        let n_tensors = c.u64(&|| "tensor count".into())?;
        let n_kv = c.u64(&|| "metadata count".into())?;
        // A key is at least 8 + 4 bytes + a value; a tensor info at least 8 + 4 + 8 + 4 + 8.
        for (what, n, min) in [("metadata", n_kv, 13u64), ("tensor", n_tensors, 32)] {
            if n.checked_mul(min).is_none_or(|b| b > c.remaining()) {
                return Err(GgufError::Truncated {
                    what: format!("{n} {what} entries"),
                    offset: c.pos as u64,
                    need: n.saturating_mul(min),
                    len: bytes.len() as u64,
                });
            }
        }
        let mut metadata = Vec::with_capacity(n_kv as usize);
        let mut index = HashMap::with_capacity(n_kv as usize);
        for i in 0..n_kv {
            let key = c.string(&|| format!("metadata key {i}"))?;
            let code = c.u32(&|| format!("value type of `{key}`"))?;
            let v = c.value(&key, code, 0)?;
            if index.insert(key.clone(), metadata.len()).is_some() {
                return Err(GgufError::Duplicate {
                    what: "metadata key",
                    name: key,
                });
            }
            metadata.push((key, v));
        }
        let alignment = match index.get("general.alignment").map(|&i| &metadata[i].1) {
            None => DEFAULT_ALIGNMENT,
            Some(Value::U32(a)) if a.is_power_of_two() => u64::from(*a),
            Some(v) => {
                return Err(GgufError::Alignment {
                    value: format!("{v:?}"),
                });
            }
        };
        let mut raw = Vec::with_capacity(n_tensors as usize);
        let mut names = HashMap::with_capacity(n_tensors as usize);
        for i in 0..n_tensors {
            let name = c.string(&|| format!("tensor name {i}"))?;
            let n_dims = c.u32(&|| format!("dimension count of `{name}`"))? as usize;
            if n_dims == 0 || n_dims > MAX_DIMS {
                return Err(GgufError::Dims {
                    tensor: name,
                    dims: vec![],
                    ty: "any type",
                    reason: "1 to 4 dimensions are allowed",
                });
            }
            let mut dims = Vec::with_capacity(n_dims);
            for d in 0..n_dims {
                dims.push(c.u64(&|| format!("dimension {d} of `{name}`"))?);
            }
            let code = c.u32(&|| format!("type of `{name}`"))?;
            let offset = c.u64(&|| format!("data offset of `{name}`"))?;
            if names.insert(name.clone(), i).is_some() {
                return Err(GgufError::Duplicate {
                    what: "tensor",
                    name,
                });
            }
            raw.push((name, dims, code, offset));
        }
        let data_offset = (c.pos as u64).next_multiple_of(alignment);
        let data_len = (bytes.len() as u64).saturating_sub(data_offset);
        let mut tensors = Vec::with_capacity(raw.len());
        for (name, dims, code, offset) in raw {
            let Some(ty) = TensorType::from_ggml_id(code) else {
                return Err(GgufError::UnsupportedType {
                    tensor: name,
                    code,
                    name: ggml_type_name(code),
                });
            };
            if dims.contains(&0) {
                return Err(GgufError::Dims {
                    tensor: name,
                    dims,
                    ty: ty.name(),
                    reason: "a dimension is 0",
                });
            }
            if dims[0] % ty.block_elems() as u64 != 0 {
                return Err(GgufError::Dims {
                    tensor: name,
                    dims,
                    ty: ty.name(),
                    reason: "the row length is not a whole number of blocks",
                });
            }
            let Some(size) = tensor_bytes(ty, &dims).filter(|&s| s <= i64::MAX as u64) else {
                return Err(GgufError::Dims {
                    tensor: name,
                    dims,
                    ty: ty.name(),
                    reason: "the byte size overflows",
                });
            };
            let bad = |reason: String| GgufError::Offset {
                tensor: name.clone(),
                offset,
                size,
                alignment,
                data_len,
                reason,
            };
            if offset % alignment != 0 {
                return Err(bad("is not aligned".into()));
            }
            if offset.checked_add(size).is_none_or(|end| end > data_len) {
                return Err(bad("runs past the end of the file".into()));
            }
            tensors.push(TensorInfo {
                offset: data_offset + offset,
                name,
                ty,
                dims,
                size,
            });
        }
        let mut order: Vec<usize> = (0..tensors.len()).collect();
        order.sort_by_key(|&i| tensors[i].offset);
        for w in order.windows(2) {
            let (a, b) = (&tensors[w[0]], &tensors[w[1]]);
            if a.size > 0 && a.offset + a.size > b.offset {
                return Err(GgufError::Offset {
                    tensor: b.name.clone(),
                    offset: b.offset - data_offset,
                    size: b.size,
                    alignment,
                    data_len,
                    reason: format!("overlaps tensor `{}`", a.name),
                });
            }
        }
        Ok(GgufHeader {
            version,
            alignment,
            metadata,
            index,
            tensors,
            data_offset,
        })
    }

    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.index.get(key).map(|&i| &self.metadata[i].1)
    }

    /// The value of `key` as an unsigned integer.
    ///
    /// # Errors
    /// [`GgufError::MissingKey`], [`GgufError::KeyType`].
    pub fn u64(&self, key: &str) -> Result<u64> {
        let v = self.get(key).ok_or_else(|| GgufError::MissingKey {
            key: key.to_owned(),
        })?;
        v.as_u64().ok_or_else(|| GgufError::KeyType {
            key: key.to_owned(),
            expected: "a non-negative integer",
            found: v.type_name(),
        })
    }

    /// The value of `key` as an unsigned integer, `None` when absent.
    ///
    /// # Errors
    /// [`GgufError::KeyType`].
    pub fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        match self.get(key) {
            None => Ok(None),
            Some(_) => self.u64(key).map(Some),
        }
    }

    /// The value of `key` as f64, `None` when absent.
    ///
    /// # Errors
    /// [`GgufError::KeyType`].
    pub fn opt_f64(&self, key: &str) -> Result<Option<f64>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| GgufError::KeyType {
                key: key.to_owned(),
                expected: "a number",
                found: v.type_name(),
            }),
        }
    }

    /// The value of `key` as a string, `None` when absent.
    ///
    /// # Errors
    /// [`GgufError::KeyType`].
    pub fn opt_str(&self, key: &str) -> Result<Option<&str>> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v.as_str().map(Some).ok_or_else(|| GgufError::KeyType {
                key: key.to_owned(),
                expected: "a string",
                found: v.type_name(),
            }),
        }
    }

    /// The value of `key` as a bool, `None` when absent.
    ///
    /// # Errors
    /// [`GgufError::KeyType`].
    pub fn opt_bool(&self, key: &str) -> Result<Option<bool>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(GgufError::KeyType {
                key: key.to_owned(),
                expected: "a bool",
                found: v.type_name(),
            }),
        }
    }

    /// The value of `key` as an array, `None` when absent.
    ///
    /// # Errors
    /// [`GgufError::KeyType`].
    pub fn opt_array(&self, key: &str) -> Result<Option<&[Value]>> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(v) => Err(GgufError::KeyType {
                key: key.to_owned(),
                expected: "an array",
                found: v.type_name(),
            }),
        }
    }

    /// The tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }
}

enum Storage {
    Mmap(memmap2::Mmap),
    Vec(Vec<u8>),
}

/// A GGUF file: its header, and its bytes (memory-mapped read-only, or in memory).
pub struct GgufFile {
    storage: Storage,
    /// The parsed header.
    pub header: GgufHeader,
    path: Option<PathBuf>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GgufFile")
            .field("path", &self.path)
            .field("version", &self.header.version)
            .field("tensors", &self.header.tensors.len())
            .finish()
    }
}

impl GgufFile {
    /// Map the file at `path` read-only and parse its header.
    ///
    /// The mapping is read-only and private to this process; a file truncated by another
    /// process while mapped makes reads of the lost pages fault (`SIGBUS`), as for every
    /// memory-mapped reader: build from files nothing else is rewriting.
    ///
    /// # Errors
    /// [`GgufError::File`] when the file cannot be opened, [`GgufError::Io`] when it cannot be
    /// mapped; every parse error of
    /// [`GgufHeader::parse`].
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        let path = path.as_ref();
        let io = |op: &'static str| {
            move |source| GgufError::Io {
                path: path.to_path_buf(),
                op,
                source,
            }
        };
        let file = tether_bundle::files::open_regular(path)?;
        let len = file.metadata().map_err(io("reading metadata of"))?.len();
        let storage = if len == 0 {
            Storage::Vec(Vec::new())
        } else {
            // SAFETY: the mapping is read-only; every access is bounds-checked against its
            // length, which does not change. Another process truncating the file while it is
            // mapped would make touching the lost pages raise SIGBUS (documented above).
            #[allow(unsafe_code)]
            let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("mapping"))?;
            Storage::Mmap(map)
        };
        let header = GgufHeader::parse(match &storage {
            Storage::Mmap(m) => m,
            Storage::Vec(v) => v,
        })?;
        Ok(GgufFile {
            storage,
            header,
            path: Some(path.to_path_buf()),
        })
    }

    /// Parse a GGUF file held in memory.
    ///
    /// # Errors
    /// As [`GgufHeader::parse`].
    pub fn from_vec(bytes: Vec<u8>) -> Result<GgufFile> {
        let header = GgufHeader::parse(&bytes)?;
        Ok(GgufFile {
            storage: Storage::Vec(bytes),
            header,
            path: None,
        })
    }

    /// The path given to [`open`](Self::open).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// The whole file.
    pub fn bytes(&self) -> &[u8] {
        match &self.storage {
            Storage::Mmap(m) => m,
            Storage::Vec(v) => v,
        }
    }

    /// A tensor's bytes (checked against the file length at parse).
    pub fn data(&self, t: &TensorInfo) -> &[u8] {
        &self.bytes()[t.offset as usize..(t.offset + t.size) as usize]
    }

    /// Give up the storage as a [`crate::tensor`] backing (the memory map, or the bytes).
    pub(crate) fn into_backing(self) -> (GgufHeader, crate::tensor::Backing) {
        let b = match self.storage {
            Storage::Mmap(m) => crate::tensor::Backing::Mmap(m),
            Storage::Vec(v) => {
                crate::tensor::Backing::Owned(crate::tensor::AlignedBuf::from_bytes(&v))
            }
        };
        (self.header, b)
    }
}

/// A GGUF writer for tests and fixtures: metadata and tensors in, file bytes out (version 3,
/// the given alignment).
#[derive(Clone, Debug, Default)]
pub struct GgufWriter {
    /// Metadata in order.
    pub metadata: Vec<(String, Value)>,
    /// Tensors: name, type, dims (`ne`), data.
    pub tensors: Vec<(String, TensorType, Vec<u64>, Vec<u8>)>,
    /// Alignment of the data (0: the default 32; written as `general.alignment` when not 32).
    pub alignment: u32,
}

impl GgufWriter {
    /// Append a metadata entry.
    pub fn kv(&mut self, key: &str, v: Value) -> &mut Self {
        self.metadata.push((key.to_owned(), v));
        self
    }

    /// Append a tensor.
    pub fn tensor(&mut self, name: &str, ty: TensorType, dims: &[u64], data: Vec<u8>) -> &mut Self {
        self.tensors
            .push((name.to_owned(), ty, dims.to_vec(), data));
        self
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        fn s(out: &mut Vec<u8>, v: &str) {
            out.extend_from_slice(&(v.len() as u64).to_le_bytes());
            out.extend_from_slice(v.as_bytes());
        }
        fn code(v: &Value) -> u32 {
            match v {
                Value::U8(_) => 0,
                Value::I8(_) => 1,
                Value::U16(_) => 2,
                Value::I16(_) => 3,
                Value::U32(_) => 4,
                Value::I32(_) => 5,
                Value::F32(_) => 6,
                Value::Bool(_) => 7,
                Value::String(_) => 8,
                Value::Array(_) => 9,
                Value::U64(_) => 10,
                Value::I64(_) => 11,
                Value::F64(_) => 12,
            }
        }
        fn val(out: &mut Vec<u8>, v: &Value) {
            match v {
                Value::U8(x) => out.push(*x),
                Value::I8(x) => out.push(*x as u8),
                Value::U16(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::I16(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::U32(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::I32(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::F32(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::Bool(x) => out.push(u8::from(*x)),
                Value::String(x) => s(out, x),
                Value::Array(a) => {
                    let c = a.first().map_or(4, code);
                    out.extend_from_slice(&c.to_le_bytes());
                    out.extend_from_slice(&(a.len() as u64).to_le_bytes());
                    a.iter().for_each(|e| val(out, e));
                }
                Value::U64(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::I64(x) => out.extend_from_slice(&x.to_le_bytes()),
                Value::F64(x) => out.extend_from_slice(&x.to_le_bytes()),
            }
        }
        let align = if self.alignment == 0 {
            32
        } else {
            self.alignment as u64
        };
        let mut meta = self.metadata.clone();
        if align != 32 && !meta.iter().any(|(k, _)| k == "general.alignment") {
            meta.push(("general.alignment".into(), Value::U32(align as u32)));
        }
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(meta.len() as u64).to_le_bytes());
        for (k, v) in &meta {
            s(&mut out, k);
            out.extend_from_slice(&code(v).to_le_bytes());
            val(&mut out, v);
        }
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for (name, ty, dims, data) in &self.tensors {
            s(&mut out, name);
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            dims.iter()
                .for_each(|d| out.extend_from_slice(&d.to_le_bytes()));
            out.extend_from_slice(&ty.ggml_id().to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len() as u64).next_multiple_of(align);
        }
        out.resize((out.len() as u64).next_multiple_of(align) as usize, 0);
        let base = out.len() as u64;
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize((base + off) as usize, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> GgufWriter {
        let mut w = GgufWriter::default();
        w.kv("general.architecture", Value::String("llama".into()))
            .kv("u8", Value::U8(7))
            .kv("i8", Value::I8(-7))
            .kv("u16", Value::U16(700))
            .kv("i16", Value::I16(-700))
            .kv("i32", Value::I32(-70000))
            .kv("f32", Value::F32(1.5))
            .kv("bool", Value::Bool(true))
            .kv("u64", Value::U64(1 << 40))
            .kv("i64", Value::I64(-(1 << 40)))
            .kv("f64", Value::F64(0.25))
            .kv(
                "strings",
                Value::Array(vec![Value::String("a".into()), Value::String("é".into())]),
            )
            .kv(
                "nested",
                Value::Array(vec![Value::Array(vec![Value::U32(1), Value::U32(2)])]),
            );
        w.tensor("a", TensorType::F32, &[4, 2], (0..32).collect())
            .tensor("b", TensorType::Q4_1, &[32], vec![9; 20])
            .tensor("c", TensorType::Q8_0, &[64], vec![3; 68]);
        w
    }

    #[test]
    fn reads_every_value_type_and_tensor() {
        let bytes = sample().to_bytes();
        let f = GgufFile::from_vec(bytes).expect("parse");
        let h = &f.header;
        assert_eq!(h.version, 3);
        assert_eq!(h.alignment, 32);
        assert_eq!(h.opt_str("general.architecture").unwrap(), Some("llama"));
        assert_eq!(h.get("i8"), Some(&Value::I8(-7)));
        assert_eq!(h.get("i16"), Some(&Value::I16(-700)));
        assert_eq!(h.u64("u16").unwrap(), 700);
        assert_eq!(h.u64("u64").unwrap(), 1 << 40);
        assert!(h.u64("i64").is_err());
        assert_eq!(h.opt_f64("f32").unwrap(), Some(1.5));
        assert_eq!(h.opt_f64("f64").unwrap(), Some(0.25));
        assert_eq!(h.opt_bool("bool").unwrap(), Some(true));
        assert_eq!(
            h.opt_array("strings").unwrap().unwrap()[1].as_str(),
            Some("é")
        );
        assert!(matches!(h.get("nested"), Some(Value::Array(a)) if a.len() == 1));
        let e = h.opt_str("u8").unwrap_err().to_string();
        assert!(e.contains("`u8` is u8; expected a string"), "{e}");
        assert_eq!(h.tensors.len(), 3);
        for t in &h.tensors {
            assert_eq!((t.offset - h.data_offset) % 32, 0);
        }
        let a = h.tensor("a").unwrap();
        assert_eq!(a.dims, [4, 2]);
        assert_eq!(f.data(a), (0..32).collect::<Vec<u8>>());
        assert_eq!(f.data(h.tensor("c").unwrap()), vec![3; 68]);
    }

    #[test]
    fn honours_general_alignment() {
        let mut w = sample();
        w.alignment = 64;
        let f = GgufFile::from_vec(w.to_bytes()).expect("parse");
        assert_eq!(f.header.alignment, 64);
        assert_eq!(f.header.data_offset % 64, 0);
        assert_eq!(f.data(f.header.tensor("c").unwrap()), vec![3; 68]);
        let mut w = sample();
        w.kv("general.alignment", Value::U32(48));
        let e = GgufFile::from_vec(w.to_bytes()).unwrap_err().to_string();
        assert!(e.contains("general.alignment: U32(48)"), "{e}");
    }

    #[test]
    fn refuses_unsupported_types_and_bad_geometry() {
        let bytes = sample().to_bytes();
        // Patch tensor `b`'s type to q5_0 (6): find its info by name.
        let at = find(&bytes, b"\x01\x00\x00\x00\x00\x00\x00\x00b") + 9;
        let mut x = bytes.clone();
        let ty_at = at + 4 + 8;
        x[ty_at..ty_at + 4].copy_from_slice(&6u32.to_le_bytes());
        let e = GgufFile::from_vec(x).unwrap_err().to_string();
        assert!(
            e.contains("`b`: ggml type 6 (q5_0) is not supported"),
            "{e}"
        );
        // Row not a whole number of blocks.
        let mut x = bytes.clone();
        x[at + 4..at + 12].copy_from_slice(&31u64.to_le_bytes());
        let e = GgufFile::from_vec(x).unwrap_err().to_string();
        assert!(e.contains("not a whole number of blocks"), "{e}");
        // Misaligned offset, and one past the end.
        let mut x = bytes.clone();
        x[ty_at + 4..ty_at + 12].copy_from_slice(&33u64.to_le_bytes());
        let e = GgufFile::from_vec(x).unwrap_err().to_string();
        assert!(e.contains("is not aligned"), "{e}");
        let mut x = bytes.clone();
        x[ty_at + 4..ty_at + 12].copy_from_slice(&(1u64 << 20).to_le_bytes());
        let e = GgufFile::from_vec(x).unwrap_err().to_string();
        assert!(e.contains("runs past the end"), "{e}");
        // Overlap: `b` at `a`'s offset.
        let mut x = bytes.clone();
        x[ty_at + 4..ty_at + 12].copy_from_slice(&0u64.to_le_bytes());
        let e = GgufFile::from_vec(x).unwrap_err().to_string();
        assert!(e.contains("overlaps tensor"), "{e}");
        // Bad magic, version.
        let mut x = bytes.clone();
        x[0] = b'X';
        assert!(matches!(
            GgufFile::from_vec(x),
            Err(GgufError::Magic { .. })
        ));
        let mut x = bytes;
        x[4] = 9;
        assert!(matches!(
            GgufFile::from_vec(x),
            Err(GgufError::Version { version: 9 })
        ));
    }

    fn find(hay: &[u8], needle: &[u8]) -> usize {
        hay.windows(needle.len())
            .position(|w| w == needle)
            .expect("needle")
    }

    #[test]
    fn every_truncation_is_an_error() {
        let bytes = sample().to_bytes();
        for n in 0..bytes.len() {
            assert!(
                GgufHeader::parse(&bytes[..n]).is_err(),
                "a file cut at {n} of {} bytes parsed",
                bytes.len()
            );
        }
    }

    /// Mutated headers (a deterministic generator: xorshift): every byte flip, random
    /// overwrites of counts and lengths with huge values. Nothing panics or allocates what
    /// the file cannot back; most mutations are errors.
    #[test]
    fn mutated_headers_never_panic() {
        let bytes = sample().to_bytes();
        let header_len = GgufHeader::parse(&bytes).unwrap().data_offset as usize;
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for i in 0..header_len {
            for v in [0u8, 0xff, 0x7f, 0x80, 1] {
                let mut x = bytes.clone();
                x[i] = v;
                let _ = GgufHeader::parse(&x);
            }
        }
        for _ in 0..5000 {
            let mut x = bytes.clone();
            let at = (next() as usize) % header_len.saturating_sub(8);
            let v = match next() % 4 {
                0 => u64::MAX,
                1 => 1 << (next() % 64),
                2 => next(),
                _ => next() % 64,
            };
            x[at..at + 8].copy_from_slice(&v.to_le_bytes());
            let _ = GgufHeader::parse(&x);
        }
    }
}
