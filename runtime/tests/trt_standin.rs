//! tether's TensorRT layer against the TensorRT **stand-in** library, which is NOT TensorRT.
//!
//! No TensorRT builder exists for the GPU host, so no real plan can be made. The stand-in
//! (`runtime/trt-standin/`) is a `libnvinfer.so.11` that this test compiles with g++ from
//! the official TensorRT 11.4 headers: its objects are C++ classes deriving from the
//! official `apiv` interfaces, returned as the public `[vptr][mImpl]` objects, and its
//! `enqueueV3` launches real CUDA kernels on the given stream (y = a*x + b through the
//! workspace). Running tether's own layer against it proves **tether's side** of the calls
//! (slots, argument and result passing, `Dims64` by pointer and by hidden result pointer,
//! object ownership and destruction, the Rust-built logger and error recorder reached from
//! C++, the compatibility gate, binding, stream handling, capture), never TensorRT's
//! behaviour.
//!
//! - CPU tests (always run; CI): build the stand-in, then load, version, flavour, runtime,
//!   gate, deserialize, I/O tensors, context (`kUSER_MANAGED`, shapes), device-memory
//!   sizes, binding (the addresses the stand-in received are read back through its extra
//!   export `tether_standin_report`), refusals with the stand-in's messages, destruction.
//! - GPU tests (`#[ignore]`: they report themselves ignored without a GPU; run with
//!   `--ignored` on the GPU host, feature `cuda`): eager enqueue and read-back, capture into
//!   a CUDA graph, replay on a poisoned output, the workspace header the kernels write;
//!   through the low-level layer, through the model API and its device session (the same
//!   path as every engine), and an executor re-bound before capture.
//!
//! The stand-in is built with `runtime/trt-standin/build.sh` against the 11.4.0 headers that
//! `runtime/trt-probe/fetch-headers.sh` caches in `.assets/trt-headers/`; g++ and those
//! headers are required (the test fails without them). `TETHER_TRT_STANDIN_DIR=<dir>` uses
//! an already built `libnvinfer.so.11` / `libnvinfer_lean.so.11` instead (the GPU host has
//! no compiler).

use std::collections::BTreeMap;
use std::ffi::c_char;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, OnceLock};

use tether_runtime::tensorrt::{
    DataType, DeserializeOptions, DeviceMemory, EnqueueError, HardwareCompatibility, PlanTarget,
    TensorBinding, TensorIoMode, TensorLocation, TensorRt, TrtError, logger_message_counts,
};
use tether_targets::{
    FLAG_VERSION_COMPATIBLE as TARGET_FLAG_VERSION_COMPATIBLE, GpuFacts, LibraryFlavor, Sm,
    TrtVersion,
};

// ---------------------------------------------------------------------------------------
// Building and loading the stand-in.

/// Paths of the two stand-in flavours.
struct Standin {
    dir: PathBuf,
    standard: PathBuf,
    lean: PathBuf,
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ has a parent")
        .to_path_buf()
}

fn run(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Builds the stand-in once per process (or takes `TETHER_TRT_STANDIN_DIR`).
fn standin() -> &'static Standin {
    static BUILT: OnceLock<Standin> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = match std::env::var_os("TETHER_TRT_STANDIN_DIR") {
            Some(d) => PathBuf::from(d),
            None => {
                let root = repo_root();
                let headers = root.join(".assets/trt-headers");
                run(
                    Command::new("bash")
                        .arg(root.join("runtime/trt-probe/fetch-headers.sh"))
                        .arg(&headers),
                    "runtime/trt-probe/fetch-headers.sh (TensorRT headers from crates.io)",
                );
                let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trt-standin");
                let mut build = Command::new("bash");
                build
                    .arg(root.join("runtime/trt-standin/build.sh"))
                    .arg(&out)
                    .arg(headers.join("11.4.0"));
                // Cross-compiled tests (run under an emulator) load a library built for the
                // target: TETHER_TEST_CXX names its C++ compiler (e.g. aarch64-linux-gnu-g++).
                if let Some(cxx) = std::env::var_os("TETHER_TEST_CXX") {
                    build.env("CXX", cxx);
                }
                run(&mut build, "runtime/trt-standin/build.sh (needs g++)");
                out
            }
        };
        let s = Standin {
            standard: dir.join("libnvinfer.so.11"),
            lean: dir.join("libnvinfer_lean.so.11"),
            dir,
        };
        for p in [&s.standard, &s.lean] {
            assert!(p.is_file(), "stand-in library {} missing", p.display());
        }
        s
    })
}

/// The stand-in's state, read through its test export `tether_standin_report` (the library
/// tether loaded: dlopen of the same path returns the same instance).
fn report(lib: &Path) -> BTreeMap<String, String> {
    type ReportFn = unsafe extern "C" fn(*mut c_char, usize) -> usize;
    // SAFETY: the stand-in built above; loading it again only takes a reference on the
    // instance tether already loaded (its initialisers ran then).
    let l = unsafe { libloading::Library::new(lib) }.expect("stand-in loads");
    // SAFETY: `tether_standin_report` is `size_t(char*, size_t) noexcept` (standin.cpp).
    let f: ReportFn = *unsafe { l.get::<ReportFn>(b"tether_standin_report\0") }
        .expect("the stand-in exports tether_standin_report");
    let mut buf = vec![0u8; 16 * 1024];
    // SAFETY: `buf` is writable for its length; the function writes at most that many bytes.
    let n = unsafe { f(buf.as_mut_ptr().cast::<c_char>(), buf.len()) };
    assert!(n < buf.len(), "report of {n} bytes does not fit");
    String::from_utf8_lossy(&buf[..n])
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.to_string()))
        })
        .collect()
}

