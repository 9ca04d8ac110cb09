//! The C API from C, on real bundles: `tests/c/api_test.c` compiled with the system `cc`
//! against the built shared library (cargo's `deps/libtether_capi.so`, linked as
//! `libtether.so`, its SONAME, as installed), its results compared with `tether run --json` on the
//! same inputs (detection on astronaut.png with the nudenet YOLOv8n 320 ONNX, text lines
//! on page.png with the PP-OCRv4 det/rec and mobile v2.0 cls ONNX, VAD on
//! Front_Center.wav, embeddings of a few sentences), the error paths' statuses and
//! messages, the same program under AddressSanitizer + UndefinedBehaviorSanitizer (no
//! report), and the allocations of `tether_detect` counted from C against the Rust
//! detector's on the same frame. The C++ wrapper (`tests/cpp/wrapper_test.cpp`) and the
//! C++ fixed-rate example (`examples/cpp/detect_loop.cpp`, its detections against the CLI's,
//! Ctrl-C) and the C++ streaming generation example (`examples/cpp/generate.cpp`, greedy text
//! and token ids against `tether run --prompt`, Ctrl-C) are built with `c++ -std=c++17` and
//! run the same way. On a GPU, `tests/c/gpu_network.c` checks the named-tensor API's device
//! buffers and a run on the program's own CUDA stream against the host buffers' run (reported
//! ignored without a GPU).
//!
//! Needs `target/<profile>/tether` (the CLI; `cargo test --workspace` builds it, else
//! `cargo build --release --bin tether`) and the assets (`tests/fetch-assets`). Without
//! `cc` or `c++`, or when `cc` builds for another architecture than this test's (a cross
//! build run under emulation), every test is reported ignored with the reason, never passed.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Arc, OnceLock};

use libtest_mimic::{Arguments, Failed, Trial};
use serde_json::Value;
use tether_testkit::{ThreadAllocCounter, count_allocs};

// ------------------------------------------------------------------ allocation counter

#[global_allocator]
static GLOBAL: ThreadAllocCounter = ThreadAllocCounter;

// ------------------------------------------------------------------ environment

/// `target/<profile>/`: where cargo put this test's library and the `tether` CLI.
fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/<profile>/deps/c_api-<hash>
    exe.parent()
        .and_then(Path::parent)
        .expect("target/<profile>")
        .to_path_buf()
}

fn crate_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(what: &str, o: &Output) -> String {
    assert!(
        o.status.success(),
        "{what} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        o.status,
        text(&o.stdout),
        text(&o.stderr)
    );
    text(&o.stdout)
}

/// Bundles and inputs shared by the tests, made once.
struct Fixture {
    dir: PathBuf,
    tether: PathBuf,
    detect: PathBuf,
    vad: PathBuf,
    embed: PathBuf,
    truncated: PathBuf,
    frame: PathBuf,
    frame_w: u32,
    frame_h: u32,
    pcm: PathBuf,
    texts: PathBuf,
    llm: PathBuf,
    ocr: PathBuf,
    /// page.png's 8-bit luminance, its width and height.
    page: PathBuf,
    page_w: u32,
    page_h: u32,
}

/// This process's scratch folder (bundles, inputs, programs): removed when every test
/// passed, kept (and named) when one failed.
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("tether-capi-{}", std::process::id()))
}

const SENTENCES: &str = "A robot arm picks a red cube from the table.\n\
                         The weather in Lyon is sunny today.\n\
                         Grasp the red block on the desk.\n";

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = scratch_dir();
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let tether = profile_dir().join("tether");
        assert!(
            tether.is_file(),
            "{} is missing: build the CLI first (`cargo build --release --bin tether`; \
             `cargo test --workspace` builds it)",
            tether.display()
        );
        let asset = |n: &str| tether_testkit::asset(n).to_string_lossy().into_owned();
        let build = |out: &Path, args: &[&str]| {
            let o = run(Command::new(&tether)
                .arg("build")
                .args(args)
                .arg("-o")
                .arg(out)
                .env_remove("RUST_LOG"));
            ok(&format!("tether build {args:?}"), &o);
        };
        let detect = dir.join("detect.bundle");
        build(
            &detect,
            &[
                "--family",
                "detect",
                "--onnx",
                &asset("320n.onnx"),
                "--input-size",
                "320",
            ],
        );
        let vad = dir.join("vad.bundle");
        build(
            &vad,
            &[
                "--family",
                "vad",
                "--onnx",
                &asset("silero_vad_op18_ifless.onnx"),
            ],
        );
        let embed = dir.join("embed.bundle");
        build(
            &embed,
            &[
                "--family",
                "embed",
                "--onnx",
                &asset("all-minilm-l6-v2-int8.onnx"),
                "--tokenizer",
                &asset("all-minilm-l6-v2-tokenizer.json"),
            ],
        );
        let llm = dir.join("llm.bundle");
        build(
            &llm,
            &[
                "--family",
                "llm",
                "--gguf",
                &asset("SmolLM2-135M-Instruct.Q4_1.gguf"),
            ],
        );
        let ocr = dir.join("ocr.bundle");
        build(
            &ocr,
            &[
                "--family",
                "ocr",
                "--det",
                &asset("ch_PP-OCRv4_det_infer.onnx"),
                "--rec",
                &asset("ch_PP-OCRv4_rec_infer.onnx"),
                "--cls",
                &asset("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
            ],
        );
        let page_img = image::open(asset("page.png")).expect("page.png").to_luma8();
        let page = dir.join("page.gray");
        std::fs::write(&page, page_img.as_raw()).expect("page frame");
        let bytes = std::fs::read(&detect).expect("detect bundle");
        let truncated = dir.join("truncated.bundle");
        std::fs::write(&truncated, &bytes[..bytes.len() / 2]).expect("truncated bundle");

        let img = image::open(asset("astronaut.png"))
            .expect("astronaut.png")
            .to_rgb8();
        let frame = dir.join("astronaut.rgb");
        std::fs::write(&frame, img.as_raw()).expect("frame");
        let audio = tether_vad::read_wav(asset("Front_Center.wav")).expect("wav");
        let pcm = dir.join("front_center_16k.f32");
        let raw: Vec<u8> = audio.samples.iter().flat_map(|s| s.to_le_bytes()).collect();
        std::fs::write(&pcm, raw).expect("pcm");
        let texts = dir.join("sentences.txt");
        std::fs::write(&texts, SENTENCES).expect("texts");
        Fixture {
            dir,
            tether,
            detect,
            vad,
            embed,
            truncated,
            frame,
            frame_w: img.width(),
            frame_h: img.height(),
            pcm,
            texts,
            llm,
            ocr,
            page,
            page_w: page_img.width(),
            page_h: page_img.height(),
        }
    })
}

/// `tether run BUNDLE INPUT --json EXTRA...`: the first result's `result` object.
fn cli_result(bundle: &Path, input: &Path, extra: &[&str]) -> Value {
    cli_doc(bundle, input, extra)["results"][0]["result"].clone()
}

/// `tether run BUNDLE INPUT --json EXTRA...`: the whole document.
fn cli_doc(bundle: &Path, input: &Path, extra: &[&str]) -> Value {
    let f = fixture();
    let o = run(Command::new(&f.tether)
        .arg("run")
        .arg(bundle)
        .arg(input)
        .arg("--json")
        .args(extra)
        .env_remove("RUST_LOG"));
    serde_json::from_str(&ok("tether run --json", &o)).expect("CLI JSON")
}

/// The allocations of every call in `v`, which must all be the same (steady state): that
/// count. `what` names the call in the failure.
fn steady(v: &[u64], what: &str) -> u64 {
    let (lo, hi) = (v.iter().min().unwrap(), v.iter().max().unwrap());
    assert_eq!(lo, hi, "{what}: allocations per call vary: {v:?}");
    *lo
}

/// Compiler flags of the program variants.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Variant {
    Plain,
    Sanitized,
    CountingAllocs,
    /// `tests/cpp/wrapper_test.cpp` (C++17).
    CppWrapper,
    /// `examples/cpp/detect_loop.cpp` (C++17, -O2).
    CppDetectLoop,
    /// `examples/cpp/generate.cpp` (C++17, -O2).
    CppGenerate,
    /// `examples/ros2/tether_detect_node/src/standalone.cpp` (C++17, -O2): the ROS 2 node's
    /// ROS-free twin.
    CppNodeTwin,
}

/// The folder where the shared library is `libtether.so` (as `install.sh` lays it out): a
/// link to the `libtether_capi.so` cargo built for this test, next to the test executable.
fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().expect("test executable path");
        let built = exe.with_file_name("libtether_capi.so");
        assert!(
            built.is_file(),
            "{} is missing (cargo builds it with this test)",
            built.display()
        );
        let dir = fixture().dir.join("lib");
        std::fs::create_dir_all(&dir).expect("lib dir");
        let link = dir.join("libtether.so");
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(&built, &link).expect("link libtether.so");
        dir
    })
}

