//! Text -> token ids with the model's own `tokenizer.json`.
//!
//! The file is read by the Hugging Face `tokenizers` crate, so normalisation
//! (BERT: clean control characters, split CJK characters, lower-case, strip
//! accents), pre-tokenisation (whitespace and punctuation), WordPiece
//! (`##` continuations, `[UNK]` for words over 100 characters or not
//! decomposable) and the `[CLS] A [SEP]` template are exactly the file's.
//! Two settings are replaced, as sentence-transformers replaces them at call
//! time: padding is turned off (the file pads to 128; padding here is the
//! [`crate::Embedder`]'s, per bucket) and truncation is set to the build-time
//! maximum sequence length (the file says 128; sentence-transformers uses its
//! `max_seq_length`, 256), special tokens included.
//!
//! Tokenisation allocates (the crate builds an `Encoding` per text); it is
//! the one allocating step of an embedding call besides the CPU engine.

use tokenizers::Tokenizer;
use tokenizers::utils::truncation::{TruncationDirection, TruncationParams, TruncationStrategy};

use crate::EmbedError;

/// Where a text longer than the maximum sequence length is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Truncated {
    /// Tokens of the whole text, `[CLS]` and `[SEP]` included.
    pub tokens: usize,
    /// Tokens embedded (the maximum sequence length).
    pub kept_tokens: usize,
    /// Characters (Unicode scalar values) of the text the kept tokens cover; the
    /// text from this character on is not embedded.
    pub kept_chars: usize,
    /// The same position in bytes of UTF-8.
    pub kept_bytes: usize,
}

/// A loaded `tokenizer.json` with padding off and a fixed truncation length.
pub struct WordPiece {
    inner: Tokenizer,
    max_len: usize,
    pad_id: u32,
}

impl std::fmt::Debug for WordPiece {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WordPiece")
            .field("max_len", &self.max_len)
            .field("pad_id", &self.pad_id)
            .field("vocab", &self.inner.get_vocab_size(true))
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> EmbedError {
    EmbedError::Tokenizer(e.to_string())
}

impl WordPiece {
    /// Load `tokenizer.json` bytes; texts will be truncated to `max_len` tokens.
    ///
    /// The padding id is the file's padding `pad_id` when it has one, else
    /// the id of `[PAD]`, else 0.
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`] when the JSON is not a tokenizer the crate
    /// reads, or the truncation cannot be set (`max_len` too small for the
    /// special tokens).
    pub fn from_json(json: &[u8], max_len: usize) -> Result<Self, EmbedError> {
        let mut inner = Tokenizer::from_bytes(json).map_err(tok_err)?;
        let pad_id = inner
            .get_padding()
            .map(|p| p.pad_id)
            .or_else(|| inner.token_to_id("[PAD]"))
            .unwrap_or(0);
        inner.with_padding(None);
        inner
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length: max_len,
                strategy: TruncationStrategy::LongestFirst,
                stride: 0,
            }))
            .map_err(tok_err)?;
        Ok(Self {
            inner,
            max_len,
            pad_id,
        })
    }

    /// Maximum tokens per text, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// Id used for padding positions.
    pub fn pad_id(&self) -> u32 {
        self.pad_id
    }

    /// Vocabulary size, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.inner.get_vocab_size(true)
    }

    /// The largest token id the tokenizer can produce (its vocabulary and added
    /// tokens) and that token, or `None` for an empty vocabulary.
    pub fn max_id(&self) -> Option<(u32, String)> {
        self.inner
            .get_vocab(true)
            .into_iter()
            .max_by_key(|(_, id)| *id)
            .map(|(token, id)| (id, token))
    }

    /// Whether `text` is longer than [`Self::max_len`] tokens, and if so where it
    /// is cut: how many tokens it has in full (special tokens included) and how
    /// much of it the kept tokens cover (the text from there on is not embedded).
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`] from the tokenizer.
    pub fn truncation(&self, text: &str) -> Result<Option<Truncated>, EmbedError> {
        // `encode`, not `encode_fast`: the fast path computes no offsets (every token's
        // is `(0, 0)`), and the cut is read from them (byte offsets into `text`).
        let enc = self.inner.encode(text, true).map_err(tok_err)?;
        if enc.get_overflowing().is_empty() {
            return Ok(None);
        }
        // The end of the last kept token that came from the text (special tokens
        // carry no offsets of their own).
        let kept_bytes = enc
            .get_offsets()
            .iter()
            .zip(enc.get_special_tokens_mask())
            .filter(|(_, special)| **special == 0)
            .map(|((_, end), _)| *end)
            .max()
            .unwrap_or(0)
            .min(text.len());
        // The number of tokens of the whole text: the text's own tokens of every
        // piece (overflowing pieces repeat the special tokens, not the text).
        let content = |e: &tokenizers::Encoding| {
            e.get_special_tokens_mask()
                .iter()
                .filter(|&&m| m == 0)
                .count()
        };
        let specials = enc.len() - content(&enc);
        let tokens =
            content(&enc) + enc.get_overflowing().iter().map(content).sum::<usize>() + specials;
        let kept_chars = text.get(..kept_bytes).map_or(0, |s| s.chars().count());
        Ok(Some(Truncated {
            tokens,
            kept_tokens: enc.len(),
            kept_chars,
            kept_bytes,
        }))
    }

    /// Token ids of `text`, special tokens included (at most [`Self::max_len`]).
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`] from the tokenizer.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, EmbedError> {
        let enc = self.inner.encode_fast(text, true).map_err(tok_err)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Write the ids of `text` into `ids` (at least [`Self::max_len`] long) as
    /// i64 and return how many were written.
    ///
    /// # Errors
    /// [`EmbedError::Tokenizer`] from the tokenizer, or when the encoding is
    /// longer than `ids` (a truncation defect).
    pub fn encode_into(&self, text: &str, ids: &mut [i64]) -> Result<usize, EmbedError> {
        let enc = self.inner.encode_fast(text, true).map_err(tok_err)?;
        let got = enc.get_ids();
        if got.len() > ids.len() {
            return Err(EmbedError::Tokenizer(format!(
                "{} tokens after truncation to {}, room for {}",
                got.len(),
                self.max_len,
                ids.len()
            )));
        }
        for (d, &s) in ids.iter_mut().zip(got) {
            *d = i64::from(s);
        }
        Ok(got.len())
    }
}
