//! The text-generation family as the `tether` CLI sees it (feature `cli`): build arguments
//! and recipe (`--gguf FILE` or `--hf-dir DIR`), the `inspect` description, the bundle's
//! self-test for `tether verify --self-test`, `run` with a prompt (tokens streamed as they
//! come, Ctrl-C cancels) and `bench` (llama-bench's `pp`/`tg` tests).
//!
//! `run`'s prompt: `--prompt TEXT`, `--chat-file FILE` (JSON: an array of `{"role",
//! "content"}` messages, or an object with such a `messages` array), `--text TEXT`, a text
//! file given as INPUT, or `-` (standard input). A prompt is sent as the user message of a
//! chat rendered by the checkpoint's template (after `--system TEXT` when given), unless
//! `--raw`, which tokenises it as it is. The sampling options are llama-cli's, under the
//! names of issue 25 (`--temperature` also answers to llama-cli's `--temp`, `--context` to
//! `--ctx-size`); their defaults are llama.cpp's (temperature 0.8, top-k 40, top-p 0.95,
//! min-p 0.05, repeat penalty 1.0 over the last 64 tokens) with the checkpoint's
//! `generation_config.json` values over them; `--temperature 0` is greedy decoding.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use anyhow::{Context as _, Result, bail};
use clap::{Arg, ArgAction, ArgMatches};
use serde_json::{Value, json};
use tether_bundle::Bundle;
use tether_family::args::{
    MAX_CPU_THREADS, flag_arg, number_arg, path_arg, read_file, utf8_text, value, whole,
};
use tether_family::family::{
    BuildCommon, Built, Description, Environment, Execution, Family, Input, InputSource,
    LatencySummary, Outcome, Report, RunOptions, Runner, SelfTest, ThroughputOptions,
    ThroughputReport, ThroughputTest, UsageError, input_as,
};
use tether_family::selftest::Role;

use crate::bench::{BenchOptions, Latency};
use crate::bundle::Description as LlmDescription;
use crate::generate::{
    CancelHandle, FinishReason, Finished, GenerateError, GenerateParams, Generator,
    GeneratorOptions, Prompt,
};
use crate::recipe::{self, BuildOptions};
use crate::selftest::{GENERATED_IDS, PROMPT_IDS};
use crate::{ChatMessage, Checkpoint, FAMILY};

/// The text-generation family.
pub struct LlmFamily;

/// The registry entry.
pub static LLM: LlmFamily = LlmFamily;

/// Largest prompt file (`INPUT`, `-`, `--chat-file`), bytes.
pub const MAX_PROMPT_BYTES: u64 = 16 << 20;

/// `pp` tests of `bench` by default (llama-bench's `-p 512` plus the issue's `pp128`).
pub const DEFAULT_N_PROMPT: [usize; 2] = [128, 512];
/// `tg` test of `bench` by default (llama-bench's `-n 128`).
pub const DEFAULT_N_GEN: usize = 128;
/// Timed repetitions of each `bench` test by default (llama-bench's `-r 5`).
pub const DEFAULT_REPETITIONS: usize = 5;

