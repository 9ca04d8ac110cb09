//! safetensors reader (single files and sharded checkpoints), memory-mapped, zero-copy.
//!
//! Source: the safetensors format (`huggingface/safetensors`, README "Format"): an 8-byte
//! little-endian header length `N`, `N` bytes of UTF-8 JSON mapping each tensor name to
//! `{"dtype", "shape", "data_offsets": [begin, end]}` (offsets relative to the byte after
//! the header; an optional `__metadata__` string map), then the data, row-major (C order).
//! A sharded checkpoint has `model.safetensors.index.json` whose `weight_map` maps each
//! tensor name to its shard file.
//!
//! Element types read: `F32`, `F16`, `BF16`; others are refused naming the type and tensor.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::quant::TensorType;

/// Largest JSON header accepted (the format's own reference limit is 100 MB).
pub const MAX_HEADER_BYTES: u64 = 100 * 1024 * 1024;

/// A malformed safetensors file or index.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// The file is not a regular file, or cannot be opened.
    #[error(transparent)]
    File(#[from] tether_bundle::files::FileError),
    /// The file could not be mapped or read.
    #[error("{op} `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// The header is malformed.
    #[error("`{file}`: {message}")]
    Header {
        /// The file.
        file: String,
        /// What is wrong, with the value seen.
        message: String,
    },
    /// A tensor's dtype is not F32, F16 or BF16.
    #[error("`{file}`: tensor `{tensor}` has dtype {dtype} (this build reads F32, F16, BF16)")]
    Dtype {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// The dtype seen.
        dtype: String,
    },
    /// A tensor's byte range disagrees with its shape and dtype, lies outside the file, or
    /// overlaps another.
    #[error("`{file}`: tensor `{tensor}`: {message}")]
    Range {
        /// The file.
        file: String,
        /// The tensor.
        tensor: String,
        /// What is wrong, with the values seen.
        message: String,
    },
    /// The sharded index is malformed, names a missing shard, or disagrees with a shard.
    #[error("`{file}`: {message}")]
    Index {
        /// The index file.
        file: String,
        /// What is wrong.
        message: String,
    },
}

type Result<T> = std::result::Result<T, SafetensorsError>;

/// One tensor of a safetensors file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StTensor {
    /// Name as stored (`model.layers.0.self_attn.q_proj.weight`).
    pub name: String,
    /// Element type.
    pub ty: TensorType,
    /// Shape, outermost first (PyTorch order).
    pub shape: Vec<u64>,
    /// Absolute byte range in the file.
    pub begin: u64,
    /// End of the range (exclusive).
    pub end: u64,
}

impl StTensor {
    /// Dimensions in ggml's `ne` order (innermost first): the reversed shape.
    pub fn ne(&self) -> Vec<u64> {
        if self.shape.is_empty() {
            vec![1]
        } else {
            self.shape.iter().rev().copied().collect()
        }
    }
}

/// One memory-mapped safetensors file.
pub struct SafetensorsFile {
    map: Option<memmap2::Mmap>,
    /// Tensors in header order (sorted by name).
    pub tensors: Vec<StTensor>,
    path: PathBuf,
}

impl std::fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SafetensorsFile")
            .field("path", &self.path)
            .field("tensors", &self.tensors.len())
            .finish()
    }
}

fn dtype(s: &str) -> Option<TensorType> {
    match s {
        "F32" => Some(TensorType::F32),
        "F16" => Some(TensorType::F16),
        "BF16" => Some(TensorType::Bf16),
        _ => None,
    }
}

