//! The text-embedding family as the `tether` CLI sees it (feature `cli`):
//! build arguments and recipe, the `inspect` description, `run`/`bench` on
//! texts (`--text "..."`, repeatable, or a UTF-8 text file with one text per
//! line), text and JSON output, and the bundle's self-test for `tether verify
//! --self-test`.
//!
//! **Lines.** A text file is cut into lines the way Python's universal newlines
//! cut it (`open()` in text mode, what sentence-transformers users read files
//! with): at LF, CRLF and a lone CR. The other characters `str.splitlines` also
//! breaks at (VT, FF, FS, GS, RS, NEL, U+2028, U+2029) are not line ends in
//! text files for editors, `wc -l`, `grep` or Python's file iteration, so they
//! stay inside a text. Each line is trimmed; empty lines are skipped; every text
//! says where it came from (`source`: the file and its 1-based line number).
//!
//! **Truncation.** A text longer than the bundle's maximum sequence length is
//! embedded from its first tokens only, as sentence-transformers does; the output
//! says so for that text (its full token count and the character the embedded
//! part ends at).
//!
//! **Similarities.** `run` embeds every text of an input as one batch
//! ([`Embedder::embed_batch`], in groups of the maximum batch) and prints, per
//! text, its token count and the first components of its embedding, then its
//! `--top-k` most similar texts (default 5) among every text of the command so
//! far (the same input and every earlier one): what
//! `sentence_transformers.util.semantic_search` returns. Memory and output grow
//! with the number of texts, not its square. `--all-pairs` lists every pairwise
//! cosine instead (within each input and with every earlier text), for at most
//! [`MAX_ALL_PAIRS_TEXTS`] texts. The JSON holds each text's full embedding.

use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgMatches, value_parser};
use serde_json::{Value, json};
use tether_bundle::Bundle;
use tether_family::args::{
    flag, flag_arg, int_in, number_arg, path_arg, read_file, required_path, utf8_text,
};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Family, Input, InputSource, Outcome, Report,
    RunOptions, Runner, SelfTest, UsageError, file_stem, input_as,
};
use tether_family::selftest::Role;

use crate::config::{
    CONFIG_SECTION, DEFAULT_MAX_BATCH, DEFAULT_MAX_SEQ_LEN, MAX_BATCH, MAX_SEQ_LEN,
};
use crate::net::NETWORK;
use crate::recipe::{self, BuildOptions};
use crate::selftest::{MIN_COSINE, TEXT};
use crate::{EMBEDDING_DIM, EmbedConfig, EmbedError, Embedder, EmbedderOptions, Embedding, FAMILY};

/// The text-embedding family.
pub struct EmbedFamily;

/// The registry entry.
pub static EMBED: EmbedFamily = EmbedFamily;

/// Most texts one input file may hold.
pub const MAX_TEXTS: usize = 4096;

/// Most texts of one command whose every pairwise cosine `--all-pairs` lists (about half a
/// million pairs).
pub const MAX_ALL_PAIRS_TEXTS: usize = 1024;

/// Most texts of one command kept for similarities (every text of an input and of the
/// inputs before it): 16 x [`MAX_TEXTS`], 25 MB of embeddings.
const MAX_KEPT_TEXTS: usize = 16 * MAX_TEXTS;

/// Default of `--top-k`.
const DEFAULT_TOP_K: usize = 5;

fn count_arg(name: &'static str, help: &'static str) -> Arg {
    number_arg(name, "N", value_parser!(i64), help)
}

/// Characters of a text the text output shows (the JSON has every text in full).
const SHOWN_CHARS: usize = 60;

/// A text as the text output quotes it: escaped as Rust's `{:?}` does, and a text longer
/// than [`SHOWN_CHARS`] characters cut there with `…` and its length in characters (a long
/// line echoed in full in every cosine line buried the results).
fn quoted(text: &str) -> String {
    let n = text.chars().count();
    if n <= SHOWN_CHARS {
        format!("{text:?}")
    } else {
        let head: String = text.chars().take(SHOWN_CHARS).collect();
        format!("{:?} ({n} characters)", format!("{head}…"))
    }
}

