//! Text generation: a generator handle over an `llm` bundle (or a GGUF file, a Hugging Face
//! directory), pieces streamed to a C callback, cancel from any thread.

use std::cell::UnsafeCell;
use std::ffi::{CStr, c_char, c_void};

use tether_llm::generate::{
    CancelHandle, FinishReason, GenerateError, GenerateParams, Generator, GeneratorOptions, Prompt,
};
use tether_llm::gguf::GgufError;
use tether_llm::safetensors::SafetensorsError;
use tether_llm::{ChatMessage, LlmError};

use crate::error::{Failure, Result, guard, non_null, tether_status};

/// Why a generation ended (`tether_generate_result::finish_reason`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_finish_reason {
    /// An end-of-generation token.
    TETHER_FINISH_STOP = 0,
    /// `max_tokens` generated, or the context is full.
    TETHER_FINISH_LENGTH = 1,
    /// Cancelled: the callback returned nonzero, or `tether_generator_cancel`.
    TETHER_FINISH_CANCELLED = 2,
}

/// Options of `tether_generator_open`; fill with `tether_generator_options_init`. Later
/// versions only append fields (`struct_size`, as `tether_options`).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_generator_options {
    /// `sizeof(tether_generator_options)` as the caller compiled it.
    pub struct_size: u32,
    /// KV-cache positions; 0: the model's training context.
    pub context: u32,
    /// Threads of the forward pass; 0: the CPUs this process may use. At most 1024
    /// (`TETHER_ERR_INVALID_ARGUMENT` above), lowered to the cores this process may run on
    /// (logged).
    pub threads: u32,
}

/// Parameters of one request; fill with `tether_generate_params_init` (the model's
/// recommended sampling over llama.cpp's defaults, as `tether run` does), then change fields.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct tether_generate_params {
    /// `sizeof(tether_generate_params)` as the caller compiled it.
    pub struct_size: u32,
    /// Most tokens to generate (at least 1).
    pub max_tokens: u32,
    /// Softmax temperature; 0 or below: greedy decoding; otherwise at least 1e-6 (a smaller
    /// one would overflow the scaled logits: refused).
    pub temperature: f32,
    /// Top-k (0: off).
    pub top_k: u32,
    /// Nucleus mass in (0, 1] (1: off).
    pub top_p: f32,
    /// Min-p in [0, 1) (0: off).
    pub min_p: f32,
    /// Repetition penalty, 1e-6 to 1e6 (1: none).
    pub repeat_penalty: f32,
    /// Tokens the repetition penalty looks back over.
    pub repeat_last_n: u32,
    /// Seed of the sampler (the same seed, prompt and parameters give the same text).
    pub seed: u64,
    /// Nonzero: tokenise the prompt as it is; zero: send it as the user message of a chat in
    /// the model's template (as `tether run --prompt` does).
    pub raw: u32,
}

/// What a generation produced besides its pieces.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct tether_generate_result {
    /// A `tether_finish_reason` value.
    pub finish_reason: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens generated (the end-of-generation token included).
    pub generated_tokens: u32,
    /// Prompt processing, milliseconds.
    pub prompt_ms: f64,
    /// From the request's start to the first generated token, milliseconds.
    pub time_to_first_token_ms: f64,
    /// From the first generated token to the last, milliseconds.
    pub generation_ms: f64,
}

/// Receives each piece of a generation, in order: `text` (`size` bytes of UTF-8, not
/// NUL-terminated, possibly empty: part of a character, a control token, text held back as
/// a possible stop) is valid during the call only; `token` is the token id, or -1 for the
/// final flush of held-back text. Return 0 to continue, nonzero to stop the generation
/// (it ends as `TETHER_FINISH_CANCELLED`). Called on the thread that called
/// `tether_generate`; it must not unwind (throw a C++ exception, longjmp) into the library
/// and must not call `tether_generate` on the same generator.
pub type tether_piece_fn = Option<
    unsafe extern "C" fn(user: *mut c_void, text: *const c_char, size: usize, token: i32) -> i32,
>;

/// A text generator (an `llm` bundle, a GGUF file or a Hugging Face directory, on the CPU).
/// Opaque; `tether_generator_open`, `tether_generator_close`. Used by one thread at a time,
/// except `tether_generator_cancel`, which any thread may call at any time while the handle
/// is open.
pub struct tether_generator {
    /// Used only through `&mut` by the one thread in a call (never while `cancel` is read
    /// concurrently through a reference to the whole struct).
    inner: UnsafeCell<Generator>,
    cancel: CancelHandle,
}

