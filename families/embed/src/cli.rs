//! The text-embedding family as the `tether` CLI sees it (feature `cli`):
//! build arguments and recipe, the `inspect` description, `run`/`bench` on
//! texts (`--text "..."`, repeatable, or a UTF-8 text file with one text per
//! line, empty lines skipped), text and JSON output, and the bundle's
//! self-test for `tether verify --self-test`.
//!
//! `run` embeds every text of an input as one batch ([`Embedder::embed_batch`],
//! in groups of the maximum batch) and prints, per text, its token count and
//! the first components of its embedding; within an input of several texts,
//! the cosine similarity of every pair; and for each input, its cosine with
//! the first text of every earlier input of the same command (so
//! `--text a --text b` prints the similarity of `a` and `b`).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgMatches, value_parser};
use serde_json::json;
use tether_bundle::Bundle;
use tether_family::family::{
    BuildCommon, Built, Description, Family, Input, InputSource, Outcome, Report, RunOptions,
    Runner, SelfTest, UsageError, describe_self_test, file_stem, input_as,
};
use tether_family::selftest::Role;

use crate::config::{
    CONFIG_SECTION, DEFAULT_MAX_BATCH, DEFAULT_MAX_SEQ_LEN, MAX_BATCH, MAX_SEQ_LEN,
};
use crate::net::NETWORK;
use crate::recipe::{self, BuildOptions};
use crate::selftest::{MIN_COSINE, TEXT};
use crate::{
    EMBEDDING_DIM, EmbedConfig, EmbedError, Embedder, EmbedderOptions, Embedding, FAMILY, cosine,
};

/// The text-embedding family.
pub struct EmbedFamily;

/// The registry entry.
pub static EMBED: EmbedFamily = EmbedFamily;

/// Most texts one input file may hold.
pub const MAX_TEXTS: usize = 4096;

/// Earlier inputs kept for the cross-input similarities of one command.
const MAX_EARLIER: usize = 64;

fn count_arg(name: &'static str, help: &'static str) -> Arg {
    Arg::new(name)
        .long(name)
        .value_name("N")
        .allow_negative_numbers(true)
        .value_parser(value_parser!(i64))
        .help(help)
}

