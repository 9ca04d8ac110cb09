//! The build recipe: a GGUF file or a Hugging Face directory -> an `llm` bundle
//! (sections in [`crate::bundle`]).
//!
//! The checkpoint is read into canonical form ([`Checkpoint`]: hyper-parameters validated,
//! every tensor's presence, shape and type checked, tokenizer against the embedding rows),
//! then written: quantised blocks as stored (the kernels read them directly), F32/F16/BF16
//! as stored (BF16 kept rather than widened: lossless, half the bytes of F32, and a BF16
//! element widens to F32 with one 16-bit shift), Q/K rows in the rotate-half layout. The
//! bundle is then read back in memory and checked like a load would ([`verify_bytes`]).
//! Nothing is written on failure: the caller writes the returned writer atomically
//! ([`tether_bundle::BundleWriter::write`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, Verify};
use zerocopy::IntoBytes;
use zerocopy::little_endian::{U32, U64};

use crate::bundle::{
    CHAT_TEMPLATE_SECTION, CONFIG_SECTION, Description, GENERATION_SECTION, GenerationRecord,
    INDEX_VERSION, TENSOR_PREFIX, TENSORS_SECTION, TOKENIZER_SECTION, TensorIndexHeader,
    TensorIndexRecord,
};
use crate::checkpoint::Checkpoint;
use crate::error::LlmError;
use crate::generate::{GenerateError, Generator, GeneratorOptions};

/// What to build from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Input {
    /// A GGUF file.
    Gguf(PathBuf),
    /// A Hugging Face directory.
    HfDir(PathBuf),
}

impl Input {
    /// A directory is a Hugging Face checkpoint, a file a GGUF.
    pub fn detect(path: &Path) -> Input {
        if path.is_dir() {
            Input::HfDir(path.to_path_buf())
        } else {
            Input::Gguf(path.to_path_buf())
        }
    }
}

/// What to write.
#[derive(Clone, Debug, Default)]
pub struct BuildOptions {
    /// Bundle name.
    pub name: String,
    /// Model version in the identity (default: the GGUF's `general.name`, or the
    /// directory's name).
    pub model_version: Option<String>,
    /// Creation time, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Embed the self-test ([`crate::selftest`]), run on this CPU first: llama.cpp's greedy
    /// tokens for the pinned GGUF (the build fails if they are not reproduced), this host's
    /// for any other checkpoint.
    pub self_test: bool,
}

/// What the recipe built, for the build log.
#[derive(Clone, Debug)]
pub struct BuildReport {
    /// The model's summary.
    pub description: Description,
    /// Tensor sections written.
    pub tensors: usize,
    /// The embedded self-test's run on this CPU (when asked for).
    pub self_test: Option<tether_family::selftest::Report>,
}

/// Whether `input` is the pinned GGUF the llama.cpp goldens belong to (its SHA-256).
///
/// # Errors
/// [`LlmError::Io`] when the file cannot be read.
pub fn is_pinned(input: &Input) -> Result<bool, LlmError> {
    match input {
        Input::HfDir(_) => Ok(false),
        Input::Gguf(p) => {
            let bytes = std::fs::read(p).map_err(|source| LlmError::Io {
                path: p.clone(),
                op: "reading",
                source,
            })?;
            Ok(tether_family::recipe::sha256_hex(&bytes) == crate::selftest::PINNED_GGUF_SHA256)
        }
    }
}