impl Family for LlmFamily {
    fn name(&self) -> &'static str {
        FAMILY
    }

    fn about(&self) -> &'static str {
        "Text generation: decoder-only transformers (Llama, Qwen2, Qwen3) from a GGUF file or a Hugging Face directory, tokens streamed"
    }

    fn inputs_help(&self) -> &'static str {
        "Prompt files (UTF-8 text; `-`: standard input), each the user message of one chat"
    }

    fn takes_text(&self) -> bool {
        true
    }

    fn has_precision(&self) -> bool {
        false
    }

    fn bench_only_args(&self) -> &'static [&'static str] {
        &["n-prompt", "n-gen"]
    }

    fn no_tensorrt_plans(&self) -> Option<&'static str> {
        Some("it runs on its own CPU and GPU kernels, not on ONNX networks")
    }

    fn has_throughput_bench(&self) -> bool {
        true
    }

    fn run_only_args(&self) -> &'static [&'static str] {
        &["prompt", "chat-file"]
    }

    fn input_args(&self) -> &'static [&'static str] {
        &["prompt", "chat-file"]
    }

    fn own_engines(&self) -> Vec<String> {
        use crate::kernels::IsaReason;
        let choice = crate::kernels::Isa::choice();
        let all: Vec<&str> = choice
            .available
            .iter()
            .copied()
            .map(crate::kernels::Isa::name)
            .collect();
        let cpu = format!(
            "CPU engine: {} kernels (this CPU runs {}; {})",
            choice.isa.name(),
            all.join(", "),
            match &choice.reason {
                IsaReason::Fastest => "TETHER_LLM_ISA picks another".to_string(),
                IsaReason::Forced => format!("TETHER_LLM_ISA={} chose it", choice.isa.name()),
                IsaReason::Ignored { value, why } => {
                    log::warn!("{why}; using {}", choice.isa.name());
                    format!("TETHER_LLM_ISA={value} is not one of them: ignored")
                }
            }
        );
        #[cfg(feature = "cuda")]
        let gpu = if tether_runtime::cuda::gpu_present() {
            "GPU decoder (one CUDA graph per token, --device cuda): usable"
        } else {
            "GPU decoder: needs a CUDA device (none here)"
        }
        .to_string();
        #[cfg(not(feature = "cuda"))]
        let gpu = "GPU decoder: not in this build (the `cuda` feature)".to_string();
        vec![cpu, gpu]
    }

    fn build_args(&self) -> Vec<Arg> {
        vec![
            path_arg(
                "gguf",
                "MODEL.gguf",
                "A GGUF v2 or v3 file (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K tensors), e.g. SmolLM2-135M-Instruct.Q4_1.gguf",
            )
            .conflicts_with("hf-dir"),
            path_arg(
                "hf-dir",
                "DIR",
                "A Hugging Face directory: config.json, *.safetensors (sharded too), tokenizer.json, tokenizer_config.json, generation_config.json",
            ),
        ]
    }

    fn build(
        &self,
        args: &ArgMatches,
        common: &BuildCommon,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Built> {
        let input = match (
            args.get_one::<PathBuf>("gguf"),
            args.get_one::<PathBuf>("hf-dir"),
        ) {
            (Some(p), None) => {
                if p.is_dir() {
                    return Err(UsageError(format!(
                        "--gguf {}: a directory (give a Hugging Face directory with --hf-dir)",
                        p.display()
                    ))
                    .into());
                }
                recipe::Input::Gguf(p.clone())
            }
            (None, Some(p)) => {
                if !p.is_dir() {
                    return Err(
                        UsageError(format!("--hf-dir {}: not a directory", p.display())).into(),
                    );
                }
                recipe::Input::HfDir(p.clone())
            }
            _ => return Err(UsageError("give --gguf FILE or --hf-dir DIR".into()).into()),
        };
        let path = match &input {
            recipe::Input::Gguf(p) | recipe::Input::HfDir(p) => p.clone(),
        };
        let options = BuildOptions {
            name: common
                .name
                .clone()
                .unwrap_or_else(|| tether_family::family::file_stem(&path, FAMILY)),
            model_version: common.model_version.clone(),
            created_unix_s: common.created_unix_s,
            self_test: true,
        };
        let (writer, report) = recipe::build(&input, &options, progress)
            .with_context(|| format!("building the llm bundle from {}", path.display()))?;
        let mut summary = vec![format!("family llm: {} tensor sections", report.tensors)];
        summary.extend(report.description.to_string().lines().map(str::to_string));
        if let Some(r) = &report.self_test {
            summary.push(format!("self-test: embedded (llm/selftest): {r}"));
        }
        Ok(Built {
            writer,
            networks: Vec::new(),
            summary,
        })
    }

    fn run_args(&self) -> Vec<Arg> {
        vec![
            Arg::new("prompt")
                .long("prompt")
                .short('p')
                .value_name("TEXT")
                .allow_hyphen_values(true)
                .help("The prompt (llm): the user message of a chat in the model's template, or raw text with --raw"),
            path_arg(
                "chat-file",
                "FILE.json",
                "Chat messages (llm): a JSON array of {\"role\", \"content\"} objects (or {\"messages\": [...]}); content a text or an array of {\"type\": \"text\", \"text\"} parts",
            ),
            Arg::new("system")
                .long("system")
                .value_name("TEXT")
                .allow_hyphen_values(true)
                .help("System message before the prompt (llm)"),
            flag_arg(
                "raw",
                "Tokenise the prompt as it is, without the chat template (llm)",
            ),
            number_arg(
                "max-tokens",
                "N",
                max_tokens,
                "Most tokens to generate; -1: no limit but the context's, as llama.cpp's --n-predict -1 (llm; default 256, or the checkpoint's max_new_tokens)",
            )
            .visible_alias("n-predict"),
            float_arg(
                "temperature",
                "T",
                "Sampling temperature, finite; 0 or below: greedy, else at least 1e-6 (llm; default 0.8)",
            )
            .visible_alias("temp"),
            number_arg(
                "top-k",
                "K",
                whole(0, 1_000_000),
                "Keep the K most likely tokens; 0: off (llm; default 40)",
            ),
            float_arg(
                "top-p",
                "P",
                "Nucleus sampling mass, 0 < P <= 1; 1: off (llm; default 0.95)",
            ),
            float_arg(
                "min-p",
                "P",
                "Minimum probability relative to the most likely token, 0 <= P < 1; 0: off (llm; default 0.05)",
            ),
            float_arg(
                "repeat-penalty",
                "R",
                "Repetition penalty over the last --repeat-last-n tokens, 1e-6 to 1e6; 1: off (llm; default 1.0)",
            ),
            number_arg(
                "repeat-last-n",
                "N",
                whole(0, 4096),
                "Tokens the repetition penalty looks back over (llm; default 64)",
            ),
            number_arg(
                "seed",
                "S",
                whole(0, u64::MAX),
                "Random seed of the sampler: the same seed, prompt and options give the same text (llm; default 0)",
            ),
            Arg::new("stop")
                .long("stop")
                .value_name("TEXT")
                .allow_hyphen_values(true)
                .action(ArgAction::Append)
                .help("End generation when TEXT appears (not printed); repeatable (llm)"),
            number_arg(
                "context",
                "N",
                whole(1, 1 << 24),
                "KV cache positions (llm; default and maximum: the model's training context)",
            )
            .visible_alias("ctx-size"),
            number_arg(
                "threads",
                "N",
                whole(1, MAX_CPU_THREADS as u64),
                "Threads of the forward pass (llm; default: the cores available)",
            ),
            Arg::new("n-prompt")
                .long("n-prompt")
                .allow_negative_numbers(true)
                .value_name("N,N,...")
                .value_delimiter(',')
                .value_parser(whole(1, 1 << 20))
                .help("bench (llm): prompt-processing tests, tokens each (default 128,512)"),
            number_arg(
                "n-gen",
                "N",
                whole(0, 1 << 20),
                "bench (llm): generation test, tokens (default 128; 0 skips it)",
            ),
        ]
    }

    fn describe(&self, bundle: &Arc<Bundle>) -> Result<Description> {
        let ckpt = Checkpoint::from_bundle(Arc::clone(bundle))?;
        let d = ckpt.describe();
        let lines: Vec<(String, String)> = d
            .to_string()
            .lines()
            .map(|l| match l.split_once("  ") {
                Some((k, v)) => (k.trim().to_string(), v.trim().to_string()),
                None => (l.trim().to_string(), String::new()),
            })
            .collect();
        let json = description_json(&d);
        let d = Description { lines, json };
        Ok(d.with_self_test(bundle, FAMILY, |t| {
            let n = |role, name| t.u32s(role, name).map_or(0, <[u32]>::len);
            let (p, g) = (n(Role::Input, PROMPT_IDS), n(Role::Expected, GENERATED_IDS));
            (
                format!(
                    "{p} prompt tokens, {g} greedy tokens expected; from {}",
                    t.source
                ),
                json!({ "prompt_token_count": p, "generated_token_count": g }),
            )
        }))
    }

    fn open(
        &self,
        bundle: Arc<Bundle>,
        args: &ArgMatches,
        options: &RunOptions,
    ) -> Result<Box<dyn Runner>> {
        let gpu = check_device(options)?;
        let params = params_of(args)?;
        let given = params.given();
        let threads = options
            .threads
            .or_else(|| value::<u64>(args, "threads").map(|n| n as usize));
        let generator = Generator::from_checkpoint(
            Checkpoint::from_bundle(bundle)?,
            &GeneratorOptions {
                context: value::<u64>(args, "context").map(|n| n as usize),
                threads,
                ..GeneratorOptions::default()
            },
        )
        .map_err(|e| match e {
            // A --context out of the model's range is a usage error (exit 2), as any other
            // option out of range; its bound is the model's, so it is known only here.
            GenerateError::Context { asked, max } => UsageError(format!(
                "--context {asked}: accepted 1 to {max} (the model's training context)"
            ))
            .into(),
            e => anyhow::Error::from(e),
        })?;
        let params = params.apply(GenerateParams::with_defaults(
            generator.generation_defaults(),
        ))?;
        #[allow(unused_mut)]
        let mut generator = generator;
        #[cfg(feature = "cuda")]
        if let Some(ordinal) = gpu {
            // The device samples as the CPU does: the same options and defaults.
            crate::gpu::check_sampling(&params.sampler, generator.model().hparams().n_vocab)
                .map_err(GenerateError::from)?;
            generator.use_gpu(ordinal, options.sync)?;
            if let Some(d) = generator.gpu() {
                log::info!(
                    "llm on {} ({}): a step graph of {}; {}; device memory {:?}",
                    d.device_name(),
                    d.kernel_image(),
                    d.launches_summary(),
                    d.check_summary(),
                    d.memory()
                );
            }
        }
        #[cfg(not(feature = "cuda"))]
        let _ = gpu;
        if gpu.is_none() {
            // The load log of `-v`, as the GPU decoder's above and the shared engines' choice.
            let state = generator.state();
            log::info!(
                "llm on the CPU: {} kernels, {} threads, context {} positions; host memory {} B (KV cache {} B), weights mapped from the bundle ({} B read per token)",
                generator.model().isa().name(),
                state.threads(),
                state.cache().shape().context,
                state.bytes(),
                state.cache().shape().bytes(),
                generator.model().weight_bytes_per_token()
            );
        }
        let cancel = generator.cancel_handle();
        Ok(Box::new(LlmRunner {
            generator,
            ordinal: gpu,
            params,
            given,
            raw: args.get_flag("raw"),
            system: value::<String>(args, "system"),
            prompt: value::<String>(args, "prompt"),
            chat_file: args.get_one::<PathBuf>("chat-file").cloned(),
            n_prompt: args
                .get_many::<u64>("n-prompt")
                .map(|v| v.map(|&n| n as usize).collect()),
            n_gen: value::<u64>(args, "n-gen").map(|n| n as usize),
            args_taken: std::cell::Cell::new(false),
            cancel,
            last: None,
        }))
    }

    fn run_self_test(
        &self,
        bundle: Arc<Bundle>,
        options: &RunOptions,
        test: &SelfTest,
    ) -> Result<Report> {
        let gpu = check_device(options)?;
        let ckpt = Checkpoint::from_bundle(bundle)?;
        let context = (ckpt.config.n_ctx_train as usize).min(
            crate::selftest::input(test)
                .map(|(p, g)| p.len() + g.len() + 1)
                .unwrap_or(1),
        );
        let mut g = Generator::from_checkpoint(
            ckpt,
            &GeneratorOptions {
                context: Some(context.max(1)),
                threads: options.threads,
                ..GeneratorOptions::default()
            },
        )?;
        #[cfg(feature = "cuda")]
        if let Some(ordinal) = gpu {
            g.use_gpu(ordinal, options.sync)?;
        }
        #[cfg(not(feature = "cuda"))]
        let _ = gpu;
        Ok(crate::selftest::run(&mut g, test)?)
    }

    fn hint(&self, error: &(dyn std::error::Error + 'static)) -> Option<&'static str> {
        use crate::LlmError as E;
        use tether_bundle::files::FileError::NotRegular;
        let llm =
            error
                .downcast_ref::<E>()
                .or_else(|| match error.downcast_ref::<GenerateError>() {
                    Some(GenerateError::Checkpoint(e)) => Some(e),
                    _ => None,
                });
        if let Some(e) = llm {
            return Some(match e {
                E::Gguf(_) | E::Safetensors(_) if io_not_found(error) => {
                    "check the path of the checkpoint file"
                }
                E::Gguf(crate::gguf::GgufError::File(NotRegular { .. }))
                | E::Safetensors(crate::safetensors::SafetensorsError::File(NotRegular {
                    ..
                })) => {
                    "give the checkpoint file itself (--gguf a .gguf file; --hf-dir a Hugging Face directory), not a device, pipe or socket"
                }
                E::Gguf(crate::gguf::GgufError::Magic { found })
                    if found.starts_with(&tether_bundle::MAGIC[..4]) =>
                {
                    "this is a bundle `tether build` wrote already: run it with `tether run BUNDLE`, or give --gguf the model's .gguf file"
                }
                E::Gguf(crate::gguf::GgufError::Magic { .. }) => {
                    "--gguf takes a GGUF file (llama.cpp's format; `--hf-dir` takes a Hugging Face directory)"
                }
                E::Gguf(crate::gguf::GgufError::Version { .. }) => {
                    "re-save the model as GGUF v3 with a current llama.cpp (`convert_hf_to_gguf.py`, or `llama-quantize` on the file)"
                }
                E::Gguf(_) | E::Safetensors(_) => {
                    "the checkpoint file is truncated, corrupt or uses a tensor type this build does not read (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)"
                }
                E::VocabMismatch { .. } => {
                    "the tokenizer belongs to another model: use the checkpoint's own tokenizer"
                }
                E::ReferenceMismatch(_) => {
                    "this CPU engine does not reproduce llama.cpp on the pinned model: report it with `tether doctor` output"
                }
                _ => return None,
            });
        }
        match error.downcast_ref::<GenerateError>()? {
            GenerateError::Context { .. } => Some(
                "--context accepts 1 to the model's training context (`tether inspect` shows it)",
            ),
            GenerateError::Forward(_) => Some(
                "a prompt longer than the context is an error, never cut: shorten it, or raise --context if it is below the model's training context (`tether inspect` shows it)",
            ),
            GenerateError::NoChatTemplate => Some("give --raw: this model has no chat template"),
            #[cfg(feature = "cuda")]
            GenerateError::Gpu(crate::gpu::GpuError::Sampling { .. }) => Some(
                "the device sampler refuses a repetition penalty over a vocabulary beyond 262,144 tokens: drop --repeat-penalty or run with --device cpu",
            ),
            #[cfg(feature = "cuda")]
            GenerateError::Gpu(_) => Some(
                "`tether doctor` shows the CUDA driver and devices found; --device cpu runs this model on the CPU",
            ),
            _ => None,
        }
    }
}

/// Whether `error` or one of its sources is an I/O error of a path that is not there.
fn io_not_found(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut e = Some(error);
    while let Some(x) = e {
        if x.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound)
        {
            return true;
        }
        e = x.source();
    }
    false
}

/// The device of `--device`: `None` for the CPU (`auto`, `cpu`), `Some(ordinal)` for
/// `cuda` / `cuda:N` (builds with the `cuda` feature; greedy or sampled decoding on the GPU).
fn check_device(options: &RunOptions) -> Result<Option<usize>> {
    let d = options.device.as_str();
    let ordinal = match d {
        "auto" | "cpu" => return Ok(None),
        "cuda" => Some(0),
        _ => d
            .strip_prefix("cuda:")
            .and_then(|n| n.parse::<usize>().ok()),
    };
    match ordinal {
        Some(n) if cfg!(feature = "cuda") => Ok(Some(n)),
        Some(_) => bail!(
            "--device {d}: this build of the llm family has no CUDA support (build with the `cuda` feature, or give --device cpu)"
        ),
        None => bail!("--device {d}: the llm family runs on auto, cpu, cuda or cuda:N"),
    }
}

/// The generation options given on the command line (each `None` when not given).
#[derive(Clone, Debug, Default)]
struct ParamArgs {
    max_tokens: Option<u64>,
    temperature: Option<f32>,
    top_k: Option<u64>,
    top_p: Option<f32>,
    min_p: Option<f32>,
    repeat_penalty: Option<f32>,
    repeat_last_n: Option<u64>,
    seed: Option<u64>,
    stop: Vec<String>,
}

fn params_of(args: &ArgMatches) -> Result<ParamArgs> {
    Ok(ParamArgs {
        max_tokens: value::<u64>(args, "max-tokens"),
        temperature: value::<f32>(args, "temperature"),
        top_k: value::<u64>(args, "top-k"),
        top_p: value::<f32>(args, "top-p"),
        min_p: value::<f32>(args, "min-p"),
        repeat_penalty: value::<f32>(args, "repeat-penalty"),
        repeat_last_n: value::<u64>(args, "repeat-last-n"),
        seed: value::<u64>(args, "seed"),
        stop: args
            .try_get_many::<String>("stop")
            .ok()
            .flatten()
            .map(|v| v.cloned().collect())
            .unwrap_or_default(),
    })
}

impl ParamArgs {
    /// The options given (`NAME` of `--NAME`), in their order of declaration.
    fn given(&self) -> Vec<&'static str> {
        [
            ("max-tokens", self.max_tokens.is_some()),
            ("stop", !self.stop.is_empty()),
            ("temperature", self.temperature.is_some()),
            ("top-k", self.top_k.is_some()),
            ("top-p", self.top_p.is_some()),
            ("min-p", self.min_p.is_some()),
            ("repeat-penalty", self.repeat_penalty.is_some()),
            ("repeat-last-n", self.repeat_last_n.is_some()),
            ("seed", self.seed.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, given)| given.then_some(name))
        .collect()
    }

    /// `base` (the checkpoint's defaults over llama.cpp's) with the options given; out of
    /// range values are usage errors naming the option.
    fn apply(self, mut p: GenerateParams) -> Result<GenerateParams> {
        if let Some(n) = self.max_tokens {
            p.max_tokens = n as usize;
        }
        let s = &mut p.sampler;
        if let Some(v) = self.temperature {
            s.temperature = v;
        }
        if let Some(v) = self.top_k {
            s.top_k = v as usize;
        }
        if let Some(v) = self.top_p {
            s.top_p = v;
        }
        if let Some(v) = self.min_p {
            s.min_p = v;
        }
        if let Some(v) = self.repeat_penalty {
            s.repeat_penalty = v;
        }
        if let Some(v) = self.repeat_last_n {
            s.repeat_last_n = v as usize;
        }
        if let Some(v) = self.seed {
            s.seed = v;
        }
        // The options given, to tell a bad option from a bad checkpoint default.
        let given = self.given();
        p.stop = self.stop;
        if p.stop.iter().any(String::is_empty) {
            return Err(UsageError("--stop: an empty text".into()).into());
        }
        while let Err(e) = s.validate() {
            let name = e.name.replace('_', "-");
            let value = crate::sample::shown(e.value);
            if given.contains(&name.as_str()) {
                return Err(
                    UsageError(format!("--{name} {value}: accepted {}", e.accepted)).into(),
                );
            }
            // Not given: the bundle's stored default is out of range. Greedy decoding
            // (temperature <= 0) does not use top-p or min-p, so such a default is set to
            // "off" there (as `transformers` checks them only when sampling); otherwise it
            // is an input error of the bundle, which the option can override.
            if s.temperature <= 0.0 && s.temperature.is_finite() {
                match e.name {
                    "top_p" => {
                        s.top_p = 1.0;
                        continue;
                    }
                    "min_p" => {
                        s.min_p = 0.0;
                        continue;
                    }
                    _ => {}
                }
            }
            bail!(
                "the bundle's default {name} {value} (from the checkpoint's generation_config.json at build) is out of range: accepted {}; give --{name} to override it",
                e.accepted
            );
        }
        Ok(p)
    }
}