fn get<'a>(r: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    r.get(key)
        .unwrap_or_else(|| panic!("stand-in report has no `{key}`: {r:#?}"))
}

fn hex(r: &BTreeMap<String, String>, key: &str) -> u64 {
    let v = get(r, key);
    u64::from_str_radix(v.trim_start_matches("0x"), 16)
        .unwrap_or_else(|e| panic!("`{key}` = {v}: {e}"))
}

fn alive(lib: &Path) -> (usize, usize, usize) {
    let r = report(lib);
    let n = |k: &str| get(&r, k).parse::<usize>().unwrap();
    (n("runtimes.alive"), n("engines.alive"), n("contexts.alive"))
}

/// The stand-in's state is per process: tests touching it run one at a time.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// What TensorRT (here: the stand-in) sent to tether's logger, as the `log` facade saw it.
struct Capture;
static CAPTURED: Mutex<Vec<String>> = Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target() == "tensorrt"
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target() == "tensorrt" {
            let mut c = CAPTURED.lock().unwrap_or_else(|e| e.into_inner());
            if c.len() < 4096 {
                c.push(format!("[{}] {}", r.level(), r.args()));
            }
        }
    }
    fn flush(&self) {}
}

fn capture_logs() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        if log::set_logger(&Capture).is_ok() {
            log::set_max_level(log::LevelFilter::Trace);
        }
    });
}

fn captured_containing(needle: &str) -> Vec<String> {
    CAPTURED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|m| m.contains(needle))
        .cloned()
        .collect()
}

// ---------------------------------------------------------------------------------------
// Stand-in plans (the stand-in's own text format, see standin.cpp: NOT TensorRT plans).

const LIB_VERSION: u32 = 11_04_00;

#[derive(Clone, Copy)]
struct Plan {
    tensorrt: u32,
    version_compatible: bool,
    /// `-1` = dynamic in `[n_min, n_max]`.
    n: i64,
    n_min: i64,
    n_max: i64,
    a: f32,
    b: f32,
    workspace_extra: u64,
}

const AFFINE: Plan = Plan {
    tensorrt: LIB_VERSION,
    version_compatible: false,
    n: -1,
    n_min: 1,
    n_max: 4096,
    a: 1.7,
    b: -0.3,
    workspace_extra: 512,
};

impl Plan {
    fn bytes(&self) -> Vec<u8> {
        format!(
            "TSTANDIN 1\n\
             # tether TensorRT stand-in plan: NOT a TensorRT plan\n\
             name affine\ninput x\noutput y\ntensorrt {}\nversion_compatible {}\n\
             n {}\nn_min {}\nn_max {}\na {}\nb {}\nworkspace_extra {}\n",
            self.tensorrt,
            u8::from(self.version_compatible),
            self.n,
            self.n_min,
            self.n_max,
            self.a,
            self.b,
            self.workspace_extra
        )
        .into_bytes()
    }

    /// The stand-in's device-memory rule: 256-byte header, the intermediate rounded up to
    /// 256 bytes, the extra bytes.
    fn device_memory(&self, n: u64) -> u64 {
        256 + (n * 4).div_ceil(256) * 256 + self.workspace_extra
    }

    /// The standard-runtime record of a plan built by `tensorrt` on an sm_90 GPU.
    fn target(&self) -> PlanTarget {
        PlanTarget {
            tensorrt_version: self.tensorrt,
            sm: Some((9, 0)),
            hardware_compat: 0,
            flags: if self.version_compatible {
                TARGET_FLAG_VERSION_COMPATIBLE
            } else {
                0
            },
        }
    }
}

/// Addresses that are never dereferenced on the host (the stand-in only stores them until an
/// enqueue, which the CPU tests never reach with a driver present); 256-byte aligned.
const FAKE_WORKSPACE: u64 = 0x7f00_0000_0000;
const FAKE_X: u64 = 0x7f00_0010_0000;
const FAKE_Y: u64 = 0x7f00_0020_0000;

fn driver_present() -> bool {
    // SAFETY: only probes whether the NVIDIA driver library can be loaded (its initialisers
    // are the driver's own); it is dropped at once.
    unsafe { libloading::Library::new("libcuda.so.1") }.is_ok()
}

// ---------------------------------------------------------------------------------------
// CPU tests.

