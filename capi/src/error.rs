//! Status codes, the thread-local last-error message, and the guard every entry point runs
//! its body in (panics caught, errors turned into a status and a message).

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// What every function returns. `TETHER_OK` (0) is success; on any other value the calling
/// thread's last-error message ([`tether_last_error`]) says what failed, naming the thing
/// and the values seen (the Rust error's own text).
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum tether_status {
    /// Success.
    TETHER_OK = 0,
    /// A null pointer where one is required, a size or value out of range, an image view
    /// that does not fit its buffer, text that is not UTF-8, a NaN or infinite audio
    /// sample, an options struct of an unknown size.
    TETHER_ERR_INVALID_ARGUMENT = 1,
    /// An operating-system call failed (opening or mapping a file: missing, unreadable, not
    /// a regular file).
    TETHER_ERR_IO = 2,
    /// The bundle is corrupt, truncated, of an unsupported format version, or its content
    /// does not match its family (configuration, labels, network I/O).
    TETHER_ERR_BUNDLE = 3,
    /// The call needs another family than the handle's (e.g. `tether_detect` on a `vad`
    /// model).
    TETHER_ERR_WRONG_FAMILY = 4,
    /// A caller-provided array is too small; the call's count output says how many
    /// elements were needed.
    TETHER_ERR_CAPACITY = 5,
    /// The operation was cancelled by the caller.
    TETHER_ERR_CANCELLED = 6,
    /// A Rust panic was caught at the boundary (a bug in tether: please report it with
    /// the message). The handle the call was given is poisoned: every later call on it
    /// returns this status; close it.
    TETHER_ERR_PANIC = 7,
    /// The engine or device failed: no engine can run the bundle on this device, the
    /// device is unavailable, a run failed.
    TETHER_ERR_RUNTIME = 8,
    /// The handle is not in the state the call needs (the staging buffer asked for before
    /// a frame geometry was prepared).
    TETHER_ERR_STATE = 9,
    /// The bundle's family is not one `tether_model_open` runs (an `llm` bundle, which
    /// `tether_generator_open` opens, or a family this library does not know), a tensor's dtype
    /// cannot be set or read through it, or the operation needs a device the handle does not
    /// run on (device buffers or a CUDA stream of a network on the CPU).
    TETHER_ERR_UNSUPPORTED = 10,
}

/// A failed call: its status and the message stored as the thread's last error.
#[derive(Debug)]
pub(crate) struct Failure {
    pub(crate) status: tether_status,
    pub(crate) message: String,
}