const _: () = {
    const fn send<T: Send>() {}
    send::<Generator>();
};

fn status_of(e: &GenerateError) -> tether_status {
    match e {
        GenerateError::Checkpoint(
            LlmError::Io { .. }
            | LlmError::Gguf(GgufError::Io { .. } | GgufError::File(_))
            | LlmError::Safetensors(SafetensorsError::Io { .. }),
        ) => tether_status::TETHER_ERR_IO,
        GenerateError::Checkpoint(LlmError::Bundle(b)) => Failure::from_ref(b),
        GenerateError::Checkpoint(_) => tether_status::TETHER_ERR_BUNDLE,
        GenerateError::Threads { .. } => tether_status::TETHER_ERR_RUNTIME,
        _ => tether_status::TETHER_ERR_INVALID_ARGUMENT,
    }
}

impl From<GenerateError> for Failure {
    fn from(e: GenerateError) -> Self {
        Failure::new(status_of(&e), e.to_string())
    }
}

/// Read a versioned struct: the caller's first `struct_size` bytes over `default`.
///
/// # Safety
/// `p` is null or points to at least its first field's `struct_size` readable bytes.
unsafe fn read_versioned<T: Copy>(p: *const T, default: T, name: &str) -> Result<T> {
    if p.is_null() {
        return Ok(default);
    }
    // SAFETY: every versioned struct starts with a u32 `struct_size` (contract).
    let size = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    let ours = std::mem::size_of::<T>();
    if size < ours {
        return Err(Failure::invalid(format!(
            "{name}::struct_size is {size}; version 1 is {ours} bytes (call its _init function)"
        )));
    }
    if size > ours {
        // A newer header's struct: its extra fields would be ignored silently.
        return Err(Failure::invalid(format!(
            "{name}::struct_size is {size}, larger than this library's {ours} bytes (a newer header than the library; link the library the header came from)"
        )));
    }
    // SAFETY: at least `ours` readable bytes (checked); the fields we know are a prefix.
    Ok(unsafe { p.read_unaligned() })
}

fn default_options() -> tether_generator_options {
    tether_generator_options {
        struct_size: std::mem::size_of::<tether_generator_options>() as u32,
        context: 0,
        threads: 0,
    }
}

/// Fill `options` with the defaults (the model's context, every CPU) and `struct_size`.
///
/// # Safety
/// `options` is null or points to a writable `tether_generator_options`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generator_options_init(
    options: *mut tether_generator_options,
) -> tether_status {
    guard(|| {
        non_null(options, "options")?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { options.write(default_options()) };
        Ok(())
    })
}

/// Open a generator on `path`: an `llm` bundle (weights memory-mapped), a GGUF file or a
/// Hugging Face checkpoint directory; `options` null for the defaults. On success `*out`
/// receives a handle owned by the caller (`tether_generator_close`); on failure null, and
/// the last error names the path and the problem (`TETHER_ERR_IO`, `TETHER_ERR_BUNDLE`,
/// `TETHER_ERR_WRONG_FAMILY` for a bundle of another family, `TETHER_ERR_INVALID_ARGUMENT`).
///
/// # Safety
/// `path` is null or NUL-terminated; `options` null or a `tether_generator_options` of at
/// least its `struct_size` bytes; `out` null or a writable `tether_generator*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generator_open(
    path: *const c_char,
    options: *const tether_generator_options,
    out: *mut *mut tether_generator,
) -> tether_status {
    guard(|| {
        non_null(out, "out")?;
        // SAFETY: writable (contract; checked non-null).
        unsafe { out.write(std::ptr::null_mut()) };
        non_null(path, "path")?;
        // SAFETY: forwarded contract.
        let o = unsafe { read_versioned(options, default_options(), "tether_generator_options") }?;
        // SAFETY: NUL-terminated (contract; checked non-null).
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes),
        );
        // A bundle of another family: say so (the generator's own error is about a section).
        // A GGUF file or a directory is not a bundle and goes on to the generator.
        if let Ok(b) = tether_bundle::Bundle::open(path, tether_bundle::Verify::Lazy) {
            let id = b.identity();
            if id.family != tether_llm::FAMILY {
                return Err(Failure::new(
                    tether_status::TETHER_ERR_WRONG_FAMILY,
                    format!(
                        "loading {}: `tether_generator_open` needs an `llm` bundle; this is the `{}` bundle `{}` (open it with `tether_model_open`)",
                        path.display(),
                        id.family,
                        id.name
                    ),
                ));
            }
        }
        let opts = GeneratorOptions {
            context: (o.context > 0).then_some(o.context as usize),
            threads: crate::options::thread_count("tether_generator_options::threads", o.threads)?,
            ..GeneratorOptions::default()
        };
        let generator = Generator::open(path, &opts)
            .map_err(|e| Failure::from(e).context(&format!("loading {}", path.display())))?;
        let cancel = generator.cancel_handle();
        let g = Box::new(tether_generator {
            inner: UnsafeCell::new(generator),
            cancel,
        });
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(g)) };
        Ok(())
    })
}

