//! Proof against a real TensorRT library on a GPU host.
//!
//! Skipped (passes at once) unless `TETHER_TRT_REAL_LIBRARY=1`. Then it
//! needs `TETHER_TENSORRT_LIB` (or a standard install) and a CUDA driver
//! (`libcuda.so.1`), and shows: the library loads and reports its version;
//! a runtime is created and passes the `getPImpl` self-check; TensorRT's
//! messages reach tether's logger (and the `log` facade) and its error
//! recorder; corrupt and foreign plans are rejected with TensorRT's own
//! message in the error; the compatibility gate refuses a foreign record
//! naming both sides; 1,000 runtime create/destroy cycles leave host RSS and
//! free device memory (`cuMemGetInfo`) flat.
//!
//! Run by `runtime/trt-probe/device-proof.sh`; the evidence is in
//! `docs/evidence/tensorrt-real-library.md`.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use tether_runtime::tensorrt::{
    DeserializeOptions, PlanTarget, TensorRt, TrtError, logger_message_counts,
};
use tether_targets::{FLAG_VERSION_COMPATIBLE, GpuFacts, Sm};

/// A `log` implementation that keeps what TensorRT sent (target `tensorrt`).
struct Capture;
static CAPTURED: Mutex<Vec<String>> = Mutex::new(Vec::new());
static CAPTURED_COUNT: AtomicUsize = AtomicUsize::new(0);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if r.target() == "tensorrt" {
            CAPTURED_COUNT.fetch_add(1, Ordering::Relaxed);
            let mut c = CAPTURED.lock().unwrap();
            if c.len() < 12 {
                c.push(format!("[{}] {}", r.level(), r.args()));
            }
        }
    }
    fn flush(&self) {}
}

/// The few CUDA driver calls the proof needs, loaded at run time.
struct Cuda {
    _lib: libloading::Library,
    mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int,
    sm: (u8, u8),
    name: String,
    driver: c_int,
}

impl Cuda {
    fn open() -> Result<Cuda, String> {
        type Init = unsafe extern "C" fn(c_uint) -> c_int;
        type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
        type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
        type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
        type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
        type MemInfo = unsafe extern "C" fn(*mut usize, *mut usize) -> c_int;
        type Name = unsafe extern "C" fn(*mut u8, c_int, c_int) -> c_int;
        type DriverVersion = unsafe extern "C" fn(*mut c_int) -> c_int;
        // SAFETY: loading the NVIDIA driver library; every symbol below is
        // resolved with the signature of the CUDA driver API (cuda.h) and
        // called with valid out-pointers on the primary context of device 0.
        unsafe {
            let lib = libloading::Library::new("libcuda.so.1").map_err(|e| e.to_string())?;
            let sym = |n: &[u8]| -> Result<*const c_void, String> {
                lib.get::<*const c_void>(n)
                    .map(|s| *s)
                    .map_err(|e| e.to_string())
            };
            let init: Init = std::mem::transmute(sym(b"cuInit\0")?);
            let device_get: DeviceGet = std::mem::transmute(sym(b"cuDeviceGet\0")?);
            let attr: Attr = std::mem::transmute(sym(b"cuDeviceGetAttribute\0")?);
            let retain: Retain = std::mem::transmute(sym(b"cuDevicePrimaryCtxRetain\0")?);
            let set_current: SetCurrent = std::mem::transmute(sym(b"cuCtxSetCurrent\0")?);
            let mem_get_info: MemInfo = std::mem::transmute(sym(b"cuMemGetInfo_v2\0")?);
            let name_fn: Name = std::mem::transmute(sym(b"cuDeviceGetName\0")?);
            let driver_fn: DriverVersion = std::mem::transmute(sym(b"cuDriverGetVersion\0")?);
            let ok = |what: &str, rc: c_int| {
                if rc == 0 {
                    Ok(())
                } else {
                    Err(format!("{what} returned {rc}"))
                }
            };
            ok("cuInit", init(0))?;
            let mut dev = 0;
            ok("cuDeviceGet", device_get(&mut dev, 0))?;
            let (mut major, mut minor) = (0, 0);
            ok("cuDeviceGetAttribute(major)", attr(&mut major, 75, dev))?; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
            ok("cuDeviceGetAttribute(minor)", attr(&mut minor, 76, dev))?; // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
            let mut ctx = std::ptr::null_mut();
            ok("cuDevicePrimaryCtxRetain", retain(&mut ctx, dev))?;
            ok("cuCtxSetCurrent", set_current(ctx))?;
            let mut name = [0u8; 128];
            name_fn(name.as_mut_ptr(), name.len() as c_int, dev);
            let len = name.iter().position(|&b| b == 0).unwrap_or(0);
            let mut driver = 0;
            driver_fn(&mut driver);
            Ok(Cuda {
                _lib: lib,
                mem_get_info,
                sm: (major as u8, minor as u8),
                name: String::from_utf8_lossy(&name[..len]).into_owned(),
                driver,
            })
        }
    }