impl Family for EmbedFamily {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "Sentence embeddings (all-MiniLM-L6-v2, sentence-transformers pipeline): texts in, 384-d vectors and similarities out"
    }

    fn inputs_help(&self) -> &'static str {
        "UTF-8 text files, one text per line (LF, CRLF or a lone CR ends a line)"
    }

    fn takes_text(&self) -> bool {
        true
    }

    fn no_tensorrt_plans(&self) -> Option<&'static str> {
        // README, "Not here yet".
        Some("plans for its sequence-length buckets are not built yet")
    }

    fn build_args(&self) -> Vec<Arg> {
        vec![
            path_arg(
                "onnx",
                "M.onnx",
                "The BERT sentence encoder (input_ids, attention_mask[, token_type_ids] -> token embeddings), e.g. all-MiniLM-L6-v2",
            )
            .required(true),
            path_arg(
                "tokenizer",
                "tokenizer.json",
                "The model's Hugging Face tokenizer.json",
            )
            .required(true),
            count_arg(
                "max-seq-len",
                "Maximum tokens per text, [CLS] and [SEP] included (4 to 512; default 256); longer texts are truncated",
            ),
            count_arg("max-batch", "Largest batch run at once (1 to 64; default 8)"),
        ]
    }

    fn build(
        &self,
        args: &ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Built> {
        let get = |name: &str, default: u32, min: u32, max: u32| -> Result<u32> {
            Ok(int_in(args, name, i64::from(min), i64::from(max))?.map_or(default, |v| v as u32))
        };
        let config = EmbedConfig {
            max_seq_len: get(
                "max-seq-len",
                DEFAULT_MAX_SEQ_LEN,
                crate::config::MIN_SEQ_LEN,
                MAX_SEQ_LEN,
            )?,
            max_batch: get("max-batch", DEFAULT_MAX_BATCH, 1, MAX_BATCH)?,
        };
        if let Err(EmbedError::Config { field, value }) = config.validate() {
            return Err(UsageError(format!(
                "--{}: invalid value {value}",
                field.replace('_', "-")
            ))
            .into());
        }
        let onnx_path = required_path(args, "onnx")?;
        let tok_path = required_path(args, "tokenizer")?;
        let (onnx, tokenizer) = (read_file(&onnx_path)?, read_file(&tok_path)?);
        // A file that is no tokenizer is named with what it should be (the tokenizer's parse
        // error alone, "expected value at line 1 column 1", names neither); the build's other
        // tokenizer errors (encoding the self-test's texts) keep their own words.
        crate::tokenize::WordPiece::from_json(&tokenizer, config.max_seq_len as usize).map_err(
            |e| {
                let why = match e {
                    EmbedError::Tokenizer(why) => why,
                    e => e.to_string(),
                };
                anyhow::anyhow!(
                    "--tokenizer {}: {why} (the tokenizer.json of a Hugging Face model is expected)",
                    tok_path.display()
                )
            },
        )?;
        let (writer, report) = recipe::build(
            &onnx,
            &tokenizer,
            &BuildOptions {
                common: common.clone().or_name(file_stem(&onnx_path, "embed")),
                config: Some(config),
            },
            progress,
        )
        .context("building the embed bundle")?;
        let c = &report.config;
        Ok(Built {
            writer,
            // Shape buckets are prepared at run time from the ONNX network; no TensorRT
            // plan is offered (one plan per bucket would be needed).
            networks: Vec::new(),
            summary: vec![
                format!(
                    "family embed: {EMBEDDING_DIM}-d mean pooling + L2, max {} tokens, max batch {}",
                    c.max_seq_len, c.max_batch
                ),
                format!("sequence buckets: {:?}", report.seq_buckets),
                format!(
                    "files: {}",
                    if report.pinned_model {
                        "the pinned all-MiniLM-L6-v2 int8 network and tokenizer"
                    } else {
                        "not the pinned pair"
                    }
                ),
                format!("self-test: embedded (embed/selftest): {}", report.selftest),
            ],
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        vec![
            count_arg(
                "top-k",
                "For each text, list this many most similar texts of the command (default 5; 0: none)",
            ),
            flag_arg(
                "all-pairs",
                "List every pairwise cosine (within each input and with every earlier text; at most 1024 texts)",
            ),
        ]
    }

    fn describe(&self, bundle: &Arc<Bundle>) -> Result<Description> {
        let c = EmbedConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let seq = c.seq_buckets();
        let batch = c.batch_buckets();
        let lines = vec![
            (
                "networks".into(),
                format!(
                    "{NETWORK} (BERT encoder: i64 input_ids, attention_mask, token_type_ids [batch, seq] -> f32 [batch, seq, {EMBEDDING_DIM}])"
                ),
            ),
            (
                "tokenizer".into(),
                "tokenizer.json (Hugging Face tokenizers; padding off, truncation)".into(),
            ),
            (
                "pooling".into(),
                format!(
                    "attention-masked mean over tokens, then L2 normalisation ({EMBEDDING_DIM}-d)"
                ),
            ),
            (
                "buckets".into(),
                format!("sequence {seq:?} x batch {batch:?} (each prepared once, on first use)"),
            ),
        ];
        let json = json!({
                "networks": { NETWORK: true },
                "dim": EMBEDDING_DIM,
                "pooling": "mean",
                "normalize": true,
                "max_seq_len": c.max_seq_len,
                "max_batch": c.max_batch,
                "seq_buckets": seq.as_slice(),
                "batch_buckets": batch.as_slice(),
        });
        let d = Description { lines, json };
        Ok(d.with_self_test(bundle, FAMILY, |t| {
            let text = t.text(Role::Input, TEXT).unwrap_or("?");
            let min_cosine = t
                .f32_scalar(Role::Tolerance, MIN_COSINE)
                .unwrap_or(f32::NAN);
            (
                format!(
                    "{text:?}, cosine >= {min_cosine}; expected values from {}",
                    t.source
                ),
                json!({ "text": text, "min_cosine": min_cosine }),
            )
        }))
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        let top_k = int_in(args, "top-k", 0, 1000)?.map_or(DEFAULT_TOP_K, |k| k as usize);
        let all_pairs = flag(args, "all-pairs");
        let embedder = Embedder::from_bundle(bundle, &embedder_options(options)?)?;
        Ok(Box::new(EmbedRunner {
            embedder,
            out: Vec::new(),
            top_k,
            all_pairs,
            earlier: std::cell::RefCell::new(Earlier::default()),
        }))
    }

    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> Result<Report> {
        let mut e = Embedder::from_bundle(bundle, &embedder_options(options)?)?;
        Ok(e.run_self_test(test)?)
    }
}

/// The [`EmbedderOptions`] of the common run options (device, verification).
fn embedder_options(options: &RunOptions) -> Result<EmbedderOptions> {
    let device: tether_runtime::Device = options.device()?;
    // Threads, precision and the device session's options (graphs, step timing, sync).
    let model = options.model_options();
    Ok(EmbedderOptions {
        device,
        model,
        verify_eagerly: options.verify_eagerly,
        ..EmbedderOptions::default()
    })
}

struct EmbedRunner {
    embedder: Embedder,
    /// Embeddings of the last run's texts.
    out: Vec<Embedding>,
    /// Matches listed per text (`--top-k`).
    top_k: usize,
    /// List every pairwise cosine (`--all-pairs`).
    all_pairs: bool,
    /// Texts of earlier inputs of this command.
    earlier: std::cell::RefCell<Earlier>,
}

/// The texts of the inputs before the current one (for cross-input similarities).
#[derive(Default)]
struct Earlier {
    /// Input label, the text's index in it and the text with where it came from, per kept
    /// text.
    texts: Vec<(Arc<str>, usize, String)>,
    embeddings: Vec<Embedding>,
    norms: Vec<f32>,
    /// Texts of this command not kept (beyond [`MAX_KEPT_TEXTS`]).
    dropped: usize,
}

/// Where a text came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Origin {
    /// A `--text` argument.
    Argument,
    /// A line of the input file (1-based).
    Line(usize),
}

struct TextInput {
    label: Arc<str>,
    texts: Vec<String>,
    origins: Vec<Origin>,
    tokens: Vec<usize>,
    truncated: Vec<Option<crate::tokenize::Truncated>>,
}

/// The lines of `text` as Python's universal newlines cut them (LF, CRLF, lone CR), each with
/// its 1-based line number; a final line end does not start another line.
pub fn universal_lines(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let bytes = text.as_bytes();
    let (mut start, mut i, mut number) = (0, 0, 1);
    while i < bytes.len() {
        match bytes[i] {
            b'\n' => {
                out.push((number, &text[start..i]));
                i += 1;
            }
            b'\r' => {
                out.push((number, &text[start..i]));
                i += if bytes.get(i + 1) == Some(&b'\n') {
                    2
                } else {
                    1
                };
            }
            _ => {
                i += 1;
                continue;
            }
        }
        start = i;
        number += 1;
    }
    if start < bytes.len() {
        out.push((number, &text[start..]));
    }
    out
}

impl Input for TextInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        let cut = self.truncated.iter().filter(|t| t.is_some()).count();
        format!(
            "{} text(s), {} tokens in all{}",
            self.texts.len(),
            self.tokens.iter().sum::<usize>(),
            if cut > 0 {
                format!(", {cut} truncated to the maximum sequence length")
            } else {
                String::new()
            }
        )
    }
}