/// Compile `tests/c/api_test.c` (once per variant) against the built library.
fn program(v: Variant) -> PathBuf {
    static PROGRAMS: OnceLock<std::sync::Mutex<Vec<(Variant, PathBuf)>>> = OnceLock::new();
    let list = PROGRAMS.get_or_init(Default::default);
    let mut list = list.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = list.iter().find(|(k, _)| *k == v) {
        return p.clone();
    }
    let f = fixture();
    let lib = lib_dir();
    let out = f.dir.join(format!("api_test_{v:?}"));
    let mut cmd = match v {
        Variant::CppWrapper
        | Variant::CppDetectLoop
        | Variant::CppGenerate
        | Variant::CppNodeTwin => {
            let node = crate_dir().join("../examples/ros2/tether_detect_node");
            let src = match v {
                Variant::CppWrapper => crate_dir().join("tests/cpp/wrapper_test.cpp"),
                Variant::CppDetectLoop => crate_dir().join("../examples/cpp/detect_loop.cpp"),
                Variant::CppGenerate => crate_dir().join("../examples/cpp/generate.cpp"),
                _ => node.join("src/standalone.cpp"),
            };
            let mut cmd = Command::new("c++");
            cmd.args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"])
                .arg("-I")
                .arg(crate_dir().join("include"))
                .arg("-I")
                .arg(node.join("include"))
                .arg(src);
            cmd
        }
        _ => {
            let mut cmd = Command::new("cc");
            cmd.args([
                "-std=c11",
                "-D_POSIX_C_SOURCE=200809L",
                "-pthread",
                "-O1",
                "-g",
            ])
            .args(["-Wall", "-Wextra", "-Werror"])
            .arg("-I")
            .arg(crate_dir().join("include"))
            .arg(crate_dir().join("tests/c/api_test.c"));
            cmd
        }
    };
    match v {
        Variant::Plain
        | Variant::CppWrapper
        | Variant::CppDetectLoop
        | Variant::CppGenerate
        | Variant::CppNodeTwin => {}
        Variant::Sanitized => {
            cmd.args([
                "-fsanitize=address,undefined",
                "-fno-sanitize-recover=undefined",
                "-fno-omit-frame-pointer",
            ]);
        }
        Variant::CountingAllocs => {
            cmd.arg("-DTETHER_COUNT_ALLOCS")
                .arg(crate_dir().join("tests/c/alloc_count.c"));
        }
    }
    cmd.arg("-L")
        .arg(lib)
        .arg("-ltether")
        // RPATH, not RUNPATH: found before LD_LIBRARY_PATH (cargo's points at target/).
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-Wl,--disable-new-dtags")
        .arg("-o")
        .arg(&out);
    ok(&format!("compiling {v:?}"), &run(&mut cmd));
    list.push((v, out.clone()));
    out
}

/// Compile `tests/c/gpu_network.c` (once) against the built library; it loads the CUDA
/// driver itself with `dlopen`.
fn gpu_program() -> PathBuf {
    static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
    PROGRAM
        .get_or_init(|| {
            let lib = lib_dir();
            let out = fixture().dir.join("gpu_network");
            let o = run(Command::new("cc")
                .args(["-std=c11", "-D_POSIX_C_SOURCE=200809L", "-O1", "-g"])
                .args(["-Wall", "-Wextra", "-Werror"])
                .arg("-I")
                .arg(crate_dir().join("include"))
                .arg(crate_dir().join("tests/c/gpu_network.c"))
                .arg(crate_dir().join("tests/c/alloc_count.c"))
                .arg("-L")
                .arg(lib)
                .args(["-ltether", "-ldl", "-lm"])
                .arg(format!("-Wl,-rpath,{}", lib.display()))
                .arg("-Wl,--disable-new-dtags")
                .arg("-o")
                .arg(&out));
            ok("compiling gpu_network.c", &o);
            out
        })
        .clone()
}

/// On a GPU, the detection network through `tether_network_device_buffer` and
/// `tether_network_run_on_stream`: the input written with `cuMemcpyHtoDAsync` to its device
/// buffer (the host input zeroed, the device outputs NaN-filled first), the run ordered on
/// the program's own stream, the outputs read from their device buffers: equal to the host
/// buffers' run on the same input (within 1e-5 of the largest output), the same for the
/// host staging on the stream, and different from a run on zeros. Copied and mapped
/// staging.
fn gpu_network_device_io() {
    let f = fixture();
    for staging in ["copy", "mapped"] {
        let o = run(Command::new(gpu_program())
            .arg(&f.detect)
            .arg(staging)
            .env_remove("RUST_LOG"));
        let c = json(&ok(&format!("gpu_network {staging}"), &o));
        println!("{c}");
        assert_ne!(c["engine"], "tract-cpu", "{c}");
        let tol = f32_of(&c["tolerance"]);
        assert!(f32_of(&c["device_io_max_diff"]) <= tol, "{staging}: {c}");
        assert!(
            f32_of(&c["host_on_stream_max_diff"]) <= tol,
            "{staging}: {c}"
        );
        assert!(f32_of(&c["zeros_max_diff"]) > tol, "{staging}: {c}");
        // Allocation-free through C on the GPU, as the Rust path: runs and detections make
        // no allocation from libtether (the CUDA driver's own are reported beside).
        assert_eq!(c["device_io_tether_allocations"], 0, "{staging}: {c}");
        assert_eq!(c["host_run_tether_allocations"], 0, "{staging}: {c}");
        assert_eq!(c["detect_tether_allocations"], 0, "{staging}: {c}");
        assert_eq!(c["unattributed_allocations"], 0, "{staging}: {c}");
        assert_ne!(c["detect_engine"], "tract-cpu", "{c}");
        assert_eq!(c["ok"], true, "{staging}: {c}");
    }
}

/// Why the GPU check cannot run here (`None` when a CUDA device answers).
fn gpu_skip_reason() -> Option<String> {
    #[cfg(feature = "cuda")]
    return tether_runtime::cuda::skip_reason();
    #[cfg(not(feature = "cuda"))]
    Some("this build of the C API has no CUDA engine".into())
}

/// Run the program (the variant's); under the sanitizers any report fails the run (exit
/// code 23).
fn api_test(v: Variant, args: &[&dyn AsRef<std::ffi::OsStr>]) -> String {
    let mut cmd = Command::new(program(v));
    for a in args {
        cmd.arg(a);
    }
    cmd.env_remove("RUST_LOG");
    if v == Variant::Sanitized {
        cmd.env(
            "ASAN_OPTIONS",
            "detect_leaks=1:exitcode=23:abort_on_error=0:halt_on_error=1",
        )
        .env(
            "UBSAN_OPTIONS",
            "print_stacktrace=1:halt_on_error=1:exitcode=23",
        )
        .env("LSAN_OPTIONS", "exitcode=23");
    }
    let o = run(&mut cmd);
    let err = text(&o.stderr);
    assert!(
        !err.contains("ERROR: AddressSanitizer")
            && !err.contains("ERROR: LeakSanitizer")
            && !err.contains("runtime error:"),
        "sanitizer report:\n{err}"
    );
    ok(&format!("api_test {v:?}"), &o)
}

fn json(s: &str) -> Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("not JSON ({e}): {s}"))
}

fn f32_of(v: &Value) -> f32 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}")) as f32
}

// ------------------------------------------------------------------ the checks

/// Detections as (class_id, class_name, score, box), f32 as the library computed them.
fn detections(v: &Value) -> Vec<(u64, String, f32, [f32; 4])> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a detection list: {v}"))
        .iter()
        .map(|d| {
            let b = d["box"].as_array().expect("box");
            (
                d["class_id"].as_u64().expect("class_id"),
                d["class_name"].as_str().expect("class_name").to_string(),
                f32_of(&d["score"]),
                [f32_of(&b[0]), f32_of(&b[1]), f32_of(&b[2]), f32_of(&b[3])],
            )
        })
        .collect()
}

fn detect_matches_cli(v: Variant) {
    let f = fixture();
    let (w, h) = (f.frame_w.to_string(), f.frame_h.to_string());
    let c = json(&api_test(v, &[&"detect", &f.detect, &f.frame, &w, &h]));
    let doc = cli_doc(&f.detect, &tether_testkit::asset("astronaut.png"), &[]);
    let cli = &doc["results"][0]["result"];
    let want = detections(&cli["detections"]);
    assert!(!want.is_empty(), "the CLI found nothing: {cli}");
    assert_eq!(c["engine"], doc["engines"]["model"], "engine");
    for way in ["rgb", "bgr_pitched", "staged", "memory"] {
        assert_eq!(
            detections(&c[way]),
            want,
            "C API ({way}) vs tether run --json"
        );
    }
}

fn vad_matches_cli(v: Variant) {
    let f = fixture();
    let c = json(&api_test(v, &[&"vad", &f.vad, &f.pcm]));
    let cli = cli_result(&f.vad, &tether_testkit::asset("Front_Center.wav"), &[]);
    let probs = |v: &Value| -> Vec<f32> {
        v.as_array()
            .expect("probabilities")
            .iter()
            .map(f32_of)
            .collect()
    };
    let want = probs(&cli["probabilities"]);
    let want_segments: Vec<[u64; 2]> = cli["segments"]
        .as_array()
        .expect("segments")
        .iter()
        .map(|s| {
            [
                s["start_sample"].as_u64().unwrap(),
                s["end_sample"].as_u64().unwrap(),
            ]
        })
        .collect();
    assert!(want.len() > 10 && !want_segments.is_empty(), "{cli}");
    for pass in ["first", "after_reset"] {
        assert_eq!(
            probs(&c[pass]["probabilities"]),
            want,
            "{pass}: probabilities"
        );
        let segs: Vec<[u64; 2]> = serde_json::from_value(c[pass]["segments"].clone()).unwrap();
        assert_eq!(segs, want_segments, "{pass}: segments");
        assert_eq!(c[pass]["samples"], cli["samples_16k"], "{pass}: samples");
    }
}

