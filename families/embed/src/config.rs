//! The text-embedding family's sections in the bundle and its configuration
//! record (read in place with zerocopy, no parsing at load).

use zerocopy::little_endian::{U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use crate::{EMBEDDING_DIM, EmbedError};

/// Name of the bundle section holding the encoder ONNX network.
pub const ONNX_SECTION: &str = "embed/encoder/model.onnx";
/// Name of the bundle section holding the Hugging Face `tokenizer.json`.
pub const TOKENIZER_SECTION: &str = "embed/tokenizer";
/// Name of the bundle section holding an [`EmbedConfigRecord`].
pub const CONFIG_SECTION: &str = "embed/config";
/// Name of the bundle section holding the self-test payload.
pub const SELFTEST_SECTION: &str = "embed/selftest";
/// Value of [`EmbedConfigRecord::version`] this crate writes and reads.
pub const CONFIG_VERSION: u16 = 1;
/// [`EmbedConfigRecord::pooling`]: attention-masked mean over tokens.
pub const POOLING_MEAN: u16 = 1;
/// Largest maximum sequence length (BERT's 512 position embeddings).
pub const MAX_SEQ_LEN: u32 = 512;
/// Smallest maximum sequence length the embedder accepts (`[CLS]` and `[SEP]` included).
pub const MIN_SEQ_LEN: u32 = 4;
/// Largest maximum batch.
pub const MAX_BATCH: u32 = 64;
/// Smallest sequence bucket; buckets double from here up to the maximum.
pub const MIN_BUCKET: u32 = 16;
/// Most sequence buckets (16, 32, 64, 128, 256, 512 and a non-power-of-two maximum).
pub const MAX_BUCKETS: usize = 8;

/// Default maximum sequence length, in tokens including `[CLS]` and `[SEP]`:
/// sentence-transformers' `max_seq_length` for all-MiniLM-L6-v2
/// (`sentence_bert_config.json`).
pub const DEFAULT_MAX_SEQ_LEN: u32 = 256;
/// Default maximum batch.
pub const DEFAULT_MAX_BATCH: u32 = 8;

/// On-disk record of the `embed/config` section (little-endian, 32 bytes,
/// alignment 1).
#[derive(Clone, Copy, Debug, FromBytes, IntoBytes, KnownLayout, Immutable)]
#[repr(C)]
pub struct EmbedConfigRecord {
    /// [`CONFIG_VERSION`].
    pub version: U16,
    /// Pooling code ([`POOLING_MEAN`]).
    pub pooling: U16,
    /// Embedding width ([`EMBEDDING_DIM`]).
    pub dim: U32,
    /// Maximum sequence length in tokens (longer texts are truncated).
    pub max_seq_len: U32,
    /// Largest batch run at once.
    pub max_batch: U32,
    /// 1: L2-normalise the pooled vector.
    pub normalize: u8,
    /// Rows of the network's token embedding table (the ids `input_ids` may hold are
    /// `0..vocab_rows`), checked against the tokenizer at build and at open; 0: not
    /// recorded (bundles written before this field).
    pub vocab_rows: U32,
    /// Reserved, zero.
    pub reserved: [u8; 11],
}

/// Embedding parameters, validated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbedConfig {
    /// Maximum sequence length in tokens, `[CLS]` and `[SEP]` included
    /// ([`MIN_SEQ_LEN`] to [`MAX_SEQ_LEN`]); longer texts are truncated (sentence-transformers
    /// truncates the same way).
    pub max_seq_len: u32,
    /// Largest batch run at once (1 to [`MAX_BATCH`]).
    pub max_batch: u32,
}

impl Default for EmbedConfig {
    fn default() -> Self {
        Self {
            max_seq_len: DEFAULT_MAX_SEQ_LEN,
            max_batch: DEFAULT_MAX_BATCH,
        }
    }
}

impl EmbedConfig {
    /// Check ranges; the error names the field and the value seen.
    ///
    /// # Errors
    /// [`EmbedError::Config`].
    pub fn validate(&self) -> Result<(), EmbedError> {
        if !(MIN_SEQ_LEN..=MAX_SEQ_LEN).contains(&self.max_seq_len) {
            return Err(EmbedError::Config {
                field: "max_seq_len",
                value: format!("{} ({MIN_SEQ_LEN} to {MAX_SEQ_LEN})", self.max_seq_len),
            });
        }
        if !(1..=MAX_BATCH).contains(&self.max_batch) {
            return Err(EmbedError::Config {
                field: "max_batch",
                value: format!("{} (1 to {MAX_BATCH})", self.max_batch),
            });
        }
        Ok(())
    }

    /// Sequence-length buckets: 16, 32, 64, ... below the maximum, then the
    /// maximum itself (e.g. 256 -> [16, 32, 64, 128, 256]; 100 -> [16, 32, 64, 100]).
    pub fn seq_buckets(&self) -> heapless::Vec<usize, MAX_BUCKETS> {
        let mut out = heapless::Vec::new();
        let mut b = MIN_BUCKET;
        while b < self.max_seq_len {
            // At most 5 powers of two below 512 plus the maximum: fits.
            let _ = out.push(b as usize);
            b *= 2;
        }
        let _ = out.push(self.max_seq_len as usize);
        out
    }

