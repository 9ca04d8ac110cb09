//! A cache of cuDNN execution plans, kept on disk between loads.
//!
//! Finalising a runtime-fusion plan (a convolution with its bias and activation fused,
//! [`crate::native::passes::fusion`]) compiles a kernel: NVRTC, then the driver. For YOLOv8n in fp16 that is
//! most of the load (`docs/evidence/native-h200.md`, seventh run: 5-36 s with fusion, 0.4-1.7 s
//! without). cuDNN serialises a finalised plan as text (documented for runtime-compiled
//! engines; on the H200's cuDNN most plain plans serialise too) and deserialises it on a
//! handle of an identical GPU without compiling again
//! (`CUDNN_ATTR_EXECUTION_PLAN_JSON_REPRESENTATION`, cuDNN backend API reference, "Execution
//! plan"; the cuDNN frontend's plan serialisation rests on the same attribute). The engine
//! keeps those serialisations here, keyed by everything that built the plan, so a later load
//! (and every executor after the first) deserialises instead of compiling (YOLOv8n: 1.2-3.3 s
//! instead of 5-17 s, eighth run). Plans cuDNN does not serialise are simply not cached.
//!
//! The decisions are not cached: every load still measures the candidates and keeps the
//! fastest, only their finalisation is cheaper.
//!
//! # File
//! One file per device model, cuDNN version and tether version
//! ([`PlanCache::file_name`]), in [`cache_dir`]. Little-endian:
//!
//! | bytes | field |
//! |---|---|
//! | 8 | magic `TETHRPLN` |
//! | 4 | format ([`FORMAT`]) |
//! | 4 + n | identity (UTF-8): what the plans were built for ([`identity`]) |
//! | 4 | entry count |
//! | per entry: 4, 4, 4 | key length, plan length, CRC-32 (IEEE, `crc32fast`) of the two lengths, the key and the plan |
//! | per entry: k + p | key (UTF-8), serialised plan |
//!
//! Nothing may follow the last entry. A file that does not parse, is larger than
//! [`MAX_BYTES`] allows, or was written for another identity is ignored with one warning
//! naming what was found ([`PlanCacheError`]) and replaced at the next save. Saving writes a
//! temporary file beside it and renames it over (two processes saving at once: the last
//! one's entries win; a cache, not a record). When a new plan would pass [`MAX_BYTES`],
//! plans this process has not used are dropped first. Files of other identities (another
//! GPU model, cuDNN or tether version) are left alone. Nothing here runs per frame.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Version of the file layout. What a key means (the operation graph the engine builds for
/// it: operand unique ids, virtual tensors) is pinned by [`identity`], which names a checksum
/// of `cudnn_graph.rs`'s source, so a plan built from other graphs is never bound to the new
/// variant packs.
pub const FORMAT: u32 = 2;

const MAGIC: &[u8; 8] = b"TETHRPLN";

/// The most bytes of keys and plans one cache holds (a cache that grows without bound on a
/// device with little storage is a fault of its own): a new plan that would pass it first
/// drops the plans this process has not used, else it is not kept; a larger file is not
/// read.
pub const MAX_BYTES: usize = 256 << 20;