fn embed_matches_cli(v: Variant) {
    let f = fixture();
    let c = json(&api_test(v, &[&"embed", &f.embed, &f.texts]));
    let cli = cli_result(&f.embed, &f.texts, &[]);
    let vecs =
        |v: &Value| -> Vec<f32> { v.as_array().expect("vector").iter().map(f32_of).collect() };
    let texts = cli["texts"].as_array().expect("texts");
    assert_eq!(texts.len(), SENTENCES.lines().count());
    let got = c["embeddings"].as_array().expect("embeddings");
    assert_eq!(got.len(), texts.len());
    assert_eq!(c["dim"], 384);
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(vecs(&got[i]), vecs(&t["embedding"]), "embedding {i}");
    }
}

/// Every error case: its status and the words its message must contain.
fn error_paths(v: Variant) {
    let f = fixture();
    let junk = tether_testkit::asset("astronaut.png");
    let out = api_test(
        v,
        &[
            &"errors",
            &f.detect,
            &f.vad,
            &f.embed,
            &f.truncated,
            &junk,
            &f.llm,
        ],
    );
    let cases: Vec<Value> = out.lines().map(json).collect();
    let get = |name: &str| -> &Value {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .unwrap_or_else(|| panic!("no case {name} in:\n{out}"))
    };
    let truncated = f.truncated.display().to_string();
    let junk = junk.display().to_string();
    #[rustfmt::skip]
    let expect: &[(&str, &str, &[&str])] = &[
        ("open_missing", "TETHER_ERR_IO", &["/nonexistent/dir/missing.bundle", "No such file"]),
        ("open_truncated", "TETHER_ERR_BUNDLE", &["truncated"]),
        ("open_not_a_bundle", "TETHER_ERR_BUNDLE", &["not a tether bundle"]),
        ("open_memory_truncated", "TETHER_ERR_BUNDLE", &["truncated"]),
        ("open_null_path", "TETHER_ERR_INVALID_ARGUMENT", &["`path` is null"]),
        ("open_null_out", "TETHER_ERR_INVALID_ARGUMENT", &["`out` is null"]),
        ("open_memory_null", "TETHER_ERR_INVALID_ARGUMENT", &["`data` is null"]),
        ("options_small_struct", "TETHER_ERR_INVALID_ARGUMENT", &["struct_size is 8", "tether_options_init"]),
        ("options_large_struct", "TETHER_ERR_INVALID_ARGUMENT", &["struct_size is 4096", "larger than this library's"]),
        ("options_bad_device", "TETHER_ERR_INVALID_ARGUMENT", &["device is 7"]),
        ("options_init_null", "TETHER_ERR_INVALID_ARGUMENT", &["`options` is null"]),
        ("options_threads_huge", "TETHER_ERR_INVALID_ARGUMENT", &["tether_options::threads is 100000; accepted 0 to 1024"]),
        ("network_open_dynamic", "TETHER_ERR_UNSUPPORTED", &["input `input_ids` has dynamic dimensions", "tether_embed"]),
        ("network_open_unknown", "TETHER_ERR_INVALID_ARGUMENT", &["has no network `zzz`; it has: encoder"]),
        ("options_threads_beyond_cores", "TETHER_OK", &[]),
        ("generator_threads_huge", "TETHER_ERR_INVALID_ARGUMENT", &["tether_generator_options::threads is 100000; accepted 0 to 1024"]),
        ("detect_on_vad", "TETHER_ERR_WRONG_FAMILY", &["`tether_detect` needs a `detect` model", "`vad` bundle"]),
        ("vad_on_detect", "TETHER_ERR_WRONG_FAMILY", &["`tether_vad_push` needs a `vad` model", "`detect` bundle `320n`"]),
        ("embed_on_detect", "TETHER_ERR_WRONG_FAMILY", &["`tether_embed` needs a `embed` model"]),
        ("detect_null_model", "TETHER_ERR_INVALID_ARGUMENT", &["`model` is null"]),
        ("detect_null_image", "TETHER_ERR_INVALID_ARGUMENT", &["`image` is null"]),
        ("detect_null_count", "TETHER_ERR_INVALID_ARGUMENT", &["`count` is null"]),
        ("detect_null_array", "TETHER_ERR_INVALID_ARGUMENT", &["`detections` is null"]),
        ("detect_small_pitch", "TETHER_ERR_INVALID_ARGUMENT", &["pitch is 10 bytes", "192 bytes"]),
        ("detect_bad_format", "TETHER_ERR_INVALID_ARGUMENT", &["format is 99"]),
        ("prepare_huge_pitch", "TETHER_ERR_INVALID_ARGUMENT", &["frame.pitch is 1099511627776 bytes", "exceeds"]),
        ("prepare_overflowing_pitch", "TETHER_ERR_INVALID_ARGUMENT", &["frame.pitch is 18446744073709551615 bytes", "exceeds"]),
        ("detect_zero_width", "TETHER_ERR_INVALID_ARGUMENT", &["width is 0"]),
        ("detect_null_data", "TETHER_ERR_INVALID_ARGUMENT", &["`image.data` is null"]),
        ("staging_before_prepare", "TETHER_ERR_STATE", &["prepare"]),
        ("staged_before_prepare", "TETHER_ERR_STATE", &["prepare"]),
        ("class_name_out_of_range", "TETHER_ERR_INVALID_ARGUMENT", &["class_id 100000", "18 classes"]),
        ("detect_count_query", "TETHER_OK", &[]),
        ("vad_bad_rate", "TETHER_ERR_INVALID_ARGUMENT", &["48000 Hz", "16000 Hz"]),
        ("vad_small_array", "TETHER_ERR_CAPACITY", &["VAD chunks", "holds 2, 4 needed"]),
        ("vad_null_samples", "TETHER_ERR_INVALID_ARGUMENT", &["`samples` is null"]),
        ("vad_nan_sample", "TETHER_ERR_INVALID_ARGUMENT", &["sample 605 of the stream is NaN", "not a finite number"]),
        ("vad_inf_sample", "TETHER_ERR_INVALID_ARGUMENT", &["sample 607 of the stream is -inf", "not a finite number"]),
        ("vad_after_refusal", "TETHER_OK", &[]),
        ("vad_count_huge", "TETHER_ERR_INVALID_ARGUMENT", &["count is 18446744073709551565: more floats than any buffer can hold"]),
        ("embed_not_utf8", "TETHER_ERR_INVALID_ARGUMENT", &["texts[1] is not UTF-8", "offset 4"]),
        ("embed_small_array", "TETHER_ERR_CAPACITY", &["holds 100, 384 needed"]),
        ("embed_dim_null", "TETHER_ERR_INVALID_ARGUMENT", &["`dim` is null"]),
        ("model_open_llm", "TETHER_ERR_UNSUPPORTED", &["is a `llm` bundle", "`tether_generator_open`"]),
        ("generator_open_detect", "TETHER_ERR_WRONG_FAMILY", &["`tether_generator_open` needs an `llm` bundle; this is the `detect` bundle `320n`"]),
    ];
    for (name, status, words) in expect {
        let c = get(name);
        assert_eq!(c["status"], *status, "{name}: {c}");
        let msg = c["message"].as_str().unwrap_or_default();
        for w in *words {
            assert!(msg.contains(w), "{name}: message {msg:?} lacks {w:?}");
        }
    }
    // A failed open leaves a null handle.
    for name in [
        "open_missing",
        "open_truncated",
        "open_not_a_bundle",
        "open_memory_truncated",
        "model_open_llm",
        "generator_open_detect",
        "options_threads_huge",
        "generator_threads_huge",
        "network_open_dynamic",
        "network_open_unknown",
    ] {
        assert_eq!(get(name)["extra"], 1, "{name}: *out not reset to null");
    }
    // A count beyond the cores (within the bound) opens, lowered to the cores.
    assert_eq!(get("options_threads_beyond_cores")["extra"], 1);
    // Opening errors name the file, as the CLI's do (`loading PATH: ...`).
    for (name, path) in [("open_truncated", &truncated), ("open_not_a_bundle", &junk)] {
        let msg = get(name)["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with(&format!("loading {path}: ")),
            "{name}: {msg}"
        );
    }
    // The count query reports without writing; the too-small VAD array says how many.
    assert_eq!(get("vad_small_array")["extra"], 4);
    // A refused non-finite sample writes no chunk and leaves the stream as it was: the next
    // samples complete chunk 1 (before the fix: TETHER_OK, the NaN run through the network).
    assert_eq!(get("vad_nan_sample")["extra"], 0);
    assert_eq!(get("vad_inf_sample")["extra"], 0);
    assert_eq!(get("vad_after_refusal")["extra"], 1);
    // The copy variant: cut to the buffer, the full length needed.
    let copy = get("last_error_copy");
    assert_eq!(copy["status"], "TETHER_ERR_CAPACITY");
    let dim_msg = get("embed_dim_null")["message"].as_str().unwrap();
    assert_eq!(copy["extra"], dim_msg.len() + 1);
    assert_eq!(copy["message"], dim_msg[..7]);
}

/// OCR lines as (text, score, box_score, rotated, polygon), f32 as the library computed them.
fn ocr_lines(v: &Value) -> Vec<(String, f32, f32, bool, [f32; 8])> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a line list: {v}"))
        .iter()
        .map(|l| {
            let p = l["polygon"].as_array().expect("polygon");
            let quad: [f32; 8] = std::array::from_fn(|i| f32_of(&p[i / 2][i % 2]));
            (
                l["text"].as_str().expect("text").to_string(),
                f32_of(&l["score"]),
                f32_of(&l["box_score"]),
                l["rotated"].as_bool().expect("rotated"),
                quad,
            )
        })
        .collect()
}