impl Family for EmbedFamily {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "Sentence embeddings (all-MiniLM-L6-v2, sentence-transformers pipeline): texts in, 384-d vectors and similarities out"
    }

    fn build_args(&self) -> Vec<Arg> {
        vec![
            Arg::new("onnx")
                .long("onnx")
                .value_name("M.onnx")
                .value_parser(value_parser!(PathBuf))
                .required(true)
                .help("The BERT sentence encoder (input_ids, attention_mask[, token_type_ids] -> token embeddings), e.g. all-MiniLM-L6-v2"),
            Arg::new("tokenizer")
                .long("tokenizer")
                .value_name("tokenizer.json")
                .value_parser(value_parser!(PathBuf))
                .required(true)
                .help("The model's Hugging Face tokenizer.json"),
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
        let get = |name: &str, default: u32, max: u32| -> Result<u32> {
            match args.get_one::<i64>(name).copied() {
                None => Ok(default),
                Some(v) if (1..=i64::from(max)).contains(&v) => Ok(v as u32),
                Some(v) => {
                    Err(UsageError(format!("--{name} {v}: must be between 1 and {max}")).into())
                }
            }
        };
        let config = EmbedConfig {
            max_seq_len: get("max-seq-len", DEFAULT_MAX_SEQ_LEN, MAX_SEQ_LEN)?,
            max_batch: get("max-batch", DEFAULT_MAX_BATCH, MAX_BATCH)?,
        };
        if let Err(EmbedError::Config { field, value }) = config.validate() {
            return Err(UsageError(format!(
                "--{}: invalid value {value}",
                field.replace('_', "-")
            ))
            .into());
        }
        let path = |name: &str| {
            args.get_one::<PathBuf>(name)
                .cloned()
                .with_context(|| format!("--{name} is required"))
        };
        let (onnx_path, tok_path) = (path("onnx")?, path("tokenizer")?);
        let read = |p: &PathBuf| {
            tether_bundle::files::read_regular(p)
                .with_context(|| format!("reading {}", p.display()))
        };
        let (onnx, tokenizer) = (read(&onnx_path)?, read(&tok_path)?);
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
        Vec::new()
    }

    fn describe(&self, bundle: &Bundle) -> Result<Description> {
        let c = EmbedConfig::from_section(bundle.section_data(CONFIG_SECTION)?)?;
        let (selftest_line, selftest_json) = describe_self_test(bundle, FAMILY, |t| {
            let text = t.text(Role::Input, TEXT).unwrap_or("?");
            let min_cosine = t
                .f32_scalar(Role::Tolerance, MIN_COSINE)
                .unwrap_or(f32::NAN);
            (
                format!(
                    "{text:?}, cosine >= {min_cosine} (expected values from {})",
                    t.source
                ),
                json!({ "text": text, "min_cosine": min_cosine }),
            )
        });
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
            ("self-test".into(), selftest_line),
        ];
        Ok(Description {
            lines,
            json: json!({
                "networks": { NETWORK: true },
                "dim": EMBEDDING_DIM,
                "pooling": "mean",
                "normalize": true,
                "max_seq_len": c.max_seq_len,
                "max_batch": c.max_batch,
                "seq_buckets": seq.as_slice(),
                "batch_buckets": batch.as_slice(),
                "self_test": selftest_json,
            }),
        })
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        _args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        let embedder = Embedder::from_bundle(bundle, &embedder_options(options)?)?;
        Ok(Box::new(EmbedRunner {
            embedder,
            out: Vec::new(),
            earlier: std::cell::RefCell::new(Vec::new()),
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
    /// `(label, first embedding)` of earlier inputs of this command.
    earlier: std::cell::RefCell<Vec<(String, Embedding)>>,
}

struct TextInput {
    label: String,
    texts: Vec<String>,
    tokens: Vec<usize>,
}

impl Input for TextInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        format!(
            "{} text(s), {} tokens in all",
            self.texts.len(),
            self.tokens.iter().sum::<usize>()
        )
    }
}

fn text_of(input: &dyn Input) -> Result<&TextInput> {
    input_as(input, "a text input of the embed family")
}

impl Runner for EmbedRunner {
    fn environment(&self) -> tether_family::family::Environment {
        tether_family::family::Environment::of_model(self.embedder.model())
    }

    fn engines(&self) -> Vec<(String, String)> {
        vec![(NETWORK.to_string(), self.embedder.engine().id().to_string())]
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        let (label, texts) = match source {
            InputSource::Text(t) => {
                // As for a file: a text with nothing but white space is refused, not embedded
                // as an empty sentence ([CLS][SEP]).
                if t.trim().is_empty() {
                    bail!("--text {t:?} holds no text");
                }
                (t.to_string(), vec![t.to_string()])
            }
            InputSource::File(path) => {
                let bytes = tether_bundle::files::read_regular(path)
                    .with_context(|| format!("reading {}", path.display()))?;
                let text = String::from_utf8(bytes).map_err(|e| {
                    anyhow::anyhow!(
                        "{} is not UTF-8 text (invalid byte at offset {})",
                        path.display(),
                        e.utf8_error().valid_up_to()
                    )
                })?;
                let texts: Vec<String> = text
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_string)
                    .collect();
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
                (path.display().to_string(), texts)
            }
        };
        let tokens = texts
            .iter()
            .map(|t| self.embedder.token_ids(t).map(|ids| ids.len()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Box::new(TextInput {
            label,
            texts,
            tokens,
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
        let mut lines = Vec::new();
        let mut texts = Vec::new();
        for i in 0..n {
            let e = &self.out[i];
            let head: Vec<String> = e[..4].iter().map(|v| format!("{v:+.4}")).collect();
            lines.push(format!(
                "{:?}: {} tokens, [{}, ...]",
                t.texts[i],
                t.tokens[i],
                head.join(", ")
            ));
            texts.push(json!({
                "text": t.texts[i],
                "tokens": t.tokens[i],
                "embedding": e.as_slice(),
            }));
        }
        let mut pairs = Vec::new();
        for i in 0..n {
            for j in i + 1..n {
                let c = cosine(&self.out[i], &self.out[j]);
                lines.push(format!(
                    "cosine({:?}, {:?}) = {c:.4}",
                    t.texts[i], t.texts[j]
                ));
                pairs.push(json!({"a": i, "b": j, "cosine": c}));
            }
        }
        let mut earlier = self.earlier.borrow_mut();
        let mut previous = Vec::new();
        if let Some(first) = self.out.first().filter(|_| n > 0) {
            for (label, e) in earlier.iter().filter(|(l, _)| *l != t.label) {
                let c = cosine(first, e);
                lines.push(format!("cosine with earlier input {label:?} = {c:.4}"));
                previous.push(json!({"input": label, "cosine": c}));
            }
            if !earlier.iter().any(|(l, _)| *l == t.label) && earlier.len() < MAX_EARLIER {
                earlier.push((t.label.clone(), *first));
            }
        }
        Ok(Outcome {
            summary: format!(
                "{n} embedding{} of {EMBEDDING_DIM} dimensions",
                if n == 1 { "" } else { "s" }
            ),
            lines,
            json: json!({
                "dim": EMBEDDING_DIM,
                "texts": texts,
                "similarities": pairs,
                "earlier_inputs": previous,
            }),
            annotated: None,
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        self.embedder.step_times().to_vec()
    }
}