/// A sampling option (`--NAME VALUE_NAME`, an f32 read by [`finite_f32`]) whose value may
/// begin with `-` in any form a number can: `--temperature -.5` and `--temperature -inf` are
/// the option's value (then accepted or refused as numbers), not options clap does not know
/// (its negative-number rule wants a digit after the `-`).
fn float_arg(name: &'static str, value_name: &'static str, help: &'static str) -> clap::Arg {
    number_arg(name, value_name, finite_f32, help).allow_hyphen_values(true)
}

/// A sampling option's number: an f32 that is finite, so that `1e309` (beyond f32's range,
/// which Rust's parser rounds to infinity), `inf` and `NaN` are refused as the text given,
/// and one that f32 can hold without rounding it to zero, so that `1e-46` is refused as the
/// text given instead of being read (and later named) as `0`.
fn finite_f32(s: &str) -> std::result::Result<f32, String> {
    let v: f32 = s.trim().parse().map_err(|e| format!("{e}"))?;
    if !v.is_finite() {
        return Err("not a finite number (the largest 32-bit float is about 3.4e38)".into());
    }
    if v == 0.0 && s.trim().parse::<f64>().is_ok_and(|w| w != 0.0) {
        return Err("too close to 0 for a 32-bit float (the smallest above 0 is about 1.4e-45); give 0 for zero".into());
    }
    Ok(v)
}