/// `tether_ocr` on page.png's luminance equals `tether run --json` on page.png: every
/// line's text, scores, turn and quad; the size query, the too-small arrays (both counts
/// written, `TETHER_ERR_CAPACITY`), null and bad arguments, the wrong family both ways.
fn ocr_matches_cli(v: Variant) {
    let f = fixture();
    let (w, h) = (f.page_w.to_string(), f.page_h.to_string());
    let c = json(&api_test(v, &[&"ocr", &f.ocr, &f.page, &w, &h, &f.detect]));
    let doc = cli_doc(&f.ocr, &tether_testkit::asset("page.png"), &[]);
    let cli = &doc["results"][0]["result"];
    let want = ocr_lines(&cli["lines"]);
    assert!(want.len() >= 3, "the CLI read too little: {cli}");
    assert_eq!(c["family"], 4, "TETHER_FAMILY_OCR");
    assert_eq!(c["engine"], doc["engines"]["det"], "engine");
    assert_eq!(ocr_lines(&c["lines"]), want, "C API vs tether run --json");
    assert_eq!(ocr_lines(&c["again"]), want, "after the error cases");
    let bytes: usize = want.iter().map(|l| l.0.len() + 1).sum();
    assert_eq!(
        (c["line_count"].clone(), c["text_size"].clone()),
        (want.len().into(), bytes.into())
    );
    for (i, l) in c["lines"].as_array().unwrap().iter().enumerate() {
        assert_eq!(l["text_size"], want[i].0.len(), "line {i}");
    }
    let n = want.len();
    #[rustfmt::skip]
    let expect: &[(&str, &str, &str, (usize, usize))] = &[
        ("size_query", "TETHER_ERR_CAPACITY", &format!("text lines: the array holds 0, {n} needed"), (n, bytes)),
        ("lines_short", "TETHER_ERR_CAPACITY", &format!("text lines: the array holds {}, {n} needed", n - 1), (n, bytes)),
        ("text_short", "TETHER_ERR_CAPACITY", &format!("text: the buffer holds {} bytes, {bytes} needed", bytes - 1), (n, bytes)),
        ("null_model", "TETHER_ERR_INVALID_ARGUMENT", "`model` is null", (0, 0)),
        ("null_image", "TETHER_ERR_INVALID_ARGUMENT", "`image` is null", (0, 0)),
        ("null_lines", "TETHER_ERR_INVALID_ARGUMENT", "`lines` is null", (0, 0)),
        ("null_text", "TETHER_ERR_INVALID_ARGUMENT", "`text` is null", (0, 0)),
        ("null_line_count", "TETHER_ERR_INVALID_ARGUMENT", "`line_count` is null", (0, 0)),
        ("null_text_size", "TETHER_ERR_INVALID_ARGUMENT", "`text_size` is null", (0, 0)),
        ("small_pitch", "TETHER_ERR_INVALID_ARGUMENT", "image.pitch is 3 bytes", (0, 0)),
        ("ocr_on_detect", "TETHER_ERR_WRONG_FAMILY", "`tether_ocr` needs a `ocr` model; this handle holds the `detect` bundle", (0, 0)),
        ("detect_on_ocr", "TETHER_ERR_WRONG_FAMILY", "`tether_detect` needs a `detect` model; this handle holds the `ocr` bundle", (0, 0)),
    ];
    for (name, status, words, counts) in expect {
        let e = &c[*name];
        assert_eq!(e["status"], *status, "{name}: {e}");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(words),
            "{name}: message {msg:?} lacks {words:?}"
        );
        assert_eq!(
            (e["lines"].clone(), e["bytes"].clone()),
            (counts.0.into(), counts.1.into()),
            "{name}: counts"
        );
    }
}

/// Silero VAD (`silero_vad_op18_ifless.onnx`) run by tract directly on `input` (576
/// samples), `state`, `sr` 16000: `(output, stateN)`.
fn silero_by_tract(input: &[f32], state: &[f32]) -> (Vec<f32>, Vec<f32>) {
    use tract_onnx::prelude::*;
    // Value info ignored as the runtime does (the file's declares a symbolic batch its
    // Pad nodes contradict once the input is [1, 576]).
    let mut model = tract_onnx::onnx()
        .with_ignore_value_info(true)
        .model_for_path(tether_testkit::asset("silero_vad_op18_ifless.onnx"))
        .expect("silero ONNX");
    let outlets = model.input_outlets().expect("inputs").to_vec();
    let mut values: TVec<TValue> = tvec![];
    for (i, o) in outlets.iter().enumerate() {
        let name = model.node(o.node).name.clone();
        let (fact, value): (InferenceFact, Tensor) = match name.as_str() {
            "input" => (
                f32::fact([1, 576]).into(),
                tract_ndarray::Array2::from_shape_vec((1, 576), input.to_vec())
                    .expect("input")
                    .into_tensor(),
            ),
            "state" => (
                f32::fact([2, 1, 128]).into(),
                tract_ndarray::Array3::from_shape_vec((2, 1, 128), state.to_vec())
                    .expect("state")
                    .into_tensor(),
            ),
            "sr" => (i64::fact([0usize; 0]).into(), tensor0(16000i64)),
            other => panic!("unexpected input {other}"),
        };
        model.set_input_fact(i, fact).expect("fact");
        values.push(value.into_tvalue());
    }
    let plan = model
        .into_optimized()
        .expect("optimized")
        .into_runnable()
        .expect("runnable");
    let out = plan.run(values).expect("tract run");
    let flat = |t: &TValue| -> Vec<f32> {
        t.to_plain_array_view::<f32>()
            .expect("f32 output")
            .iter()
            .copied()
            .collect()
    };
    // The graph's outputs in order: output [1, 1], stateN [2, 1, 128].
    let (a, b) = (flat(&out[0]), flat(&out[1]));
    assert_eq!((a.len(), b.len()), (1, 256), "silero outputs");
    (a, b)
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(f32_of)
        .collect()
}