    /// Free device memory, bytes.
    fn free(&self) -> usize {
        let (mut free, mut total) = (0usize, 0usize);
        // SAFETY: valid out-pointers; the primary context is current.
        let rc = unsafe { (self.mem_get_info)(&mut free, &mut total) };
        assert_eq!(rc, 0, "cuMemGetInfo");
        free
    }
}

/// Resident set size of this process, bytes (`/proc/self/statm`, field 2).
fn rss() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

fn mib(b: i64) -> String {
    format!("{:.2} MiB", b as f64 / (1024.0 * 1024.0))
}

#[test]
fn real_library_proof() {
    if std::env::var("TETHER_TRT_REAL_LIBRARY").as_deref() != Ok("1") {
        eprintln!("TETHER_TRT_REAL_LIBRARY is not 1: real TensorRT proof skipped");
        return;
    }
    log::set_logger(&Capture).unwrap();
    log::set_max_level(log::LevelFilter::Trace);

    println!("== 1. load");
    let missing = TensorRt::load(Some(std::path::Path::new("/nonexistent/tensorrt"))).unwrap_err();
    println!("explicit bad path -> {missing}");
    let trt = TensorRt::load(None).unwrap_or_else(|e| panic!("{e}"));
    println!(
        "loaded {} : TensorRT {} build {} ({:?})",
        trt.path().display(),
        trt.version(),
        trt.build(),
        trt.flavor()
    );

    let cuda = Cuda::open().unwrap_or_else(|e| panic!("CUDA driver: {e}"));
    println!(
        "device: {} sm_{}{} driver API {}",
        cuda.name, cuda.sm.0, cuda.sm.1, cuda.driver
    );

    println!("== 2. runtime");
    let before_counts = logger_message_counts();
    let runtime = trt.create_runtime().unwrap_or_else(|e| panic!("{e}"));
    println!("runtime created; getPImpl self-check passed (IRuntime)");
    println!(
        "error recorder references held by TensorRT: {}",
        runtime.error_recorder_references()
    );

    let mut failures: Vec<String> = Vec::new();

    println!("== 3. a corrupt plan TensorRT must reject");
    let mut garbage = vec![0u8; 64 * 1024];
    let mut x: u32 = 0x1234_5678;
    for b in garbage.iter_mut() {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        *b = x as u8;
    }
    let e = runtime.deserialize_unchecked(&garbage, false).unwrap_err();
    println!("corrupt plan (64 KiB random) -> {e}");
    if !matches!(&e, TrtError::Deserialize { messages, .. } if !messages.0.is_empty()) {
        failures.push(format!(
            "corrupt plan: expected Deserialize with TensorRT's message, got {e:?}"
        ));
    }
    println!("error recorder holds: {:?}", runtime.recorded_errors());

    println!("== 4. compatibility gate (nothing deserialized)");
    let opts = DeserializeOptions::default();
    // The test host is a data-center GPU (the H200).
    let gpu = GpuFacts::discrete(Sm::new(cuda.sm.0, cuda.sm.1));
    let jetson_plan = PlanTarget {
        tensorrt_version: 100300,
        sm: Some((8, 7)),
        hardware_compat: 0,
        flags: 0,
    };
    let e = runtime
        .deserialize(&garbage, &jetson_plan.record(), gpu, &opts)
        .unwrap_err();
    println!("JetPack 6 plan record (10.3.0, sm_87) -> {e}");
    if !matches!(e, TrtError::Incompatible(_)) {
        failures.push(format!("JetPack record: expected Incompatible, got {e:?}"));
    }
    let orin_vc = PlanTarget {
        tensorrt_version: trt.version().0,
        sm: Some((8, 7)),
        hardware_compat: 0,
        flags: FLAG_VERSION_COMPATIBLE,
    };
    let e = runtime
        .deserialize(&garbage, &orin_vc.record(), gpu, &opts)
        .unwrap_err();
    println!("version-compatible record built on sm_87 -> {e}");
    if !matches!(e, TrtError::Incompatible(_)) {
        failures.push(format!("sm_87 record: expected Incompatible, got {e:?}"));
    }
    let vc_record = PlanTarget {
        sm: Some(cuda.sm),
        ..orin_vc
    };
    let e = runtime
        .deserialize(&garbage, &vc_record.record(), gpu, &opts)
        .unwrap_err();
    println!("record passes the gate (host code allowed), bytes are garbage -> {e}");
    if !matches!(e, TrtError::Deserialize { .. }) {
        failures.push(format!(
            "gate-passing record: expected Deserialize, got {e:?}"
        ));
    }

    println!("== 5. logger");
    let after = logger_message_counts();
    let delta: Vec<u64> = after
        .iter()
        .zip(before_counts)
        .map(|(a, b)| a - b)
        .collect();
    println!(
        "logger messages by severity [internal, error, warning, info, verbose]: {delta:?}; log facade records (target tensorrt): {}",
        CAPTURED_COUNT.load(Ordering::Relaxed)
    );
    for m in CAPTURED.lock().unwrap().iter() {
        println!("  {m}");
    }
    if CAPTURED_COUNT.load(Ordering::Relaxed) == 0 {
        failures.push("no TensorRT message reached the log facade".to_string());
    }
    drop(runtime);

    println!("== 6. 1,000 runtime create/destroy cycles");
    for _ in 0..20 {
        drop(trt.create_runtime().unwrap());
    }
    let (rss0, free0) = (rss(), cuda.free());
    let start = std::time::Instant::now();
    for i in 1..=1000 {
        let r = trt
            .create_runtime()
            .unwrap_or_else(|e| panic!("cycle {i}: {e}"));
        drop(r);
        if i % 250 == 0 {
            println!(
                "after {i:4}: RSS {:+} bytes ({}), free device memory {:+} bytes",
                rss() as i64 - rss0 as i64,
                mib(rss() as i64 - rss0 as i64),
                cuda.free() as i64 - free0 as i64
            );
        }
    }
    let (rss1, free1) = (rss(), cuda.free());
    println!(
        "1000 cycles in {:.2?}: RSS {} -> {} ({}), free device memory {} -> {} ({:+} bytes)",
        start.elapsed(),
        rss0,
        rss1,
        mib(rss1 as i64 - rss0 as i64),
        free0,
        free1,
        free1 as i64 - free0 as i64
    );
    if rss1 >= rss0 + 8 * 1024 * 1024 {
        failures.push("host RSS grew by more than 8 MiB".to_string());
    }
    if free1 + 2 * 1024 * 1024 < free0 {
        failures.push("free device memory fell by more than 2 MiB".to_string());
    }

    println!("== 7. a plan with a foreign-version header");
    // Tag "ftrt", serialization 0, version bytes 10.3.0.26 at 24..28, then
    // random bytes: what a JetPack 6 plan's header looks like. Last, in case
    // TensorRT reads further than the header.
    let runtime = trt.create_runtime().unwrap();
    let mut foreign = garbage.clone();
    foreign[..4].copy_from_slice(b"ftrt");
    foreign[4..8].copy_from_slice(&0u32.to_le_bytes());
    foreign[24..28].copy_from_slice(&[10, 3, 0, 26]);
    let e = runtime.deserialize_unchecked(&foreign, true).unwrap_err();
    println!("plan with a TensorRT 10.3.0 header -> {e}");
    if !matches!(&e, TrtError::Deserialize { messages, .. } if !messages.0.is_empty()) {
        failures.push(format!(
            "foreign header: expected Deserialize with TensorRT's message, got {e:?}"
        ));
    }
    assert!(failures.is_empty(), "failures:\n{}", failures.join("\n"));
    println!("== done");
}