/// `--max-tokens`: 1 to 1,000,000, or -1 (llama.cpp's "no limit"): `u64::MAX`, which the
/// context bounds.
fn max_tokens(s: &str) -> std::result::Result<u64, String> {
    if s.trim() == "-1" {
        return Ok(u64::MAX);
    }
    whole(1, 1_000_000)(s).map_err(|e| format!("{e}, or -1 (no limit but the context's)"))
}

/// The JSON of `inspect`'s `family_config`.
fn description_json(d: &LlmDescription) -> Value {
    let tok = |t: &Option<(u32, String)>| {
        t.as_ref()
            .map_or(Value::Null, |(id, text)| json!({ "id": id, "text": text }))
    };
    json!({
        "architecture": d.architecture,
        "parameters": d.parameters,
        "weight_bytes": d.weight_bytes,
        "quantization": d.quantization.iter().map(|(t, n, p)| json!({
            "type": t.name(), "tensors": n, "parameters": p,
        })).collect::<Vec<_>>(),
        "context_length": d.context_length,
        "vocabulary": d.vocabulary,
        "tokenizer_tokens": d.tokenizer_tokens,
        "layers": d.layers,
        "width": d.width,
        "heads": d.heads.0,
        "kv_heads": d.heads.1,
        "head_dim": d.heads.2,
        "ffn": d.ffn,
        "rope_theta": d.rope_theta,
        "features": d.features,
        "special_tokens": {
            "bos": tok(&d.bos),
            "eos": tok(&d.eos),
            "eot": tok(&d.eot),
            "eog": d.eog.iter().map(|(id, text)| json!({ "id": id, "text": text })).collect::<Vec<_>>(),
            "add_bos": d.add_bos,
        },
        "chat_template": d.chat_template,
    })
}

/// A prompt to run.
struct PromptInput {
    label: String,
    what: PromptKind,
}

enum PromptKind {
    /// Tokenised as it is (`--raw`).
    Raw(String),
    /// Chat messages for the template.
    Chat(Vec<ChatMessage>),
}

impl Input for PromptInput {
    fn label(&self) -> &str {
        &self.label
    }
    fn describe(&self) -> String {
        match &self.what {
            PromptKind::Raw(t) => format!("raw prompt of {} bytes", t.len()),
            PromptKind::Chat(m) => format!("chat of {} message(s)", m.len()),
        }
    }
}

fn prompt_of(input: &dyn Input) -> Result<&PromptInput> {
    input_as(input, "a prompt of the llm family")
}

/// Read a prompt file (`-`: standard input) as UTF-8, at most [`MAX_PROMPT_BYTES`].
/// Whether `path` is a FIFO or a character device (read as a stream, not as a file).
fn is_stream(path: &Path) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        std::fs::metadata(path).is_ok_and(|m| {
            let t = m.file_type();
            t.is_fifo() || t.is_char_device()
        })
    }
    #[cfg(not(unix))]
    {
        let _ = path;
        false
    }
}

fn read_text(path: &Path) -> Result<String> {
    // A stream read to one byte past the bound, so that a longer one is told from one at it.
    let bounded = |r: &mut dyn std::io::Read| -> std::io::Result<Vec<u8>> {
        let mut b = Vec::new();
        r.take(MAX_PROMPT_BYTES + 1).read_to_end(&mut b)?;
        Ok(b)
    };
    let bytes = if path.as_os_str() == "-" {
        bounded(&mut std::io::stdin()).context("reading the prompt from standard input")?
    } else if !path.exists() {
        // `tether run smollm2.bundle "Where is Paris?"`: text where a prompt file belongs.
        // (The caller names the input.) An input that failed, as any unreadable file (exit
        // 1); `--text` gives a prompt to `run` and to `bench` alike.
        bail!(
            "no such prompt file; to give the prompt itself, use --text \"...\" (or - to read standard input)"
        );
    } else if is_stream(path) {
        // A pipe or character device (`<(printf ...)`, /dev/stdin): read as standard input
        // is, to the same bound (llama-cli's `-f` reads them too).
        std::fs::File::open(path)
            .and_then(|mut f| bounded(&mut f))
            .with_context(|| format!("reading {}", path.display()))?
    } else {
        read_file(path)?
    };
    if bytes.len() as u64 > MAX_PROMPT_BYTES {
        bail!(
            "{}: more than {MAX_PROMPT_BYTES} bytes of prompt",
            path.display()
        );
    }
    Ok(prompt_text(utf8_text(path, bytes)?))
}

/// A prompt file's text as the prompt: without a leading byte-order mark (U+FEFF, which
/// Windows editors write) and without one final line end (`\n` or `\r\n`), which `echo` and
/// editors add and llama.cpp's `-f` drops too (`common/arg.cpp`: `params.prompt.pop_back()`
/// of a last `'\n'`); a raw prompt "The capital of France is\n" would otherwise be continued
/// after a line break.
fn prompt_text(mut text: String) -> String {
    if text.starts_with('\u{feff}') {
        text.drain(..'\u{feff}'.len_utf8());
    }
    if text.ends_with("\r\n") {
        text.truncate(text.len() - 2);
    } else if text.ends_with('\n') {
        text.pop();
    }
    text
}