/// The dot product of two embeddings, eight lanes at a time in f32 (vectorised by the
/// compiler; within 1e-6 of the f64 sum for unit vectors of 384 components).
fn dot(a: &Embedding, b: &Embedding) -> f32 {
    let mut acc = [0f32; 8];
    for (x, y) in a.chunks_exact(8).zip(b.chunks_exact(8)) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum()
}

/// Cosine similarity from the dot product and the two norms ([`crate::cosine`]'s value to
/// within 1e-6, without recomputing the norms for every pair).
fn cosine_with(a: &Embedding, na: f32, b: &Embedding, nb: f32) -> f32 {
    if na == 0.0 || nb == 0.0 {
        return 0.0;
    }
    dot(a, b) / (na * nb)
}

fn norm(a: &Embedding) -> f32 {
    dot(a, a).sqrt()
}

/// The `k` largest `(cosine, key)` kept in descending order of cosine (ties: the earlier
/// key first).
fn keep_top<K: Copy>(top: &mut Vec<(f32, K)>, k: usize, cos: f32, key: K) {
    if k == 0 || (top.len() == k && top[k - 1].0 >= cos) {
        return;
    }
    let at = top.iter().position(|(c, _)| *c < cos).unwrap_or(top.len());
    top.insert(at, (cos, key));
    top.truncate(k);
}