/// Why a cache file was not used.
#[derive(Debug, thiserror::Error)]
pub enum PlanCacheError {
    /// Reading or writing the file failed.
    #[error("cuDNN plan cache {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What the OS said.
        source: std::io::Error,
    },
    /// The file does not start with the magic.
    #[error("cuDNN plan cache {path}: not a plan cache (first bytes {found:02x?})")]
    Magic {
        /// The file.
        path: PathBuf,
        /// Its first bytes (up to 8).
        found: Vec<u8>,
    },
    /// Another layout version.
    #[error("cuDNN plan cache {path}: format {found}, this build reads format {expected}")]
    Format {
        /// The file.
        path: PathBuf,
        /// The file's format.
        found: u32,
        /// [`FORMAT`].
        expected: u32,
    },
    /// Written for another device, cuDNN or tether.
    #[error("cuDNN plan cache {path}: written for {found:?}, this process is {expected:?}")]
    Identity {
        /// The file.
        path: PathBuf,
        /// The file's identity.
        found: String,
        /// This process's.
        expected: String,
    },
    /// The file ends inside a field.
    #[error(
        "cuDNN plan cache {path}: truncated: {what} at byte {offset} needs {need} bytes, {have} left"
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// The field.
        what: &'static str,
        /// Where it starts.
        offset: usize,
        /// Its length.
        need: usize,
        /// Bytes left in the file from `offset`.
        have: usize,
    },
    /// An entry's CRC does not match its bytes.
    #[error(
        "cuDNN plan cache {path}: entry {index} at byte {offset}: CRC-32 {stored:#010x} stored, {computed:#010x} computed"
    )]
    Crc {
        /// The file.
        path: PathBuf,
        /// The entry's position.
        index: usize,
        /// Where its header starts.
        offset: usize,
        /// The CRC in the file.
        stored: u32,
        /// The CRC of the bytes read.
        computed: u32,
    },
    /// Bytes after the last entry (an entry count that does not match the file).
    #[error(
        "cuDNN plan cache {path}: {extra} bytes after the last of {count} entries, at byte {offset}"
    )]
    Trailing {
        /// The file.
        path: PathBuf,
        /// The entry count the file states.
        count: usize,
        /// Where the extra bytes start.
        offset: usize,
        /// How many.
        extra: usize,
    },
    /// The file is larger than a cache may be.
    #[error("cuDNN plan cache {path}: {bytes} bytes, more than the {max} a cache may hold")]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// Its size.
        bytes: u64,
        /// The bound ([`MAX_BYTES`] plus room for the headers).
        max: u64,
    },
    /// A key or identity is not UTF-8.
    #[error("cuDNN plan cache {path}: {what} at byte {offset} is not UTF-8")]
    Text {
        /// The file.
        path: PathBuf,
        /// The field.
        what: &'static str,
        /// Where it starts.
        offset: usize,
    },
}

/// What a plan was built for: tether's version, [`FORMAT`] and the CRC-32 of
/// `cudnn_graph.rs` as compiled (where the operation graphs and their operand ids are
/// written: any edit there starts a new cache), the cuDNN version (`cudnnGetVersion`), and
/// the device (name, compute capability, SM count). A plan is only ever deserialised for the
/// same identity.
pub fn identity(cudnn_version: u32, device: &str, sm: u32, multiprocessors: u32) -> String {
    format!(
        "tether {} plan format {FORMAT} graphs {:08x}; cuDNN {cudnn_version}; {device} sm_{sm} {multiprocessors} SMs",
        env!("CARGO_PKG_VERSION"),
        crc32fast::hash(include_str!("cudnn_graph.rs").as_bytes())
    )
}

/// The cache directory from the values of `TETHER_CACHE_DIR`, `XDG_CACHE_HOME` and `HOME`
/// (read by [`crate::native::NativeOptions::from_env`]): `tether` when set (an empty value
/// turns the cache off: `None`), else `$XDG_CACHE_HOME/tether`, else `$HOME/.cache/tether`;
/// `None` when none of them is set.
pub fn cache_dir(
    tether: Option<std::ffi::OsString>,
    xdg: Option<std::ffi::OsString>,
    home: Option<std::ffi::OsString>,
) -> Option<PathBuf> {
    match tether {
        Some(d) if d.is_empty() => None,
        Some(d) => Some(PathBuf::from(d)),
        None => match xdg.filter(|d| !d.is_empty()) {
            Some(d) => Some(PathBuf::from(d).join("tether")),
            None => home
                .filter(|d| !d.is_empty())
                .map(|h| PathBuf::from(h).join(".cache").join("tether")),
        },
    }
}

struct Inner {
    entries: HashMap<String, Vec<u8>>,
    /// Keys looked up with a hit or added since opened.
    used: HashSet<String>,
    bytes: usize,
    added: usize,
    hits: usize,
    /// Entries added, removed or dropped since the last save.
    dirty: bool,
}