/// Chat messages from a `--chat-file` document.
fn read_chat(path: &Path) -> Result<Vec<ChatMessage>> {
    if path.as_os_str() != "-" && !path.exists() {
        bail!("--chat-file {}: no such file", path.display());
    }
    let text = read_text(path)?;
    let doc: Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    let list = match &doc {
        Value::Array(a) => a,
        Value::Object(o) => match o.get("messages") {
            Some(Value::Array(a)) => {
                // An OpenAI-style request body: its other keys (temperature, max_tokens,
                // stop, ...) are not read; said, so that they are not taken as applied.
                let other: Vec<&str> = o
                    .keys()
                    .map(String::as_str)
                    .filter(|k| *k != "messages")
                    .collect();
                if !other.is_empty() {
                    log::warn!(
                        "{}: only `messages` is read; {} not (give the sampling options on the command line: --temperature, --max-tokens, --stop, ...)",
                        path.display(),
                        other
                            .iter()
                            .map(|k| format!("`{}`", escape_role(k)))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                a
            }
            _ => bail!("{}: an object without a `messages` array", path.display()),
        },
        _ => bail!(
            "{}: neither an array of messages nor an object with `messages`",
            path.display()
        ),
    };
    if list.is_empty() {
        bail!("{}: no messages", path.display());
    }
    list.iter()
        .enumerate()
        .map(|(i, m)| {
            let field = |k: &str| {
                m.get(k).and_then(Value::as_str).ok_or_else(|| {
                    anyhow::anyhow!("{}: message {i} has no text `{k}`", path.display())
                })
            };
            let role = field("role")?;
            // A role the chat templates do not know would be rendered as text (`<|im_start|>
            // bogus`) and derail the answer: refused.
            if !CHAT_ROLES.contains(&role) {
                bail!(
                    "{}: message {i} has the role `{}`: accepted {}",
                    path.display(),
                    escape_role(role),
                    CHAT_ROLES.join(", ")
                );
            }
            Ok(ChatMessage::new(role, &message_text(m, i, path)?))
        })
        .collect()
}

/// A message's `content`: a string, or an OpenAI-style array of content parts whose text
/// parts (`{"type": "text", "text": ...}`) are joined with a line break, as llama.cpp's
/// server does for a template that takes string content (`concat_typed_text`). A part of
/// another type (an image, audio) is refused: this family takes text only.
fn message_text(m: &Value, i: usize, path: &Path) -> Result<String> {
    let at = || format!("{}: message {i}", path.display());
    match m.get("content") {
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut text = Vec::with_capacity(parts.len());
            for (k, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("text") => match part.get("text") {
                        Some(Value::String(t)) => text.push(t.as_str()),
                        None => bail!("{}: content part {k} has no `text`", at()),
                        Some(other) => bail!(
                            "{}: content part {k}'s `text` is {}, not a text",
                            at(),
                            json_kind(other)
                        ),
                    },
                    Some(other) => bail!(
                        "{}: content part {k} is of type `{}`: this model takes text parts only",
                        at(),
                        escape_role(other)
                    ),
                    None => bail!("{}: content part {k} has no text `type`", at()),
                }
            }
            if text.is_empty() {
                bail!("{}: a content array without parts", at());
            }
            Ok(text.join("\n"))
        }
        None => bail!(
            "{}: has no `content` (a text, or an array of text parts)",
            at()
        ),
        Some(other) => bail!(
            "{}: `content` is {}: a text, or an array of text parts",
            at(),
            json_kind(other)
        ),
    }
}

