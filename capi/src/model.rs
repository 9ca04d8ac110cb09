//! The model handle: a family pipeline opened from a bundle.

use std::ffi::{CStr, CString, c_char};
use std::sync::Arc;

use tether_bundle::{Bundle, Verify};
use tether_detect::{Detector, DetectorOptions};
use tether_embed::{Embedder, EmbedderOptions};
use tether_ocr::{Ocr, OcrOptions};
use tether_vad::{Vad, VadOptions};

use crate::error::{Failure, Result, guard, non_null, tether_status};
use crate::options::{self, tether_options};

/// The family of a model (`tether_model_family`).
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_family {
    /// YOLOv8 object detection: `tether_detect*`.
    TETHER_FAMILY_DETECT = 1,
    /// Silero voice activity: `tether_vad_*`.
    TETHER_FAMILY_VAD = 2,
    /// Sentence embeddings (all-MiniLM-L6-v2): `tether_embed*`.
    TETHER_FAMILY_EMBED = 3,
    /// Text recognition (PP-OCR: detection, orientation, recognition): `tether_ocr`.
    TETHER_FAMILY_OCR = 4,
}

/// A family pipeline opened from a bundle: a detector, a text reader, a voice-activity
/// stream or an embedder (`tether_model_family` says which). Opaque; created by `tether_model_open` or
/// `tether_model_open_memory`, destroyed by `tether_model_close`.
///
/// Thread safety: a handle may be used from any thread, but by one thread at a time (calls
/// on one handle must not overlap; the library does not lock). Different handles are
/// independent and may be used concurrently, each from its own thread.
pub struct tether_model {
    pub(crate) family: Family,
    /// The bundle's name (its identity), for messages.
    pub(crate) bundle_name: String,
    /// Set when a panic was caught in a call on this handle: its state is unknown.
    pub(crate) poisoned: bool,
}

pub(crate) enum Family {
    Detect(Box<crate::detect::DetectModel>),
    Vad(Box<crate::vad::VadModel>),
    Embed(Box<Embedder>),
    Ocr(Box<Ocr>),
}

impl Family {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Family::Detect(_) => tether_detect::FAMILY,
            Family::Vad(_) => tether_vad::FAMILY,
            Family::Embed(_) => tether_embed::FAMILY,
            Family::Ocr(_) => tether_ocr::FAMILY,
        }
    }
}

// The handle is documented as movable between threads (one user at a time).
const _: () = {
    const fn send<T: Send>() {}
    send::<Detector>();
    send::<Vad>();
    send::<Embedder>();
    send::<Ocr>();
};

impl crate::error::Handle for tether_model {
    fn poisoned(&mut self) -> &mut bool {
        &mut self.poisoned
    }
    fn describe(&self) -> String {
        format!("model `{}`", self.bundle_name)
    }
}

/// Run `f` on the model behind `model` as an entry point's body (null and poisoned handles
/// refused; a panic inside poisons the handle).
pub(crate) fn with_model(
    model: *mut tether_model,
    f: impl FnOnce(&mut tether_model) -> Result<()>,
) -> tether_status {
    crate::error::with_handle(model, "model", f)
}

/// The family's error when a call needs `want` and the handle is another family.
/// The error of a call that needs a `want` model on a handle of family `family`.
pub(crate) fn wrong_family(family: &Family, bundle: &str, call: &str, want: &str) -> Failure {
    Failure::new(
        tether_status::TETHER_ERR_WRONG_FAMILY,
        format!(
            "`{call}` needs a `{want}` model; this handle holds the `{}` bundle `{bundle}`",
            family.name()
        ),
    )
}