/// Serialised plans by key, shared by the load and the executors of one plan (a mutex:
/// lookups happen at load and at bind, never per frame).
pub struct PlanCache {
    path: Option<PathBuf>,
    identity: String,
    /// [`MAX_BYTES`] (smaller in tests).
    max_bytes: usize,
    inner: Mutex<Inner>,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache")
            .field("path", &self.path)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl PlanCache {
    /// An empty cache that is never saved (it still spares later executors a compile).
    pub fn in_memory(identity: String) -> Self {
        Self::with(None, identity, HashMap::new())
    }

    fn with(path: Option<PathBuf>, identity: String, entries: HashMap<String, Vec<u8>>) -> Self {
        let bytes = entries.iter().map(|(k, v)| k.len() + v.len()).sum();
        PlanCache {
            path,
            identity,
            max_bytes: MAX_BYTES,
            inner: Mutex::new(Inner {
                entries,
                used: HashSet::new(),
                bytes,
                added: 0,
                hits: 0,
                dirty: false,
            }),
        }
    }

    /// The file name for `identity` in a cache directory: `cudnn-plans-<crc32>.bin`.
    pub fn file_name(identity: &str) -> String {
        format!(
            "cudnn-plans-{:08x}.bin",
            crc32fast::hash(identity.as_bytes())
        )
    }

    /// The cache kept in `dir` for `identity`: its entries when the file exists and is
    /// valid; empty when it does not exist, or (with the reason) when it is not valid.
    pub fn open(dir: &Path, identity: String) -> (Self, Option<PlanCacheError>) {
        let path = dir.join(Self::file_name(&identity));
        let max = (MAX_BYTES + (1 << 20)) as u64;
        if let Ok(m) = std::fs::metadata(&path)
            && m.len() > max
        {
            let err = PlanCacheError::TooLarge {
                path: path.clone(),
                bytes: m.len(),
                max,
            };
            return (Self::with(Some(path), identity, HashMap::new()), Some(err));
        }
        let (entries, err) = match std::fs::read(&path) {
            Ok(bytes) => match parse(&bytes, &path, &identity) {
                Ok(e) => (e, None),
                Err(e) => (HashMap::new(), Some(e)),
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => (HashMap::new(), None),
            Err(source) => (
                HashMap::new(),
                Some(PlanCacheError::Io {
                    path: path.clone(),
                    source,
                }),
            ),
        };
        (Self::with(Some(path), identity, entries), err)
    }

    /// The file it is saved to (`None`: in memory only).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// What the plans are built for ([`identity`]).
    pub fn identity(&self) -> &str {
        &self.identity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic while holding it cannot leave the map half-updated (one insert or
        // remove): the data is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The serialised plan under `key` (counted as a hit by [`PlanCache::record_hit`] once
    /// it deserialised).
    pub fn get(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().entries.get(key).cloned()
    }

    /// Whether a plan is kept under `key`; if so it counts as used by this process (the size
    /// bound drops unused plans first), though not as a hit: a load that finds a plan it is
    /// about to deserialise keeps it from being evicted meanwhile.
    pub fn claim(&self, key: &str) -> bool {
        let mut inner = self.lock();
        let held = inner.entries.contains_key(key);
        if held {
            inner.used.insert(key.to_string());
        }
        held
    }

    /// The plan under `key` was deserialised and is used.
    pub fn record_hit(&self, key: &str) {
        let mut inner = self.lock();
        inner.hits += 1;
        inner.used.insert(key.to_string());
    }

    /// Keep `plan` under `key` (replacing what was there). When the cache would pass
    /// [`MAX_BYTES`], entries this process has not used are dropped first; if that is not
    /// enough, `plan` is not kept. Returns whether it was kept.
    pub fn insert(&self, key: String, plan: Vec<u8>) -> bool {
        let mut inner = self.lock();
        let max = self.max_bytes;
        let Inner {
            entries,
            used,
            bytes,
            added,
            dirty,
            ..
        } = &mut *inner;
        let old = entries.get(&key).map_or(0, |v| key.len() + v.len());
        let new = key.len() + plan.len();
        if *bytes - old + new > max {
            let stale: Vec<String> = entries
                .keys()
                .filter(|k| !used.contains(*k) && **k != key)
                .cloned()
                .collect();
            for k in stale {
                if *bytes - old + new <= max {
                    break;
                }
                if let Some(v) = entries.remove(&k) {
                    *bytes -= k.len() + v.len();
                    *dirty = true;
                }
            }
            if *bytes - old + new > max {
                return false;
            }
        }
        *bytes = *bytes - old + new;
        used.insert(key.clone());
        entries.insert(key, plan);
        *added += 1;
        *dirty = true;
        true
    }

    /// Drop the plan under `key` (cuDNN refused to deserialise it).
    pub fn remove(&self, key: &str) {
        let mut inner = self.lock();
        if let Some(v) = inner.entries.remove(key) {
            inner.bytes -= key.len() + v.len();
            inner.dirty = true;
        }
        inner.used.remove(key);
    }

    /// Forget, in memory, every entry but those under `keep` (after [`PlanCache::save`]: the
    /// file keeps them), so that a plan holds only the serialisations its executors rebuild.
    pub fn retain(&self, keep: &HashSet<&str>) {
        let mut inner = self.lock();
        inner.entries.retain(|k, _| keep.contains(k.as_str()));
        inner.bytes = inner.entries.iter().map(|(k, v)| k.len() + v.len()).sum();
    }

    /// Entries held, plans deserialised ([`PlanCache::record_hit`]), and entries added since
    /// opened.
    pub fn counts(&self) -> (usize, usize, usize) {
        let inner = self.lock();
        (inner.entries.len(), inner.hits, inner.added)
    }

    /// Bytes of keys and plans held (bounded by [`MAX_BYTES`]).
    pub fn bytes(&self) -> usize {
        self.lock().bytes
    }

    /// The file's bytes for what the cache holds now (entries sorted by key, so the same
    /// entries give the same bytes).
    pub fn encode(&self) -> Vec<u8> {
        let inner = self.lock();
        let mut keys: Vec<&String> = inner.entries.keys().collect();
        keys.sort();
        let mut out = Vec::with_capacity(inner.bytes + 32 + 12 * keys.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        put_len(&mut out, self.identity.len());
        out.extend_from_slice(self.identity.as_bytes());
        put_len(&mut out, keys.len());
        for k in keys {
            let v = &inner.entries[k];
            let at = out.len();
            put_len(&mut out, k.len());
            put_len(&mut out, v.len());
            let crc = entry_crc(&out[at..at + 8], k.as_bytes(), v);
            out.extend_from_slice(&crc.to_le_bytes());
            out.extend_from_slice(k.as_bytes());
            out.extend_from_slice(v);
        }
        out
    }

    /// Write the file when anything was added, removed or dropped since it was opened or last
    /// saved (creating the directory); `Ok(false)`: nothing to write, or in memory only.
    ///
    /// # Errors
    /// [`PlanCacheError::Io`]: the directory, the temporary file or the rename failed.
    pub fn save(&self) -> Result<bool, PlanCacheError> {
        let Some(path) = &self.path else {
            return Ok(false);
        };
        if !self.lock().dirty {
            return Ok(false);
        }
        let io = |source| PlanCacheError::Io {
            path: path.clone(),
            source,
        };
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        // Unique per process and per save: two plans of one process may save at once.
        static SAVES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = SAVES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
        std::fs::write(&tmp, self.encode())
            .and_then(|_| std::fs::rename(&tmp, path))
            .map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                io(e)
            })?;
        self.lock().dirty = false;
        Ok(true)
    }
}

/// An entry's CRC-32: its two length fields (as stored), its key, its plan.
fn entry_crc(lengths: &[u8], key: &[u8], plan: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(lengths);
    h.update(key);
    h.update(plan);
    h.finalize()
}

fn put_len(out: &mut Vec<u8>, n: usize) {
    // Lengths are bounded by MAX_BYTES (entries) and by a key's or identity's text.
    out.extend_from_slice(&u32::try_from(n).unwrap_or(u32::MAX).to_le_bytes());
}

/// The entries of a cache file's `bytes` written for `identity`.
///
/// # Errors
/// [`PlanCacheError`] naming the field and the values found.
pub fn parse(
    bytes: &[u8],
    path: &Path,
    identity: &str,
) -> Result<HashMap<String, Vec<u8>>, PlanCacheError> {
    let mut r = Reader { bytes, at: 0, path };
    let magic = r
        .take("magic", MAGIC.len())
        .map_err(|_| PlanCacheError::Magic {
            path: path.to_path_buf(),
            found: bytes[..bytes.len().min(8)].to_vec(),
        })?;
    if magic != MAGIC {
        return Err(PlanCacheError::Magic {
            path: path.to_path_buf(),
            found: magic.to_vec(),
        });
    }
    let format = r.u32("format")?;
    if format != FORMAT {
        return Err(PlanCacheError::Format {
            path: path.to_path_buf(),
            found: format,
            expected: FORMAT,
        });
    }
    let n = r.u32("identity length")? as usize;
    let found = r.text("identity", n)?;
    if found != identity {
        return Err(PlanCacheError::Identity {
            path: path.to_path_buf(),
            found,
            expected: identity.to_string(),
        });
    }
    let count = r.u32("entry count")? as usize;
    // Not with_capacity(count): the count is untrusted until the entries are read.
    let mut entries = HashMap::new();
    for index in 0..count {
        let offset = r.at;
        let k = r.u32("key length")? as usize;
        let v = r.u32("plan length")? as usize;
        let stored = r.u32("entry CRC")?;
        let key_bytes = r.take("key", k)?;
        let plan = r.take("plan", v)?;
        let computed = entry_crc(&bytes[offset..offset + 8], key_bytes, plan);
        if computed != stored {
            return Err(PlanCacheError::Crc {
                path: path.to_path_buf(),
                index,
                offset,
                stored,
                computed,
            });
        }
        let key = String::from_utf8(key_bytes.to_vec()).map_err(|_| PlanCacheError::Text {
            path: path.to_path_buf(),
            what: "key",
            offset: offset + 12,
        })?;
        entries.insert(key, plan.to_vec());
    }
    if r.at != bytes.len() {
        return Err(PlanCacheError::Trailing {
            path: path.to_path_buf(),
            count,
            offset: r.at,
            extra: bytes.len() - r.at,
        });
    }
    Ok(entries)
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    path: &'a Path,
}

impl<'a> Reader<'a> {
    fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], PlanCacheError> {
        let have = self.bytes.len() - self.at;
        if n > have {
            return Err(PlanCacheError::Truncated {
                path: self.path.to_path_buf(),
                what,
                offset: self.at,
                need: n,
                have,
            });
        }
        let s = &self.bytes[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, PlanCacheError> {
        let b = self.take(what, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn text(&mut self, what: &'static str, n: usize) -> Result<String, PlanCacheError> {
        let offset = self.at;
        let b = self.take(what, n)?;
        String::from_utf8(b.to_vec()).map_err(|_| PlanCacheError::Text {
            path: self.path.to_path_buf(),
            what,
            offset,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d =
            std::env::temp_dir().join(format!("tether-plan-cache-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn id() -> String {
        identity(91900, "NVIDIA H200", 90, 132)
    }

    /// Bytes held, recomputed from what a file of the cache holds.
    fn held(c: &PlanCache) -> usize {
        parse(&c.encode(), Path::new("f"), c.identity())
            .unwrap()
            .iter()
            .map(|(k, v)| k.len() + v.len())
            .sum()
    }

    #[test]
    fn round_trip_through_the_file() {
        let dir = scratch("round");
        let (c, err) = PlanCache::open(&dir, id());
        assert!(err.is_none(), "a missing file is an empty cache: {err:?}");
        assert_eq!(c.counts(), (0, 0, 0));
        assert!(!c.save().unwrap(), "nothing added: nothing written");
        c.insert("conv a".into(), b"{\"plan\":1}".to_vec());
        c.insert("conv b".into(), vec![0, 255, 7]);
        assert_eq!(c.counts(), (2, 0, 2));
        assert!(c.save().unwrap());
        assert!(!c.save().unwrap(), "saved: nothing new");
        let (d, err) = PlanCache::open(&dir, id());
        assert!(err.is_none(), "{err:?}");
        assert_eq!(d.get("conv a").as_deref(), Some(&b"{\"plan\":1}"[..]));
        assert_eq!(d.get("conv b"), Some(vec![0, 255, 7]));
        assert_eq!(d.get("conv c"), None);
        d.record_hit("conv a");
        assert_eq!(d.counts(), (2, 1, 0), "a lookup is a hit once recorded");
        assert_eq!(d.encode(), c.encode(), "same entries, same bytes");
        d.remove("conv a");
        assert_eq!(d.bytes(), held(&d));
        assert!(d.save().unwrap(), "a removal is written");
        let (e, _) = PlanCache::open(&dir, id());
        assert_eq!(e.counts().0, 1);
        // Only what the plan keeps stays in memory; the file is not touched.
        e.insert("conv c".into(), b"c".to_vec());
        e.retain(&HashSet::from(["conv c"]));
        assert_eq!(e.counts().0, 1);
        assert_eq!(e.get("conv b"), None, "not kept: dropped from memory");
        assert_eq!(e.get("conv c"), Some(b"c".to_vec()));
        assert_eq!(e.bytes(), held(&e));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn another_identity_is_refused_by_name() {
        let dir = scratch("identity");
        let c = PlanCache::in_memory(id());
        c.insert("k".into(), b"v".to_vec());
        assert!(!c.save().unwrap(), "in memory: never written");
        let other = identity(91000, "NVIDIA H200", 90, 132);
        let path = dir.join("f");
        match parse(&c.encode(), &path, &other) {
            Err(PlanCacheError::Identity {
                found, expected, ..
            }) => {
                assert!(found.contains("cuDNN 91900"), "{found}");
                assert!(expected.contains("cuDNN 91000"), "{expected}");
            }
            other => panic!("{other:?}"),
        }
        assert_ne!(PlanCache::file_name(&id()), PlanCache::file_name(&other));
        // Another device model, another SM count.
        assert_ne!(id(), identity(91900, "NVIDIA H100", 90, 132));
        assert_ne!(id(), identity(91900, "NVIDIA H200", 90, 114));
        // The graphs' source is part of it.
        let graphs = format!(
            "graphs {:08x}",
            crc32fast::hash(include_str!("cudnn_graph.rs").as_bytes())
        );
        assert!(id().contains(&graphs), "{}", id());
    }

    #[test]
    fn every_truncation_and_corruption_is_a_typed_error() {
        let c = PlanCache::in_memory(id());
        c.insert("conv geometry".into(), b"serialised plan bytes".to_vec());
        c.insert("another".into(), vec![1; 40]);
        let bytes = c.encode();
        let path = Path::new("/cache/file");
        assert_eq!(parse(&bytes, path, &id()).unwrap().len(), 2);
        for n in 0..bytes.len() {
            let e = parse(&bytes[..n], path, &id()).unwrap_err();
            assert!(
                matches!(
                    e,
                    PlanCacheError::Truncated { .. } | PlanCacheError::Magic { .. }
                ),
                "cut at {n}: {e}"
            );
        }
        // Every byte flipped, raised by one and zeroed: an entry count that grows reads past
        // the end, one that shrinks leaves bytes after the last entry, a length or a CRC
        // that changes fails the entry's CRC.
        for i in 0..bytes.len() {
            for change in [|b: u8| b ^ 0x40, |b: u8| b.wrapping_add(1), |_| 0u8] {
                let mut b = bytes.clone();
                b[i] = change(b[i]);
                if b[i] != bytes[i] {
                    assert!(
                        parse(&b, path, &id()).is_err(),
                        "byte {i} changed, accepted"
                    );
                }
            }
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(b"junk");
        assert!(matches!(
            parse(&longer, path, &id()),
            Err(PlanCacheError::Trailing {
                count: 2,
                extra: 4,
                ..
            })
        ));
        let e = parse(b"NOTACACHEFILE", path, &id()).unwrap_err();
        assert!(e.to_string().contains("not a plan cache"), "{e}");
        let mut b = bytes.clone();
        b[8] = 9;
        assert!(matches!(
            parse(&b, path, &id()),
            Err(PlanCacheError::Format {
                found: 9,
                expected: FORMAT,
                ..
            })
        ));
    }

    #[test]
    fn a_corrupt_file_opens_empty_with_its_reason_and_is_replaced() {
        let dir = scratch("corrupt");
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(PlanCache::file_name(&id()));
        std::fs::write(&path, b"TETHRPLN\x02\x00\x00\x00\xff\xff").unwrap();
        let (c, err) = PlanCache::open(&dir, id());
        assert!(
            matches!(
                err,
                Some(PlanCacheError::Truncated {
                    what: "identity length",
                    ..
                })
            ),
            "{err:?}"
        );
        assert_eq!(c.counts().0, 0);
        c.insert("k".into(), b"v".to_vec());
        c.save().unwrap();
        let (d, err) = PlanCache::open(&dir, id());
        assert!(err.is_none(), "{err:?}");
        assert_eq!(d.get("k"), Some(b"v".to_vec()));
        // A file larger than a cache may be is not read.
        let f = std::fs::File::options().append(true).open(&path).unwrap();
        f.set_len((MAX_BYTES + (2 << 20)) as u64).unwrap();
        let (e, err) = PlanCache::open(&dir, id());
        assert!(
            matches!(err, Some(PlanCacheError::TooLarge { .. })),
            "{err:?}"
        );
        assert_eq!(e.counts().0, 0);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A cache bounded at 4 KiB holding two plans of `big` bytes read from a file (not used
    /// by this process).
    fn two_old_plans() -> (PlanCache, usize, usize) {
        let bound = 4096;
        let big = bound / 2 - 8;
        let file = HashMap::from([
            ("old a".to_string(), vec![0; big]),
            ("old b".to_string(), vec![0; big]),
        ]);
        let mut c = PlanCache::with(None, id(), file);
        c.max_bytes = bound;
        (c, bound, big)
    }

    #[test]
    fn the_size_bound_drops_unused_plans_first() {
        let (c, bound, big) = two_old_plans();
        c.record_hit("old b");
        assert_eq!(c.bytes(), 2 * (big + 5));
        // Room for it only without an unused plan: "old a" goes, "old b" (used) stays.
        c.insert("new".into(), vec![0; 64]);
        assert_eq!(c.get("old a"), None);
        assert!(c.get("old b").is_some());
        assert!(c.get("new").is_some());
        assert_eq!(c.bytes(), held(&c));
        // Nothing unused left to drop: a plan that does not fit is not kept.
        c.insert("too big".into(), vec![0; big]);
        assert_eq!(c.get("too big"), None);
        assert_eq!(c.bytes(), held(&c));
        // A smaller replacement of a kept plan frees room.
        c.insert("old b".into(), vec![0; 8]);
        assert!(c.insert("too big".into(), vec![0; big]));
        assert!(c.get("too big").is_some());
        assert!(c.bytes() <= bound);
        assert_eq!(c.bytes(), held(&c));
    }

    #[test]
    fn a_claimed_plan_is_not_dropped_for_room() {
        // Both plans claimed by a load about to deserialise them.
        let (c, _, _) = two_old_plans();
        assert!(c.claim("old a") && c.claim("old b"));
        assert!(!c.claim("absent"));
        // A new plan would need room that only dropping a claimed plan gives: not kept.
        assert!(!c.insert("new".into(), vec![0; 64]));
        assert!(c.get("old a").is_some() && c.get("old b").is_some());
        assert_eq!(c.get("new"), None);
        // A claim is not a hit.
        assert_eq!(c.counts().1, 0);
    }

    #[test]
    fn the_directory_follows_the_environment() {
        let s = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(
            cache_dir(s("/d"), s("/x"), s("/h")),
            Some(PathBuf::from("/d"))
        );
        assert_eq!(cache_dir(s(""), s("/x"), s("/h")), None, "empty: off");
        assert_eq!(
            cache_dir(None, s("/x"), s("/h")),
            Some(PathBuf::from("/x/tether"))
        );
        assert_eq!(
            cache_dir(None, s(""), s("/h")),
            Some(PathBuf::from("/h/.cache/tether"))
        );
        assert_eq!(cache_dir(None, None, None), None);
    }
}