impl Failure {
    pub(crate) fn new(status: tether_status, message: impl Into<String>) -> Self {
        Failure {
            status,
            message: message.into(),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Self::new(tether_status::TETHER_ERR_INVALID_ARGUMENT, message)
    }

    /// The same failure with `what: ` before its message.
    pub(crate) fn context(self, what: &str) -> Self {
        Failure {
            status: self.status,
            message: format!("{what}: {}", self.message),
        }
    }

    /// A caller array of `capacity` elements where `needed` were needed.
    pub(crate) fn capacity(what: &str, capacity: usize, needed: usize) -> Self {
        Self::new(
            tether_status::TETHER_ERR_CAPACITY,
            format!("{what}: the array holds {capacity}, {needed} needed"),
        )
    }
}

pub(crate) type Result<T> = std::result::Result<T, Failure>;

/// `Err(INVALID_ARGUMENT)` naming `name` when `p` is null.
pub(crate) fn non_null<T>(p: *const T, name: &str) -> Result<()> {
    if p.is_null() {
        Err(Failure::invalid(format!("`{name}` is null")))
    } else {
        Ok(())
    }
}

/// A handle that a caught panic makes unusable (its state is unknown after it).
pub(crate) trait Handle {
    /// The poisoned flag.
    fn poisoned(&mut self) -> &mut bool;
    /// What the handle is, for messages: "model `320n`".
    fn describe(&self) -> String;
}

/// Run `f` on the handle behind `h` as an entry point's body: a null handle (named `name`)
/// and a poisoned one are refused; a panic inside `f` poisons the handle.
pub(crate) fn with_handle<H: Handle>(
    h: *mut H,
    name: &str,
    f: impl FnOnce(&mut H) -> Result<()>,
) -> tether_status {
    let mut panicked = true;
    let status = guard(|| {
        non_null(h, name)?;
        // SAFETY: a non-null handle comes from its `_open` function and is not used by
        // another thread during the call (documented contract).
        let handle = unsafe { &mut *h };
        if *handle.poisoned() {
            panicked = false;
            return Err(Failure::new(
                tether_status::TETHER_ERR_PANIC,
                format!(
                    "{} is unusable: an earlier call on it panicked; close it",
                    handle.describe()
                ),
            ));
        }
        let r = f(handle);
        panicked = false;
        r
    });
    if panicked && status == tether_status::TETHER_ERR_PANIC && !h.is_null() {
        // SAFETY: as above; the panic unwound out of `f`, the handle is still allocated.
        unsafe { *(*h).poisoned() = true };
    }
    status
}

/// Release a handle from its `_open` function as its `_close` entry point does: null does
/// nothing; a panic in a destructor is caught (it cannot cross the boundary).
///
/// # Safety
/// `h` is null or a handle from `Box::into_raw` not released before, used by no other thread.
pub(crate) unsafe fn close_handle<H>(h: *mut H) {
    if h.is_null() {
        return;
    }
    let _ = guard(|| {
        // SAFETY: an open handle from `Box::into_raw` (contract), released once.
        drop(unsafe { Box::from_raw(h) });
        Ok(())
    });
}

thread_local! {
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

fn set_last_error(message: &str) {
    // Interior NULs cannot be in a C string; an error text never has one, but a path
    // could in principle carry one through a lossy conversion.
    let text = CString::new(message.replace('\0', "\u{fffd}")).unwrap_or_default();
    LAST_ERROR.with(|e| *e.borrow_mut() = Some(text));
}

/// Run `f` as an entry point's body: `Ok` is `TETHER_OK`; an `Err` stores its message as
/// the thread's last error and returns its status; a panic is caught, stored (with its
/// message) and returned as `TETHER_ERR_PANIC`. Nothing allocates on the `Ok` path.
pub(crate) fn guard(f: impl FnOnce() -> Result<()>) -> tether_status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => tether_status::TETHER_OK,
        Ok(Err(e)) => {
            set_last_error(&e.message);
            e.status
        }
        Err(payload) => {
            set_last_error(&format!(
                "internal error: a Rust panic was caught at the C boundary: {}",
                panic_text(payload.as_ref())
            ));
            tether_status::TETHER_ERR_PANIC
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> &str {
    if let Some(s) = payload.downcast_ref::<&str>() {
        s
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s
    } else {
        "(no message)"
    }
}

/// The calling thread's last error message, NUL-terminated UTF-8; `""` when no call on
/// this thread has failed yet. Successful calls leave it unchanged.
///
/// Ownership: the string belongs to the library. The pointer stays valid until the next
/// call into tether on the same thread that fails (which replaces the message), or the
/// thread's exit; copy it (or use [`tether_last_error_copy`]) to keep it longer. Never
/// free it.
#[unsafe(no_mangle)]
pub extern "C" fn tether_last_error() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR.with(|e| match &*e.borrow() {
            Some(s) => s.as_ptr(),
            None => c"".as_ptr(),
        })
    })
    .unwrap_or(c"".as_ptr())
}