/// Parse a safetensors header from the whole file's bytes; `file` names it in errors.
///
/// # Errors
/// [`SafetensorsError::Header`], [`SafetensorsError::Dtype`], [`SafetensorsError::Range`].
pub fn parse_header(bytes: &[u8], file: &str) -> Result<Vec<StTensor>> {
    let bad = |message: String| SafetensorsError::Header {
        file: file.to_owned(),
        message,
    };
    let len = bytes.len() as u64;
    if len < 8 {
        return Err(bad(format!(
            "{len} bytes: shorter than the 8-byte header length"
        )));
    }
    let n = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
    if n > MAX_HEADER_BYTES || n > len - 8 {
        return Err(bad(format!(
            "header length {n} exceeds the file ({len} bytes) or the {MAX_HEADER_BYTES}-byte limit"
        )));
    }
    let json = std::str::from_utf8(&bytes[8..8 + n as usize])
        .map_err(|e| bad(format!("header is not UTF-8: {e}")))?;
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(json).map_err(|e| bad(format!("header is not a JSON object: {e}")))?;
    let data_start = 8 + n;
    let data_len = len - data_start;
    let mut out = Vec::with_capacity(map.len());
    for (name, v) in &map {
        if name == "__metadata__" {
            continue;
        }
        let range = |message: String| SafetensorsError::Range {
            file: file.to_owned(),
            tensor: name.clone(),
            message,
        };
        let d = v
            .get("dtype")
            .and_then(|d| d.as_str())
            .ok_or_else(|| range(format!("no string `dtype` in {v}")))?;
        let ty = dtype(d).ok_or_else(|| SafetensorsError::Dtype {
            file: file.to_owned(),
            tensor: name.clone(),
            dtype: d.to_owned(),
        })?;
        let shape: Vec<u64> = v
            .get("shape")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64()).collect::<Option<Vec<_>>>())
            .filter(|s| s.len() <= crate::gguf::MAX_DIMS)
            .ok_or_else(|| range(format!("`shape` is not a list of at most 4 sizes: {v}")))?;
        let offs: Vec<u64> = v
            .get("data_offsets")
            .and_then(|s| s.as_array())
            .and_then(|a| a.iter().map(|x| x.as_u64()).collect::<Option<Vec<_>>>())
            .filter(|o| o.len() == 2)
            .ok_or_else(|| range(format!("`data_offsets` is not [begin, end]: {v}")))?;
        let (b, e) = (offs[0], offs[1]);
        let elems = shape
            .iter()
            .try_fold(1u64, |a, &d| a.checked_mul(d))
            .ok_or_else(|| range(format!("shape {shape:?} overflows")))?;
        let need = elems
            .checked_mul(ty.block_bytes() as u64)
            .ok_or_else(|| range(format!("shape {shape:?} overflows")))?;
        if e < b || e - b != need {
            return Err(range(format!(
                "data_offsets [{b}, {e}] hold {} bytes; shape {shape:?} of {d} needs {need}",
                e.wrapping_sub(b)
            )));
        }
        if e > data_len {
            return Err(range(format!(
                "data_offsets [{b}, {e}] run past the data ({data_len} bytes)"
            )));
        }
        if elems == 0 {
            return Err(range(format!("shape {shape:?} is empty")));
        }
        if ty != TensorType::F32 && (data_start + b) % 2 != 0 {
            return Err(range(format!("data at {b} is not 2-byte aligned")));
        }
        out.push(StTensor {
            name: name.clone(),
            ty,
            shape,
            begin: data_start + b,
            end: data_start + e,
        });
    }
    let mut order: Vec<&StTensor> = out.iter().collect();
    order.sort_by_key(|t| t.begin);
    for w in order.windows(2) {
        if w[0].end > w[1].begin {
            return Err(SafetensorsError::Range {
                file: file.to_owned(),
                tensor: w[1].name.clone(),
                message: format!("overlaps tensor `{}`", w[0].name),
            });
        }
    }
    Ok(out)
}

