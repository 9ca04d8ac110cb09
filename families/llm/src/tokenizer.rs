//! Byte-level BPE tokenizer (GPT-2 style, as SmolLM2, Llama 3, Qwen2/3 use), through the
//! Hugging Face `tokenizers` crate, with llama.cpp's semantics for special tokens, BOS/EOS
//! and detokenisation; and a UTF-8-safe streaming detokeniser.
//!
//! **From a GGUF** (`tokenizer.ggml.model = "gpt2"`): the BPE model is built from
//! `tokenizer.ggml.tokens` (id = index) and `tokenizer.ggml.merges` (rank = index); the
//! pre-tokenizer is the regex list llama.cpp uses for `tokenizer.ggml.pre`
//! (`src/llama-vocab.cpp`, `llm_tokenizer_bpe`), each regex a `Split` (matches isolated,
//! the text between kept), then the GPT-2 byte-to-unicode map; tokens of
//! `tokenizer.ggml.token_type` 3 (control) and 2 (unknown) are special added tokens, 4
//! (user-defined) non-special added tokens, so they are matched whole before BPE and never
//! split. `parse_special = false` (llama.cpp's `llama_tokenize(..., parse_special)`) leaves
//! control tokens to BPE as plain text while user-defined ones are still matched, as
//! llama.cpp's `tokenizer_st_partition` does.
//!
//! **From a Hugging Face directory**: `tokenizer.json` as the model authors wrote it (its
//! model must be BPE with a byte-level decoder); BOS/EOS policy from `tokenizer_config.json`.
//! Encoding never runs the file's post-processor: BOS/EOS are added here, once, by
//! [`SpecialTokens::add_bos`]/[`SpecialTokens::add_eos`] (a template that also adds BOS
//! would add it twice).
//!
//! **Detokenising** follows llama.cpp's `token_to_piece`: a normal token's text is mapped
//! back through the byte-level table to bytes; a control or unknown token renders as nothing
//! unless asked (`render_special`); a user-defined token renders as its text.

use std::collections::HashMap;
use std::sync::OnceLock;

use tokenizers::models::bpe::BPE;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, DecoderWrapper, ModelWrapper, PreTokenizerWrapper};

use crate::config::SpecialTokens;
use crate::error::LlmError;
use crate::gguf::{GgufHeader, Value};

/// GPT-2's regex (`'s|'t|...`), as llama.cpp writes it for `gpt-2` (no trailing `|\s+`).
const GPT2: &str = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)";
/// Llama 3's regex as llama.cpp adapts it (case-insensitive contractions spelled out).
const LLAMA3: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";
/// Qwen2's regex as llama.cpp adapts it (single digits).
const QWEN2: &str = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// A pre-tokenizer llama.cpp names by `tokenizer.ggml.pre`: its regexes, applied in order,
/// and whether BPE first looks a whole pre-token up in the vocabulary (`ignore_merges`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PreTokenizer {
    /// The canonical name (`smollm`, `llama3`, `qwen2`, `gpt-2`, `default`).
    pub name: &'static str,
    /// Regexes, each splitting every piece the previous ones left (matches isolated).
    pub regexes: &'static [&'static str],
    /// A pre-token found whole in the vocabulary is one token (Llama 3).
    pub ignore_merges: bool,
}