#[test]
fn standin_loads_as_tensorrt_11_4_in_both_flavours() {
    let _g = serial();
    let s = standin();
    let trt = TensorRt::load(Some(&s.dir)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(trt.version(), TrtVersion::new(11, 4, 0));
    assert_eq!(
        trt.build(),
        106,
        "getInferLibBuildVersion of the 11.4.0.106 headers"
    );
    assert_eq!(trt.flavor(), LibraryFlavor::Full);
    assert_eq!(
        trt.path(),
        s.standard.as_path(),
        "libnvinfer.so.11 is tried first"
    );
    let lean = TensorRt::load(Some(&s.lean)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(lean.flavor(), LibraryFlavor::Lean);
    assert_eq!(lean.version(), TrtVersion::new(11, 4, 0));
    for lib in [&s.standard, &s.lean] {
        let r = report(lib);
        assert!(get(&r, "identity").contains("NOT TensorRT"), "{r:?}");
        assert_eq!(get(&r, "version"), "110400");
    }
    assert_eq!(get(&report(&s.lean), "flavor"), "lean");
    println!(
        "stand-in (NOT TensorRT) loaded through tether's layer: {} {} from {}; lean from {}",
        trt.version(),
        trt.build(),
        trt.path().display(),
        lean.path().display()
    );
}

#[test]
fn standin_runs_tethers_calls_up_to_the_enqueue_without_a_gpu() {
    let _g = serial();
    capture_logs();
    let s = standin();
    let lib = &s.standard;
    assert_eq!(alive(lib), (0, 0, 0), "nothing left over from other tests");
    let trt = TensorRt::load(Some(&s.dir)).unwrap();

    // Runtime: the stand-in checks tether's logger (getInterfaceInfo, slot 1) and error
    // recorder (getInterfaceInfo, getAPILanguage) the way TensorRT's headers declare them,
    // logs through `log` (slot 4) and takes a reference on the recorder (incRefCount).
    let warnings_before = logger_message_counts()[2];
    let runtime = trt.create_runtime().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alive(lib), (1, 0, 0));
    assert_eq!(runtime.error_recorder_references(), 1);
    assert!(logger_message_counts()[2] > warnings_before);
    let hello = captured_containing("runtime created");
    assert!(
        hello.iter().any(|m| m.starts_with("[WARN]")
            && m.contains("stand-in")
            && m.contains("NOT TensorRT")),
        "the stand-in's warning reached the log facade through tether's ILogger: {hello:?}"
    );
    let r = report(lib);
    assert_ne!(hex(&r, "runtime.error_recorder"), 0);

    // Deserialize through the gate (a plan "built by 11.4.0 on sm_90", device sm_90).
    let plan = AFFINE.bytes();
    let engine = runtime
        .deserialize(
            &plan,
            &AFFINE.target().record(),
            GpuFacts::discrete(Sm::new(9, 0)),
            &DeserializeOptions::default(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alive(lib), (1, 1, 0));
    assert_eq!(
        runtime.error_recorder_references(),
        2,
        "the engine holds the runtime's recorder"
    );
    assert_eq!(engine.name(), "affine");
    assert_eq!(engine.optimization_profiles(), 1);
    assert_eq!(engine.hardware_compatibility(), HardwareCompatibility::None);
    assert_eq!(engine.streamable_weights_size(), 0);
    assert_eq!(
        engine.device_memory_size(),
        AFFINE.device_memory(AFFINE.n_max as u64),
        "getDeviceMemorySizeV2 (int64) for the largest shape"
    );
    let io = engine.io_tensors();
    assert_eq!(io.len(), 2);
    let (x, y) = (&io[0], &io[1]);
    assert_eq!((x.name(), y.name()), ("x", "y"));
    assert_eq!(
        (x.mode, y.mode),
        (TensorIoMode::Input, TensorIoMode::Output)
    );
    assert_eq!(
        (x.data_type, y.data_type),
        (DataType::Float, DataType::Float)
    );
    assert_eq!(
        (x.location, y.location),
        (TensorLocation::Device, TensorLocation::Device)
    );
    assert_eq!(
        (x.shape.as_slice(), y.shape.as_slice()),
        (&[1, -1][..], &[1, -1][..]),
        "getTensorShape's Dims64 through the hidden result pointer"
    );
    assert!(!x.shape_inference_io && !y.shape_inference_io);
    assert_eq!(get(&report(lib), "engine.name"), "affine");

    // Context: kUSER_MANAGED, the input shape set (Dims64 by pointer), the output resolved.
    let n = 1000u64;
    let unbound = engine
        .create_execution_context(&[("x", &[1, n as i64])])
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(alive(lib), (1, 1, 1));
    assert_eq!(runtime.error_recorder_references(), 3);
    assert_eq!(unbound.tensor_shape("x"), Some(&[1, n as i64][..]));
    assert_eq!(unbound.tensor_shape("y"), Some(&[1, n as i64][..]));
    assert_eq!(unbound.tensor_bytes("y"), Some(n * 4));
    assert_eq!(
        unbound.device_memory_size(),
        AFFINE.device_memory(n),
        "updateDeviceMemorySizeForShapes (size_t) for n = {n}"
    );
    assert!(unbound.capture_blockers().is_empty());
    let r = report(lib);
    assert_eq!(get(&r, "context.strategy"), "2", "kUSER_MANAGED");
    assert_eq!(get(&r, "context.n"), n.to_string());
    assert_eq!(hex(&r, "context.device_memory"), 0, "nothing bound yet");

    // Bind: every address must reach the stand-in under the right name, and the workspace
    // with its size (int64).
    let memory = DeviceMemory {
        address: FAKE_WORKSPACE,
        size: unbound.device_memory_size() + 256,
    };
    let bindings = [
        TensorBinding {
            name: "y",
            address: FAKE_Y,
        },
        TensorBinding {
            name: "x",
            address: FAKE_X,
        },
    ];
    // SAFETY (test): the stand-in stores these addresses and dereferences them only on the
    // device at an enqueue; this test enqueues only where no CUDA driver exists, and the
    // stand-in fails that enqueue before touching any address.
    let mut ctx = unsafe { unbound.bind(memory, &bindings) }.unwrap_or_else(|e| panic!("{e}"));
    let r = report(lib);
    assert_eq!(hex(&r, "context.device_memory"), FAKE_WORKSPACE);
    assert_eq!(
        get(&r, "context.device_memory_size"),
        memory.size.to_string()
    );
    assert_eq!(hex(&r, "context.tensor.x"), FAKE_X);
    assert_eq!(hex(&r, "context.tensor.y"), FAKE_Y);
    assert_eq!(get(&r, "context.enqueue_calls"), "0");
    assert_eq!(ctx.device_memory(), memory);
    assert!(ctx.is_capture_safe());

    // Enqueue without a CUDA driver: the stand-in reaches enqueueV3 (slot 36), fails before
    // touching any address, and its reason reaches tether's error recorder.
    if driver_present() {
        println!(
            "a CUDA driver is present: the no-driver enqueue check runs on machines without one (CI); the GPU tests cover the enqueue here"
        );
    } else {
        // SAFETY (test): no CUDA driver exists, so the stand-in returns false before any
        // CUDA call; the null stream is never used.
        let e = unsafe { ctx.enqueue(std::ptr::null_mut()) }.unwrap_err();
        assert_eq!(e, EnqueueError::Failed);
        let errors = runtime.recorded_errors();
        assert!(
            errors.iter().any(|e| e.code == 7
                && e.description.contains("stand-in: enqueueV3")
                && e.description.contains("libcuda.so.1")),
            "kFAILED_EXECUTION with the stand-in's reason: {errors:?}"
        );
        let r = report(lib);
        assert_eq!(get(&r, "context.enqueue_calls"), "1");
        assert_eq!(get(&r, "context.kernel_launches"), "0");
        println!("enqueue without a CUDA driver -> {e}: {errors:?}");
    }

    // Destruction through the public objects' deleting destructors, in tether's order, and
    // the references on the recorder released with them.
    drop(ctx);
    assert_eq!(alive(lib), (1, 1, 0));
    assert_eq!(runtime.error_recorder_references(), 2);
    drop(engine);
    assert_eq!(alive(lib), (1, 0, 0));
    assert_eq!(runtime.error_recorder_references(), 1);
    drop(runtime);
    assert_eq!(alive(lib), (0, 0, 0));
}

#[test]
fn standin_refusals_reach_tether_with_the_standins_messages() {
    let _g = serial();
    let s = standin();
    let lib = &s.standard;
    let trt = TensorRt::load(Some(&s.standard)).unwrap();
    let runtime = trt.create_runtime().unwrap();
    let calls = |r: &BTreeMap<String, String>| get(r, "runtime.deserialize_calls").to_string();
    let messages = |e: &TrtError| match e {
        TrtError::Deserialize { messages, .. }
        | TrtError::InputShape { messages, .. }
        | TrtError::TensorAddress { messages, .. }
        | TrtError::ContextCreation { messages, .. } => messages.0.join(" | "),
        other => panic!("expected an error carrying TensorRT's messages, got {other:?}"),
    };

    // Bytes that are not a stand-in plan: refused by the stand-in, its message in the error.
    let e = runtime
        .deserialize_unchecked(b"ftrt\0\0\0\0 not a stand-in plan", false)
        .unwrap_err();
    assert!(
        messages(&e).contains("stand-in: deserializeCudaEngine: not a stand-in plan"),
        "{e}"
    );
    println!("foreign bytes -> {e}");

    // A plan "built by 11.3.0": the gate refuses from the record without calling the
    // library; without the gate the stand-in refuses it too.
    let old = Plan {
        tensorrt: 11_03_00,
        ..AFFINE
    };
    let before = calls(&report(lib));
    let e = runtime
        .deserialize(
            &old.bytes(),
            &old.target().record(),
            GpuFacts::discrete(Sm::new(9, 0)),
            &DeserializeOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e, TrtError::Incompatible(_)), "{e}");
    assert_eq!(
        calls(&report(lib)),
        before,
        "the gate ran before the library"
    );
    let e = runtime
        .deserialize_unchecked(&old.bytes(), false)
        .unwrap_err();
    assert!(messages(&e).contains("built by 110300"), "{e}");
    println!("11.3.0 plan -> gate: Incompatible; unchecked: {e}");

    let engine = runtime
        .deserialize_unchecked(&AFFINE.bytes(), false)
        .unwrap();

    // Shapes: the stand-in echoes the Dims64 it received, so a wrong rank or extent shows.
    let e = engine
        .create_execution_context(&[("x", &[1, 5000])])
        .unwrap_err();
    assert!(
        messages(&e).contains("n in [1, 4096], got [1, 5000] (nbDims 2)"),
        "{e}"
    );
    let e = engine
        .create_execution_context(&[("x", &[1000])])
        .unwrap_err();
    assert!(messages(&e).contains("got [1000] (nbDims 1)"), "{e}");
    let e = engine.create_execution_context(&[]).unwrap_err();
    assert!(
        matches!(&e, TrtError::ShapesIncomplete { name, shape } if name == "x" && shape == &[1, -1]),
        "allInputDimensionsSpecified / getTensorShape: {e}"
    );
    assert_eq!(alive(lib), (1, 1, 0), "refused contexts were destroyed");

    // Binding: a misaligned address is refused by the stand-in (TensorRT requires 256 bytes).
    let unbound = engine.create_execution_context(&[("x", &[1, 64])]).unwrap();
    let memory = DeviceMemory {
        address: FAKE_WORKSPACE,
        size: unbound.device_memory_size(),
    };
    let misaligned = [
        TensorBinding {
            name: "x",
            address: FAKE_X + 16,
        },
        TensorBinding {
            name: "y",
            address: FAKE_Y,
        },
    ];
    // SAFETY (test): the addresses are refused or stored, never dereferenced (no enqueue).
    let e = unsafe { unbound.bind(memory, &misaligned) }.unwrap_err();
    assert!(
        matches!(&e, TrtError::TensorAddress { name, address, .. } if name == "x" && *address == FAKE_X + 16),
        "{e}"
    );
    assert!(messages(&e).contains("not 256-byte aligned"), "{e}");
    println!("misaligned binding -> {e}");
    assert_eq!(alive(lib), (1, 1, 0));
    drop(engine);
    drop(runtime);
    assert_eq!(alive(lib), (0, 0, 0));
}

#[test]
fn lean_standin_takes_version_compatible_plans_with_host_code_allowed() {
    let _g = serial();
    let s = standin();
    let lib = &s.lean;
    let trt = TensorRt::load(Some(lib)).unwrap();
    assert_eq!(trt.flavor(), LibraryFlavor::Lean);
    let runtime = trt.create_runtime().unwrap();
    let opts = DeserializeOptions::default();

    // Not version-compatible: the gate refuses for the lean runtime; unchecked, the lean
    // stand-in refuses too.
    let e = runtime
        .deserialize(
            &AFFINE.bytes(),
            &AFFINE.target().record(),
            GpuFacts::discrete(Sm::new(9, 0)),
            &opts,
        )
        .unwrap_err();
    assert!(matches!(e, TrtError::Incompatible(_)), "{e}");
    let e = runtime
        .deserialize_unchecked(&AFFINE.bytes(), true)
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("lean runtime deserializes version-compatible plans only"),
        "{e}"
    );

    // Version-compatible, "built by 11.0.0": the gate requires host code, tether allows it
    // (setEngineHostCodeAllowed(true)), the stand-in sees it and accepts the plan.
    let vc = Plan {
        tensorrt: 11_00_00,
        version_compatible: true,
        ..AFFINE
    };
    let refused = runtime.deserialize(
        &vc.bytes(),
        &vc.target().record(),
        GpuFacts::discrete(Sm::new(9, 0)),
        &DeserializeOptions {
            allow_engine_host_code: false,
        },
    );
    assert!(matches!(refused, Err(TrtError::HostCodeNotAllowed)));
    let engine = runtime
        .deserialize(
            &vc.bytes(),
            &vc.target().record(),
            GpuFacts::discrete(Sm::new(9, 0)),
            &opts,
        )
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(get(&report(lib), "runtime.host_code_allowed"), "1");
    drop(engine);

    // Without host code allowed (tether reads the flag back and clears it), the stand-in
    // refuses the same plan.
    let e = runtime
        .deserialize_unchecked(&vc.bytes(), false)
        .unwrap_err();
    assert_eq!(get(&report(lib), "runtime.host_code_allowed"), "0");
    assert!(
        e.to_string()
            .contains("setEngineHostCodeAllowed(true) was not called"),
        "{e}"
    );
    drop(runtime);
    assert_eq!(alive(lib), (0, 0, 0));
}