fn text_of(input: &dyn Input) -> Result<&TextInput> {
    input_as(input, "a text input of the embed family")
}

impl Runner for EmbedRunner {
    fn environment(&self) -> tether_family::family::Environment {
        Environment::of_model_sessions(self.embedder.model(), self.embedder.sessions())
    }

    fn engines(&self) -> Vec<(String, String)> {
        vec![(NETWORK.to_string(), self.embedder.engine().id().to_string())]
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        let (label, texts, origins) = match source {
            InputSource::Text(t) => {
                // As for a file: a text with nothing but white space is refused, not embedded
                // as an empty sentence ([CLS][SEP]).
                if t.trim().is_empty() {
                    // The option's value, not an input's content: a usage error (exit 2).
                    return Err(UsageError(format!("--text {t:?} holds no text")).into());
                }
                (t.to_string(), vec![t.to_string()], vec![Origin::Argument])
            }
            InputSource::File(path) => {
                let text = utf8_text(path, read_file(path)?)?;
                // A byte-order mark is not text (Python's `utf-8-sig`, editors on Windows).
                let body = text.strip_prefix('\u{feff}').unwrap_or(&text);
                let (mut texts, mut origins) = (Vec::new(), Vec::new());
                for (number, line) in universal_lines(body) {
                    let line = line.trim();
                    if !line.is_empty() {
                        texts.push(line.to_string());
                        origins.push(Origin::Line(number));
                    }
                }
                if texts.is_empty() {
                    bail!("{} holds no text (one text per line)", path.display());
                }
                if texts.len() > MAX_TEXTS {
                    bail!(
                        "{} holds {} texts; at most {MAX_TEXTS} per file",
                        path.display(),
                        texts.len()
                    );
                }
                (path.display().to_string(), texts, origins)
            }
        };
        let tokens = texts
            .iter()
            .map(|t| self.embedder.token_ids(t).map(|ids| ids.len()))
            .collect::<Result<Vec<_>, _>>()?;
        let truncated = texts
            .iter()
            .map(|t| self.embedder.truncation(t))
            .collect::<Result<Vec<_>, _>>()?;
        if self.all_pairs {
            let seen = self.earlier.borrow().texts.len() + texts.len();
            if seen > MAX_ALL_PAIRS_TEXTS {
                return Err(UsageError(format!(
                    "--all-pairs: {seen} texts would make {} pairs; at most {MAX_ALL_PAIRS_TEXTS} texts (use --top-k for the closest matches of each text)",
                    seen * (seen - 1) / 2
                ))
                .into());
            }
        }
        Ok(Box::new(TextInput {
            label: label.into(),
            texts,
            origins,
            tokens,
            truncated,
        }))
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        let t = text_of(input)?;
        self.out.resize(t.texts.len(), [0.0; EMBEDDING_DIM]);
        self.embedder
            .embed_batch(&t.texts, &mut self.out)
            .with_context(|| format!("embedding {}", t.label))?;
        Ok(())
    }