/// What a JSON value is, for an error: `a number (5)`, `an object`, ...
fn json_kind(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("a boolean ({b})"),
        Value::Number(n) => format!("a number ({n})"),
        Value::String(_) => "a text".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

/// The roles a `--chat-file` message may have: those of the chat format Hugging Face chat
/// templates are written for (`transformers`' chat templating: system, user, assistant, and
/// tool for tool results).
const CHAT_ROLES: [&str; 4] = ["system", "user", "assistant", "tool"];

/// A role as a message quotes it: at most 40 characters, control characters escaped.
fn escape_role(role: &str) -> String {
    let short: String = role.chars().take(40).collect();
    let tail = if role.chars().count() > 40 { "..." } else { "" };
    format!("{}{tail}", short.escape_debug())
}

struct LlmRunner {
    generator: Generator,
    /// The CUDA device ordinal when the generator runs on a GPU (reports only).
    #[allow(dead_code)]
    ordinal: Option<usize>,
    params: GenerateParams,
    /// The generation options given ([`ParamArgs::given`]), for those a throughput
    /// benchmark refuses.
    given: Vec<&'static str>,
    raw: bool,
    system: Option<String>,
    prompt: Option<String>,
    chat_file: Option<PathBuf>,
    n_prompt: Option<Vec<usize>>,
    n_gen: Option<usize>,
    /// Whether `arg_inputs` took `--prompt` / `--chat-file` (`run` does, before any INPUT;
    /// `bench` never does, so an INPUT loaded without it is bench's, which refuses them).
    args_taken: std::cell::Cell<bool>,
    cancel: CancelHandle,
    /// The last run's text and outcome.
    last: Option<(String, Finished)>,
}

impl LlmRunner {
    /// `--system` needs the chat template, which `--raw` leaves out: refused, not dropped.
    fn check_raw_system(&self) -> Result<()> {
        if self.raw && self.system.is_some() {
            return Err(UsageError(
                "--system with --raw: a system message needs the chat template".into(),
            )
            .into());
        }
        Ok(())
    }

    /// A prompt text as this runner's options make it: raw, or the user message of a chat.
    fn prompt_input(&self, label: String, text: String) -> PromptInput {
        let what = if self.raw {
            PromptKind::Raw(text)
        } else {
            let mut m = Vec::new();
            if let Some(s) = &self.system {
                m.push(ChatMessage::new("system", s));
            }
            m.push(ChatMessage::new("user", &text));
            PromptKind::Chat(m)
        };
        PromptInput { label, what }
    }

    /// Generate from `input`, handing each piece of text to `sink`.
    fn generate(
        &mut self,
        input: &dyn Input,
        sink: &mut dyn FnMut(&str) -> Result<()>,
    ) -> Result<()> {
        let p = prompt_of(input)?;
        let prompt = match &p.what {
            PromptKind::Raw(t) => Prompt::Text(t),
            PromptKind::Chat(m) => Prompt::Chat(m),
        };
        self.last = None;
        let mut run = self.generator.generate(prompt, &self.params)?;
        let mut text = String::new();
        while let Some(piece) = run.next_piece()? {
            text.push_str(piece.text);
            if !piece.text.is_empty() {
                sink(piece.text)?;
            }
        }
        self.last = Some((text, run.finish()));
        Ok(())
    }
}

fn latency_summary(name: &str, l: &Latency) -> LatencySummary {
    LatencySummary {
        name: name.into(),
        count: l.count,
        p50: l.p50,
        p99: l.p99,
        p999: l.p999,
        max: l.max,
        mean: l.mean,
    }
}

impl Runner for LlmRunner {
    fn engines(&self) -> Vec<(String, String)> {
        #[cfg(feature = "cuda")]
        if let Some(gpu) = self.generator.gpu() {
            return vec![(
                FAMILY.to_string(),
                format!("tether-llm CUDA ({})", gpu.kernel_image()),
            )];
        }
        vec![(
            FAMILY.to_string(),
            format!("tether-llm CPU ({})", self.generator.model().isa().name()),
        )]
    }

    fn environment(&self) -> Environment {
        // On the GPU: one graph per token (and per prompt chunk), the family's own kernels.
        #[cfg(feature = "cuda")]
        if let Some(gpu) = self.generator.gpu() {
            return Environment {
                device: format!("cuda:{}", self.ordinal.unwrap_or(0)),
                execution: Execution::Graph,
                execution_note: format!(
                    "one CUDA graph per token ({}), prompts in graphs of 128-token chunks",
                    gpu.launches_summary()
                ),
                cpu_threads: self.generator.state().threads(),
                engine_choice: vec![(
                    FAMILY.to_string(),
                    format!(
                        "the llm family's own CUDA kernels on {} ({}; the only GPU engine of this family)",
                        gpu.device_name(),
                        gpu.kernel_image()
                    ),
                )],
                ..Environment::default()
            };
        }
        Environment {
            device: "cpu".into(),
            execution: Execution::Host,
            cpu_threads: self.generator.state().threads(),
            engine_choice: vec![(
                FAMILY.to_string(),
                format!(
                    "the llm family's own CPU kernels ({}){}",
                    self.generator.model().isa().name(),
                    if cfg!(feature = "cuda") {
                        "; its GPU decoder runs with --device cuda"
                    } else {
                        "; this build has no GPU decoder (the `cuda` feature)"
                    }
                ),
            )],
            ..Environment::default()
        }
    }

    fn load(&self, source: InputSource<'_>) -> Result<Box<dyn Input>> {
        // `run` refuses them before any input (`arg_inputs`); this is `bench` timing an
        // INPUT, whose runs are whole requests, not the throughput tests.
        if self.n_prompt.is_some() || self.n_gen.is_some() {
            return Err(UsageError(
                "--n-prompt and --n-gen set the throughput tests (`tether bench` without an INPUT); with an INPUT each run is one whole request (--max-tokens bounds it)".into(),
            )
            .into());
        }
        if !self.args_taken.get() && (self.prompt.is_some() || self.chat_file.is_some()) {
            return Err(UsageError(
                "--prompt and --chat-file are options of `tether run`: bench times its INPUT (a prompt file, or --text)".into(),
            )
            .into());
        }
        self.check_raw_system()?;
        // An empty option value is a usage error (exit 2), as an empty --prompt is; an empty
        // file is an input that failed (exit 1). The caller names the input.
        let (label, text) = match source {
            InputSource::Text(t) if t.trim().is_empty() => {
                return Err(UsageError(format!("--text {t:?}: an empty prompt")).into());
            }
            InputSource::Text(t) => (t.to_string(), t.to_string()),
            InputSource::File(p) => (p.display().to_string(), read_text(p)?),
        };
        if text.trim().is_empty() {
            match source {
                InputSource::File(p) if p.as_os_str() == "-" => {
                    bail!("standard input holds no prompt text")
                }
                _ => bail!("{label}: the prompt file holds no text"),
            }
        }
        Ok(Box::new(self.prompt_input(label, text)))
    }

    fn arg_inputs(&self) -> Result<Vec<Box<dyn Input>>> {
        self.args_taken.set(true);
        if self.n_prompt.is_some() || self.n_gen.is_some() {
            return Err(UsageError(
                "--n-prompt and --n-gen are options of `tether bench`, not of `run`".into(),
            )
            .into());
        }
        self.check_raw_system()?;
        let mut out: Vec<Box<dyn Input>> = Vec::new();
        if let Some(p) = &self.prompt {
            if p.trim().is_empty() {
                return Err(UsageError(format!("--prompt {p:?}: an empty prompt")).into());
            }
            out.push(Box::new(self.prompt_input(p.clone(), p.clone())));
        }
        if let Some(f) = &self.chat_file {
            if self.raw {
                return Err(UsageError(
                    "--raw with --chat-file: chat messages need the template".into(),
                )
                .into());
            }
            let mut m = Vec::new();
            if let Some(s) = &self.system {
                m.push(ChatMessage::new("system", s));
            }
            let chat = read_chat(f)?;
            if self.system.is_some() && chat.iter().any(|c| c.role == "system") {
                return Err(UsageError(format!(
                    "--system with --chat-file {}: the file has a system message of its own (give one or the other)",
                    f.display()
                ))
                .into());
            }
            m.extend(chat);
            out.push(Box::new(PromptInput {
                label: f.display().to_string(),
                what: PromptKind::Chat(m),
            }));
        }
        Ok(out)
    }

    fn run(&mut self, input: &dyn Input) -> Result<()> {
        self.generate(input, &mut |_| Ok(()))
    }

    fn run_streaming(
        &mut self,
        input: &dyn Input,
        sink: &mut dyn FnMut(&str) -> Result<()>,
    ) -> Option<Result<()>> {
        Some(self.generate(input, sink))
    }

    fn canceller(&self) -> Option<Box<dyn Fn() + Send + Sync>> {
        let c = self.cancel.clone();
        Some(Box::new(move || c.cancel()))
    }

    fn throughput_bench(
        &mut self,
        options: &ThroughputOptions,
        stop: &AtomicBool,
    ) -> Option<Result<ThroughputReport>> {
        Some(self.bench(options, stop))
    }

    fn outcome(&self, input: &dyn Input, _annotate: bool) -> Result<Outcome> {
        let _ = prompt_of(input)?;
        let Some((text, f)) = &self.last else {
            bail!("no generation has run");
        };
        let t = &f.timings;
        let itl = Latency::of(&t.inter_token_ms);
        // No token (cancelled during the prompt, or a stop at once): no first-token time;
        // fewer than two: no interval between tokens, so no generation rate or percentiles.
        let ttft = (t.generated_tokens > 0).then_some(t.time_to_first_token_ms);
        let intervals = !t.inter_token_ms.is_empty();
        let plural =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        // "length" is either limit: say which (the JSON keeps the OpenAI-style name).
        let reason = match f.finish_reason {
            FinishReason::Length if t.generated_tokens >= self.params.max_tokens => format!(
                "length: --max-tokens {} reached{}",
                self.params.max_tokens,
                if self.given.contains(&"max-tokens") {
                    ""
                } else {
                    " (the default)"
                }
            ),
            FinishReason::Length => format!(
                "length: the context of {} tokens is full",
                self.generator.state().cache().shape().context
            ),
            r => r.as_str().to_string(),
        };
        Ok(Outcome {
            summary: format!(
                "{reason} ({} in {:.1} ms, {:.1} tok/s; {}{}; {})",
                plural(t.prompt_tokens, "prompt token", "prompt tokens"),
                t.prompt_ms,
                t.prompt_tokens_per_s(),
                plural(t.generated_tokens, "token generated", "tokens generated"),
                if intervals {
                    format!(", {:.1} tok/s", t.generation_tokens_per_s())
                } else {
                    String::new()
                },
                match ttft {
                    Some(ms) => format!("first token after {ms:.1} ms"),
                    None => "no token generated".to_string(),
                }
            ),
            lines: text.lines().map(str::to_string).collect(),
            json: json!({
                "text": text,
                "finish_reason": f.finish_reason.as_str(),
                "prompt_tokens": f.prompt_tokens,
                "tokens": f.tokens,
                "seed": f.seed,
                "timings": {
                    "prompt_token_count": t.prompt_tokens,
                    "prompt_ms": t.prompt_ms,
                    "prompt_tokens_per_s": t.prompt_tokens_per_s(),
                    "time_to_first_token_ms": ttft,
                    "generated_token_count": t.generated_tokens,
                    // First token to last: 0 for one token (never -0), null for none.
                    "generation_ms": (t.generated_tokens > 0).then_some(t.generation_ms.max(0.0) + 0.0),
                    "generation_tokens_per_s": intervals.then(|| t.generation_tokens_per_s()),
                    "inter_token_ms": intervals.then(|| json!({ "p50": itl.p50, "p99": itl.p99, "max": itl.max, "mean": itl.mean })),
                    "host_us_per_token": t.host_us_per_token(),
                },
            }),
            annotated: None,
        })
    }

    fn stage_times(&self) -> Vec<(String, f64)> {
        self.last.as_ref().map_or_else(Vec::new, |(_, f)| {
            vec![
                ("prompt".into(), f.timings.prompt_ms),
                ("generation".into(), f.timings.generation_ms),
            ]
        })
    }
}

impl LlmRunner {
    /// The GPU decoder's benchmark: for each prompt length `n`, a prompt of `n`
    /// pseudo-random ids (`ppN`: prefill, one replay of the prefill graph per chunk of
    /// `PREFILL_CHUNK` tokens, up to the first token in hand = time to first token), then `n_gen` decode steps after it (`tgG@N`: decode
    /// at positions N ..), each timed from launch to the 4-byte token read-back.
    #[cfg(feature = "cuda")]
    fn gpu_bench(
        &mut self,
        options: &ThroughputOptions,
        stop: &AtomicBool,
    ) -> Result<ThroughputReport> {
        use std::sync::atomic::Ordering;
        let n_prompt = self
            .n_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_N_PROMPT.to_vec());
        let n_gen = self.n_gen.unwrap_or(DEFAULT_N_GEN);
        let repetitions = options.repetitions.max(1);
        let Some(d) = self.generator.gpu_mut() else {
            anyhow::bail!("the GPU benchmark needs a generator on the GPU (--device cuda)");
        };
        let mut tests = Vec::new();
        let mut latencies = Vec::new();
        let mut slowest = Vec::new();
        for &n in &n_prompt {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            // One warm-up run, then the timed ones, each step's successor launched before
            // its token is taken (as the generator runs the GPU). Ctrl-C ends the test after
            // the run in progress, keeping the runs done (none: the test is left out).
            d.time_decode_with(n, n_gen.min(8), 0, &self.params.sampler, true)?;
            let (mut pp, mut tg, mut ttft, mut inter) =
                (Vec::new(), Vec::new(), Vec::new(), Vec::new());
            for r in 0..repetitions {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                let (prefill_ms, steps) =
                    d.time_decode_with(n, n_gen, 1 + r as u64, &self.params.sampler, true)?;
                pp.push(n as f64 / (prefill_ms / 1e3));
                ttft.push(prefill_ms);
                if !steps.is_empty() {
                    tg.push(steps.len() as f64 / (steps.iter().sum::<f64>() / 1e3));
                }
                inter.extend(steps);
            }
            if pp.is_empty() {
                break;
            }
            let (m, sd) = crate::bench::mean_std(&pp);
            tests.push(ThroughputTest {
                name: format!("pp{n}"),
                per_run: n as u64,
                unit: "tokens",
                runs: pp,
                mean: m,
                stddev: sd,
            });
            if !tg.is_empty() {
                let (m, sd) = crate::bench::mean_std(&tg);
                tests.push(ThroughputTest {
                    name: format!("tg{n_gen}@{n}"),
                    per_run: n_gen as u64,
                    unit: "tokens",
                    runs: tg,
                    mean: m,
                    stddev: sd,
                });
                latencies.push(latency_summary(
                    &format!("inter-token @{n}"),
                    &Latency::of(&inter),
                ));
                // Beside it, in the same run: each step launched only after the previous
                // token is in hand (no step ahead), and where the slowest steps fell.
                if !stop.load(Ordering::SeqCst) {
                    let (_, sync_steps) =
                        d.time_decode_with(n, n_gen, 1, &self.params.sampler, false)?;
                    latencies.push(latency_summary(
                        &format!("  same, no step ahead @{n}"),
                        &Latency::of(&sync_steps),
                    ));
                }
                slowest.push(format!("@{n}: {}", slowest_steps(&inter, n_gen, 3)));
            }
            latencies.push(latency_summary(
                &format!("time to first token (pp{n})"),
                &Latency::of(&ttft),
            ));
        }
        let mem = d.memory();
        Ok(ThroughputReport {
            tests,
            latencies_ms: latencies,
            notes: vec![
                (
                    "method".into(),
                    format!(
                        "pseudo-random token ids; ppN: prompt of N ids, prefill = one prefill-graph replay per chunk of {} prompt tokens (0: one decode-graph replay per token) up to the first token on the host (= time to first token); tgG@N: G decode steps after it, each one graph launch + a 4-byte read-back, the next step launched before the token is taken (as `run` does), timed token in hand to token in hand; 1 warm-up and {repetitions} timed run{}",
                        d.prefill_chunk(),
                        if repetitions == 1 { "" } else { "s" }
                    ),
                ),
                (
                    "prefill graph".into(),
                    format!(
                        "{} launches per chunk of {} tokens, chunk buffers {} B",
                        d.prefill_launches(),
                        d.prefill_chunk(),
                        d.prefill_memory()
                    ),
                ),
                ("device".into(), d.device_name().to_string()),
                ("kernels".into(), d.kernel_image().to_string()),
                ("launches per step".into(), d.launches_summary()),
                ("load check".into(), d.check_summary().to_string()),
                (
                    "device memory".into(),
                    format!(
                        "weights {} B, KV cache {} B, activations {} B, logits {} B",
                        mem.weights, mem.cache, mem.activations, mem.logits
                    ),
                ),
                ("context".into(), d.context().to_string()),
                ("sampler".into(), sampler_line(&self.params.sampler)),
                ("slowest steps (run.step ms)".into(), slowest.join("; ")),
            ],
        })
    }

    /// The throughput tests' positions checked against the context before any test runs
    /// (a usage error naming the option, as any value out of range): on the CPU each `ppN`
    /// and the `tg` test start from an empty cache (N, and `--n-gen`, positions); on the GPU
    /// (`gpu`) `tgG@N` decodes G tokens after a prompt of N (N + G positions).
    fn check_bench_fits(&self, gpu: bool) -> Result<()> {
        #[cfg(feature = "cuda")]
        let context = match self.generator.gpu() {
            Some(d) if gpu => d.context(),
            _ => self.generator.state().cache().shape().context,
        };
        #[cfg(not(feature = "cuda"))]
        let context = self.generator.state().cache().shape().context;
        let n_prompt = self
            .n_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_N_PROMPT.to_vec());
        let n_gen = self.n_gen.unwrap_or(DEFAULT_N_GEN);
        // A value not given is named as the default it is.
        let opt = |name: &str, given: bool, v: usize| {
            if given {
                format!("--{name} {v}")
            } else {
                format!("--{name} {v} (the default)")
            }
        };
        let (p_given, g_given) = (self.n_prompt.is_some(), self.n_gen.is_some());
        let trained = self.generator.config().n_ctx_train as usize;
        let why = |what: String, needed: usize| {
            Err(UsageError(format!(
                "{what}: the test needs {needed} positions, beyond the context of {context}; give smaller tests{}",
                if context < trained {
                    format!(" or a larger --context (at most {trained}, the model's training context)")
                } else {
                    " (the context is the model's training context)".to_string()
                }
            ))
            .into())
        };
        if let Some(&n) = n_prompt.iter().find(|&&n| n > context) {
            return why(opt("n-prompt", p_given, n), n);
        }
        if gpu {
            if let Some(&n) = n_prompt.iter().find(|&&n| n + n_gen > context) {
                return why(
                    format!(
                        "{} after {}",
                        opt("n-gen", g_given, n_gen),
                        opt("n-prompt", p_given, n)
                    ),
                    n + n_gen,
                );
            }
        } else if n_gen > context {
            return why(opt("n-gen", g_given, n_gen), n_gen);
        }
        Ok(())
    }

    /// llama-bench's tests, one at a time so that Ctrl-C ends the benchmark between them.
    fn bench(
        &mut self,
        options: &ThroughputOptions,
        stop: &AtomicBool,
    ) -> Result<ThroughputReport> {
        use std::sync::atomic::Ordering;
        if self.prompt.is_some() || self.chat_file.is_some() {
            return Err(UsageError(
                "--prompt and --chat-file are options of `tether run`: the benchmark's tokens are pseudo-random ids (llama-bench's method)".into(),
            )
            .into());
        }
        #[cfg(feature = "cuda")]
        let sampled = self.generator.gpu().is_some();
        #[cfg(not(feature = "cuda"))]
        let sampled = false;
        let mut unused = unused_by_throughput(&self.given, sampled);
        // No prompt is shaped: the tests feed token ids.
        if self.raw {
            unused.push("raw");
        }
        if self.system.is_some() {
            unused.push("system");
        }
        if !unused.is_empty() {
            let names: Vec<String> = unused.iter().map(|n| format!("--{n}")).collect();
            return Err(UsageError(format!(
                "{}: not used by the throughput tests (bench without an INPUT): they feed pseudo-random token ids (no prompt, no template) and generate --n-gen tokens (default 128) with no stop text{}; give {} to `tether run`, or to `tether bench` with an INPUT (whole requests)",
                names.join(", "),
                if sampled {
                    ""
                } else {
                    ", sampling nothing on the CPU (llama-bench's method; the GPU decoder samples with the sampler options)"
                },
                if names.len() == 1 { "it" } else { "them" }
            ))
            .into());
        }
        self.check_bench_fits(sampled)?;
        #[cfg(feature = "cuda")]
        if sampled {
            return self.gpu_bench(options, stop);
        }
        let n_prompt = self
            .n_prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_N_PROMPT.to_vec());
        let n_gen = self.n_gen.unwrap_or(DEFAULT_N_GEN);
        let repetitions = options.repetitions.max(1);
        let mut tests = Vec::new();
        let mut latencies = Vec::new();
        let add = |r: &crate::bench::BenchReport, tests: &mut Vec<ThroughputTest>| {
            tests.extend(r.throughput.iter().map(|t| ThroughputTest {
                name: t.name.clone(),
                per_run: t.tokens as u64,
                unit: "tokens",
                runs: t.runs.clone(),
                mean: t.mean,
                stddev: t.stddev,
            }));
        };
        let (model, state) = self.generator.model_and_state();
        let one = |prompt: Vec<usize>,
                   generate: usize,
                   ttft: usize,
                   state: &mut crate::forward::State| {
            crate::bench::run_until(
                model,
                state,
                &BenchOptions {
                    prompt,
                    generate,
                    repetitions,
                    ttft_prompt: ttft,
                },
                stop,
            )
        };
        // The time to first token of the first prompt length right after its pp test, so
        // that Ctrl-C later keeps its line (a pass cut off before its first timed run has
        // none).
        let ttft = n_prompt.first().copied().unwrap_or(DEFAULT_N_PROMPT[0]);
        for (i, &n) in n_prompt.iter().enumerate() {
            if stop.load(Ordering::SeqCst) {
                break;
            }
            add(&one(vec![n], 0, 0, state)?, &mut tests);
            if i == 0 && !stop.load(Ordering::SeqCst) {
                let r = one(Vec::new(), 0, ttft, state)?;
                if r.time_to_first_token_ms.count > 0 {
                    latencies.push(latency_summary(
                        &format!("time to first token (pp{ttft})"),
                        &r.time_to_first_token_ms,
                    ));
                }
            }
        }
        if n_gen > 0 && !stop.load(Ordering::SeqCst) {
            let r = one(Vec::new(), n_gen, 0, state)?;
            add(&r, &mut tests);
            // A tg test cut off before its first timed run: no line (one token a run: a
            // line of no intervals, which the report prints as n/a).
            if !r.throughput.is_empty() {
                latencies.push(latency_summary("inter-token", &r.inter_token_ms));
            }
        }
        let threads = state.threads();
        let context = state.cache().shape().context;
        Ok(ThroughputReport {
            tests,
            latencies_ms: latencies,
            notes: vec![
                (
                    "method".into(),
                    format!(
                        "llama-bench's: pseudo-random token ids, an empty KV cache per run, 1 warm-up and {repetitions} timed run{} per test; t/s = tokens / run time, mean ± sample sd",
                        if repetitions == 1 { "" } else { "s" }
                    ),
                ),
                ("threads".into(), threads.to_string()),
                ("kernels".into(), model.isa().name().to_string()),
                ("context".into(), context.to_string()),
            ],
        })
    }
}