/// Open `input` in canonical form and lay out the bundle; the result is checked by reading
/// it back (in memory) as a load would.
///
/// `progress` receives a short message before each long step.
///
/// # Errors
/// Every error of [`Checkpoint::from_gguf`] / [`Checkpoint::from_hf_dir`] (bad file,
/// unsupported architecture or hyper-parameter, tensor shape or type, tokenizer/embedding
/// mismatch, invalid UTF-8 in the template), [`LlmError::Bundle`], and any error of reading
/// the result back.
pub fn build(
    input: &Input,
    options: &BuildOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<(BundleWriter, BuildReport), LlmError> {
    progress("reading the checkpoint");
    let ckpt = match input {
        Input::Gguf(p) => Checkpoint::from_gguf(p)?,
        Input::HfDir(p) => Checkpoint::from_hf_dir(p)?,
    };
    let model_version = options
        .model_version
        .clone()
        .unwrap_or_else(|| match input {
            Input::Gguf(p) | Input::HfDir(p) => p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
        });
    progress("laying out the bundle");
    let writer = writer_of(
        &ckpt,
        IdentityDesc {
            name: options.name.clone(),
            family: crate::FAMILY.into(),
            model_version,
            tool_version: concat!("tether-llm ", env!("CARGO_PKG_VERSION")).into(),
            created_unix_s: options.created_unix_s,
        },
    )?;
    progress("checking the bundle as a load reads it");
    let mut writer = writer;
    let back = verify_bytes(writer.to_bytes()?)?;
    check_template(&back)?;
    let description = back.describe();
    let tensors = back.weights.len();
    let self_test = if options.self_test {
        progress("running the self-test on this CPU");
        let pinned = is_pinned(input)?;
        let context = (back.config.n_ctx_train as usize).min(SELF_TEST_CONTEXT);
        let mut g = Generator::from_checkpoint(
            back,
            &GeneratorOptions {
                context: Some(context),
                ..GeneratorOptions::default()
            },
        )
        .map_err(generate_error)?;
        let (payload, report) =
            crate::selftest::for_recipe(pinned, &mut g).map_err(generate_error)?;
        drop(g);
        payload.add_to(&mut writer, crate::FAMILY)?;
        Some(report)
    } else {
        None
    };
    let report = BuildReport {
        description,
        tensors,
        self_test,
    };
    Ok((writer, report))
}

/// A chat template must render a one-message chat with the message in it: one that raises,
/// fails or drops the message would fail (or silently empty) every chat the bundle is asked,
/// so the build refuses it while the checkpoint can still be fixed. No template: fine (raw
/// prompts only).
///
/// # Errors
/// [`LlmError::Template`] naming what the template did.
fn check_template(ckpt: &Checkpoint) -> Result<(), LlmError> {
    let Some(t) = ckpt.compiled_chat_template()? else {
        return Ok(());
    };
    const PROBE: &str = "Hello there";
    let text = t
        .render(&[crate::template::ChatMessage::new("user", PROBE)], true)
        .map_err(|e| {
            let why = match e {
                LlmError::Template(m) => m,
                other => other.to_string(),
            };
            LlmError::Template(format!(
                "the checkpoint's template does not render a one-message chat ({why}): every chat would fail; fix the checkpoint's chat template (GGUF `tokenizer.chat_template`, or `chat_template.jinja`)"
            ))
        })?;
    if !text.contains(PROBE) {
        return Err(LlmError::Template(format!(
            "the checkpoint's template renders a one-message chat without the message ({} bytes out): every prompt would be dropped; fix the checkpoint's chat template",
            text.len()
        )));
    }
    Ok(())
}

/// Context of the generator the build-time self-test runs on (the reference needs 59
/// positions; a host payload at most its prompt plus as many tokens).
const SELF_TEST_CONTEXT: usize = 1024;

/// A generator error as the recipe's: the front end's as it is, the rest (a prompt longer
/// than the context, the thread pool) as [`LlmError::SelfTestRun`] naming it.
fn generate_error(e: GenerateError) -> LlmError {
    match e {
        GenerateError::Checkpoint(e) => e,
        other => LlmError::SelfTestRun(other.to_string()),
    }
}

/// Read bundle bytes back as a load would (every section CRC-checked, everything
/// validated).
///
/// # Errors
/// As [`Checkpoint::from_bundle`].
pub fn verify_bytes(bytes: Vec<u8>) -> Result<Checkpoint, LlmError> {
    Checkpoint::from_bundle(Arc::new(Bundle::from_vec(bytes, Verify::Eager)?))
}

/// The bundle of a checkpoint (checked first with [`Checkpoint::check`]).
///
/// # Errors
/// The errors of [`Checkpoint::check`]; [`LlmError::Bundle`] from the writer;
/// [`LlmError::Tokenizer`] if the tokenizer cannot be serialised.
pub fn writer_of(ckpt: &Checkpoint, identity: IdentityDesc) -> Result<BundleWriter, LlmError> {
    ckpt.check()?;
    let mut w = BundleWriter::new(identity);
    w.add_section(
        SectionKind::FamilyConfig,
        CONFIG_SECTION,
        None,
        ckpt.config.to_record().as_bytes().to_vec(),
    )?;
    w.add_section(
        SectionKind::FamilyConfig,
        GENERATION_SECTION,
        None,
        GenerationRecord::of(&ckpt.generation).as_bytes().to_vec(),
    )?;
    w.add_section(
        SectionKind::Tokenizer,
        TOKENIZER_SECTION,
        None,
        ckpt.tokenizer.to_json()?.into_bytes(),
    )?;
    if let Some(t) = &ckpt.chat_template {
        w.add_section(
            SectionKind::Tokenizer,
            CHAT_TEMPLATE_SECTION,
            None,
            t.as_bytes().to_vec(),
        )?;
    }
    let tensors = ckpt.weights.all()?;
    let first_tensor_section = 4 + u32::from(ckpt.chat_template.is_some());
    let mut index = TensorIndexHeader {
        version: U32::new(INDEX_VERSION),
        count: U32::new(tensors.len() as u32),
    }
    .as_bytes()
    .to_vec();
    for (i, t) in tensors.iter().enumerate() {
        let mut ne = [U64::new(1); 4];
        for (d, &v) in ne.iter_mut().zip(t.dims) {
            *d = U64::new(v);
        }
        index.extend_from_slice(
            TensorIndexRecord {
                section: U32::new(first_tensor_section + i as u32),
                ggml_type: U32::new(t.ty.ggml_id()),
                n_dims: U32::new(t.dims.len() as u32),
                reserved: U32::new(0),
                ne,
            }
            .as_bytes(),
        );
    }
    w.add_section(SectionKind::FamilyConfig, TENSORS_SECTION, None, index)?;
    for t in &tensors {
        let s = w.add_section(
            SectionKind::Blob,
            &format!("{TENSOR_PREFIX}{}", t.name),
            None,
            t.data.to_vec(),
        )?;
        debug_assert!(s >= first_tensor_section);
    }
    Ok(w)
}