    fn outcome(&self, input: &dyn Input, _annotate: bool) -> Result<Outcome> {
        let t = text_of(input)?;
        let n = t.texts.len().min(self.out.len());
        let mut earlier = self.earlier.borrow_mut();
        // Each text's closest texts: the others of this input, then every earlier text.
        let k = self.top_k;
        let mut top: Vec<Vec<(f32, (bool, usize))>> = vec![Vec::new(); n];
        let mut pairs = Vec::new();
        let mut previous = Vec::new();
        let norms: Vec<f32> = self.out[..n].iter().map(norm).collect();
        for i in 0..n {
            for j in 0..n {
                if i != j {
                    let c = cosine_with(&self.out[i], norms[i], &self.out[j], norms[j]);
                    keep_top(&mut top[i], k, c, (true, j));
                    if self.all_pairs && j > i {
                        pairs.push((i, j, c));
                    }
                }
            }
            for (e, emb) in earlier.embeddings.iter().enumerate() {
                let c = cosine_with(&self.out[i], norms[i], emb, earlier.norms[e]);
                keep_top(&mut top[i], k, c, (false, e));
                if self.all_pairs {
                    previous.push((i, e, c));
                }
            }
        }
        let name = |key: (bool, usize)| -> (String, usize) {
            if key.0 {
                (t.label.to_string(), key.1)
            } else {
                let (label, index, _) = &earlier.texts[key.1];
                (label.to_string(), *index)
            }
        };
        let text_of_key = |key: (bool, usize)| -> String {
            if key.0 {
                quoted(&t.texts[key.1])
            } else {
                earlier.texts[key.1].2.clone()
            }
        };
        let mut lines = Vec::new();
        let mut texts = Vec::new();
        // `i` indexes six parallel per-text arrays (embeddings, texts, origins, tokens, cuts,
        // matches); one index reads clearer than a zip of six.
        #[allow(clippy::needless_range_loop)]
        for i in 0..n {
            let e = &self.out[i];
            let head: Vec<String> = e[..4].iter().map(|v| format!("{v:+.4}")).collect();
            let source = match t.origins[i] {
                Origin::Argument => json!({"argument": "--text"}),
                Origin::Line(l) => json!({"file": &*t.label, "line": l}),
            };
            let cut = t.truncated[i].map(|c| {
                json!({
                    "tokens": c.tokens,
                    "kept_tokens": c.kept_tokens,
                    "kept_chars": c.kept_chars,
                })
            });
            let mut line = format!(
                "{}{}: {} tokens, [{}, ...]",
                quoted(&t.texts[i]),
                match t.origins[i] {
                    Origin::Line(l) => format!(" (line {l})"),
                    Origin::Argument => String::new(),
                },
                t.tokens[i],
                head.join(", ")
            );
            if let Some(c) = t.truncated[i] {
                line.push_str(&format!(
                    "; truncated: {} tokens in full, only the first {} (up to character {}) are embedded",
                    c.tokens, c.kept_tokens, c.kept_chars
                ));
            }
            lines.push(line);
            let matches: Vec<Value> = top[i]
                .iter()
                .map(|&(c, key)| {
                    let (label, index) = name(key);
                    json!({"input": label, "text": index, "cosine": c})
                })
                .collect();
            for &(c, key) in &top[i] {
                lines.push(format!(
                    "  cosine({}, {}) = {c:.4}",
                    quoted(&t.texts[i]),
                    text_of_key(key)
                ));
            }
            texts.push(json!({
                "text": t.texts[i],
                "source": source,
                "token_count": t.tokens[i],
                "truncated": cut,
                "embedding": e.as_slice(),
                "matches": matches,
            }));
        }
        for &(i, j, c) in &pairs {
            lines.push(format!(
                "cosine({}, {}) = {c:.4}",
                quoted(&t.texts[i]),
                quoted(&t.texts[j])
            ));
        }
        for &(i, e, c) in &previous {
            lines.push(format!(
                "cosine({}, {}) = {c:.4}",
                quoted(&t.texts[i]),
                earlier.texts[e].2
            ));
        }
        let cut = t.truncated[..n].iter().filter(|c| c.is_some()).count();
        let json = json!({
            "dim": EMBEDDING_DIM,
            "top_k": k,
            "texts": texts,
            "similarities": if self.all_pairs {
                Value::from(pairs.iter().map(|&(a, b, c)| json!({"a": a, "b": b, "cosine": c})).collect::<Vec<_>>())
            } else {
                Value::Null
            },
            "earlier_inputs": if self.all_pairs {
                Value::from(previous.iter().map(|&(i, e, c)| json!({
                    "text": i,
                    "input": &*earlier.texts[e].0,
                    "input_text": earlier.texts[e].1,
                    "cosine": c,
                })).collect::<Vec<_>>())
            } else {
                Value::Null
            },
            "earlier_not_compared_count": earlier.dropped,
        });
        // This input's texts become earlier texts of the next inputs.
        if !earlier.texts.iter().any(|(l, _, _)| **l == *t.label) {
            // `i` indexes the parallel per-text arrays (texts, origins, embeddings, norms).
            #[allow(clippy::needless_range_loop)]
            for i in 0..n {
                if earlier.texts.len() < MAX_KEPT_TEXTS {
                    let shown = match t.origins[i] {
                        Origin::Argument => quoted(&t.texts[i]),
                        Origin::Line(l) => {
                            format!("{} ({} line {l})", quoted(&t.texts[i]), t.label)
                        }
                    };
                    earlier.texts.push((Arc::clone(&t.label), i, shown));
                    earlier.embeddings.push(self.out[i]);
                    earlier.norms.push(norms[i]);
                } else {
                    earlier.dropped += 1;
                }
            }
        }
        Ok(Outcome {
            summary: format!(
                "{n} embedding{} of {EMBEDDING_DIM} dimensions{}",
                if n == 1 { "" } else { "s" },
                if cut > 0 {
                    format!(" ({cut} text(s) truncated to the maximum sequence length)")
                } else {
                    String::new()
                }
            ),
            lines,
            json,
            annotated: None,
        })
    }