/// The sampler chain as the options name it: `greedy`, or each filter's value (`off` when
/// it is off), e.g. `temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty off,
/// seed 0`.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn sampler_line(p: &crate::sample::SamplerParams) -> String {
    if p.temperature <= 0.0 {
        return "greedy (argmax)".into();
    }
    let off = |on: bool, v: String| if on { v } else { "off".into() };
    format!(
        "temperature {}, top-k {}, top-p {}, min-p {}, repeat-penalty {}, seed {}",
        p.temperature,
        off(p.top_k > 0, p.top_k.to_string()),
        off(p.top_p < 1.0, p.top_p.to_string()),
        off(p.min_p > 0.0, p.min_p.to_string()),
        off(
            p.repeat_penalty != 1.0 && p.repeat_last_n > 0,
            format!("{} over the last {}", p.repeat_penalty, p.repeat_last_n)
        ),
        p.seed
    )
}

/// Of the generation options `given` ([`ParamArgs::given`]), those the throughput tests do
/// not use: they generate `--n-gen` tokens, not `--max-tokens`, and stop at no `--stop`
/// text; on the CPU they decode pseudo-random ids and sample nothing (llama-bench's method),
/// so the sampler's options go unused too, unless `sampled` (the GPU decoder's graph samples
/// with them).
fn unused_by_throughput(given: &[&'static str], sampled: bool) -> Vec<&'static str> {
    given
        .iter()
        .copied()
        .filter(|name| !sampled || matches!(*name, "max-tokens" | "stop"))
        .collect()
}

/// The `k` longest of `steps` (runs of `per_run` steps, back to back) as `run.step ms`,
/// longest first: where a latency tail falls (the same step of every run, or one run).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn slowest_steps(steps: &[f64], per_run: usize, k: usize) -> String {
    let mut idx: Vec<usize> = (0..steps.len()).collect();
    idx.sort_by(|&a, &b| steps[b].total_cmp(&steps[a]));
    idx.iter()
        .take(k)
        .map(|&i| {
            format!(
                "{}.{} {:.3}",
                i / per_run.max(1),
                i % per_run.max(1),
                steps[i]
            )
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::{ParamArgs, sampler_line, slowest_steps, unused_by_throughput};
    use crate::sample::SamplerParams;

    #[test]
    fn a_prompt_file_loses_its_bom_and_one_final_line_end() {
        use super::prompt_text;
        assert_eq!(
            prompt_text("The capital of France is\n".into()),
            "The capital of France is"
        );
        assert_eq!(prompt_text("\u{feff}Hello\r\n".into()), "Hello");
        // Only one line end, and only at the end: a blank last line stays one line end.
        assert_eq!(prompt_text("a\n\n".into()), "a\n");
        assert_eq!(prompt_text("a\nb".into()), "a\nb");
        assert_eq!(prompt_text("x\u{feff}".into()), "x\u{feff}");
    }

    #[test]
    fn throughput_refuses_what_it_does_not_use() {
        let given = ParamArgs {
            max_tokens: Some(4),
            top_p: Some(0.5),
            seed: Some(1),
            ..ParamArgs::default()
        };
        assert_eq!(
            unused_by_throughput(&given.given(), false),
            ["max-tokens", "top-p", "seed"]
        );
        assert_eq!(unused_by_throughput(&given.given(), true), ["max-tokens"]);
        assert!(unused_by_throughput(&ParamArgs::default().given(), false).is_empty());
    }

    #[test]
    fn a_bad_stored_default_blocks_only_the_runs_that_use_it() {
        use crate::generate::GenerateParams;
        let mut base = GenerateParams::default();
        base.sampler.top_p = 1.5;
        base.sampler.min_p = -0.5;
        // Sampling uses top-p: refused, naming the default and the option.
        let e = ParamArgs::default().apply(base.clone()).unwrap_err();
        let m = format!("{e:#}");
        assert!(
            m.contains("default top-p 1.5") && m.contains("give --top-p"),
            "{m}"
        );
        assert!(e.downcast_ref::<super::UsageError>().is_none(), "{m}");
        // Greedy does not: both defaults set to off, the run goes on.
        let greedy = ParamArgs {
            temperature: Some(0.0),
            ..ParamArgs::default()
        };
        let p = greedy.apply(base.clone()).unwrap();
        assert_eq!((p.sampler.top_p, p.sampler.min_p), (1.0, 0.0));
        // A value given is the user's: still a usage error, greedy or not.
        let given = ParamArgs {
            temperature: Some(0.0),
            top_p: Some(2.0),
            ..ParamArgs::default()
        };
        let e = given.apply(base.clone()).unwrap_err();
        assert!(e.downcast_ref::<super::UsageError>().is_some(), "{e:#}");
        // A bad stored repeat penalty applies to greedy decoding too: refused.
        base.sampler.top_p = 0.9;
        base.sampler.repeat_penalty = -1.0;
        let greedy = ParamArgs {
            temperature: Some(0.0),
            ..ParamArgs::default()
        };
        let m = format!("{:#}", greedy.apply(base).unwrap_err());
        assert!(m.contains("default repeat-penalty -1"), "{m}");
    }

    #[test]
    fn sampler_line_names_each_filter_or_off() {
        assert_eq!(sampler_line(&SamplerParams::greedy()), "greedy (argmax)");
        assert_eq!(
            sampler_line(&SamplerParams::default()),
            "temperature 0.8, top-k 40, top-p 0.95, min-p 0.05, repeat-penalty off, seed 0"
        );
        let p = SamplerParams {
            top_k: 0,
            top_p: 1.0,
            min_p: 0.0,
            repeat_penalty: 1.1,
            seed: 7,
            ..SamplerParams::default()
        };
        assert_eq!(
            sampler_line(&p),
            "temperature 0.8, top-k off, top-p off, min-p off, repeat-penalty 1.1 over the last 64, seed 7"
        );
    }

    #[test]
    fn slowest_steps_name_the_run_and_the_step() {
        // Two runs of 4 steps: the longest is run 1's step 2, then run 0's step 0.
        let steps = [1.5, 1.0, 1.1, 1.0, 1.0, 1.2, 2.25, 1.0];
        assert_eq!(
            slowest_steps(&steps, 4, 3),
            "1.2 2.250, 0.0 1.500, 1.1 1.200"
        );
        assert_eq!(slowest_steps(&[], 4, 3), "");
    }
}
