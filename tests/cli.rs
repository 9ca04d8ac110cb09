//! The `tether` command line as scripts use it: the documented forms, the JSON
//! outputs, and the exit codes (0 ok, 1 error, 2 usage, 3 corrupt bundle).
//!
//! Uses the real models from `tests/fetch-assets`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use serde_json::Value;

fn tether(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("spawn tether")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn asset(name: &str) -> String {
    let dir = std::env::var_os("TETHER_ASSETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".assets"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first",
        p.display()
    );
    p.to_string_lossy().into_owned()
}

fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let d = std::env::temp_dir().join(format!("tether-cli-{}", std::process::id()));
        std::fs::create_dir_all(&d).expect("scratch dir");
        d
    })
}

/// `tether build` of the nudenet 320n model at 320x320 into `out`, plus `extra` flags.
fn build_320n(out: &Path, extra: &[&str]) -> Output {
    let onnx = asset("320n.onnx");
    let mut args = vec![
        "build",
        "--family",
        "detect",
        "--onnx",
        &onnx,
        "-o",
        out.to_str().unwrap(),
        "--input-size",
        "320",
    ];
    args.extend_from_slice(extra);
    tether(&args)
}

/// The nudenet 320n model built at 320x320, once per test process.
fn nudenet_bundle() -> String {
    static B: OnceLock<String> = OnceLock::new();
    B.get_or_init(|| {
        let out = scratch().join("nudenet.bundle");
        let o = build_320n(&out, &[]);
        assert!(o.status.success(), "build failed: {}", stderr(&o));
        assert!(
            stdout(&o).contains("18 classes, input 320x320"),
            "{}",
            stdout(&o)
        );
        out.to_string_lossy().into_owned()
    })
    .clone()
}

fn json(o: &Output) -> Value {
    assert!(
        o.status.success(),
        "exit {:?}: {}",
        o.status.code(),
        stderr(o)
    );
    serde_json::from_slice(&o.stdout).expect("JSON on stdout")
}

#[test]
fn inspect_json_describes_the_manifest() {
    let b = nudenet_bundle();
    let v = json(&tether(&["inspect", &b, "--json"]));
    assert_eq!(v["identity"]["family"], "detect");
    assert_eq!(v["identity"]["name"], "320n");
    assert_eq!(v["format_version"], "1.1");
    assert_eq!(
        v["identity"]["content_digest_sha256"]
            .as_str()
            .unwrap()
            .len(),
        64
    );
    let sections = v["sections"].as_array().unwrap();
    let names: Vec<&str> = sections
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["detect/model/model.onnx", "detect/labels", "detect/config"]
    );
    for s in sections {
        assert_eq!(
            s["offset"].as_u64().unwrap() % 4096,
            0,
            "section {} not page-aligned",
            s["name"]
        );
    }
    // The manifest records the shapes the bundle runs at (the ONNX declares [batch, 3, h, w]
    // with dynamic dims; the bundle was built at 320x320).
    let t = &sections[0]["tensors"][0];
    assert_eq!(t["name"], "images");
    assert_eq!(t["dtype"], "f32");
    assert_eq!(t["dims"], serde_json::json!([1, 3, 320, 320]));
    let o = &sections[0]["tensors"][1];
    assert_eq!(o["dims"], serde_json::json!([1, 22, 2100]));
    assert_eq!(v["targets"][0]["engine"], "TractCpu");

    let text = tether(&["inspect", &b]);
    assert!(text.status.success());
    assert!(
        stdout(&text).contains("family     detect"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn run_json_and_annotation() {
    let b = nudenet_bundle();
    let png = scratch().join("astronaut.annotated.png");
    let v = json(&tether(&[
        "run",
        &b,
        &asset("astronaut.png"),
        "--json",
        "--annotate",
        png.to_str().unwrap(),
    ]));
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["family"], "detect");
    assert_eq!(v["engines"]["model"], "tract CPU");
    let r = &v["results"][0];
    assert_eq!(r["result"]["image_width"], 512);
    assert_eq!(r["result"]["image_height"], 512);
    assert_eq!(r["annotated"], png.to_str().unwrap());
    let dets = r["result"]["detections"].as_array().unwrap();
    assert!(!dets.is_empty());
    assert_eq!(dets[0]["class_name"], "FACE_FEMALE");
    let img = image::open(&png).expect("annotated PNG");
    assert_eq!((img.width(), img.height()), (512, 512));

    // Several inputs: one JSON document, annotations into a directory.
    let dir = scratch().join("annotated");
    let v = json(&tether(&[
        "run",
        &b,
        &asset("astronaut.png"),
        &asset("page.png"),
        "--json",
        "--annotate",
        dir.to_str().unwrap(),
    ]));
    assert_eq!(v["results"].as_array().unwrap().len(), 2);
    assert!(dir.join("000-astronaut.annotated.png").is_file());
    assert!(dir.join("001-page.annotated.png").is_file());
    // Two inputs with the same stem: two files, neither overwritten.
    let same = scratch().join("same-stem");
    let v = json(&tether(&[
        "run",
        &b,
        &asset("page.png"),
        &asset("page.png"),
        "--json",
        "--annotate",
        same.to_str().unwrap(),
    ]));
    assert_eq!(
        v["results"][1]["annotated"],
        same.join("001-page.annotated.png").to_str().unwrap()
    );
    assert!(same.join("000-page.annotated.png").is_file());
    assert!(same.join("001-page.annotated.png").is_file());

    // One input and an existing directory: the file goes into the directory.
    let one = scratch().join("annotated-one");
    std::fs::create_dir_all(&one).unwrap();
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        "--annotate",
        one.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(one.join("000-page.annotated.png").is_file());
    // A missing parent folder is refused before any work.
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        "--annotate",
        scratch().join("no/such/dir/x.png").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("does not exist"), "{}", stderr(&o));
}