    fn units(&self) -> Option<tether_family::family::Units<'_>> {
        // Texts share batches: the time per text is the run's over their count.
        Some(tether_family::family::Units {
            name: "text",
            count: self.out.len() as u64,
            times_ms: &[],
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        self.embedder.step_times().to_vec()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_as_pythons_universal_newlines_cut_them() {
        let cut = universal_lines;
        assert_eq!(
            cut("a\nb\r\nc\rd"),
            [(1, "a"), (2, "b"), (3, "c"), (4, "d")]
        );
        // A final line end starts no line; empty lines keep their numbers.
        assert_eq!(cut("a\r\n\r\nb\n"), [(1, "a"), (2, ""), (3, "b")]);
        assert_eq!(cut("\r\r"), [(1, ""), (2, "")]);
        assert_eq!(cut(""), []);
        // Not line ends in a text file: form feed, NEL, U+2028 stay inside the text.
        assert_eq!(
            cut("a\u{c}b\u{85}c\u{2028}d"),
            [(1, "a\u{c}b\u{85}c\u{2028}d")]
        );
    }

    #[test]
    fn top_matches_keep_the_k_best_in_order() {
        let mut top = Vec::new();
        for (c, k) in [(0.5, 1), (0.9, 2), (0.1, 3), (0.9, 4), (0.7, 5)] {
            keep_top(&mut top, 3, c, k);
        }
        assert_eq!(top, [(0.9, 2), (0.9, 4), (0.7, 5)]);
        let mut none: Vec<(f32, u8)> = Vec::new();
        keep_top(&mut none, 0, 1.0, 1);
        assert!(none.is_empty());
    }
}