/// Copy the calling thread's last error message ([`tether_last_error`]) into `buffer`,
/// NUL-terminated. `*needed` (when `needed` is not null) receives the message's length
/// in bytes plus one for the NUL.
///
/// Returns `TETHER_ERR_CAPACITY` when `capacity` < `*needed` (the first `capacity - 1`
/// bytes and a NUL are written when `capacity` > 0; the cut may split a UTF-8 sequence),
/// `TETHER_ERR_INVALID_ARGUMENT` when `buffer` is null and `capacity` > 0. This call does
/// not replace the last error when it fails itself.
///
/// # Safety
/// `buffer` points to `capacity` writable bytes (or is null with `capacity` 0); `needed`
/// is null or points to a writable `size_t`. Nothing is kept after the call.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn tether_last_error_copy(
    buffer: *mut c_char,
    capacity: usize,
    needed: *mut usize,
) -> tether_status {
    let r = catch_unwind(AssertUnwindSafe(|| {
        LAST_ERROR.with(|e| {
            let e = e.borrow();
            let bytes = e.as_ref().map_or(&[][..], |s| s.as_bytes());
            let need = bytes.len() + 1;
            if !needed.is_null() {
                // SAFETY: the caller passes a writable `size_t` or null (checked).
                unsafe { needed.write(need) };
            }
            if capacity == 0 {
                return tether_status::TETHER_ERR_CAPACITY;
            }
            if buffer.is_null() {
                return tether_status::TETHER_ERR_INVALID_ARGUMENT;
            }
            let n = bytes.len().min(capacity - 1);
            // SAFETY: `buffer` holds `capacity` >= n + 1 writable bytes (caller contract);
            // `bytes` is a distinct Rust allocation.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), buffer.cast::<u8>(), n);
                buffer.add(n).write(0);
            }
            if n < bytes.len() {
                tether_status::TETHER_ERR_CAPACITY
            } else {
                tether_status::TETHER_OK
            }
        })
    }));
    r.unwrap_or(tether_status::TETHER_ERR_PANIC)
}

/// A short name of `status` (`"TETHER_ERR_IO"`), a static NUL-terminated string owned by
/// the library; `"TETHER_ERR_UNKNOWN"` for a value that is no status.
#[unsafe(no_mangle)]
pub extern "C" fn tether_status_name(status: i32) -> *const c_char {
    use tether_status::*;
    let name = match status {
        s if s == TETHER_OK as i32 => c"TETHER_OK",
        s if s == TETHER_ERR_INVALID_ARGUMENT as i32 => c"TETHER_ERR_INVALID_ARGUMENT",
        s if s == TETHER_ERR_IO as i32 => c"TETHER_ERR_IO",
        s if s == TETHER_ERR_BUNDLE as i32 => c"TETHER_ERR_BUNDLE",
        s if s == TETHER_ERR_WRONG_FAMILY as i32 => c"TETHER_ERR_WRONG_FAMILY",
        s if s == TETHER_ERR_CAPACITY as i32 => c"TETHER_ERR_CAPACITY",
        s if s == TETHER_ERR_CANCELLED as i32 => c"TETHER_ERR_CANCELLED",
        s if s == TETHER_ERR_PANIC as i32 => c"TETHER_ERR_PANIC",
        s if s == TETHER_ERR_RUNTIME as i32 => c"TETHER_ERR_RUNTIME",
        s if s == TETHER_ERR_STATE as i32 => c"TETHER_ERR_STATE",
        s if s == TETHER_ERR_UNSUPPORTED as i32 => c"TETHER_ERR_UNSUPPORTED",
        _ => c"TETHER_ERR_UNKNOWN",
    };
    name.as_ptr()
}

// ------------------------------------------------------------------ Rust errors -> status

impl From<tether_bundle::BundleError> for Failure {
    fn from(e: tether_bundle::BundleError) -> Self {
        Failure::new(Failure::from_ref(&e), e.to_string())
    }
}

/// The status of a runtime error: a bundle fault inside it is the bundle's.
pub(crate) fn runtime_status(e: &tether_runtime::Error) -> tether_status {
    use tether_runtime::Error as E;
    match e {
        E::Bundle(b) => Failure::from_ref(b),
        E::NoEnginePrepared {
            damaged: Some(_), ..
        } => tether_status::TETHER_ERR_BUNDLE,
        _ => tether_status::TETHER_ERR_RUNTIME,
    }
}