#[test]
fn verify_passes_then_catches_a_flipped_byte_and_truncation() {
    let b = nudenet_bundle();
    let o = tether(&["verify", &b]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("ok: "));

    let mut bytes = std::fs::read(&b).unwrap();
    let v = json(&tether(&["inspect", &b, "--json"]));
    let onnx = &v["sections"][0];
    let at = onnx["offset"].as_u64().unwrap() + onnx["length"].as_u64().unwrap() / 2;
    bytes[at as usize] ^= 0x40;
    let bad = scratch().join("flipped.bundle");
    std::fs::write(&bad, &bytes).unwrap();
    let o = tether(&["verify", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let msg = stderr(&o);
    assert!(
        msg.contains("detect/model/model.onnx") && msg.contains("CRC"),
        "{msg}"
    );

    let cut = scratch().join("truncated.bundle");
    std::fs::write(&cut, &bytes[..bytes.len() / 3]).unwrap();
    let o = tether(&["verify", cut.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    // Running a truncated bundle is an ordinary error with a hint, never a panic.
    let o = tether(&["run", cut.to_str().unwrap(), &asset("astronaut.png")]);
    assert_eq!(o.status.code(), Some(1));
    let msg = stderr(&o);
    assert!(
        msg.starts_with("error: ") && msg.contains("\nhint: "),
        "{msg}"
    );
    assert!(!msg.contains("panicked"), "{msg}");
}

#[test]
fn bad_inputs_are_one_line_errors() {
    let b = nudenet_bundle();
    // Missing bundle: exit 1 (not a verdict on content), names the path.
    let o = tether(&["verify", "/nonexistent/x.bundle"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/x.bundle"),
        "{}",
        stderr(&o)
    );
    // Not an image.
    let o = tether(&["run", &b, &b]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("hint: inputs must be readable PNG or JPEG"),
        "{}",
        stderr(&o)
    );
    // A fixed-size model asked for another size: names both values.
    let out = scratch().join("never.bundle");
    let o = tether(&[
        "build",
        "--family",
        "detect",
        "--onnx",
        &asset("yolov8n-doclaynet.onnx"),
        "-o",
        out.to_str().unwrap(),
        "--input-size",
        "640",
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("640x640, but the model's input is fixed at 1024x1024"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists(), "no bundle may be written on failure");
    // Not an ONNX file.
    let o = tether(&[
        "build",
        "--family",
        "detect",
        "--onnx",
        &asset("page.png"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("ONNX"), "{}", stderr(&o));
    // Usage errors are exit 2 (clap).
    assert_eq!(tether(&["run"]).status.code(), Some(2));
    assert_eq!(
        tether(&["build", "--family", "segment"]).status.code(),
        Some(2)
    );
}

#[test]
fn bench_reports_percentiles() {
    let b = nudenet_bundle();
    let v = json(&tether(&[
        "bench",
        &b,
        &asset("astronaut.png"),
        "--runs",
        "3",
        "--warmup",
        "1",
        "--json",
    ]));
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["runs"], 3);
    let total = &v["total_ms"];
    let (p50, p99) = (
        total["p50"].as_f64().unwrap(),
        total["p99"].as_f64().unwrap(),
    );
    assert!(p50 > 0.0 && p99 >= p50, "{total}");
    let stages = v["stages_ms"].as_array().unwrap();
    let names: Vec<&str> = stages
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["stage-in", "letterbox", "model", "decode+nms", "collect"]
    );
    for s in stages {
        let st = &s["stats"];
        assert_eq!(st["count"], 3, "{s}");
        assert!(
            st["p99.9"].as_f64().unwrap() >= st["p50"].as_f64().unwrap(),
            "{s}"
        );
    }
    // A count beyond the documented bound is a usage error, not an abort.
    let o = tether(&[
        "bench",
        &b,
        &asset("astronaut.png"),
        "--runs",
        "18446744073709551615",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

/// `build --engine tensorrt` against a fake `trtexec` (JetPack 6 on Orin): the
/// flags it receives are checked by the script, and the manifest must record
/// the plan, its target (TensorRT version, SM, hardware compatibility) and
/// its concrete I/O shapes. No TensorRT is needed.
#[test]
fn build_with_tensorrt_records_the_plan_target() {
    use std::os::unix::fs::PermissionsExt;
    let fake = scratch().join("trtexec");
    let script = r#"#!/bin/sh
if [ "$1" = "--help" ]; then
  echo "  --onnx=<file>  --saveEngine=<file>  --memPoolSize=poolspec  --skipInference"
  echo "  --fp16  --versionCompatible  --hardwareCompatibilityLevel=mode"
  exit 0
fi
for want in --onnx= --saveEngine= --memPoolSize=workspace:256M --skipInference --fp16 \
            --hardwareCompatibilityLevel=ampere+ \
            --minShapes=images:1x3x320x320 --optShapes=images:1x3x320x320 --maxShapes=images:1x3x320x320; do
  case " $* " in *" $want"*) ;; *) echo "missing flag $want in: $*" >&2; exit 3;; esac
done
out=""
for a in "$@"; do case "$a" in --saveEngine=*) out="${a#--saveEngine=}";; esac; done
echo "[I] Selected Device: Orin"
echo "[I] Compute Capability: 8.7"
echo "[I] TensorRT version: 10.3.0"
printf 'placeholder plan from a fake trtexec' > "$out"
echo "&&&& PASSED TensorRT.trtexec [TensorRT v100300]"
"#;
    std::fs::write(&fake, script).unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = scratch().join("trt.bundle");
    let o = build_320n(
        &out,
        &[
            "--engine",
            "tensorrt",
            "--trtexec",
            fake.to_str().unwrap(),
            "--workspace-mib",
            "256",
            "--hardware-compat",
            "ampere+",
        ],
    );
    assert!(o.status.success(), "build failed: {}", stderr(&o));
    let v = json(&tether(&["inspect", out.to_str().unwrap(), "--json"]));
    let t = &v["targets"][1];
    assert_eq!(t["engine"], "TensorRt");
    assert_eq!(t["name"], "sm87-trt10.3");
    assert_eq!(t["sm"], "8.7");
    assert_eq!(t["tensorrt_version"], 100300);
    assert_eq!(t["hardware_compat"], 1);
    let plan = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "TensorRtPlan")
        .expect("plan section");
    assert_eq!(plan["name"], "detect/model/plan.sm87-trt10.3");
    assert_eq!(plan["target"], 1);
    assert_eq!(plan["length"], 36);
    assert_eq!(
        plan["tensors"][0]["dims"],
        serde_json::json!([1, 3, 320, 320])
    );
    assert_eq!(plan["tensors"][1]["dims"], serde_json::json!([1, 22, 2100]));
    // The temporary plan file is gone; the bundle still verifies.
    assert!(!out.with_extension("model.plan.tmp").exists());
    assert_eq!(
        tether(&["verify", out.to_str().unwrap()]).status.code(),
        Some(0)
    );
    // With no usable trtexec the build fails, names what was tried, writes nothing.
    let none = scratch().join("none.bundle");
    let o = build_320n(
        &none,
        &["--engine", "tensorrt", "--trtexec", "/nonexistent/trtexec"],
    );
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("/nonexistent/trtexec"),
        "{}",
        stderr(&o)
    );
    assert!(!none.exists());
}

/// `tether doctor` works on any machine: with no GPU/TensorRT it says so and
/// lists where it looked (CI has neither); output is valid JSON with `--json`.
#[test]
fn doctor_reports_this_machine() {
    let v = json(&tether(&["doctor", "--json"]));
    let probe = &v["probe"];
    let arch = probe["host"]["arch"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        arch.contains(std::env::consts::ARCH.split('_').next().unwrap()),
        "arch {arch}"
    );
    let devices = probe["cuda"]["devices"].as_array().expect("devices list");
    let cuda_search = &probe["cuda"]["search"];
    let tried = cuda_search["tried"].as_array().expect("libcuda search");
    assert!(!tried.is_empty(), "no search shown");
    if devices.is_empty() {
        let notes = probe["notes"].to_string();
        assert!(notes.contains("no GPU"), "{notes}");
    }
    // Structured: each place once, with its kind and outcome.
    for t in tried {
        assert!(
            t["place"].is_string() && t["kind"].is_string() && t["outcome"].is_string(),
            "{t}"
        );
    }
    let places: Vec<&str> = tried.iter().map(|t| t["place"].as_str().unwrap()).collect();
    let mut unique = places.clone();
    unique.sort_unstable();
    unique.dedup();
    assert_eq!(unique.len(), places.len(), "{places:?}");
    let trt = &v["tensorrt"];
    assert!(trt["search"]["tried"].is_array(), "{trt}");
    match trt["found"].as_bool() {
        Some(true) => assert!(trt["version"].is_string()),
        Some(false) => {
            let e = trt["error"].as_str().unwrap();
            assert!(!e.contains('\n') && e.contains("searched"), "{e}");
            // On x86_64 no aarch64/Tegra directory is searched; pip folders are.
            if cfg!(target_arch = "x86_64") {
                let tp = trt["search"]["tried"].to_string();
                assert!(!tp.contains("aarch64") && !tp.contains("tegra"), "{tp}");
            }
        }
        None => panic!("tensorrt.found missing: {v}"),
    }
    for lib in ["cudnn", "cublas"] {
        assert!(v["libraries"][lib]["found"].is_boolean(), "{lib}: {v}");
    }

    let text = tether(&["doctor"]);
    assert!(text.status.success());
    let out = stdout(&text);
    assert!(
        out.contains("CUDA driver") && out.contains("TensorRT") && out.contains("engines"),
        "{out}"
    );
    assert!(out.contains("cuDNN") && out.contains("cuBLAS"), "{out}");
    assert!(!out.contains("or pass a path"), "{out}");
    // The text summarises; `-v` lists each place.
    let verbose = stdout(&tether(&["doctor", "-v"]));
    assert!(out.lines().count() < 30, "{out}");
    assert!(
        verbose.contains("CUDA driver search (libcuda.so.1):"),
        "{verbose}"
    );
    assert!(verbose.lines().count() > out.lines().count(), "{verbose}");
}

/// `doctor --tensorrt-lib PATH` tries only that path, and says so.
#[test]
fn doctor_takes_a_tensorrt_path() {
    let v = json(&tether(&[
        "doctor",
        "--json",
        "--tensorrt-lib",
        "/nonexistent/libnvinfer.so.10",
    ]));
    let trt = &v["tensorrt"];
    assert_eq!(trt["found"], false, "{trt}");
    let tried = trt["search"]["tried"].as_array().unwrap();
    assert_eq!(tried.len(), 1, "{trt}");
    assert_eq!(tried[0]["kind"], "Explicit");
    assert_eq!(tried[0]["place"], "/nonexistent/libnvinfer.so.10");
}