// ---------------------------------------------------------------------------------------
// GPU tests (feature `cuda`; ignored without `--ignored`).

#[cfg(feature = "tensorrt")]
mod gpu {
    use super::*;
    use std::ffi::c_void;
    use tether_bundle::Bundle;
    use tether_runtime::cuda::{
        ArenaPlan, Context, CudaError, DeviceArena, DevicePtr, Graph, Stream, SyncPolicy,
        skip_reason,
    };

    /// Workspace header the stand-in's first kernel writes (kernels.cu).
    const MAGIC: u32 = 0x4454_5354;
    const NAN_BITS: u32 = 0x7fc0_dead;

    fn require_gpu() -> (Context, Stream) {
        if let Some(why) = skip_reason() {
            panic!("this test needs a CUDA GPU (it is #[ignore]d for machines without one): {why}");
        }
        let ctx = Context::new(0, SyncPolicy::Spin).unwrap();
        let stream = Stream::new(&ctx, SyncPolicy::Spin).unwrap();
        (ctx, stream)
    }

    fn sm(ctx: &Context) -> (u8, u8) {
        let (major, minor) = ctx.properties().compute_capability;
        (major as u8, minor as u8)
    }

    fn inputs(n: usize, seed: u32) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                (s % 20_001) as f32 / 1000.0 - 10.0
            })
            .collect()
    }

    /// The plan's op in f32, two roundings (what the kernels compute, see kernels.cu).
    fn expected(p: &Plan, x: &[f32]) -> Vec<u32> {
        x.iter().map(|&v| ((p.a * v) + p.b).to_bits()).collect()
    }

    fn upload(s: &Stream, dst: DevicePtr, v: &[f32]) {
        // SAFETY: `dst` holds at least `v.len()` f32 (regions sized for n); synchronised.
        unsafe { s.memcpy_htod(dst, v.as_ptr().cast::<u8>(), v.len() * 4) }.unwrap();
        s.synchronize().unwrap();
    }

    fn download(s: &Stream, src: DevicePtr, n: usize) -> Vec<u32> {
        let mut v = vec![0u32; n];
        // SAFETY: `src` holds at least n u32; synchronised right after.
        unsafe { s.memcpy_dtoh(v.as_mut_ptr().cast::<u8>(), src, n * 4) }.unwrap();
        s.synchronize().unwrap();
        v
    }

    fn poison(s: &Stream, p: DevicePtr, n: usize) {
        // SAFETY: `p` holds at least n u32.
        unsafe { s.memset_u32(p, NAN_BITS, n) }.unwrap();
        s.synchronize().unwrap();
    }

    fn mismatches(got: &[u32], want: &[u32]) -> usize {
        got.iter().zip(want).filter(|(g, w)| g != w).count()
    }

    #[test]
    #[ignore = "needs a CUDA GPU: run with --ignored on the GPU host"]
    fn standin_enqueue_capture_and_replay_through_the_layer_on_the_gpu() {
        let _g = serial();
        let (ctx, stream) = require_gpu();
        let s = standin();
        let lib = &s.standard;
        let trt = TensorRt::load(Some(&s.dir)).unwrap();
        let runtime = trt.create_runtime().unwrap();
        let plan = AFFINE;
        let target = PlanTarget {
            sm: Some(sm(&ctx)),
            ..plan.target()
        };
        let engine = runtime
            .deserialize(
                &plan.bytes(),
                &target.record(),
                GpuFacts::discrete(Sm::new(sm(&ctx).0, sm(&ctx).1)),
                &DeserializeOptions::default(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
        let n = 1000usize;
        let unbound = engine
            .create_execution_context(&[("x", &[1, n as i64])])
            .unwrap();
        let ws_bytes = usize::try_from(unbound.device_memory_size()).unwrap();
        let mut arena = ArenaPlan::new();
        let ws_id = arena.add("stand-in workspace", ws_bytes).unwrap();
        let x_id = arena.add("x", n * 4).unwrap();
        let y_id = arena.add("y", n * 4).unwrap();
        let arena = DeviceArena::new(&ctx, arena).unwrap();
        let (ws, xp, yp) = (arena.ptr(ws_id), arena.ptr(x_id), arena.ptr(y_id));
        // SAFETY: regions of one live arena, each as large as the tensor or workspace, kept
        // alive (declared before the context, so dropped after it) and used by nothing else.
        let mut ec = unsafe {
            unbound.bind(
                DeviceMemory {
                    address: ws.0,
                    size: ws_bytes as u64,
                },
                &[
                    TensorBinding {
                        name: "x",
                        address: xp.0,
                    },
                    TensorBinding {
                        name: "y",
                        address: yp.0,
                    },
                ],
            )
        }
        .unwrap();
        // The kernels count runs in the workspace header: start it from zero.
        // SAFETY: the workspace region holds `ws_bytes` bytes, a multiple of 4.
        unsafe { stream.memset_u32(ws, 0, ws_bytes / 4) }.unwrap();
        stream.synchronize().unwrap();

        // A capture before the first eager enqueue is refused (the stand-in, like TensorRT,
        // does one-time work at the first enqueue): NotCapturable, stream still usable.
        let e = Graph::capture(&stream, |s| {
            // SAFETY: live stream of the engine's context, in capture mode; memory bound above.
            unsafe { ec.enqueue_for_capture(s.raw() as *mut c_void) }
        })
        .err()
        .expect("capture before warm-up must fail");
        assert!(
            matches!(e, CudaError::Capture(ref m) if m.contains("not capturable")),
            "{e}"
        );
        assert!(
            runtime
                .recorded_errors()
                .iter()
                .any(|r| r.description.contains("illegal under CUDA graph capture")),
            "{:?}",
            runtime.recorded_errors()
        );
        println!("capture before the first enqueue -> {e}");

        // Eager.
        let x1 = inputs(n, 0x1234_5678);
        upload(&stream, xp, &x1);
        poison(&stream, yp, n);
        // SAFETY: live stream of the context the engine was deserialized on; memory bound.
        unsafe { ec.enqueue(stream.raw() as *mut c_void) }
            .unwrap_or_else(|e| panic!("{e}: {:?}", runtime.recorded_errors()));
        let y1 = download(&stream, yp, n);
        let want1 = expected(&plan, &x1);
        assert_eq!(mismatches(&y1, &want1), 0, "eager output");
        let header = download(&stream, ws, 3);
        assert_eq!(
            header,
            [MAGIC, 1, n as u32],
            "workspace header after one run"
        );
        println!(
            "eager: {n} outputs equal (a*x)+b in f32 bit for bit; workspace header {header:x?}"
        );

        // Capture (the kernels are recorded, not run), replay on a poisoned output with new
        // input data in the same buffer.
        let graph = Graph::capture(&stream, |s| {
            // SAFETY: as above; the stream is capturing.
            unsafe { ec.enqueue_for_capture(s.raw() as *mut c_void) }
        })
        .unwrap_or_else(|e| panic!("{e}: {:?}", runtime.recorded_errors()));
        assert_eq!(graph.nodes(), 2, "two kernel nodes");
        assert_eq!(download(&stream, ws, 2)[1], 1, "capturing ran nothing");
        let x2 = inputs(n, 0x0bad_cafe);
        upload(&stream, xp, &x2);
        poison(&stream, yp, n);
        let replays = 3;
        for _ in 0..replays {
            graph.launch(&stream).unwrap();
        }
        stream.synchronize().unwrap();
        let y2 = download(&stream, yp, n);
        assert_eq!(mismatches(&y2, &expected(&plan, &x2)), 0, "replayed output");
        assert_eq!(
            download(&stream, ws, 3),
            [MAGIC, 1 + replays, n as u32],
            "each replay ran the kernels once"
        );
        let r = report(lib);
        assert_eq!(
            get(&r, "context.enqueue_calls"),
            "3",
            "failed capture, eager, captured"
        );
        assert_eq!(get(&r, "context.captured_enqueues"), "1");
        assert_eq!(get(&r, "context.kernel_launches"), "4");
        println!(
            "graph of {} nodes replayed {replays}x on a poisoned output: {n} outputs equal; enqueueV3 was not called by the replays",
            graph.nodes()
        );
        drop(graph);
        drop(ec);
        drop(engine);
        drop(runtime);
        assert_eq!(alive(lib), (0, 0, 0));
    }

    /// A bundle holding the stand-in plan as network `model`, recorded as built by TensorRT
    /// 11.4 on this device's SM (what `tether build --engine tensorrt` records).
    fn standin_bundle(plan: &Plan, n: usize, sm: (u8, u8)) -> std::sync::Arc<Bundle> {
        use tether_bundle::{
            BundleWriter, CpuArch, DType, EngineKind, IdentityDesc, IoMode, Layout, SectionKind,
            TargetDesc, TensorDesc,
        };
        let mut w = BundleWriter::new(IdentityDesc {
            name: "standin".into(),
            family: "standin".into(),
            ..IdentityDesc::default()
        });
        let t = w
            .add_target(TargetDesc {
                name: "standin-trt11.4".into(),
                arch: if cfg!(target_arch = "aarch64") {
                    CpuArch::Aarch64
                } else {
                    CpuArch::X86_64
                },
                sm: Some(sm),
                engine: EngineKind::TensorRt,
                tensorrt_version: plan.tensorrt,
                hardware_compat: 0,
                flags: plan.target().flags,
            })
            .unwrap();
        let sec = w
            .add_section(
                SectionKind::TensorRtPlan,
                "standin/model/plan.standin-trt11.4",
                Some(t),
                plan.bytes(),
            )
            .unwrap();
        for (name, mode) in [("x", IoMode::Input), ("y", IoMode::Output)] {
            w.add_tensor(
                sec,
                TensorDesc {
                    name: name.into(),
                    mode,
                    dtype: DType::F32,
                    layout: Layout::Unspecified,
                    dims: vec![1, n as i64],
                },
            )
            .unwrap();
        }
        std::sync::Arc::new(
            Bundle::from_vec(w.to_bytes().unwrap(), tether_bundle::Verify::Eager).unwrap(),
        )
    }

    /// The TensorRT executor through the same model API and device session as every other
    /// engine: selection picks the plan, the session binds its workspace and I/O in its arena,
    /// runs eagerly, captures one graph (upload, enqueueV3, download) and checks the replay on
    /// poisoned buffers against the eager run before handing the session out.
    #[test]
    #[ignore = "needs a CUDA GPU: run with --ignored on the GPU host"]
    fn standin_runs_through_the_model_api_and_session_on_the_gpu() {
        use tether_runtime::session::ExecMode;
        use tether_runtime::{Device, EngineKind, Model, ModelOptions};
        let _g = serial();
        let (ctx, _stream) = require_gpu();
        let s = standin();
        // The backend loads TensorRT once per process, from TETHER_TENSORRT_LIB first.
        // SAFETY: set before any thread of this test process reads the environment for it
        // (the test is serialised and the library is loaded lazily by this call chain).
        unsafe { std::env::set_var("TETHER_TENSORRT_LIB", &s.standard) };
        let plan = Plan {
            a: -3.25,
            b: 0.125,
            n: 4096,
            n_min: 4096,
            n_max: 4096,
            workspace_extra: 0,
            ..AFFINE
        };
        let n = 4096usize;
        let bundle = standin_bundle(&plan, n, sm(&ctx));
        let model = Model::from_bundle(
            bundle,
            &ModelOptions {
                device: Device::Cuda(0),
                ..ModelOptions::default()
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let net = model.network("model").unwrap();
        assert_eq!(net.engine(), EngineKind::TensorRt);
        println!("selection: {}", net.choice());

        // Two modules on one plan (two cameras): two execution contexts, one engine.
        let mut m1 = model
            .network_session("model")
            .unwrap_or_else(|e| panic!("{e}"));
        let mut m2 = model
            .network_session("model")
            .unwrap_or_else(|e| panic!("{e}"));
        for m in [&m1, &m2] {
            let d = m.session().device().expect("a device session");
            let (mode, note) = d.exec_mode();
            println!("session: {mode:?}: {note}; budget {:?}", d.memory_budget());
            assert_eq!(mode, ExecMode::WholeGraph, "{note}");
            assert!(note.contains("matches the eager run"), "{note}");
        }
        for (round, seed) in [(0, 7u32), (1, 11), (2, 13)] {
            let (x1, x2) = (inputs(n, seed), inputs(n, seed + 100));
            m1.input_mut::<f32>("x").unwrap().copy_from_slice(&x1);
            m2.input_mut::<f32>("x").unwrap().copy_from_slice(&x2);
            m1.run().unwrap_or_else(|e| panic!("{e}"));
            m2.run().unwrap_or_else(|e| panic!("{e}"));
            let y1: Vec<u32> = m1
                .output::<f32>("y")
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            let y2: Vec<u32> = m2
                .output::<f32>("y")
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(
                mismatches(&y1, &expected(&plan, &x1)),
                0,
                "session 1, round {round}"
            );
            assert_eq!(
                mismatches(&y2, &expected(&plan, &x2)),
                0,
                "session 2, round {round}"
            );
        }
        println!(
            "TensorRT stand-in through the model API: two modules on one plan, one captured graph each, (a*x)+b exact for {n} elements over 3 rounds"
        );
        drop((m1, m2, model));
        assert_eq!(alive(&s.standard), (0, 0, 0));
    }

    /// Re-binding a device executor before capture: the same execution context, bound to
    /// region set A, then to region set B (recurrent state ping-pong), writes where it was
    /// last bound.
    #[test]
    #[ignore = "needs a CUDA GPU: run with --ignored on the GPU host"]
    fn standin_executor_rebinds_to_a_second_region_set_on_the_gpu() {
        use tether_runtime::backend::{Backend, NetworkSource, PrepareOptions, SourceFormat};
        use tether_runtime::backends::tensorrt::TensorRtBackend;
        use tether_runtime::cuda::DeviceRegion;
        use tether_runtime::{Bindings, Enqueue, Plan as RtPlan};
        let _g = serial();
        let (ctx, stream) = require_gpu();
        let s = standin();
        // SAFETY: as in the model API test (serialised; read lazily by this call chain).
        unsafe { std::env::set_var("TETHER_TENSORRT_LIB", &s.standard) };
        let plan = Plan {
            n: 1024,
            n_min: 1024,
            n_max: 1024,
            ..AFFINE
        };
        let n = 1024usize;
        let backend = TensorRtBackend::new(ctx.clone(), false).unwrap_or_else(|e| panic!("{e}"));
        let offer = tether_targets::Offer::tensorrt(
            0,
            tether_targets::CpuArch::host(),
            tether_targets::Sm::new(sm(&ctx).0, sm(&ctx).1),
            plan.tensorrt,
        );
        let bytes = plan.bytes();
        let RtPlan::Device(p) = backend
            .prepare(
                &NetworkSource {
                    network: "model",
                    format: SourceFormat::TensorRtPlan,
                    bytes: &bytes,
                    target: Some(offer),
                },
                &PrepareOptions {
                    input_shapes: vec![vec![1, n]],
                    ..PrepareOptions::default()
                },
            )
            .unwrap_or_else(|e| panic!("{e}"))
        else {
            panic!("a device plan")
        };
        let mut arena = ArenaPlan::new();
        let ids: Vec<_> = ["x_a", "y_a", "x_b", "y_b"]
            .iter()
            .map(|r| arena.add(*r, n * 4).unwrap())
            .collect();
        let ws = arena.add("workspace", p.workspace().bytes).unwrap();
        let arena = DeviceArena::new(&ctx, arena).unwrap();
        let region = |i: usize| arena.region(ids[i]);
        let mut exec = p.executor(&ctx).unwrap_or_else(|e| panic!("{e}"));
        let (xa, xb) = (inputs(n, 3), inputs(n, 5));
        upload(&stream, region(0).ptr, &xa);
        upload(&stream, region(2).ptr, &xb);
        for (inp, out, x) in [(0, 1, &xa), (2, 3, &xb), (0, 1, &xa)] {
            poison(&stream, region(out).ptr, n);
            // SAFETY: all regions lie in `arena`, sized n f32 / the workspace, alive until the
            // end of the test; nothing else runs on them.
            unsafe {
                exec.bind(&Bindings {
                    inputs: &[region(inp)],
                    outputs: &[region(out)],
                    workspace: DeviceRegion::new(arena.region(ws).ptr, arena.region(ws).bytes),
                })
            }
            .unwrap();
            exec.enqueue(&stream, Enqueue::Eager).unwrap();
            stream.synchronize().unwrap();
            assert_eq!(
                mismatches(&download(&stream, region(out).ptr, n), &expected(&plan, x)),
                0
            );
        }
        // Captured after the last re-binding: the graph writes set A.
        poison(&stream, region(1).ptr, n);
        let g = Graph::capture(&stream, |s| exec.enqueue(s, Enqueue::Capturing)).unwrap();
        g.launch(&stream).unwrap();
        stream.synchronize().unwrap();
        assert_eq!(
            mismatches(&download(&stream, region(1).ptr, n), &expected(&plan, &xa)),
            0
        );
        println!(
            "TensorRT stand-in executor re-bound A -> B -> A, then captured: each run wrote where it was bound"
        );
        drop(g);
        drop(exec);
    }
}