impl Failure {
    /// The status of a bundle error (I/O or the bundle's content).
    pub(crate) fn from_ref(e: &tether_bundle::BundleError) -> tether_status {
        use tether_bundle::BundleError as B;
        match e {
            B::Io { .. } | B::File(_) => tether_status::TETHER_ERR_IO,
            _ => tether_status::TETHER_ERR_BUNDLE,
        }
    }
}

/// The status of an error every family's API shares (`tether_family::model::ModelError`).
pub(crate) fn model_status(e: &::tether_family::model::ModelError) -> tether_status {
    use ::tether_family::model::ModelError as M;
    match e {
        M::Bundle(b) => Failure::from_ref(b),
        M::Runtime(r) => runtime_status(r),
        M::WrongFamily { .. } => tether_status::TETHER_ERR_WRONG_FAMILY,
        M::Run(_) | M::View(_) => tether_status::TETHER_ERR_RUNTIME,
    }
}

impl From<tether_detect::DetectError> for Failure {
    fn from(e: tether_detect::DetectError) -> Self {
        use tether_detect::DetectError as D;
        let status = match &e {
            D::Bundle(b) => Failure::from_ref(b),
            D::Runtime(r) => runtime_status(r),
            D::WrongFamily { .. } => tether_status::TETHER_ERR_WRONG_FAMILY,
            D::Frame(f) => frame_status(f),
            D::Config { .. } | D::Labels(_) | D::Network(_) | D::SelfTest(_) => {
                tether_status::TETHER_ERR_BUNDLE
            }
            _ => tether_status::TETHER_ERR_RUNTIME,
        };
        Failure::new(status, e.to_string())
    }
}

fn frame_status(e: &tether_detect::FrameError) -> tether_status {
    use tether_detect::FrameError as F;
    match e {
        F::Image(_) | F::Geometry { .. } => tether_status::TETHER_ERR_INVALID_ARGUMENT,
        F::NotPrepared => tether_status::TETHER_ERR_STATE,
        _ => tether_status::TETHER_ERR_RUNTIME,
    }
}

impl From<tether_detect::FrameError> for Failure {
    fn from(e: tether_detect::FrameError) -> Self {
        Failure::new(frame_status(&e), e.to_string())
    }
}

impl From<tether_vad::VadError> for Failure {
    fn from(e: tether_vad::VadError) -> Self {
        use tether_vad::VadError as V;
        let status = match &e {
            V::Model(m) => model_status(m),
            V::Config { .. } | V::Network(_) | V::SelfTest(_) => tether_status::TETHER_ERR_BUNDLE,
            V::ChunkLength { .. } | V::NonFiniteSample { .. } => {
                tether_status::TETHER_ERR_INVALID_ARGUMENT
            }
            V::PartialChunkPending { .. } => tether_status::TETHER_ERR_STATE,
            _ => tether_status::TETHER_ERR_RUNTIME,
        };
        Failure::new(status, e.to_string())
    }
}