/// Release a generator. Null does nothing.
///
/// # Safety
/// `generator` is null or an open handle no thread is using (no `tether_generate` running,
/// no `tether_generator_cancel` racing with the close).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generator_close(generator: *mut tether_generator) {
    // SAFETY: the contract above is `close_handle`'s.
    unsafe { crate::error::close_handle(generator) }
}

/// Ask the generation running on `generator` (on another thread) to stop before its next
/// token; it then returns `TETHER_ERR_CANCELLED`. Any thread, any time while the handle is
/// open; a no-op when nothing runs (the next `tether_generate` starts uncancelled).
///
/// # Safety
/// `generator` is null or an open handle.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generator_cancel(
    generator: *const tether_generator,
) -> tether_status {
    guard(|| {
        non_null(generator, "generator")?;
        // SAFETY: an open handle (contract); only the `cancel` field is read, through a
        // shared reference to it alone (the running call holds `&mut` to `inner` only).
        let cancel = unsafe { &(*generator).cancel };
        cancel.cancel();
        Ok(())
    })
}

/// The C record of request parameters.
fn params_record(p: &GenerateParams, raw: bool) -> tether_generate_params {
    let s = &p.sampler;
    tether_generate_params {
        struct_size: std::mem::size_of::<tether_generate_params>() as u32,
        max_tokens: u32::try_from(p.max_tokens).unwrap_or(u32::MAX),
        temperature: s.temperature,
        top_k: u32::try_from(s.top_k).unwrap_or(u32::MAX),
        top_p: s.top_p,
        min_p: s.min_p,
        repeat_penalty: s.repeat_penalty,
        repeat_last_n: u32::try_from(s.repeat_last_n).unwrap_or(u32::MAX),
        seed: s.seed,
        raw: u32::from(raw),
    }
}

/// Fill `params` with the request defaults of `generator`'s model: llama.cpp's sampling
/// defaults with the checkpoint's recommendations (`generation_config.json`) over them, as
/// `tether run` does; `raw` 0.
///
/// # Safety
/// `generator` is null or an open handle used by no other thread; `params` null or
/// writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generate_params_init(
    generator: *mut tether_generator,
    params: *mut tether_generate_params,
) -> tether_status {
    guard(|| {
        non_null(generator, "generator")?;
        non_null(params, "params")?;
        // SAFETY: an open handle used by this thread only (contract).
        let g = unsafe { &*(*generator).inner.get() };
        let p = GenerateParams::with_defaults(g.generation_defaults());
        // SAFETY: writable (contract; checked non-null).
        unsafe { params.write(params_record(&p, false)) };
        Ok(())
    })
}