/// The pre-tokenizer `tokenizer.ggml.pre` names (llama.cpp `llama_vocab::impl::load`, the
/// `tokenizer_pre == ...` chain, and `llm_tokenizer_bpe`'s regex table). `None` for a name
/// this build does not know.
pub fn pre_tokenizer(name: &str) -> Option<PreTokenizer> {
    let p = |name, regexes, ignore_merges| {
        Some(PreTokenizer {
            name,
            regexes,
            ignore_merges,
        })
    };
    match name {
        "default" => p(
            "default",
            &[r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
            false,
        ),
        "llama3" | "llama-v3" | "llama-bpe" | "falcon3" | "pixtral" => p("llama3", &[LLAMA3], true),
        "dbrx" | "smaug-bpe" => p("dbrx", &[LLAMA3], false),
        "qwen2" | "deepseek-r1-qwen" | "stablelm2" => p("qwen2", &[QWEN2], false),
        "smollm" | "starcoder" | "refact" | "command-r" | "codeshell" | "exaone" | "minerva" => {
            p("smollm", &[r"\p{N}", GPT2], false)
        }
        "gpt-2" | "phi-2" | "mpt" | "olmo" => p("gpt-2", &[GPT2], false),
        _ => None,
    }
}

/// How a token renders when detokenised (llama.cpp's token attributes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum TokenKind {
    /// A BPE token: its bytes.
    Normal = 0,
    /// A control token (`<|im_start|>`, EOS): nothing, unless special tokens are rendered.
    Control = 1,
    /// A user-defined added token: its text.
    UserDefined = 2,
}

/// GPT-2's reversible byte <-> unicode map (`bytes_to_unicode` in OpenAI's `encoder.py`):
/// printable bytes `!`..`~`, `¡`..`¬`, `®`..`ÿ` map to themselves; the other 68 bytes to
/// U+0100 onwards, in byte order.
fn unicode_to_byte() -> &'static HashMap<char, u8> {
    static MAP: OnceLock<HashMap<char, u8>> = OnceLock::new();
    MAP.get_or_init(|| {
        let mut m = HashMap::with_capacity(256);
        let mut n = 0u32;
        for b in 0..=255u8 {
            let printable = matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF);
            let c = if printable {
                char::from(b)
            } else {
                n += 1;
                char::from_u32(255 + n).expect("U+0100..U+0143 are chars")
            };
            m.insert(c, b);
        }
        m
    })
}

/// Bytes of a byte-level token text (a char outside the map contributes its UTF-8 bytes).
pub fn byte_level_decode(text: &str) -> Vec<u8> {
    let map = unicode_to_byte();
    let mut out = Vec::with_capacity(text.len());
    for c in text.chars() {
        match map.get(&c) {
            Some(&b) => out.push(b),
            None => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out
}

/// A byte-level BPE tokenizer with llama.cpp's BOS/EOS and special-token semantics.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    /// The same, with special tokens encoded as plain text (`parse_special = false`).
    plain: OnceLock<tokenizers::Tokenizer>,
    special: SpecialTokens,
    /// Every id's detokenised bytes, concatenated; `offsets[id]..offsets[id + 1]`.
    piece_bytes: Vec<u8>,
    offsets: Vec<u32>,
    kinds: Vec<TokenKind>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("tokens", &self.kinds.len())
            .field("special", &self.special)
            .finish()
    }
}

fn tok_err(e: impl std::fmt::Display) -> LlmError {
    LlmError::Tokenizer(e.to_string())
}