impl From<tether_embed::EmbedError> for Failure {
    fn from(e: tether_embed::EmbedError) -> Self {
        use tether_embed::EmbedError as E;
        let status = match &e {
            E::Model(m) => model_status(m),
            E::Config { .. } | E::Network(_) | E::SelfTest(_) => tether_status::TETHER_ERR_BUNDLE,
            E::Tokenizer(_) | E::BatchSize { .. } => tether_status::TETHER_ERR_INVALID_ARGUMENT,
            _ => tether_status::TETHER_ERR_RUNTIME,
        };
        Failure::new(status, e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn last() -> String {
        // SAFETY: `tether_last_error` returns a valid NUL-terminated string.
        unsafe { CStr::from_ptr(tether_last_error()) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn a_panic_becomes_a_status_and_a_message() {
        let prev = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let s = guard(|| panic!("the test's panic {}", 42));
        std::panic::set_hook(prev);
        assert_eq!(s, tether_status::TETHER_ERR_PANIC);
        assert!(last().contains("the test's panic 42"), "{}", last());
    }

    #[test]
    fn errors_set_the_message_and_success_keeps_it() {
        let s = guard(|| Err(Failure::invalid("`thing` is null")));
        assert_eq!(s, tether_status::TETHER_ERR_INVALID_ARGUMENT);
        assert_eq!(last(), "`thing` is null");
        assert_eq!(guard(|| Ok(())), tether_status::TETHER_OK);
        assert_eq!(last(), "`thing` is null");
    }

    #[test]
    fn copy_reports_the_size_needed() {
        let _ = guard(|| Err(Failure::invalid("abcdef")));
        let mut need = 0usize;
        let mut buf = [1 as c_char; 4];
        // SAFETY: `buf` holds 4 bytes, `need` is a valid usize.
        let s = unsafe { tether_last_error_copy(buf.as_mut_ptr(), buf.len(), &mut need) };
        assert_eq!(s, tether_status::TETHER_ERR_CAPACITY);
        assert_eq!(need, 7);
        assert_eq!(buf.map(|c| c as u8), *b"abc\0");
        let mut big = [1 as c_char; 7];
        // SAFETY: as above.
        let s = unsafe { tether_last_error_copy(big.as_mut_ptr(), big.len(), &mut need) };
        assert_eq!(s, tether_status::TETHER_OK);
        assert_eq!(big.map(|c| c as u8), *b"abcdef\0");
    }

    struct Fake {
        poisoned: bool,
        calls: u32,
    }

    impl Handle for Fake {
        fn poisoned(&mut self) -> &mut bool {
            &mut self.poisoned
        }
        fn describe(&self) -> String {
            "fake `f`".into()
        }
    }

    #[test]
    fn a_panic_poisons_the_handle() {
        let mut h = Fake {
            poisoned: false,
            calls: 0,
        };
        let p: *mut Fake = &mut h;
        let ok = with_handle(p, "fake", |f| {
            f.calls += 1;
            Ok(())
        });
        assert_eq!(ok, tether_status::TETHER_OK);
        let s = with_handle(p, "fake", |_| panic!("boom"));
        assert_eq!(s, tether_status::TETHER_ERR_PANIC);
        let s = with_handle(p, "fake", |f| {
            f.calls += 1;
            Ok(())
        });
        assert_eq!(s, tether_status::TETHER_ERR_PANIC);
        assert_eq!(
            last(),
            "fake `f` is unusable: an earlier call on it panicked; close it"
        );
        assert_eq!((h.calls, h.poisoned), (1, true), "the poisoned call ran");
        let s = with_handle(std::ptr::null_mut::<Fake>(), "fake", |_| Ok(()));
        assert_eq!(s, tether_status::TETHER_ERR_INVALID_ARGUMENT);
        assert_eq!(last(), "`fake` is null");
    }

    #[test]
    fn every_status_has_its_name() {
        for (s, n) in [
            (tether_status::TETHER_OK, "TETHER_OK"),
            (tether_status::TETHER_ERR_CAPACITY, "TETHER_ERR_CAPACITY"),
            (
                tether_status::TETHER_ERR_UNSUPPORTED,
                "TETHER_ERR_UNSUPPORTED",
            ),
        ] {
            // SAFETY: static NUL-terminated strings.
            let got = unsafe { CStr::from_ptr(tether_status_name(s as i32)) };
            assert_eq!(got.to_str().unwrap(), n);
        }
        // SAFETY: as above.
        let got = unsafe { CStr::from_ptr(tether_status_name(-5)) };
        assert_eq!(got.to_str().unwrap(), "TETHER_ERR_UNKNOWN");
    }
}