impl SafetensorsFile {
    /// Map `path` read-only and parse its header.
    ///
    /// # Errors
    /// [`SafetensorsError::File`], [`SafetensorsError::Io`], and the errors of
    /// [`parse_header`].
    pub fn open(path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let path = path.as_ref();
        let file = tether_bundle::files::open_regular(path)?;
        let len = file
            .metadata()
            .map_err(|source| SafetensorsError::Io {
                path: path.to_path_buf(),
                op: "reading metadata of",
                source,
            })?
            .len();
        let map = if len == 0 {
            None
        } else {
            // SAFETY: read-only mapping; every access is bounds-checked against its fixed
            // length. A file truncated by another process while mapped would fault on the
            // lost pages (SIGBUS), as for every memory-mapped reader.
            #[allow(unsafe_code)]
            let m =
                unsafe { memmap2::Mmap::map(&file) }.map_err(|source| SafetensorsError::Io {
                    path: path.to_path_buf(),
                    op: "mapping",
                    source,
                })?;
            Some(m)
        };
        let name = path.display().to_string();
        let tensors = parse_header(map.as_deref().unwrap_or(&[]), &name)?;
        Ok(SafetensorsFile {
            map,
            tensors,
            path: path.to_path_buf(),
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The bytes of `t` (a tensor of this file; ranges were checked at parse).
    pub fn data(&self, t: &StTensor) -> &[u8] {
        &self.map.as_deref().unwrap_or(&[])[t.begin as usize..t.end as usize]
    }

    pub(crate) fn into_map(self) -> Option<memmap2::Mmap> {
        self.map
    }
}

/// The files of a checkpoint: `model.safetensors`, or the shards named by
/// `model.safetensors.index.json` (every shard opened, every tensor of the index found in
/// the shard it names). Returned in a stable order (single file, or shards by name).
///
/// # Errors
/// [`SafetensorsError::Index`] for a malformed index, a missing shard, a tensor the index
/// names absent from its shard, or a tensor in two shards; errors of
/// [`SafetensorsFile::open`].
pub fn open_checkpoint(dir: &Path) -> Result<Vec<SafetensorsFile>> {
    let index = dir.join("model.safetensors.index.json");
    if !index.exists() {
        let single = dir.join("model.safetensors");
        if single.exists() {
            return Ok(vec![SafetensorsFile::open(single)?]);
        }
        // Any single *.safetensors file (some exporters name it otherwise).
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map_err(|source| SafetensorsError::Io {
                path: dir.to_path_buf(),
                op: "listing",
                source,
            })?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
            .collect();
        found.sort();
        return match found.len() {
            0 => Err(SafetensorsError::Index {
                file: dir.display().to_string(),
                message: "no model.safetensors, no model.safetensors.index.json, no *.safetensors"
                    .into(),
            }),
            1 => Ok(vec![SafetensorsFile::open(&found[0])?]),
            n => Err(SafetensorsError::Index {
                file: dir.display().to_string(),
                message: format!(
                    "{n} *.safetensors files but no model.safetensors.index.json to say which tensor is where"
                ),
            }),
        };
    }
    let name = index.display().to_string();
    let bad = |message: String| SafetensorsError::Index {
        file: name.clone(),
        message,
    };
    let text = tether_bundle::files::read_regular(&index)?;
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let map = v
        .get("weight_map")
        .and_then(|m| m.as_object())
        .ok_or_else(|| bad("no `weight_map` object".into()))?;
    let mut shards: Vec<String> = Vec::new();
    let mut wanted: HashMap<&str, &str> = HashMap::new();
    for (tensor, shard) in map {
        let shard = shard
            .as_str()
            .ok_or_else(|| bad(format!("`{tensor}` maps to {shard}, not a file name")))?;
        if shard.contains('/') || shard.contains('\\') || shard.starts_with('.') {
            return Err(bad(format!(
                "shard `{shard}` is not a plain file name in the directory"
            )));
        }
        if !shards.iter().any(|s| s == shard) {
            shards.push(shard.to_owned());
        }
        wanted.insert(tensor, shard);
    }
    shards.sort();
    let mut files = Vec::with_capacity(shards.len());
    let mut seen: HashMap<String, String> = HashMap::new();
    for shard in &shards {
        let p = dir.join(shard);
        if !p.exists() {
            return Err(bad(format!("shard `{shard}` does not exist")));
        }
        let f = SafetensorsFile::open(&p)?;
        for t in &f.tensors {
            if let Some(other) = seen.insert(t.name.clone(), shard.clone()) {
                return Err(bad(format!(
                    "tensor `{}` is in both `{other}` and `{shard}`",
                    t.name
                )));
            }
        }
        files.push(f);
    }
    for (tensor, shard) in &wanted {
        match seen.get(*tensor) {
            Some(s) if s == shard => {}
            Some(s) => {
                return Err(bad(format!(
                    "tensor `{tensor}` is mapped to `{shard}` but stored in `{s}`"
                )));
            }
            None => {
                return Err(bad(format!(
                    "tensor `{tensor}` is mapped to `{shard}` but not stored there"
                )));
            }
        }
    }
    Ok(files)
}

/// Bytes of a safetensors file holding `tensors` (name, type, shape, data), for tests and
/// fixtures. Tensors are laid out in the order given.
pub fn write(tensors: &[(&str, TensorType, &[u64], &[u8])]) -> Vec<u8> {
    let mut header = serde_json::Map::new();
    let mut off = 0u64;
    for (name, ty, shape, data) in tensors {
        let d = match ty {
            TensorType::F32 => "F32",
            TensorType::F16 => "F16",
            TensorType::Bf16 => "BF16",
            other => other.name(),
        };
        header.insert(
            (*name).to_owned(),
            serde_json::json!({"dtype": d, "shape": shape, "data_offsets": [off, off + data.len() as u64]}),
        );
        off += data.len() as u64;
    }
    let mut json = serde_json::to_vec(&header).expect("a JSON map serialises");
    // Pad with spaces so the data starts 8-byte aligned (as the reference writer does).
    while !(8 + json.len()).is_multiple_of(8) {
        json.push(b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    for (_, _, _, data) in tensors {
        out.extend_from_slice(data);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_refuses() {
        let a: Vec<u8> = (0..24).collect();
        let b = vec![1u8; 8];
        let bytes = write(&[
            ("a", TensorType::F32, &[2, 3], &a),
            ("b", TensorType::Bf16, &[4], &b),
        ]);
        let t = parse_header(&bytes, "x").expect("parse");
        let ta = t.iter().find(|t| t.name == "a").unwrap();
        assert_eq!(ta.ne(), [3, 2]);
        assert_eq!(&bytes[ta.begin as usize..ta.end as usize], a.as_slice());
        for n in 0..bytes.len() {
            assert!(parse_header(&bytes[..n], "x").is_err(), "cut at {n} parsed");
        }
        let i8s = write(&[("q", TensorType::Q8_0, &[4], &[0; 4])]);
        let e = parse_header(&i8s, "x").unwrap_err().to_string();
        assert!(e.contains("`q` has dtype q8_0"), "{e}");
        // Size disagreeing with the shape.
        let bad = write(&[("a", TensorType::F32, &[2, 4], &a)]);
        let e = parse_header(&bad, "x").unwrap_err().to_string();
        assert!(
            e.contains("hold 24 bytes; shape [2, 4] of F32 needs 32"),
            "{e}"
        );
        // Huge header length.
        let mut x = bytes.clone();
        x[..8].copy_from_slice(&u64::MAX.to_le_bytes());
        let e = parse_header(&x, "x").unwrap_err().to_string();
        assert!(e.contains("exceeds the file"), "{e}");
        // Invalid UTF-8 / JSON in the header.
        let mut x = bytes.clone();
        x[9] = 0xff;
        let e = parse_header(&x, "x").unwrap_err().to_string();
        assert!(e.contains("not UTF-8"), "{e}");
        let mut x = bytes;
        x[8] = b'[';
        assert!(parse_header(&x, "x").is_err());
    }
}