impl Tokenizer {
    /// Build the tokenizer a GGUF file describes.
    ///
    /// # Errors
    /// [`LlmError::Tokenizer`] for a model other than `gpt2` (byte-level BPE), an unknown
    /// `tokenizer.ggml.pre` (named), missing or malformed tokens/merges/types (named, with
    /// the index), a regex the engine refuses; [`LlmError::Gguf`] for a key of the wrong type.
    pub fn from_gguf(h: &GgufHeader, special: &SpecialTokens) -> Result<Tokenizer, LlmError> {
        let model = h.opt_str("tokenizer.ggml.model")?.unwrap_or("");
        if model != "gpt2" {
            return Err(LlmError::Tokenizer(format!(
                "tokenizer.ggml.model `{model}` is not supported (this build reads `gpt2`, byte-level BPE)"
            )));
        }
        let pre_name = h.opt_str("tokenizer.ggml.pre")?;
        let pre = match pre_name {
            None => {
                log::warn!(
                    "GGUF has no tokenizer.ggml.pre; using llama.cpp's `default` pre-tokenizer, as llama.cpp does"
                );
                pre_tokenizer("default").expect("default is known")
            }
            Some(n) => pre_tokenizer(n).ok_or_else(|| {
                LlmError::Tokenizer(format!(
                    "tokenizer.ggml.pre `{n}` is not supported (known: default, llama3/llama-bpe, qwen2, smollm/starcoder, gpt-2, dbrx)"
                ))
            })?,
        };
        let tokens = h
            .opt_array("tokenizer.ggml.tokens")?
            .ok_or_else(|| LlmError::Tokenizer("tokenizer.ggml.tokens is missing".into()))?;
        let mut texts = Vec::with_capacity(tokens.len());
        for (i, t) in tokens.iter().enumerate() {
            texts.push(t.as_str().ok_or_else(|| {
                LlmError::Tokenizer(format!(
                    "tokenizer.ggml.tokens[{i}] is {}, not a string",
                    t.type_name()
                ))
            })?);
        }
        let types: Vec<i64> = match h.opt_array("tokenizer.ggml.token_type")? {
            None => vec![1; texts.len()],
            Some(a) => {
                if a.len() != texts.len() {
                    return Err(LlmError::Tokenizer(format!(
                        "tokenizer.ggml.token_type has {} entries for {} tokens",
                        a.len(),
                        texts.len()
                    )));
                }
                a.iter()
                    .enumerate()
                    .map(|(i, v)| match v {
                        Value::I32(x) => Ok(i64::from(*x)),
                        other => other.as_u64().map(|x| x as i64).ok_or_else(|| {
                            LlmError::Tokenizer(format!(
                                "tokenizer.ggml.token_type[{i}] is {}",
                                other.type_name()
                            ))
                        }),
                    })
                    .collect::<Result<_, _>>()?
            }
        };
        let merges_v = h
            .opt_array("tokenizer.ggml.merges")?
            .ok_or_else(|| LlmError::Tokenizer("tokenizer.ggml.merges is missing".into()))?;
        let mut merges = Vec::with_capacity(merges_v.len());
        for (i, m) in merges_v.iter().enumerate() {
            let s = m.as_str().ok_or_else(|| {
                LlmError::Tokenizer(format!("tokenizer.ggml.merges[{i}] is not a string"))
            })?;
            let (a, b) = s.split_once(' ').ok_or_else(|| {
                LlmError::Tokenizer(format!(
                    "tokenizer.ggml.merges[{i}] `{s}` is not two tokens separated by a space"
                ))
            })?;
            merges.push((a.to_owned(), b.to_owned()));
        }
        // llama.cpp's token_to_id: a later duplicate wins (as collecting does).
        let vocab: tokenizers::models::bpe::Vocab = texts
            .iter()
            .enumerate()
            .map(|(i, t)| ((*t).to_owned(), i as u32))
            .collect();
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges)
            .build()
            .map_err(|e| tok_err(format!("building the BPE model: {e}")))?;
        let mut tk = tokenizers::Tokenizer::new(bpe);
        let mut pres: Vec<PreTokenizerWrapper> = Vec::with_capacity(pre.regexes.len() + 1);
        for r in pre.regexes {
            let split = Split::new(
                SplitPattern::Regex((*r).to_owned()),
                tokenizers::SplitDelimiterBehavior::Isolated,
                false,
            )
            .map_err(|e| tok_err(format!("pre-tokenizer regex `{r}`: {e}")))?;
            pres.push(split.into());
        }
        pres.push(ByteLevel::new(false, false, false).into());
        tk.with_pre_tokenizer(Some(Sequence::new(pres)));
        tk.with_decoder(Some(ByteLevel::new(false, false, false)));
        let mut kinds = Vec::with_capacity(texts.len());
        let mut special_added = Vec::new();
        let mut user_added = Vec::new();
        for (i, (t, ty)) in texts.iter().zip(&types).enumerate() {
            // llama.cpp token types: 1 normal, 2 unknown, 3 control, 4 user-defined,
            // 5 unused, 6 byte.
            let kind = match ty {
                2 | 3 => TokenKind::Control,
                // llama.cpp forces end-of-turn/generation and FIM texts to control type.
                _ if crate::checkpoint::llama_cpp_control_text(t) => TokenKind::Control,
                4 => TokenKind::UserDefined,
                _ => TokenKind::Normal,
            };
            if kind != TokenKind::Normal && vocab_id(&tk, t) != Some(i as u32) {
                return Err(LlmError::Tokenizer(format!(
                    "special token {i} `{t}` is duplicated in tokenizer.ggml.tokens"
                )));
            }
            match kind {
                TokenKind::Control => {
                    special_added.push(AddedToken::from((*t).to_owned(), true).normalized(false))
                }
                TokenKind::UserDefined => {
                    user_added.push(AddedToken::from((*t).to_owned(), false).normalized(false))
                }
                TokenKind::Normal => {}
            }
            kinds.push(kind);
        }
        tk.add_special_tokens(&special_added);
        tk.add_tokens(&user_added);
        Self::assemble(tk, special.clone(), Some((texts, kinds)))
    }

    /// Load a `tokenizer.json` (the Hugging Face format, as a bundle stores it).
    ///
    /// # Errors
    /// [`LlmError::Tokenizer`] for a file the crate cannot read, a model that is not BPE, or
    /// a decoder that is not byte-level (named).
    pub fn from_json(json: &[u8], special: &SpecialTokens) -> Result<Tokenizer, LlmError> {
        let tk = tokenizers::Tokenizer::from_bytes(json)
            .map_err(|e| tok_err(format!("reading tokenizer.json: {e}")))?;
        if !matches!(tk.get_model(), ModelWrapper::BPE(_)) {
            return Err(LlmError::Tokenizer(
                "tokenizer.json: the model is not BPE (this build reads byte-level BPE)".into(),
            ));
        }
        match tk.get_decoder() {
            Some(DecoderWrapper::ByteLevel(_)) => {}
            other => {
                return Err(LlmError::Tokenizer(format!(
                    "tokenizer.json: decoder {} is not byte-level (this build reads byte-level BPE)",
                    other.map_or("(none)".to_owned(), |d| format!("{d:?}")
                        .split(['(', ' ', '{'])
                        .next()
                        .unwrap_or("?")
                        .to_owned())
                )));
            }
        }
        Self::assemble(tk, special.clone(), None)
    }

    fn assemble(
        tk: tokenizers::Tokenizer,
        special: SpecialTokens,
        gguf: Option<(Vec<&str>, Vec<TokenKind>)>,
    ) -> Result<Tokenizer, LlmError> {
        let added = tk.get_added_tokens_decoder();
        let n = tk.get_vocab_size(true);
        let n = n.max(added.keys().map(|&k| k as usize + 1).max().unwrap_or(0));
        let mut piece_bytes = Vec::new();
        let mut offsets = Vec::with_capacity(n + 1);
        let mut kinds = Vec::with_capacity(n);
        offsets.push(0u32);
        for id in 0..n as u32 {
            let (text, kind) = match &gguf {
                Some((texts, k)) => (
                    texts.get(id as usize).map(|s| (*s).to_owned()),
                    k.get(id as usize).copied().unwrap_or(TokenKind::Normal),
                ),
                None => match added.get(&id) {
                    Some(a) if a.special => (Some(a.content.clone()), TokenKind::Control),
                    Some(a) => (Some(a.content.clone()), TokenKind::UserDefined),
                    None => (tk.id_to_token(id), TokenKind::Normal),
                },
            };
            let text = text.unwrap_or_default();
            match kind {
                TokenKind::Normal => piece_bytes.extend_from_slice(&byte_level_decode(&text)),
                _ => piece_bytes.extend_from_slice(text.as_bytes()),
            }
            offsets
                .push(u32::try_from(piece_bytes.len()).map_err(|_| {
                    LlmError::Tokenizer("token texts exceed 4 GiB in total".into())
                })?);
            kinds.push(kind);
        }
        Ok(Tokenizer {
            inner: tk,
            plain: OnceLock::new(),
            special,
            piece_bytes,
            offsets,
            kinds,
        })
    }

    /// The tokenizer as `tokenizer.json` (what a bundle stores).
    ///
    /// # Errors
    /// [`LlmError::Tokenizer`] if serialisation fails.
    pub fn to_json(&self) -> Result<String, LlmError> {
        self.inner
            .to_string(false)
            .map_err(|e| tok_err(format!("serialising: {e}")))
    }

    /// The special ids and BOS/EOS policy.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Number of token ids (the largest id + 1).
    pub fn len(&self) -> usize {
        self.kinds.len()
    }

    /// Whether the vocabulary is empty.
    pub fn is_empty(&self) -> bool {
        self.kinds.is_empty()
    }

    /// The id of `text` when it is one token (vocabulary or added token).
    pub fn token_to_id(&self, text: &str) -> Option<u32> {
        self.inner.token_to_id(text)
    }

    /// The added tokens that are special (control) tokens: (text, id).
    pub fn special_tokens(&self) -> impl Iterator<Item = (String, u32)> + '_ {
        self.inner
            .get_added_tokens_decoder()
            .into_iter()
            .filter(|(_, t)| t.special)
            .map(|(id, t)| (t.content, id))
    }

    /// How `id` renders; `None` beyond the vocabulary.
    pub fn kind(&self, id: u32) -> Option<TokenKind> {
        self.kinds.get(id as usize).copied()
    }

    /// The bytes `id` detokenises to (for a control token: its text); `None` beyond the
    /// vocabulary. A piece may be part of a UTF-8 character: use [`StreamDecoder`] for text.
    pub fn piece(&self, id: u32) -> Option<&[u8]> {
        let i = id as usize;
        let (a, b) = (*self.offsets.get(i)?, *self.offsets.get(i + 1)?);
        Some(&self.piece_bytes[a as usize..b as usize])
    }

    /// The longest piece, in bytes (sizes a streaming buffer).
    pub fn max_piece_len(&self) -> usize {
        self.offsets
            .windows(2)
            .map(|w| (w[1] - w[0]) as usize)
            .max()
            .unwrap_or(0)
    }

    /// Token ids of `text`, as llama.cpp's `llama_tokenize(vocab, text, add_special,
    /// parse_special)`: with `add_special`, BOS first when [`SpecialTokens::add_bos`] and EOS
    /// last when [`SpecialTokens::add_eos`]; with `parse_special`, control tokens written in
    /// the text (`<|im_start|>`) are those tokens, otherwise plain text. User-defined tokens
    /// are always matched whole.
    ///
    /// # Errors
    /// [`LlmError::Tokenizer`] when the engine fails on the text.
    pub fn encode(
        &self,
        text: &str,
        add_special: bool,
        parse_special: bool,
    ) -> Result<Vec<u32>, LlmError> {
        let tk = if parse_special {
            &self.inner
        } else {
            self.plain.get_or_init(|| {
                let mut t = self.inner.clone();
                t.set_encode_special_tokens(true);
                t
            })
        };
        let enc = tk
            .encode_fast(text, false)
            .map_err(|e| tok_err(format!("encoding: {e}")))?;
        let mut ids = Vec::with_capacity(enc.get_ids().len() + 2);
        if add_special
            && self.special.add_bos
            && let Some(b) = self.special.bos
        {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        if add_special
            && self.special.add_eos
            && let Some(e) = self.special.eos
        {
            ids.push(e);
        }
        Ok(ids)
    }

    /// The text of `ids` (control tokens rendered when `render_special`; invalid UTF-8
    /// replaced by U+FFFD).
    pub fn decode(&self, ids: &[u32], render_special: bool) -> String {
        let mut s = StreamDecoder::new(self, render_special);
        let mut out = String::new();
        for &id in ids {
            out.push_str(s.push(id));
        }
        out.push_str(s.finish());
        out
    }

    /// A streaming detokeniser over this vocabulary.
    pub fn stream(&self, render_special: bool) -> StreamDecoder<'_> {
        StreamDecoder::new(self, render_special)
    }
}