    /// Batch buckets: 1 and the maximum batch (one entry when it is 1).
    pub fn batch_buckets(&self) -> heapless::Vec<usize, 2> {
        let mut out = heapless::Vec::new();
        let _ = out.push(1);
        if self.max_batch > 1 {
            let _ = out.push(self.max_batch as usize);
        }
        out
    }

    /// Read and validate the record at the start of `bytes`.
    ///
    /// # Errors
    /// [`EmbedError::Config`] for a short record, another version, pooling,
    /// width or normalisation, or an out-of-range field.
    pub fn from_section(bytes: &[u8]) -> Result<Self, EmbedError> {
        let bad = |field: &'static str, value: String| EmbedError::Config { field, value };
        let (r, _) = EmbedConfigRecord::ref_from_prefix(bytes).map_err(|_| {
            bad(
                "record",
                format!(
                    "{} bytes, need {}",
                    bytes.len(),
                    size_of::<EmbedConfigRecord>()
                ),
            )
        })?;
        if r.version.get() != CONFIG_VERSION {
            return Err(bad(
                "version",
                format!("{} (this build reads {CONFIG_VERSION})", r.version.get()),
            ));
        }
        if r.pooling.get() != POOLING_MEAN {
            return Err(bad(
                "pooling",
                format!(
                    "{} (this build does mean pooling, {POOLING_MEAN})",
                    r.pooling.get()
                ),
            ));
        }
        if r.dim.get() as usize != EMBEDDING_DIM {
            return Err(bad(
                "dim",
                format!("{} (this build returns {EMBEDDING_DIM})", r.dim.get()),
            ));
        }
        if r.normalize != 1 {
            return Err(bad("normalize", r.normalize.to_string()));
        }
        let c = Self {
            max_seq_len: r.max_seq_len.get(),
            max_batch: r.max_batch.get(),
        };
        c.validate()?;
        Ok(c)
    }

    /// The on-disk record (no vocabulary size recorded).
    pub fn to_record(&self) -> EmbedConfigRecord {
        self.to_record_with_vocab(0)
    }

    /// The on-disk record with the network's token embedding rows.
    pub fn to_record_with_vocab(&self, vocab_rows: u32) -> EmbedConfigRecord {
        EmbedConfigRecord {
            version: CONFIG_VERSION.into(),
            pooling: POOLING_MEAN.into(),
            dim: (EMBEDDING_DIM as u32).into(),
            max_seq_len: self.max_seq_len.into(),
            max_batch: self.max_batch.into(),
            normalize: 1,
            vocab_rows: vocab_rows.into(),
            reserved: [0; 11],
        }
    }
}

/// The token embedding rows a record holds (`None`: not recorded, or a short record).
pub fn vocab_rows(bytes: &[u8]) -> Option<u32> {
    let (r, _) = EmbedConfigRecord::ref_from_prefix(bytes).ok()?;
    Some(r.vocab_rows.get()).filter(|&v| v > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_is_32_bytes_and_round_trips() {
        assert_eq!(size_of::<EmbedConfigRecord>(), 32);
        let c = EmbedConfig::default();
        assert_eq!(
            EmbedConfig::from_section(c.to_record().as_bytes()).expect("ok"),
            c
        );
        assert_eq!(c.seq_buckets().as_slice(), [16, 32, 64, 128, 256]);
        assert_eq!(c.batch_buckets().as_slice(), [1, 8]);
        assert_eq!(vocab_rows(c.to_record().as_bytes()), None);
        assert_eq!(
            vocab_rows(c.to_record_with_vocab(30_522).as_bytes()),
            Some(30_522)
        );
        let c = EmbedConfig {
            max_seq_len: 100,
            max_batch: 1,
        };
        assert_eq!(c.seq_buckets().as_slice(), [16, 32, 64, 100]);
        assert_eq!(c.batch_buckets().as_slice(), [1]);
        let c = EmbedConfig {
            max_seq_len: 512,
            max_batch: 64,
        };
        assert_eq!(c.seq_buckets().as_slice(), [16, 32, 64, 128, 256, 512]);
        let c = EmbedConfig {
            max_seq_len: 8,
            max_batch: 2,
        };
        assert_eq!(c.seq_buckets().as_slice(), [8]);
    }

    #[test]
    fn rejects_bad_records() {
        let c = EmbedConfig::default();
        let e = EmbedConfig::from_section(&c.to_record().as_bytes()[..5]).unwrap_err();
        assert!(e.to_string().contains("5 bytes, need 32"), "{e}");
        let mut r = c.to_record();
        r.dim = 768.into();
        let e = EmbedConfig::from_section(r.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("dim: 768"), "{e}");
        let mut r = c.to_record();
        r.max_seq_len = 1000.into();
        let e = EmbedConfig::from_section(r.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("max_seq_len: 1000"), "{e}");
        let mut r = c.to_record();
        r.max_batch = 0.into();
        assert!(EmbedConfig::from_section(r.as_bytes()).is_err());
        let mut r = c.to_record();
        r.pooling = 2.into();
        assert!(EmbedConfig::from_section(r.as_bytes()).is_err());
    }
}