fn open_bundle(bundle: Bundle, options: *const tether_options) -> Result<tether_model> {
    // SAFETY: forwarded caller contract (null or a readable options struct).
    let o = unsafe { options::read(options) }?;
    let bundle = Arc::new(bundle);
    let id = bundle.identity();
    let (family, bundle_name) = (id.family.to_string(), id.name.to_string());
    let family = match family.as_str() {
        tether_detect::FAMILY => {
            let opts = DetectorOptions {
                device: o.device,
                verify_eagerly: o.verify_eagerly,
                model: o.model,
                ..DetectorOptions::default()
            };
            let detector = Detector::from_bundle(bundle, &opts)?;
            Family::Detect(Box::new(crate::detect::DetectModel::new(detector)?))
        }
        tether_vad::FAMILY => {
            let opts = VadOptions {
                device: o.device,
                model: o.model,
                config: None,
                verify_eagerly: o.verify_eagerly,
            };
            Family::Vad(Box::new(crate::vad::VadModel {
                vad: Vad::from_bundle(bundle, &opts)?,
                pending: 0,
            }))
        }
        tether_embed::FAMILY => {
            let opts = EmbedderOptions {
                device: o.device,
                model: o.model,
                verify_eagerly: o.verify_eagerly,
                ..EmbedderOptions::default()
            };
            Family::Embed(Box::new(Embedder::from_bundle(bundle, &opts)?))
        }
        tether_ocr::FAMILY => {
            let opts = OcrOptions {
                device: o.device,
                model: o.model,
                verify_eagerly: o.verify_eagerly,
                ..OcrOptions::default()
            };
            Family::Ocr(Box::new(Ocr::from_bundle(bundle, &opts)?))
        }
        other => {
            return Err(Failure::new(
                tether_status::TETHER_ERR_UNSUPPORTED,
                format!(
                    "bundle `{bundle_name}` is a `{other}` bundle; the C API opens `detect`, `ocr`, `vad` and `embed` bundles (`llm`: `tether_generator_open`)"
                ),
            ));
        }
    };
    Ok(tether_model {
        family,
        bundle_name,
        poisoned: false,
    })
}

fn verify_of(options: *const tether_options) -> Result<Verify> {
    // SAFETY: forwarded caller contract.
    let o = unsafe { options::read(options) }?;
    Ok(if o.verify_eagerly {
        Verify::Eager
    } else {
        Verify::Lazy
    })
}

/// Open the bundle at `path` (memory-mapped) and prepare its family's pipeline on the
/// device `options` asks for (null: defaults, see `tether_options_init`).
///
/// On success `*out` receives a new handle, owned by the caller, to be released with
/// `tether_model_close`. On failure `*out` is set to null and the last error names the
/// path (or the bundle) and what is wrong: `TETHER_ERR_IO` (missing, unreadable, not a
/// regular file), `TETHER_ERR_BUNDLE` (corrupt, truncated, inconsistent content),
/// `TETHER_ERR_UNSUPPORTED` (a family this API does not run), `TETHER_ERR_RUNTIME` (no
/// engine can run it on the device), `TETHER_ERR_INVALID_ARGUMENT` (null `path` or
/// `out`, bad options).
///
/// The bundle file must not be rewritten in place while the handle is open (replace it by
/// renaming a new file over it).
///
/// # Safety
/// `path` is null or a NUL-terminated file path (bytes as the OS takes them); `options`
/// is null or points to a `tether_options` of at least its `struct_size` bytes; `out` is
/// null or points to a writable `tether_model*`. Nothing passed is kept after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_model_open(
    path: *const c_char,
    options: *const tether_options,
    out: *mut *mut tether_model,
) -> tether_status {
    guard(|| {
        non_null(out, "out")?;
        // SAFETY: `out` is writable (contract; checked non-null).
        unsafe { out.write(std::ptr::null_mut()) };
        non_null(path, "path")?;
        // SAFETY: `path` is a NUL-terminated string (contract; checked non-null).
        let bytes = unsafe { CStr::from_ptr(path) }.to_bytes();
        let path = std::path::Path::new(
            <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(bytes),
        );
        let verify = verify_of(options)?;
        // The CLI's words: `loading PATH: <the error>`.
        let model = Bundle::open(path, verify)
            .map_err(Failure::from)
            .and_then(|b| open_bundle(b, options))
            .map_err(|e| e.context(&format!("loading {}", path.display())))?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(model))) };
        Ok(())
    })
}