fn vocab_id(tk: &tokenizers::Tokenizer, t: &str) -> Option<u32> {
    tk.token_to_id(t)
}

/// Streaming detokenisation that never splits a UTF-8 character: a character whose bytes
/// arrive over several tokens is emitted once, whole, with the token that completes it;
/// bytes that can never form a character are emitted as one U+FFFD each maximal invalid
/// sequence (as `String::from_utf8_lossy`). Allocation-free after [`new`](Self::new): the
/// output buffer is sized for the longest piece.
pub struct StreamDecoder<'t> {
    tok: &'t Tokenizer,
    render_special: bool,
    /// Bytes of an incomplete character carried to the next token (at most 3).
    pending: [u8; 4],
    n_pending: usize,
    out: String,
    scratch: Vec<u8>,
}

impl<'t> StreamDecoder<'t> {
    /// A decoder over `tok`'s vocabulary; control tokens render as their text when
    /// `render_special`, else as nothing.
    pub fn new(tok: &'t Tokenizer, render_special: bool) -> StreamDecoder<'t> {
        let cap = tok.max_piece_len() + 4;
        StreamDecoder {
            tok,
            render_special,
            pending: [0; 4],
            n_pending: 0,
            out: String::with_capacity(3 * cap),
            scratch: Vec::with_capacity(cap),
        }
    }

    /// The text completed by token `id` (possibly empty). An id beyond the vocabulary
    /// renders as U+FFFD.
    pub fn push(&mut self, id: u32) -> &str {
        self.out.clear();
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&self.pending[..self.n_pending]);
        self.n_pending = 0;
        match (self.tok.kind(id), self.tok.piece(id)) {
            (Some(TokenKind::Control), _) if !self.render_special => {}
            (Some(_), Some(p)) => self.scratch.extend_from_slice(p),
            _ => {
                self.flush_scratch(true);
                self.out.push(char::REPLACEMENT_CHARACTER);
                return &self.out;
            }
        }
        self.flush_scratch(false);
        &self.out
    }