/// Largest absolute difference, the lengths checked equal.
fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// The named-tensor API on the VAD bundle's network: its tensors as the bundle records
/// them, two recurrent runs (input copied in, state written in place, then fed back from a
/// copied-out `stateN`) equal to tract running the ONNX file directly (within 1e-5: our
/// plan folds constants before tract's optimiser), and the error cases.
fn network_matches_tract(v: Variant) {
    let f = fixture();
    let c = json(&api_test(v, &[&"network", &f.vad, &f.pcm]));
    assert_eq!(c["engine"], "tract-cpu", "{c}");
    let names = |k: &str| -> Vec<String> {
        c[k].as_array()
            .expect("tensors")
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (inputs, outputs) = (names("inputs"), names("outputs"));
    assert!(
        inputs.iter().any(|n| n == "input") && inputs.iter().any(|n| n == "state"),
        "{c}"
    );
    assert_eq!(outputs, ["output", "stateN"], "{c}");
    let input = c["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "input")
        .unwrap();
    assert_eq!(
        (
            input["dtype"].clone(),
            input["shape"].clone(),
            input["size"].clone()
        ),
        (1.into(), serde_json::json!([1, 576]), (576 * 4).into())
    );
    let pcm: Vec<f32> = std::fs::read(&f.pcm)
        .expect("pcm")
        .chunks_exact(4)
        .take(576)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let state: Vec<f32> = (0..256)
        .map(|i| ((i % 17) as f32 - 8.0) * 0.01f32)
        .collect();
    let (out1, state1) = silero_by_tract(&pcm, &state);
    let (out2, state2) = silero_by_tract(&pcm, &state1);
    let tol = 1e-5;
    for (run, out, st) in [("run1", &out1, &state1), ("run2", &out2, &state2)] {
        let d_out = max_diff(&floats(&c[run]["output"]), out);
        let d_st = max_diff(&floats(&c[run]["stateN"]), st);
        println!("{run}: |C - tract| output {d_out:e}, stateN {d_st:e}");
        assert!(
            d_out <= tol && d_st <= tol,
            "{run}: output {d_out}, stateN {d_st}"
        );
    }
    // The recurrence matters: the second run differs from the first.
    assert!(max_diff(&state1, &state2) > 1e-4, "stateN did not change");
    assert_eq!(c["open_missing_null"], true);
    assert_eq!(c["copy_small_size"], 1024);
    #[rustfmt::skip]
    let expect: &[(&str, &str, &str)] = &[
        ("open_missing", "TETHER_ERR_IO", "loading /nonexistent/net.bundle: "),
        ("open_no_such_network", "TETHER_ERR_INVALID_ARGUMENT", "nope"),
        ("open_null_path", "TETHER_ERR_INVALID_ARGUMENT", "`path` is null"),
        ("set_unknown", "TETHER_ERR_INVALID_ARGUMENT", "has no input `nope`; its inputs: "),
        ("set_wrong_size", "TETHER_ERR_INVALID_ARGUMENT", "input `input` holds 2304 bytes, 100 given"),
        ("set_null_data", "TETHER_ERR_INVALID_ARGUMENT", "`data` is null"),
        ("set_null_name", "TETHER_ERR_INVALID_ARGUMENT", "`name` is null"),
        ("output_unknown", "TETHER_ERR_INVALID_ARGUMENT", "has no output `nope`; its outputs: output, stateN"),
        ("output_is_input", "TETHER_ERR_INVALID_ARGUMENT", "has no output `input`"),
        ("copy_small", "TETHER_ERR_CAPACITY", "output `stateN`: the buffer holds 16 bytes, 1024 needed"),
        ("tensor_out_of_range", "TETHER_ERR_INVALID_ARGUMENT", "index 99 is out of range: the network has 2 outputs"),
        ("bad_io", "TETHER_ERR_INVALID_ARGUMENT", "io is 7"),
        ("run_null", "TETHER_ERR_INVALID_ARGUMENT", "`network` is null"),
        ("device_buffer_cpu", "TETHER_ERR_UNSUPPORTED",
         "network `silero`: a device buffer needs a session on a CUDA device; this one runs on cpu (engine tract CPU)"),
        ("device_buffer_output_cpu", "TETHER_ERR_UNSUPPORTED", "a device buffer needs a session on a CUDA device; this one runs on cpu"),
        ("device_buffer_unknown", "TETHER_ERR_INVALID_ARGUMENT", "has no output tensor `nope`; it has: output, stateN"),
        ("device_buffer_bad_io", "TETHER_ERR_INVALID_ARGUMENT", "io is 7"),
        ("device_buffer_null_address", "TETHER_ERR_INVALID_ARGUMENT", "`address` is null"),
        ("run_on_stream_cpu", "TETHER_ERR_UNSUPPORTED",
         "network `silero`: a run on a CUDA stream needs a session on a CUDA device; this one runs on cpu (engine tract CPU)"),
        ("run_on_stream_host_cpu", "TETHER_ERR_UNSUPPORTED", "a run on a CUDA stream needs a session on a CUDA device"),
        ("run_on_stream_bad_memory", "TETHER_ERR_INVALID_ARGUMENT",
         "memory is 9; expected TETHER_MEMORY_HOST (1) or TETHER_MEMORY_DEVICE (2)"),
        ("run_on_stream_null", "TETHER_ERR_INVALID_ARGUMENT", "`network` is null"),
    ];
    assert_eq!(c["device_buffer_untouched"], true, "{c}");
    for (name, status, words) in expect {
        let e = &c[*name];
        assert_eq!(e["status"], *status, "{name}: {e}");
        let msg = e["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(words),
            "{name}: message {msg:?} lacks {words:?}"
        );
    }
}

const PROMPT: &str = "What is a robot?";

/// Greedy generation streamed through the callback equals `tether run --prompt ...
/// --temperature 0` (the same chat template, text and token ids).
fn generate_matches_cli(v: Variant) {
    let f = fixture();
    let c = json(&api_test(v, &[&"generate", &f.llm, &PROMPT, &"24"]));
    let cli = &cli_greedy(24);
    assert_eq!(c["text"], cli["text"], "text");
    assert_eq!(c["tokens"], cli["tokens"], "token ids");
    assert_eq!(
        c["prompt_tokens"],
        cli["prompt_tokens"].as_array().expect("prompt").len()
    );
    let finish = ["stop", "length", "cancelled"][c["finish_reason"].as_u64().unwrap() as usize];
    assert_eq!(finish, cli["finish_reason"], "finish reason");
}

/// Cancel from the callback (exactly 3 tokens) and from another thread; the next request
/// runs to its end; errors of the generator.
fn generate_cancel(v: Variant) {
    let f = fixture();
    let c = json(&api_test(v, &[&"generate_cancel", &f.llm, &PROMPT]));
    let cb = &c["callback"];
    assert_eq!(cb["status"], "TETHER_ERR_CANCELLED", "{c}");
    assert_eq!(
        (cb["finish_reason"].clone(), cb["generated_tokens"].clone()),
        (2.into(), 3.into()),
        "{c}"
    );
    assert_eq!(cb["tokens"].as_array().unwrap().len(), 3, "{c}");
    assert_eq!(cb["message"], "generation cancelled after 3 tokens");
    let th = &c["thread"];
    assert_eq!(th["status"], "TETHER_ERR_CANCELLED", "{c}");
    assert!(th["generated_tokens"].as_u64().unwrap() < 200, "{c}");
    assert_eq!(c["after"]["status"], "TETHER_OK", "{c}");
    assert_eq!(c["after"]["generated_tokens"], 4, "{c}");
    #[rustfmt::skip]
    let expect: &[(&str, &str, &str)] = &[
        ("not_utf8", "TETHER_ERR_INVALID_ARGUMENT", "prompt is not UTF-8: invalid byte at offset 0"),
        ("empty_chat", "TETHER_ERR_INVALID_ARGUMENT", "the prompt is empty or white space only (0 bytes)"),
        ("blank_chat", "TETHER_ERR_INVALID_ARGUMENT", "the prompt is empty or white space only (3 bytes)"),
        ("blank_raw", "TETHER_ERR_INVALID_ARGUMENT", "the prompt is empty or white space only (3 bytes)"),
        ("zero_max_tokens", "TETHER_ERR_INVALID_ARGUMENT", "max_tokens is 0"),
        ("open_missing", "TETHER_ERR_IO", "loading /nonexistent/model.gguf: "),
        ("cancel_null", "TETHER_ERR_INVALID_ARGUMENT", "`generator` is null"),
    ];
    for (name, status, words) in expect {
        assert_eq!(c[name]["status"], *status, "{name}: {c}");
        assert!(
            c[name]["message"].as_str().unwrap().contains(words),
            "{name}: {c}"
        );
    }
}

/// A result array too small on a real frame: the status says so, `count` is the number
/// found, the best ones are written.
fn small_result_array(v: Variant) {
    let f = fixture();
    let (w, h) = (f.frame_w.to_string(), f.frame_h.to_string());
    let c = json(&api_test(
        v,
        &[&"detect_small", &f.detect, &f.frame, &w, &h],
    ));
    let all = detections(&c["all"]);
    assert!(!all.is_empty());
    assert_eq!(c["status"], "TETHER_ERR_CAPACITY", "{c}");
    assert_eq!(c["count"], all.len());
    let msg = c["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "detections: the array holds {}, {} needed",
            all.len() - 1,
            all.len()
        )),
        "{msg}"
    );
    assert_eq!(detections(&c["written"]), all[..all.len() - 1]);
}

/// `tether_detect` and `tether_detect_staged` allocate, per call after warm-up, exactly
/// what the Rust detector allocates for the same frame (the C layer adds nothing: 0 on a
/// GPU, where the detector allocates nothing; on the CPU tract's own intermediates), and
/// the same number every call.
fn detect_allocations() {
    let f = fixture();
    let (w, h) = (f.frame_w.to_string(), f.frame_h.to_string());
    let c = json(&api_test(
        Variant::CountingAllocs,
        &[&"alloc", &f.detect, &f.frame, &w, &h],
    ));
    let counts = |k: &str| -> Vec<u64> { serde_json::from_value(c[k].clone()).expect("counts") };
    let (c_detect, c_staged) = (counts("detect"), counts("staged"));

    use tether_detect::{Detector, FrameSpec, ImageView, PixelFormat};
    let mut det = Detector::load(&f.detect).expect("detector");
    let rgb = std::fs::read(&f.frame).expect("frame");
    let view = ImageView::new(&rgb, f.frame_w, f.frame_h, PixelFormat::Rgb8).expect("view");
    det.prepare(FrameSpec::packed(f.frame_w, f.frame_h, PixelFormat::Rgb8))
        .expect("prepare");
    det.staging_mut().expect("staging").copy_from_slice(&rgb);
    for _ in 0..5 {
        det.detect_prepared(&view).expect("detect");
        det.detect_staged().expect("staged");
    }
    let rust_detect: Vec<u64> = (0..20)
        .map(|_| count_allocs(|| det.detect_prepared(&view).map(|d| d.len())).1)
        .collect();
    let rust_staged: Vec<u64> = (0..20)
        .map(|_| count_allocs(|| det.detect_staged().map(|d| d.len())).1)
        .collect();
    println!(
        "allocations per call after warm-up: C tether_detect {c_detect:?}, Rust detect_prepared {rust_detect:?}; \
         C tether_detect_staged {c_staged:?}, Rust detect_staged {rust_staged:?}"
    );
    assert_eq!(
        steady(&c_detect, "C tether_detect"),
        steady(&rust_detect, "Rust detect_prepared"),
        "tether_detect allocates more than the detector"
    );
    assert_eq!(
        steady(&c_staged, "C tether_detect_staged"),
        steady(&rust_staged, "Rust detect_staged"),
        "tether_detect_staged allocates more than the detector"
    );
}