/// As `tether_model_open`, from the `size` bytes of a bundle at `data` (a bundle file's
/// content). The bytes are copied during the call: the caller may free or reuse `data` as
/// soon as it returns. `TETHER_ERR_BUNDLE` for bytes that are not a valid bundle.
///
/// # Safety
/// `data` is null or points to `size` readable bytes; `options` and `out` as for
/// `tether_model_open`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_model_open_memory(
    data: *const u8,
    size: usize,
    options: *const tether_options,
    out: *mut *mut tether_model,
) -> tether_status {
    guard(|| {
        non_null(out, "out")?;
        // SAFETY: `out` is writable (contract; checked non-null).
        unsafe { out.write(std::ptr::null_mut()) };
        non_null(data, "data")?;
        // SAFETY: `data` holds `size` readable bytes (contract; checked non-null).
        let bytes = unsafe { std::slice::from_raw_parts(data, size) }.to_vec();
        let verify = verify_of(options)?;
        let model = Bundle::from_vec(bytes, verify)
            .map_err(Failure::from)
            .and_then(|b| open_bundle(b, options))
            .map_err(|e| e.context(&format!("loading a bundle from memory ({size} bytes)")))?;
        // SAFETY: as above.
        unsafe { out.write(Box::into_raw(Box::new(model))) };
        Ok(())
    })
}

/// Release a model and everything it holds (device memory, the bundle mapping). Null is
/// accepted and does nothing. Every pointer the library handed out for this model (class
/// names, the staging buffer) becomes invalid.
///
/// # Safety
/// `model` is null or a handle from `tether_model_open*` not closed before, and no other
/// thread is using it.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_model_close(model: *mut tether_model) {
    // SAFETY: the contract above is `close_handle`'s.
    unsafe { crate::error::close_handle(model) }
}

/// The family of `model` into `*family` (a `tether_family` value).
///
/// # Safety
/// `model` is null or a live handle; `family` is null or points to a writable `uint32_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_model_family(
    model: *const tether_model,
    family: *mut u32,
) -> tether_status {
    with_model(model.cast_mut(), |m| {
        non_null(family, "family")?;
        let f = match m.family {
            Family::Detect(_) => tether_family::TETHER_FAMILY_DETECT,
            Family::Vad(_) => tether_family::TETHER_FAMILY_VAD,
            Family::Embed(_) => tether_family::TETHER_FAMILY_EMBED,
            Family::Ocr(_) => tether_family::TETHER_FAMILY_OCR,
        };
        // SAFETY: writable (contract; checked non-null).
        unsafe { family.write(f as u32) };
        Ok(())
    })
}

/// The engine running `model`'s network into `*engine`: `"tensorrt"`, `"cuda-native"`,
/// `"tract-cuda"` or `"tract-cpu"` (the identifiers `tether run --json` reports under
/// `engines`; for an `ocr` model, its text detector's); a static string owned by the
/// library.
///
/// # Safety
/// `model` is null or a live handle used by no other thread during the call; `engine` is
/// null or points to a writable `const char*`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_model_engine(
    model: *const tether_model,
    engine: *mut *const c_char,
) -> tether_status {
    with_model(model.cast_mut(), |m| {
        non_null(engine, "engine")?;
        let kind = match &m.family {
            Family::Detect(d) => d.engine(),
            Family::Vad(v) => v.vad.engine(),
            Family::Embed(e) => e.engine(),
            // The text detector's (`det`): the first stage; each network's engine is chosen
            // at open, `tether run --json` lists all three.
            Family::Ocr(o) => o.engines().next().map(|(_, e)| e).ok_or_else(|| {
                Failure::new(
                    tether_status::TETHER_ERR_BUNDLE,
                    "ocr model without networks",
                )
            })?,
        };
        let name = engine_name(kind);
        // SAFETY: writable (contract; checked non-null).
        unsafe { engine.write(name.as_ptr()) };
        Ok(())
    })
}

/// A NUL-terminated copy of a Rust string (for names handed to C once, at open).
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{fffd}")).unwrap_or_default()
}

/// The identifier of an engine as `tether run --json` names it (a static C string).
pub(crate) fn engine_name(kind: tether_runtime::EngineKind) -> &'static CStr {
    use tether_runtime::EngineKind;
    match kind {
        EngineKind::TensorRt => c"tensorrt",
        EngineKind::CudaNative => c"cuda-native",
        EngineKind::TractCuda => c"tract-cuda",
        EngineKind::TractCpu => c"tract-cpu",
    }
}
