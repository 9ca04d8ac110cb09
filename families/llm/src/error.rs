//! Errors of the LLM family's front end: checkpoints, hyper-parameters, tensors, tokenizer,
//! chat template, bundle sections. Every variant names the thing and the value seen.
//!
//! The readers have their own enums ([`crate::gguf::GgufError`],
//! [`crate::safetensors::SafetensorsError`]) wrapped here.

use std::path::PathBuf;

use crate::quant::TensorType;

/// An error of the LLM family's front end.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A GGUF file is malformed or uses something this build does not read.
    #[error(transparent)]
    Gguf(#[from] crate::gguf::GgufError),
    /// A safetensors file (or its sharded index) is malformed.
    #[error(transparent)]
    Safetensors(#[from] crate::safetensors::SafetensorsError),
    /// The bundle could not be read or written. (Its own words, and the bundle error as the
    /// source, so that a tool walking the error chain finds it: `tether`'s hints do.)
    #[error("{0}")]
    Bundle(#[from] tether_bundle::BundleError),
    /// A file of a checkpoint could not be read.
    #[error("{op} `{path}`: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`reading`, `mapping`, ...).
        op: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
    /// A JSON file of a Hugging Face directory is malformed or lacks a field.
    #[error("`{file}`: {message}")]
    Json {
        /// The file (`config.json`, `tokenizer_config.json`, ...).
        file: String,
        /// What is wrong, with the value seen.
        message: String,
    },
    /// The checkpoint's architecture is not one this family implements.
    #[error(
        "architecture `{arch}` is not supported (supported: the Llama, Qwen2 and Qwen3 decoder definitions)"
    )]
    UnsupportedArchitecture {
        /// The name the checkpoint gives (`general.architecture`, `model_type`).
        arch: String,
    },
    /// A hyper-parameter is missing, out of range, or outside what the kernels handle.
    #[error("hyper-parameter `{field}`: {value}")]
    Config {
        /// The field (`head_dim`, `rope.scaling.type`, ...).
        field: &'static str,
        /// The value seen and the accepted range.
        value: String,
    },
    /// A tensor the architecture needs is absent.
    #[error("tensor `{name}` is missing")]
    MissingTensor {
        /// Canonical (GGUF) tensor name.
        name: String,
    },
    /// A tensor no supported architecture defines (its meaning would be silently ignored).
    #[error("tensor `{name}` is not part of the supported architectures")]
    UnexpectedTensor {
        /// The tensor's name in the checkpoint.
        name: String,
    },
    /// A tensor's dimensions disagree with the hyper-parameters.
    #[error("tensor `{name}`: dimensions (ggml ne order) {found:?}, expected {expected:?}")]
    TensorShape {
        /// Canonical tensor name.
        name: String,
        /// Expected `ne` (innermost first).
        expected: Vec<u64>,
        /// Stored `ne`.
        found: Vec<u64>,
    },
    /// A tensor's element type is not accepted where it is used (a norm weight quantised...).
    #[error("tensor `{name}` is {ty:?}; expected one of {allowed}")]
    TensorType {
        /// Canonical tensor name.
        name: String,
        /// Its type.
        ty: TensorType,
        /// The accepted types.
        allowed: &'static str,
    },
    /// The tokenizer could not be built, loaded or run.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A token id the tokenizer can produce has no embedding row.
    #[error(
        "tokenizer id {id} (`{token}`) is beyond the embedding's {n_vocab} rows: tokenizer and model do not match"
    )]
    VocabMismatch {
        /// The largest id.
        id: u32,
        /// Its text.
        token: String,
        /// Rows of `token_embd.weight`.
        n_vocab: u32,
    },
    /// The chat template could not be parsed or rendered.
    #[error("chat template: {0}")]
    Template(String),
    /// A section of an `llm` bundle is malformed.
    #[error("section `{section}`: {message}")]
    Section {
        /// Section name.
        section: String,
        /// What is wrong, with the value seen.
        message: String,
    },
    /// The self-test section is unreadable or lacks an entry ([`crate::selftest`]).
    #[error(transparent)]
    SelfTest(#[from] tether_family::selftest::SelfTestError),
    /// The build-time self-test could not run on the build host's CPU engine (a context
    /// too small for its chat, the thread pool): the message names the generator's error.
    #[error("the build's self-test could not run on this CPU: {0}")]
    SelfTestRun(String),
    /// The pinned model's greedy tokens differ from llama.cpp's at build time: the build
    /// host's CPU engine does not reproduce the reference (the bundle is not written).
    #[error("the CPU engine does not reproduce llama.cpp's greedy tokens: {0}")]
    ReferenceMismatch(Box<tether_family::selftest::Report>),
}

impl LlmError {
    /// A [`LlmError::Config`] error.
    pub fn config(field: &'static str, value: impl Into<String>) -> LlmError {
        LlmError::Config {
            field,
            value: value.into(),
        }
    }

    /// A [`LlmError::Json`] error.
    pub fn json(file: impl Into<String>, message: impl Into<String>) -> LlmError {
        LlmError::Json {
            file: file.into(),
            message: message.into(),
        }
    }

    /// A [`LlmError::Section`] error.
    pub fn section(section: impl Into<String>, message: impl Into<String>) -> LlmError {
        LlmError::Section {
            section: section.into(),
            message: message.into(),
        }
    }
}