    /// Whatever is still pending (an incomplete character at the end of the stream,
    /// rendered as U+FFFD), and reset.
    pub fn finish(&mut self) -> &str {
        self.out.clear();
        self.scratch.clear();
        self.scratch
            .extend_from_slice(&self.pending[..self.n_pending]);
        self.n_pending = 0;
        self.flush_scratch(true);
        &self.out
    }

    /// Move the valid UTF-8 of `scratch` to `out`; keep an incomplete tail pending unless
    /// `final_`.
    fn flush_scratch(&mut self, final_: bool) {
        let mut rest: &[u8] = &self.scratch;
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    self.out.push_str(s);
                    return;
                }
                Err(e) => {
                    let (valid, after) = rest.split_at(e.valid_up_to());
                    // The first `valid_up_to` bytes are valid UTF-8 by definition.
                    self.out
                        .push_str(std::str::from_utf8(valid).unwrap_or_default());
                    match e.error_len() {
                        Some(n) => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            rest = &after[n..];
                        }
                        None if final_ => {
                            self.out.push(char::REPLACEMENT_CHARACTER);
                            return;
                        }
                        None => {
                            // An incomplete character (at most 3 bytes): wait for the rest.
                            let n = after.len().min(4);
                            self.pending[..n].copy_from_slice(&after[..n]);
                            self.n_pending = n;
                            return;
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_level_map_is_gpt2s() {
        let m = unicode_to_byte();
        assert_eq!(m.len(), 256);
        assert_eq!(m[&'Ġ'], b' ');
        assert_eq!(m[&'Ċ'], b'\n');
        assert_eq!(m[&'!'], b'!');
        assert_eq!(byte_level_decode("ĠHello"), b" Hello");
        assert_eq!(byte_level_decode("Ã©"), "é".as_bytes());
    }

    #[test]
    fn known_pre_tokenizers_and_refusal() {
        for n in ["smollm", "llama-bpe", "llama3", "qwen2", "gpt-2", "default"] {
            assert!(pre_tokenizer(n).is_some(), "{n}");
        }
        assert!(pre_tokenizer("llama-bpe").unwrap().ignore_merges);
        assert!(pre_tokenizer("chameleon").is_none());
    }
}