/// Generate from `prompt` (`prompt_size` bytes of UTF-8), streaming each piece to
/// `on_piece` (may be null: pieces dropped), then fill `*result` (may be null).
///
/// Returns `TETHER_OK` when the generation ended by itself (`TETHER_FINISH_STOP` or
/// `_LENGTH`), `TETHER_ERR_CANCELLED` when the callback returned nonzero or
/// `tether_generator_cancel` was called (`*result` is filled either way);
/// `TETHER_ERR_INVALID_ARGUMENT` for a prompt that is not UTF-8, empty or white space only
/// (raw or chat, as `tether run` refuses it), or longer than the context (never cut), or
/// parameters out of range (the message names the field).
///
/// # Safety
/// `generator` is an open handle used by no other thread (but `tether_generator_cancel`);
/// `prompt` points to `prompt_size` readable bytes; `params` is null (defaults) or a
/// `tether_generate_params` of at least its `struct_size` bytes; `result` is null or
/// writable; `on_piece` follows `tether_piece_fn`'s rules; `user` is passed to it as is.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_generate(
    generator: *mut tether_generator,
    prompt: *const u8,
    prompt_size: usize,
    params: *const tether_generate_params,
    on_piece: tether_piece_fn,
    user: *mut c_void,
    result: *mut tether_generate_result,
) -> tether_status {
    guard(|| {
        non_null(generator, "generator")?;
        non_null(prompt, "prompt")?;
        // SAFETY: an open handle used by this thread only (but for `cancel`, a separate
        // field): `&mut` to the generator alone.
        let g = unsafe { &mut *(*generator).inner.get() };
        // SAFETY: `prompt_size` readable bytes (contract; checked non-null).
        let bytes = unsafe { std::slice::from_raw_parts(prompt, prompt_size) };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Failure::invalid(format!(
                "prompt is not UTF-8: invalid byte at offset {}",
                e.valid_up_to()
            ))
        })?;
        // As `tether run` refuses an empty or blank prompt (raw or chat): the chat template
        // would otherwise wrap nothing into a request the model answers anyway.
        if text.trim().is_empty() {
            return Err(Failure::invalid(format!(
                "the prompt is empty or white space only ({prompt_size} bytes)"
            )));
        }
        let mut gp = GenerateParams::with_defaults(g.generation_defaults());
        let defaults = params_record(&gp, false);
        // SAFETY: forwarded contract (null: the defaults).
        let p = unsafe { read_versioned(params, defaults, "tether_generate_params") }?;
        if p.max_tokens == 0 {
            return Err(Failure::invalid("tether_generate_params::max_tokens is 0"));
        }
        gp.max_tokens = p.max_tokens as usize;
        gp.sampler.temperature = p.temperature;
        gp.sampler.top_k = p.top_k as usize;
        gp.sampler.top_p = p.top_p;
        gp.sampler.min_p = p.min_p;
        gp.sampler.repeat_penalty = p.repeat_penalty;
        gp.sampler.repeat_last_n = p.repeat_last_n as usize;
        gp.sampler.seed = p.seed;
        let raw = p.raw != 0;
        let messages;
        let prompt = if raw {
            Prompt::Text(text)
        } else {
            messages = [ChatMessage {
                role: "user".into(),
                content: text.into(),
            }];
            Prompt::Chat(&messages)
        };
        let mut run = g.generate(prompt, &gp)?;
        // SAFETY: the `cancel` field alone, shared (other threads may read it too).
        let cancel = unsafe { &(*generator).cancel };
        while let Some(piece) = run.next_piece()? {
            if let Some(f) = on_piece {
                let token = piece
                    .token
                    .map_or(-1, |t| i32::try_from(t).unwrap_or(i32::MAX));
                // SAFETY: the caller's callback with its own `user`; `text` valid for the call.
                let stop = unsafe { f(user, piece.text.as_ptr().cast(), piece.text.len(), token) };
                if stop != 0 {
                    cancel.cancel();
                }
            }
        }
        let f = run.finish();
        let cancelled = f.finish_reason == FinishReason::Cancelled;
        if !result.is_null() {
            let t = &f.timings;
            // SAFETY: writable (contract; checked non-null).
            unsafe {
                result.write(tether_generate_result {
                    finish_reason: match f.finish_reason {
                        FinishReason::Stop => tether_finish_reason::TETHER_FINISH_STOP,
                        FinishReason::Length => tether_finish_reason::TETHER_FINISH_LENGTH,
                        FinishReason::Cancelled => tether_finish_reason::TETHER_FINISH_CANCELLED,
                    } as u32,
                    prompt_tokens: u32::try_from(t.prompt_tokens).unwrap_or(u32::MAX),
                    generated_tokens: u32::try_from(t.generated_tokens).unwrap_or(u32::MAX),
                    prompt_ms: t.prompt_ms,
                    time_to_first_token_ms: t.time_to_first_token_ms,
                    generation_ms: t.generation_ms,
                });
            }
        }
        if cancelled {
            return Err(Failure::new(
                tether_status::TETHER_ERR_CANCELLED,
                format!(
                    "generation cancelled after {} tokens",
                    f.timings.generated_tokens
                ),
            ));
        }
        Ok(())
    })
}