/// The C++ wrapper: exceptions carry the status and the message, handles move, results
/// as through C.
fn cpp_wrapper() {
    let f = fixture();
    let (w, h) = (f.frame_w.to_string(), f.frame_h.to_string());
    let (pw, ph) = (f.page_w.to_string(), f.page_h.to_string());
    let c = json(&api_test(
        Variant::CppWrapper,
        &[
            &f.detect, &f.vad, &f.embed, &f.frame, &w, &h, &f.llm, &f.ocr, &f.page, &pw, &ph,
            &f.pcm,
        ],
    ));
    assert_eq!(c["missing"]["status"], "TETHER_ERR_IO", "{c}");
    assert!(
        c["missing"]["message"]
            .as_str()
            .unwrap()
            .contains("/nonexistent/missing.bundle"),
        "{c}"
    );
    assert_eq!(
        c["wrong_family"]["status"], "TETHER_ERR_WRONG_FAMILY",
        "{c}"
    );
    assert!(
        c["wrong_family"]["message"]
            .as_str()
            .unwrap()
            .contains("is a `detect` bundle, not a `vad` bundle"),
        "{c}"
    );
    let cli = cli_result(&f.detect, &tether_testkit::asset("astronaut.png"), &[]);
    let want = detections(&cli["detections"]);
    assert_eq!(c["detections"], want.len(), "{c}");
    assert_eq!(c["first_class"], want[0].1.as_str(), "{c}");
    assert_eq!(c["capacity"], "TETHER_ERR_CAPACITY", "{c}");
    // 1600 samples: 3 chunks pushed, the 64 left over run by finish.
    assert_eq!(
        (
            c["vad_chunks"].clone(),
            c["vad_last"].clone(),
            c["vad_samples"].clone()
        ),
        (3.into(), 1.into(), 1600.into())
    );
    assert_eq!(c["embed_dim"], 384);
    // tether::Ocr: the page's lines (texts and quads) equal the CLI's, on the first read
    // (its buffers grown to the sizes the library reported) and the second.
    let cli = cli_result(&f.ocr, &tether_testkit::asset("page.png"), &[]);
    let want: Vec<(String, [f32; 8])> = ocr_lines(&cli["lines"])
        .into_iter()
        .map(|l| (l.0, l.4))
        .collect();
    let got: Vec<(String, [f32; 8])> = c["ocr"]
        .as_array()
        .expect("ocr lines")
        .iter()
        .map(|l| {
            let q = l["quad"].as_array().expect("quad");
            (
                l["text"].as_str().expect("text").to_string(),
                std::array::from_fn(|i| f32_of(&q[i])),
            )
        })
        .collect();
    assert_eq!(got, want, "tether::Ocr vs tether run --json");
    assert_eq!(c["ocr_first_read"], want.len(), "{c}");
    // tether::Network on the VAD bundle's network (zero state): its output equals tract's
    // on the same 576 samples.
    let pcm: Vec<f32> = std::fs::read(&f.pcm)
        .expect("pcm")
        .chunks_exact(4)
        .take(576)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let (out, _) = silero_by_tract(&pcm, &[0.0; 256]);
    assert_eq!(c["net_inputs"], serde_json::json!(["input", "sr", "state"]));
    assert_eq!(c["net_output_count"], 1);
    assert!(
        (f32_of(&c["net_output"]) - out[0]).abs() <= 1e-5,
        "tether::Network {} vs tract {}",
        c["net_output"],
        out[0]
    );
    assert_eq!(
        c["net_wrong_type"]["status"], "TETHER_ERR_INVALID_ARGUMENT",
        "{c}"
    );
    assert!(
        c["net_wrong_type"]["message"]
            .as_str()
            .unwrap()
            .contains("tensor `output` is f32: not readable or writable as the element type asked for (8-byte elements)"),
        "{c}"
    );
    assert_eq!(c["net_wrong_size"]["status"], "TETHER_ERR_INVALID_ARGUMENT");
    assert!(
        c["net_wrong_size"]["message"]
            .as_str()
            .unwrap()
            .contains("input `input` holds 2304 bytes, 12 given"),
        "{c}"
    );
    for key in ["net_device_buffer_cpu", "net_run_on_stream_cpu"] {
        assert_eq!(c[key]["status"], "TETHER_ERR_UNSUPPORTED", "{key}: {c}");
        let msg = c[key]["message"].as_str().unwrap_or_default();
        assert!(
            msg.contains(
                "needs a session on a CUDA device; this one runs on cpu (engine tract CPU)"
            ),
            "{key}: {msg}"
        );
    }
    assert!(
        (c["embed_norm"].as_f64().unwrap() - 1.0).abs() < 1e-5,
        "{c}"
    );
}

/// The C++ fixed-rate loop: its last frame's detections equal the CLI's.
fn cpp_detect_loop_matches_cli() {
    let f = fixture();
    let size = format!("{}x{}", f.frame_w, f.frame_h);
    let c = json(&api_test(
        Variant::CppDetectLoop,
        &[
            &f.detect,
            &"--raw",
            &f.frame,
            &"--size",
            &size,
            &"--frames",
            &"3",
            &"--json",
        ],
    ));
    assert_eq!(c["frames"], 3, "{c}");
    assert_eq!(c["stopped_by_signal"], false, "{c}");
    let misses = c["deadline_misses"].as_u64().expect("misses");
    assert!(misses <= 3, "{c}");
    let cli = cli_result(&f.detect, &tether_testkit::asset("astronaut.png"), &[]);
    assert_eq!(detections(&c["detections"]), detections(&cli["detections"]));
}

/// Ctrl-C stops the endless loop cleanly: exit 0 and the summary.
fn cpp_detect_loop_sigint() {
    let f = fixture();
    let exe = program(Variant::CppDetectLoop);
    let child = Command::new(&exe)
        .arg(&f.detect)
        .arg("--json")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn detect_loop");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let kill = run(Command::new("kill").arg("-INT").arg(child.id().to_string()));
    ok("kill -INT", &kill);
    let o = child.wait_with_output().expect("wait detect_loop");
    let c = json(&ok("detect_loop (SIGINT)", &o));
    assert_eq!(c["stopped_by_signal"], true, "{c}");
    assert!(c["frames"].as_u64().unwrap() > 0, "{c}");
    // At 0.05 Hz (a 20 s period) Ctrl-C ends the wait for the next frame, not the period.
    let child = Command::new(&exe)
        .arg(&f.detect)
        .args(["--hz", "0.05", "--json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn detect_loop");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let asked = std::time::Instant::now();
    ok(
        "kill -INT",
        &run(Command::new("kill").arg("-INT").arg(child.id().to_string())),
    );
    let o = child.wait_with_output().expect("wait detect_loop");
    let waited = asked.elapsed();
    let c = json(&ok("detect_loop --hz 0.05 (SIGINT)", &o));
    assert_eq!(c["stopped_by_signal"], true, "{c}");
    assert!(
        waited < std::time::Duration::from_secs(5),
        "exited {waited:?} after SIGINT (the period is 20 s): {c}"
    );
}

/// `tether run LLM --prompt PROMPT --temperature 0 --max-tokens N --threads 1 --json`: the
/// result object (greedy: text and token ids are the reference of every generation test).
fn cli_greedy(n: u32) -> Value {
    let f = fixture();
    let o = run(Command::new(&f.tether)
        .arg("run")
        .arg(&f.llm)
        .args(["--prompt", PROMPT, "--temperature", "0"])
        .args(["--max-tokens", &n.to_string()])
        .args(["--threads", "1", "--json"])
        .env_remove("RUST_LOG"));
    let v: Value = serde_json::from_str(&ok("tether run --prompt", &o)).expect("CLI JSON");
    v["results"][0]["result"].clone()
}

/// The C++ streaming example, greedy: the text its callback gathered and the token ids
/// equal the CLI's; streamed to stdout (no `--json`), the output is the same text.
fn cpp_generate_matches_cli() {
    let f = fixture();
    let exe = program(Variant::CppGenerate);
    let args = |json: bool| {
        let mut cmd = Command::new(&exe);
        cmd.arg(&f.llm)
            .args([
                "--prompt",
                PROMPT,
                "--temperature",
                "0",
                "--max-tokens",
                "12",
            ])
            .args(["--threads", "1"])
            .env_remove("RUST_LOG");
        if json {
            cmd.arg("--json");
        }
        cmd
    };
    let c = json(&ok("generate --json", &run(&mut args(true))));
    let cli = cli_greedy(12);
    assert!(
        !cli["text"].as_str().unwrap_or_default().is_empty(),
        "{cli}"
    );
    assert_eq!(c["text"], cli["text"], "text");
    assert_eq!(c["tokens"], cli["tokens"], "token ids");
    assert_eq!(c["finish_reason"], cli["finish_reason"], "finish reason");
    assert_eq!(c["stopped_by_signal"], false);
    assert_eq!(
        c["prompt_tokens"],
        cli["prompt_tokens"].as_array().expect("prompt").len()
    );
    assert_eq!(c["generated_tokens"], 12);
    let o = run(&mut args(false));
    let streamed = ok("generate (streaming)", &o);
    assert_eq!(
        streamed,
        format!("{}\n", cli["text"].as_str().unwrap()),
        "streamed text"
    );
    assert!(
        text(&o.stderr).contains("finish length"),
        "{}",
        text(&o.stderr)
    );
}

/// Ctrl-C during a long generation: the request ends as cancelled, exit 0 with the summary.
fn cpp_generate_sigint() {
    use std::io::Read;
    let f = fixture();
    let exe = program(Variant::CppGenerate);
    let mut child = Command::new(&exe)
        .arg(&f.llm)
        .args(["--prompt", PROMPT, "--max-tokens", "4000", "--threads", "1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn generate");
    // Wait for the first streamed bytes: the generation is running.
    let mut stdout = child.stdout.take().expect("stdout");
    let mut first = [0u8; 1];
    stdout
        .read_exact(&mut first)
        .expect("a first streamed piece");
    let kill = run(Command::new("kill").arg("-INT").arg(child.id().to_string()));
    ok("kill -INT", &kill);
    let mut rest = Vec::new();
    stdout.read_to_end(&mut rest).expect("stdout");
    let o = child.wait_with_output().expect("wait generate");
    let err = text(&o.stderr);
    assert!(o.status.success(), "generate (SIGINT): {}: {err}", o.status);
    assert!(
        err.contains("finish cancelled (stopped by Ctrl-C)"),
        "{err}"
    );
    let generated: u64 = err
        .split(" generated")
        .next()
        .and_then(|s| s.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no generated count in {err:?}"));
    assert!((1..4000).contains(&generated), "{err}");
}

/// A published Detection2DArray: (frame_id, [(class, score, [centre x, centre y, size x,
/// size y])]).
type Published = (String, Vec<(String, f64, [f64; 4])>);

/// The CLI's detections as the node publishes them: f64 from the f32 corners, computed as
/// detect_core.hpp does.
fn as_published(frame_id: &str, cli: &Value) -> Published {
    let d = detections(&cli["detections"])
        .into_iter()
        .map(|(_, name, score, b)| {
            let [x1, y1, x2, y2] = b.map(f64::from);
            (
                name,
                f64::from(score),
                [0.5 * (x1 + x2), 0.5 * (y1 + y2), x2 - x1, y2 - y1],
            )
        })
        .collect();
    (frame_id.to_string(), d)
}

/// One Detection2DArray line of the node's twin.
fn published(line: &str) -> Published {
    let m = json(line);
    let n = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"));
    let d = m["detections"]
        .as_array()
        .expect("detections")
        .iter()
        .map(|d| {
            let b = &d["bbox"];
            let h = &d["results"][0]["hypothesis"];
            (
                h["class_id"].as_str().expect("class_id").to_string(),
                n(&h["score"]),
                [
                    n(&b["center"]["position"]["x"]),
                    n(&b["center"]["position"]["y"]),
                    n(&b["size_x"]),
                    n(&b["size_y"]),
                ],
            )
        })
        .collect();
    let id = m["header"]["frame_id"].as_str().expect("frame_id");
    (id.to_string(), d)
}

/// The frames the node's twin is fed, `(file, WxH, encoding)`: astronaut.png as rgb8, as
/// bgr8 with 8 bytes of row padding, as an encoding the detector cannot take (yuv422:
/// logged, nothing published), and page.png as mono8.
fn node_frames() -> Vec<(PathBuf, String, &'static str)> {
    let f = fixture();
    let rgb = std::fs::read(&f.frame).expect("frame");
    let (w, h) = (f.frame_w as usize, f.frame_h as usize);
    let step = w * 3 + 8;
    let mut bgr = vec![0u8; step * h];
    for y in 0..h {
        for x in 0..w {
            let (s, d) = ((y * w + x) * 3, y * step + x * 3);
            bgr[d..d + 3].copy_from_slice(&[rgb[s + 2], rgb[s + 1], rgb[s]]);
        }
    }
    let bgr_path = f.dir.join("astronaut_padded.bgr");
    std::fs::write(&bgr_path, bgr).expect("bgr frame");
    let size = format!("{}x{}", f.frame_w, f.frame_h);
    vec![
        (f.frame.clone(), size.clone(), "rgb8"),
        (bgr_path, size.clone(), "bgr8"),
        (f.frame.clone(), size, "yuv422"),
        (
            f.page.clone(),
            format!("{}x{}", f.page_w, f.page_h),
            "mono8",
        ),
    ]
}

/// Run a build of the twin on `node_frames()`; every published array equals the CLI's
/// detections on the same image, the yuv422 frame is logged and publishes nothing.
fn check_node_twin(exe: &Path) {
    let f = fixture();
    let mut cmd = Command::new(exe);
    cmd.arg(&f.detect).args(["--hz", "50"]);
    for (file, size, encoding) in node_frames() {
        cmd.arg("--image").arg(file).arg(size).arg(encoding);
    }
    let o = run(&mut cmd);
    let out = ok(&exe.display().to_string(), &o);
    let got: Vec<Published> = out.lines().map(published).collect();
    let astronaut = cli_result(&f.detect, &tether_testkit::asset("astronaut.png"), &[]);
    let page = cli_result(&f.detect, &tether_testkit::asset("page.png"), &[]);
    assert!(!astronaut["detections"].as_array().unwrap().is_empty());
    let want = vec![
        as_published("camera_0", &astronaut),
        as_published("camera_1", &astronaut),
        as_published("camera_3", &page),
    ];
    // Equal up to serde_json's parsing of the 17 printed digits (it may round the last
    // bit the other way): the values themselves are exact f64 sums and differences of the
    // f32 corners.
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * b.abs().max(1.0);
    let same = got.len() == want.len()
        && got.iter().zip(&want).all(|(g, w)| {
            g.0 == w.0
                && g.1.len() == w.1.len()
                && g.1.iter().zip(&w.1).all(|(a, b)| {
                    a.0 == b.0
                        && close(a.1, b.1)
                        && a.2.iter().zip(&b.2).all(|(x, y)| close(*x, *y))
                })
        });
    assert!(
        same,
        "published Detection2DArrays vs tether run --json:\n{got:?}\n{want:?}"
    );
    let err = text(&o.stderr);
    assert!(
        err.contains(
            "TETHER_ERR_INVALID_ARGUMENT: image encoding `yuv422` is not rgb8, bgr8, rgba8 or mono8"
        ),
        "{err}"
    );
}

/// The ROS 2 node's ROS-free twin (ROS 2 cannot be installed here), built with `c++`.
fn node_twin_matches_cli() {
    check_node_twin(&program(Variant::CppNodeTwin));
}

/// `capi/install.sh PREFIX --from <this test's deps dir>`, once: the installed layout.
fn installed() -> &'static Path {
    static PREFIX: OnceLock<PathBuf> = OnceLock::new();
    PREFIX.get_or_init(|| {
        let prefix = fixture().dir.join("prefix");
        let deps = std::env::current_exe()
            .expect("test executable path")
            .parent()
            .expect("deps dir")
            .to_path_buf();
        let o = run(Command::new("bash")
            .arg(crate_dir().join("install.sh"))
            .arg(&prefix)
            .arg("--from")
            .arg(&deps));
        ok("capi/install.sh", &o);
        for f in [
            "include/tether/tether.h",
            "include/tether/tether.hpp",
            "lib/libtether.so",
            "lib/libtether.a",
            "lib/cmake/tether/tetherConfig.cmake",
            "lib/cmake/tether/tetherConfigVersion.cmake",
            "lib/pkgconfig/tether.pc",
        ] {
            assert!(prefix.join(f).is_file(), "install.sh did not install {f}");
        }
        prefix
    })
}

/// Run an installed consumer of detect_loop on the test frame; its detections equal the
/// CLI's.
fn consumer_matches_cli(exe: &Path) {
    let f = fixture();
    let size = format!("{}x{}", f.frame_w, f.frame_h);
    let o = run(Command::new(exe)
        .arg(&f.detect)
        .args(["--raw"])
        .arg(&f.frame)
        .args(["--size", &size, "--frames", "2", "--json"]));
    let c = json(&ok(&exe.display().to_string(), &o));
    let cli = cli_result(&f.detect, &tether_testkit::asset("astronaut.png"), &[]);
    assert_eq!(
        detections(&c["detections"]),
        detections(&cli["detections"]),
        "{}",
        exe.display()
    );
}

/// `pkg-config --cflags --libs tether` builds the C++ example against the install.
fn install_pkg_config() {
    let prefix = installed();
    let pc = run(Command::new("pkg-config")
        .args(["--cflags", "--libs", "tether"])
        .env("PKG_CONFIG_PATH", prefix.join("lib/pkgconfig")));
    let flags = ok("pkg-config tether", &pc);
    let exe = fixture().dir.join("detect_loop_pkg_config");
    let o = run(Command::new("c++")
        .args(["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror"])
        .arg(crate_dir().join("../examples/cpp/detect_loop.cpp"))
        .args(flags.split_whitespace())
        .arg(format!("-Wl,-rpath,{}", prefix.join("lib").display()))
        .arg("-Wl,--disable-new-dtags")
        .arg("-o")
        .arg(&exe));
    ok("c++ with pkg-config flags", &o);
    consumer_matches_cli(&exe);
}

/// `find_package(tether)`: examples/cpp/CMakeLists.txt builds detect_loop against
/// tether::tether (shared) and tether::tether_static; both run.
fn install_cmake() {
    let prefix = installed();
    let build = fixture().dir.join("cmake-build");
    let o = run(Command::new("cmake")
        .arg("-S")
        .arg(crate_dir().join("../examples/cpp"))
        .arg("-B")
        .arg(&build)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg("-DCMAKE_BUILD_TYPE=Release"));
    ok("cmake configure", &o);
    ok(
        "cmake --build",
        &run(Command::new("cmake").arg("--build").arg(&build)),
    );
    consumer_matches_cli(&build.join("detect_loop"));
    consumer_matches_cli(&build.join("detect_loop_static"));
    // The ROS 2 node's package without ROS 2: its CMakeLists builds the twin alone.
    let node = fixture().dir.join("cmake-node");
    let o = run(Command::new("cmake")
        .arg("-S")
        .arg(crate_dir().join("../examples/ros2/tether_detect_node"))
        .arg("-B")
        .arg(&node)
        .arg(format!("-DCMAKE_PREFIX_PATH={}", prefix.display()))
        .arg("-DCMAKE_BUILD_TYPE=Release"));
    let log = ok("cmake configure (tether_detect_node)", &o);
    assert!(
        log.contains("building only tether_detect_standalone"),
        "{log}"
    );
    ok(
        "cmake --build (tether_detect_node)",
        &run(Command::new("cmake").arg("--build").arg(&node)),
    );
    check_node_twin(&node.join("tether_detect_standalone"));
}

/// Why `tool` cannot be used here, if so.
fn missing_tool(tool: &str) -> Option<String> {
    match Command::new(tool).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        _ => Some(format!("`{tool}` is not installed")),
    }
}

/// `tether_vad_push` of one chunk allocates, per call after warm-up, what the Rust stream's
/// `Vad::push_chunk` allocates for the same chunks (the C layer adds nothing), every call.
fn vad_allocations() {
    let f = fixture();
    let c = json(&api_test(
        Variant::CountingAllocs,
        &[&"alloc_vad", &f.vad, &f.pcm],
    ));
    let c_push: Vec<u64> = serde_json::from_value(c["push"].clone()).expect("counts");
    let audio = tether_vad::read_wav(tether_testkit::asset("Front_Center.wav")).expect("wav");
    let chunks: Vec<&[f32]> = audio
        .samples
        .chunks_exact(tether_vad::CHUNK_SAMPLES)
        .collect();
    let mut vad = tether_vad::Vad::load(&f.vad).expect("vad");
    for i in 0..20 {
        vad.push_chunk(chunks[i % chunks.len()]).expect("chunk");
    }
    let rust: Vec<u64> = (20..60)
        .map(|i| count_allocs(|| vad.push_chunk(chunks[i % chunks.len()]).map(|r| r.index)).1)
        .collect();
    println!(
        "allocations per chunk after warm-up: C tether_vad_push {c_push:?}, Rust Vad::push_chunk {rust:?}"
    );
    let (lo, hi) = (c_push.iter().min().unwrap(), c_push.iter().max().unwrap());
    assert_eq!(
        lo, hi,
        "C tether_vad_push: allocations per call vary: {c_push:?}"
    );
    let (rlo, rhi) = (rust.iter().min().unwrap(), rust.iter().max().unwrap());
    assert_eq!(
        rlo, rhi,
        "Rust push_chunk: allocations per call vary: {rust:?}"
    );
    assert_eq!(lo, rlo, "tether_vad_push allocates more than the stream");
}

/// `tether_ocr` on a page and `tether_network_run` allocate, per call after warm-up, what
/// the Rust `Ocr::detect_text` and `NetworkSession::run` allocate for the same input (the C
/// layer adds nothing), every call.
fn ocr_network_allocations() {
    let f = fixture();
    let (w, h) = (f.page_w.to_string(), f.page_h.to_string());
    let c = json(&api_test(
        Variant::CountingAllocs,
        &[&"alloc_more", &f.ocr, &f.page, &w, &h, &f.vad, &f.pcm],
    ));
    let counts = |k: &str| -> Vec<u64> { serde_json::from_value(c[k].clone()).expect("counts") };
    let (c_ocr, c_net) = (counts("ocr"), counts("network_run"));

    let gray = std::fs::read(&f.page).expect("page");
    let view =
        tether_ocr::ImageView::new(&gray, f.page_w, f.page_h, tether_ocr::PixelFormat::Gray8)
            .expect("view");
    let mut ocr = tether_ocr::Ocr::load(&f.ocr).expect("ocr");
    for _ in 0..2 {
        ocr.detect_text(&view).expect("ocr");
    }
    let rust_ocr: Vec<u64> = (0..5)
        .map(|_| count_allocs(|| ocr.detect_text(&view).map(|r| r.len())).1)
        .collect();
    let mut net =
        tether_runtime::NetworkSession::open(&f.vad, &Default::default()).expect("network");
    let pcm: Vec<f32> = std::fs::read(&f.pcm)
        .expect("pcm")
        .chunks_exact(4)
        .take(576)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    net.input_mut::<i64>("sr").expect("sr")[0] = 16000;
    net.input_mut::<f32>("input")
        .expect("input")
        .copy_from_slice(&pcm);
    for _ in 0..5 {
        net.run().expect("run");
    }
    let rust_net: Vec<u64> = (0..20).map(|_| count_allocs(|| net.run()).1).collect();
    println!(
        "allocations per call after warm-up: C tether_ocr {c_ocr:?}, Rust detect_text {rust_ocr:?}; \
         C tether_network_run {c_net:?}, Rust NetworkSession::run {rust_net:?}"
    );
    assert_eq!(
        steady(&c_ocr, "C tether_ocr"),
        steady(&rust_ocr, "Rust Ocr::detect_text"),
        "tether_ocr allocates more than the pipeline"
    );
    assert_eq!(
        steady(&c_net, "C tether_network_run"),
        steady(&rust_net, "Rust NetworkSession::run"),
        "tether_network_run allocates more than the session"
    );
}

// ------------------------------------------------------------------ harness

/// Why the C tests cannot run here, if so: `cc` or `c++` missing, or building for another
/// architecture than the one this test runs as (a cross build run under emulation, as
/// `cross/ci-aarch64.sh` runs the suite: the host's `cc` cannot link the target's library;
/// these tests run natively in `./tests/run`).
fn skip_reason() -> Option<String> {
    for compiler in ["cc", "c++"] {
        match Command::new(compiler).arg("-dumpmachine").output() {
            Ok(o) if o.status.success() => {
                let machine = text(&o.stdout).trim().to_string();
                let arch = std::env::consts::ARCH;
                if !machine.starts_with(arch) {
                    return Some(format!(
                        "`{compiler}` builds for {machine}, this test runs as {arch} (a cross \
                         build under emulation); the C and C++ tests run natively"
                    ));
                }
            }
            Ok(o) => {
                return Some(format!(
                    "`{compiler} -dumpmachine` failed: {}",
                    text(&o.stderr)
                ));
            }
            Err(e) => {
                return Some(format!(
                    "no C/C++ compiler: `{compiler}` cannot be run ({e})"
                ));
            }
        }
    }
    None
}

fn main() {
    let args = Arguments::from_args();
    let skip = skip_reason();
    if let Some(why) = &skip {
        eprintln!("c_api: every test ignored: {why}");
    }
    type Check = Arc<dyn Fn() + Send + Sync>;
    let checks: Vec<(&str, Check)> = vec![
        (
            "detect_matches_cli",
            Arc::new(|| detect_matches_cli(Variant::Plain)),
        ),
        (
            "ocr_matches_cli",
            Arc::new(|| ocr_matches_cli(Variant::Plain)),
        ),
        (
            "vad_matches_cli",
            Arc::new(|| vad_matches_cli(Variant::Plain)),
        ),
        (
            "network_matches_tract",
            Arc::new(|| network_matches_tract(Variant::Plain)),
        ),
        (
            "embed_matches_cli",
            Arc::new(|| embed_matches_cli(Variant::Plain)),
        ),
        ("error_paths", Arc::new(|| error_paths(Variant::Plain))),
        (
            "generate_matches_cli",
            Arc::new(|| generate_matches_cli(Variant::Plain)),
        ),
        (
            "generate_cancel",
            Arc::new(|| generate_cancel(Variant::Plain)),
        ),
        (
            "small_result_array",
            Arc::new(|| small_result_array(Variant::Plain)),
        ),
        (
            "detect_allocations_match_rust",
            Arc::new(detect_allocations),
        ),
        ("vad_allocations_match_rust", Arc::new(vad_allocations)),
        (
            "ocr_network_allocations_match_rust",
            Arc::new(ocr_network_allocations),
        ),
        ("cpp::wrapper", Arc::new(cpp_wrapper)),
        (
            "cpp::detect_loop_matches_cli",
            Arc::new(cpp_detect_loop_matches_cli),
        ),
        (
            "cpp::detect_loop_stops_on_sigint",
            Arc::new(cpp_detect_loop_sigint),
        ),
        (
            "cpp::generate_matches_cli",
            Arc::new(cpp_generate_matches_cli),
        ),
        (
            "cpp::generate_stops_on_sigint",
            Arc::new(cpp_generate_sigint),
        ),
        (
            "cpp::ros2_node_twin_matches_cli",
            Arc::new(node_twin_matches_cli),
        ),
        (
            "sanitizers::asan_ubsan_no_report",
            Arc::new(|| {
                detect_matches_cli(Variant::Sanitized);
                ocr_matches_cli(Variant::Sanitized);
                network_matches_tract(Variant::Sanitized);
                vad_matches_cli(Variant::Sanitized);
                embed_matches_cli(Variant::Sanitized);
                error_paths(Variant::Sanitized);
                generate_cancel(Variant::Sanitized);
                small_result_array(Variant::Sanitized);
            }),
        ),
    ];
    let mut checks: Vec<(&str, Check, Option<String>)> = checks
        .into_iter()
        .map(|(name, check)| (name, check, skip.clone()))
        .collect();
    // The device buffers and a caller's stream need a GPU (ignored, with the reason, without).
    let gpu_why = skip.clone().or_else(gpu_skip_reason);
    if let Some(w) = &gpu_why {
        eprintln!("c_api: gpu::network_device_io_on_caller_stream ignored: {w}");
    }
    checks.push((
        "gpu::network_device_io_on_caller_stream",
        Arc::new(gpu_network_device_io) as Check,
        gpu_why,
    ));
    // The install layout's consumers need their tools too (each ignored, with the reason,
    // where its tool is missing).
    for (name, tool, check) in [
        (
            "install::pkg_config",
            "pkg-config",
            Arc::new(install_pkg_config) as Check,
        ),
        ("install::cmake", "cmake", Arc::new(install_cmake) as Check),
    ] {
        let why = skip.clone().or_else(|| missing_tool(tool));
        if let Some(w) = &why {
            eprintln!("c_api: {name} ignored: {w}");
        }
        checks.push((name, check, why));
    }
    let trials = checks
        .into_iter()
        .map(|(name, check, why)| {
            Trial::test(name, move || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check())).map_err(|p| {
                    Failed::from(
                        p.downcast_ref::<String>()
                            .cloned()
                            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                            .unwrap_or_else(|| "panicked".into()),
                    )
                })
            })
            .with_ignored_flag(why.is_some())
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    let dir = scratch_dir();
    if dir.exists() {
        if conclusion.has_failed() {
            eprintln!("c_api: scratch files kept in {}", dir.display());
        } else {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    conclusion.exit();
}
