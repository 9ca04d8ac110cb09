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

/// `tether bench B astronaut.png --device cpu --runs RUNS --warmup 0 EXTRA...`.
fn cpu_bench(b: &str, runs: u32, extra: &[&str]) -> Output {
    let (img, runs) = (asset("astronaut.png"), runs.to_string());
    let mut args = vec!["bench", b, &img, "--device", "cpu", "--runs", &runs];
    args.extend(["--warmup", "0"]);
    args.extend_from_slice(extra);
    tether(&args)
}

/// `tether ARGS` refused: exit status `code`, `says` in the error, nothing on stdout (no work
/// done before the refusal).
fn refused(args: &[&str], code: i32, says: &str) -> Output {
    let o = tether(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
    assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
    assert!(o.stdout.is_empty(), "{args:?}: {}", stdout(&o));
    o
}

/// Runs `tether ARGS`, sends it SIGINT (Ctrl-C) after `after`, and returns its output and how
/// long it took to exit after the signal.
fn interrupted(args: &[&str], after: std::time::Duration) -> (Output, std::time::Duration) {
    interrupted_at(args, &[after])
}

/// [`interrupted`] with one SIGINT after each of `gaps` (each counted from the one before):
/// the output, and the time from the last SIGINT to the exit.
fn interrupted_at(args: &[&str], gaps: &[std::time::Duration]) -> (Output, std::time::Duration) {
    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("RUST_LOG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn tether");
    let mut sent = std::time::Instant::now();
    for gap in gaps {
        std::thread::sleep(*gap);
        sent = std::time::Instant::now();
        // SAFETY: kill(2) on our own child, not yet waited on (its pid is not reused), with
        // SIGINT; a child already gone is a zombie until the wait below.
        assert_eq!(
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) },
            0
        );
    }
    let o = child.wait_with_output().expect("wait");
    (o, sent.elapsed())
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
        // One fixed folder under cargo's per-target temp dir, emptied at the
        // start of each run: a run leaves at most one copy (~300 MB of bundles)
        // behind instead of one per process id in the system temp dir.
        let d = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli");
        let _ = std::fs::remove_dir_all(&d);
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

/// `tether build --family embed` of the MiniLM int8 model and its tokenizer into `out`,
/// with `extra` options before `-o`.
fn build_minilm(out: &Path, extra: &[&str]) -> Output {
    let (onnx, tokenizer) = (
        asset("all-minilm-l6-v2-int8.onnx"),
        asset("all-minilm-l6-v2-tokenizer.json"),
    );
    let mut args = vec![
        "build",
        "--family",
        "embed",
        "--onnx",
        &onnx,
        "--tokenizer",
        &tokenizer,
    ];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-o", out.to_str().unwrap()]);
    tether(&args)
}

/// A MiniLM int8 embed bundle built once for the tests that only run it.
fn minilm_bundle() -> String {
    static B: OnceLock<String> = OnceLock::new();
    B.get_or_init(|| {
        let out = scratch().join("shared-minilm.bundle");
        let o = build_minilm(&out, &[]);
        assert!(o.status.success(), "build failed: {}", stderr(&o));
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
    assert_eq!(v["schema_version"], 2);
    assert_eq!(v["command"], "inspect");
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
        [
            "detect/model/model.onnx",
            "detect/labels",
            "detect/config",
            "detect/selftest"
        ]
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
    assert_eq!(t["mode"], "input");
    let o = &sections[0]["tensors"][1];
    assert_eq!(o["dims"], serde_json::json!([1, 22, 2100]));
    // Enumerations are spelled as in bundle/FORMAT.md section 5.
    assert_eq!(v["targets"][0]["engine"], "tract-cpu");
    assert_eq!(sections[0]["kind"], "onnx");
    assert_eq!(sections[0]["tensors"][1]["mode"], "output");

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
    assert_eq!(v["schema_version"], 5);
    assert_eq!(v["command"], "run");
    assert_eq!(v["family"], "detect");
    assert_eq!(v["engines"]["model"], "tract-cpu");
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
    // The file's name picks the format: JPEG for .jpg; a name of neither is refused, and so
    // is one image file for several inputs (before any work, exit 2).
    let jpg = scratch().join("page.annotated.JPG");
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        "--annotate",
        jpg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let bytes = std::fs::read(&jpg).unwrap();
    assert_eq!(&bytes[..3], &[0xFF, 0xD8, 0xFF], "not a JPEG");
    assert_eq!(
        image::guess_format(&bytes).unwrap(),
        image::ImageFormat::Jpeg
    );
    let (page, astronaut) = (asset("page.png"), asset("astronaut.png"));
    let txt = scratch().join("page.annotated.txt");
    let one_png = scratch().join("both.png");
    for (inputs, out, says) in [
        (vec![&page], &txt, "name it .png, .jpg or .jpeg"),
        (
            vec![&page, &astronaut],
            &one_png,
            "2 inputs write one image each: give a folder",
        ),
    ] {
        let mut args = vec!["run", b.as_str()];
        args.extend(inputs.iter().map(|s| s.as_str()));
        args.extend(["--annotate", out.to_str().unwrap()]);
        refused(&args, 2, says);
        assert!(!out.exists(), "{}", out.display());
    }
    // ... but a name ending in `/` is a folder whatever it looks like.
    let shots = scratch().join("shots.png");
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        &asset("astronaut.png"),
        "--annotate",
        &format!("{}/", shots.display()),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(shots.join("001-astronaut.annotated.png").is_file());

    // A failing input among others: the others' results and one error entry (its OS error
    // said once), exit 1.
    let missing = scratch().join("no-such-image.png");
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        missing.to_str().unwrap(),
        "--json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert!(v["results"][0]["result"]["detections"].is_array(), "{v}");
    let e = v["results"][1]["error"].as_str().unwrap();
    assert!(e.contains("no-such-image.png"), "{e}");
    assert_eq!(e.matches("os error 2").count(), 1, "{e}");
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

    // Running it: an ordinary error (exit 1) whose hint says the file is damaged.
    let o = tether(&["run", bad.to_str().unwrap(), &asset("astronaut.png")]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let msg = stderr(&o);
    assert!(
        msg.contains("CRC mismatch")
            && msg.contains("hint: the file is not a valid tether bundle (truncated or corrupted copy?); rebuild it with `tether build` and check it with `tether verify`"),
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

/// `verify --json`: one document whatever the verdict, with the exit status of the text form
/// (0 ok, 3 corrupt or self-test failed), the self-test's checks with their bounds.
#[test]
fn verify_json_reports_every_verdict() {
    let (b, _) = vad_bundle();
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu", "--json"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["command"], "verify");
    assert_eq!(v["verdict"], "ok");
    assert_eq!(v["bundle"], b.as_str());
    assert!(v["checked_section_count"].as_u64().unwrap() >= 2, "{v}");
    assert_eq!(v["self_test"]["passed"], true);
    let check = &v["self_test"]["checks"][0];
    assert_eq!(check["bound"], "at_most");
    assert!(check["value"].as_f64().unwrap() <= check["limit"].as_f64().unwrap());
    let cut = scratch().join("verify_json_cut.bundle");
    let bytes = std::fs::read(&b).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let o = tether(&["verify", cut.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["verdict"], "corrupt");
    assert!(v["error"].as_str().unwrap().contains("truncated"), "{v}");
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
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
    // The same with no INPUT but a family's own input option (`--prompt`): still the missing
    // file, not a missing INPUT.
    let o = tether(&["run", "/nonexistent/x.bundle", "--prompt", "hi"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("/nonexistent/x.bundle") && !stderr(&o).contains("INPUT"),
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
fn run_and_bench_share_threads() {
    let b = nudenet_bundle();
    let img = asset("astronaut.png");
    let with_threads = |n: &str| {
        let o = tether(&["run", &b, &img, "--device", "cpu", "--json", "--threads", n]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        o
    };
    let v = json(&with_threads("2"));
    assert_eq!(v["cpu_threads"], 2);
    assert_eq!(v["cpu_threads_why"], "--threads");
    // More threads than cores are capped at the cores, said on stderr and in the JSON.
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let o = with_threads("1024");
    let v = json(&o);
    assert_eq!(v["cpu_threads"], cores as u64, "{v}");
    assert_eq!(
        v["cpu_threads_why"],
        "--threads capped at the cores available"
    );
    assert!(
        stderr(&o).contains(&format!(
            "--threads 1024 is more than the {cores} cores this process may run on: using {cores}"
        )),
        "{}",
        stderr(&o)
    );
    // The default is bench's default (the same function), and both print it.
    let o = tether(&["run", &b, &img, "--device", "cpu"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("CPU engine threads: "),
        "{}",
        stderr(&o)
    );
    let run_default = json(&tether(&["run", &b, &img, "--device", "cpu", "--json"]))["cpu_threads"]
        .as_u64()
        .expect("a count");
    let o = cpu_bench(&b, 1, &["--json"]);
    let v = json(&o);
    let bench = v["environment"]["cpu_threads"]
        .as_str()
        .expect("text")
        .to_string();
    assert!(
        bench.starts_with(&format!("{run_default} (")),
        "{bench} vs {run_default}"
    );
}

#[test]
fn json_prints_f32_without_noise_digits() {
    let b = nudenet_bundle();
    let v = json(&tether(&["inspect", &b, "--json"]));
    // 0.7f32 widened to f64 would print 0.699999988079071.
    assert_eq!(v["family_config"]["iou_threshold"].to_string(), "0.7");
    assert_eq!(v["family_config"]["score_threshold"].to_string(), "0.25");
}

#[test]
fn first_mistakes_name_what_to_do() {
    // An unknown family, even followed by another family's flags: the known families, not
    // "unexpected argument"; `build --help` lists them too.
    let out = scratch().join("never-yolo.bundle");
    let onnx = asset("320n.onnx");
    let o = tether(&[
        "build",
        "--family",
        "yolo",
        "--onnx",
        &onnx,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("yolo"), "{e}");
    for f in ["detect", "ocr", "vad", "embed"] {
        assert!(e.contains(f), "{f} not listed: {e}");
    }
    assert!(!e.contains("unexpected argument"), "{e}");
    let help = stdout(&tether(&["build", "--help"]));
    for f in ["detect", "ocr", "vad", "embed"] {
        assert!(help.contains(f), "{f} not in build --help: {help}");
    }
    // A known family with another family's build option: whose option it is and the help.
    let o = tether(&[
        "build",
        "--family",
        "llm",
        "--onnx",
        &onnx,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("--onnx is an option of the detect")
            && e.contains("tether build --family llm --help"),
        "{e}"
    );
    // A recipe's option without `--family`: what selects the recipe, every family named.
    let o = tether(&["build", "--onnx", &onnx, "-o", out.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("needs `--family NAME`") && e.contains("llm"),
        "{e}"
    );
    assert!(!out.exists(), "nothing written on a usage error");
    // Another family's option on a bundle: the family named, no look-alike suggestion.
    let b = nudenet_bundle();
    let o = tether(&["run", &b, &asset("astronaut.png"), "--text-score", "0.5"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("--text-score is an option of the ocr family"),
        "{e}"
    );
    assert!(e.contains("this bundle is of the detect family"), "{e}");
    assert!(!e.contains("similar argument"), "{e}");
    // An ONNX model where a bundle belongs: say so and what to type, no magic-number dump.
    let o = tether(&["run", &onnx, &asset("astronaut.png")]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("is an ONNX model, not a tether bundle"), "{e}");
    assert!(e.contains("tether build"), "{e}");
    assert!(!e.to_lowercase().contains("magic"), "{e}");
    // The same for verify and inspect (not "corrupt"), and for a GGUF checkpoint.
    let gguf = asset("SmolLM2-135M-Instruct.Q4_1.gguf");
    let png = asset("astronaut.png");
    for (args, says) in [
        (vec!["verify", onnx.as_str(), "--json"], "is an ONNX model"),
        (vec!["inspect", onnx.as_str()], "is an ONNX model"),
        (vec!["run", gguf.as_str(), png.as_str()], "is a GGUF model"),
        (
            vec!["run", gguf.as_str(), "--prompt", "hi"],
            "is a GGUF model",
        ),
        (vec!["inspect", gguf.as_str()], "--family llm --gguf"),
        // The throughput benchmark's hint names bench, not run.
        (
            vec!["bench", gguf.as_str()],
            "then `tether bench model.bundle`",
        ),
    ] {
        refused(&args, 2, says);
    }
    // A missing path named like a model is a missing file, and a file named `.gguf` without
    // the GGUF magic is not called a GGUF model.
    let missing = scratch().join("no-such-model.gguf");
    let o = tether(&["run", missing.to_str().unwrap(), "--prompt", "hi"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("No such file") && !stderr(&o).contains("GGUF model"),
        "{}",
        stderr(&o)
    );
    let text = scratch().join("notes.gguf");
    std::fs::write(&text, "hello, not a model\n").unwrap();
    let o = tether(&["run", text.to_str().unwrap(), "--prompt", "hi"]);
    assert_ne!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(!stderr(&o).contains("GGUF model"), "{}", stderr(&o));
    // An input where the bundle belongs (the arguments swapped): a usage error (exit 2, as
    // for a model file) saying what the file is and which argument comes first, not
    // "damaged copy".
    let wav = asset("Front_Center.wav");
    for (args, kind) in [
        (vec!["inspect", png.as_str()], "a PNG image"),
        (vec!["run", png.as_str(), b.as_str()], "a PNG image"),
        (vec!["verify", png.as_str()], "a PNG image"),
        (vec!["verify", wav.as_str()], "WAV audio"),
        (vec!["run", wav.as_str(), "--prompt", "hi"], "WAV audio"),
    ] {
        let o = tether(&args);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains(&format!(
                "is {kind}, an input, not a tether bundle: a command takes the bundle first (`tether {} model.bundle",
                args[0]
            )),
            "{args:?}: {e}"
        );
        assert!(!e.contains("corrupted"), "{args:?}: {e}");
    }
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
    assert_eq!(v["schema_version"], 5);
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
        assert_eq!(
            s["clock"], "host",
            "the CPU engine's stages are host time: {s}"
        );
        assert!(
            st["p99.9"].as_f64().unwrap() >= st["p50"].as_f64().unwrap(),
            "{s}"
        );
    }
    // Every statistic the issue names, ordered as statistics are.
    let num = |k: &str| {
        total[k]
            .as_f64()
            .unwrap_or_else(|| panic!("{k} in {total}"))
    };
    assert!(num("min") <= num("p50") && num("p50") <= num("p90") && num("p90") <= num("p99"));
    assert!(num("p99.9") <= num("max") && num("stddev") >= 0.0 && num("cv") >= 0.0);
    assert!(num("min") <= num("mean") && num("mean") <= num("max"));
    assert_eq!(v["mode"], "closed-loop");
    assert!(v["missed_deadlines"].is_null() && v["skipped_frames"].is_null());
    assert!(v["throughput_fps"].as_f64().unwrap() > 0.0);
    assert_eq!(v["variants"][0]["name"], "host");
    assert_eq!(v["variants"][0]["execution"], "host");
    assert_eq!(v["environment"]["device"], "cpu");
    assert!(
        v["environment"]["engine_choice"]["model"]
            .as_str()
            .unwrap()
            .contains("portable CPU engine"),
        "{}",
        v["environment"]
    );
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

/// Open loop at a fixed rate with a deadline no run can meet: every frame is counted as
/// missed; the JSON file and both plot formats are written; `--threads` reaches the engine.
#[test]
fn bench_open_loop_counts_missed_deadlines_and_plots() {
    let b = nudenet_bundle();
    let dir = scratch().join("bench-plots");
    std::fs::create_dir_all(&dir).unwrap();
    let (json_path, svg, png) = (dir.join("b.json"), dir.join("b.svg"), dir.join("b.png"));
    let o = tether(&[
        "bench",
        &b,
        &asset("astronaut.png"),
        "--device",
        "cpu",
        "--runs",
        "4",
        "--warmup",
        "1",
        "--rate",
        "40",
        "--deadline",
        "0.001",
        "--threads",
        "2",
        "--json",
        json_path.to_str().unwrap(),
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("open loop at 40 Hz"), "{text}");
    assert!(text.contains("4 of 4 frames missed it"), "{text}");
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["mode"], "open-loop");
    assert_eq!(v["rate_hz"], 40.0);
    assert_eq!(v["deadline_ms"], 0.001);
    assert_eq!(v["missed_deadlines"], 4);
    assert!(v["skipped_frames"].as_u64().is_some());
    assert_eq!(v["environment"]["cpu_threads"], "2 (--threads)");
    let s = std::fs::read_to_string(&svg).unwrap();
    assert!(s.starts_with("<svg"), "{}", &s[..s.len().min(200)]);
    for stage in ["total (host)", "model (host)", "decode+nms (host)"] {
        assert!(s.contains(stage), "no {stage} in the SVG");
    }
    // The header names the setup the figures belong to.
    for setup in ["on tract-cpu", "CPU threads 2", "timed runs after"] {
        assert!(s.contains(setup), "no {setup:?} in the SVG header");
    }
    // The same as PNG: header, the shared-axis CDFs, histogram and bars; not blank.
    let o = cpu_bench(&b, 2, &["--plot", png.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let img = image::open(&png).unwrap().to_rgb8();
    assert_eq!(img.dimensions(), (1400, 64 + 440 + 330));
    // Nothing is drawn in the last 4 columns: text and legends stay inside the picture.
    let right_edge_dark = (0..img.height())
        .flat_map(|y| (1396..1400).map(move |x| (x, y)))
        .filter(|&(x, y)| img.get_pixel(x, y).0.iter().all(|&c| c < 128))
        .count();
    assert_eq!(right_edge_dark, 0, "something runs off the right edge");
    let dark = img.pixels().filter(|p| p.0.iter().all(|&c| c < 64)).count();
    assert!(dark > 5_000, "{dark} dark pixels: axes and text missing?");
}

#[test]
fn bench_usage_errors_exit_2() {
    let b = nudenet_bundle();
    let img = asset("astronaut.png");
    for (args, says) in [
        (vec!["--plot", "x.jpg"], ".svg or .png"),
        (vec!["--sync", "sometimes"], "spin, yield or block"),
        (
            vec!["--staging", "zero-copy"],
            "auto, copy, mapped or mapped-outputs",
        ),
        (vec!["--precision", "fp8"], "fp32, tf32 or fp16"),
        (vec!["--graph", "--eager"], "cannot be used with"),
        (vec!["--threads", "0"], "--threads"),
        // A negative or fractional count names the range, as one too large does.
        (
            vec!["--threads", "-1"],
            "'--threads <N>': accepted 1 to 1024",
        ),
        (vec!["--runs", "-5"], "accepted 1 to 1000000000"),
        (
            vec!["--warmup", "1.5"],
            "not a whole number (accepted 0 to 1000000)",
        ),
        (
            vec!["--duration", "a"],
            "not a number (accepted 1 to 86400)",
        ),
        (
            vec!["--deadline", "-1"],
            "--deadline <MS>': accepted above 0 up to 3600000 ms",
        ),
        (vec!["--rate", "1e-9"], "accepted 1/86400 (one frame a day"),
        (
            vec!["--device", "cpu", "--compare", "--runs", "1"],
            "needs a GPU session",
        ),
        (
            vec!["--device", "cpu", "--floor", "--runs", "1"],
            "--floor needs a GPU session",
        ),
        (vec!["--floor", "--rate", "10"], "cannot be used with"),
    ] {
        let mut all = vec!["bench", b.as_str(), img.as_str()];
        all.extend(args.iter().copied());
        refused(&all, 2, says);
    }
}

/// `--staged`: runs on the frame left in the staging, no copy-in (stage-in is zero, the
/// other stages still run); said in the report and the JSON.
#[test]
fn bench_staged_runs_skip_the_copy_in() {
    let b = nudenet_bundle();
    let o = cpu_bench(&b, 2, &["--staged", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["staged"], true);
    assert_eq!(v["floor"], false);
    let stage = |name: &str| {
        v["stages_ms"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["stage"] == name)
            .unwrap_or_else(|| panic!("no {name} in {}", v["stages_ms"]))["stats"]
            .clone()
    };
    assert!(
        stage("stage-in")["max"].as_f64().unwrap() < 1e-5,
        "{}",
        stage("stage-in")
    );
    assert!(
        stage("model")["p50"].as_f64().unwrap() > 0.01,
        "{}",
        stage("model")
    );
    let o = cpu_bench(&b, 1, &["--staged"]);
    assert!(
        stdout(&o).contains("closed loop, staged input"),
        "{}",
        stdout(&o)
    );
    // --graph on the CPU says why nothing is captured.
    let o = cpu_bench(&b, 1, &["--graph"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("host (--graph asked, but this bundle runs on the CPU"),
        "{}",
        stdout(&o)
    );
    // So does --eager (the run is the host's, not labelled eager), and --sync has its line.
    let o = cpu_bench(&b, 1, &["--eager", "--sync", "block"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("host (--eager asked, but this bundle runs on the CPU")
            && !stdout(&o).contains("[eager]")
            && stdout(&o).contains("block asked, but this bundle runs on the CPU: no GPU"),
        "{}",
        stdout(&o)
    );
    // So does --staging: nothing is staged on the CPU; the default says nothing.
    let o = cpu_bench(&b, 1, &["--staging", "mapped-outputs", "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["environment"]["staging"],
        "mapped-outputs asked, but this bundle runs on the CPU: nothing is staged"
    );
    let o = cpu_bench(&b, 1, &["--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["environment"].get("staging").is_none(),
        "{}",
        v["environment"]
    );
}

/// Ctrl-C (SIGINT) stops a long benchmark after the run in flight: the summary and the JSON
/// file still come, marked interrupted, and the exit status is 130.
#[test]
fn bench_ctrl_c_reports_what_ran_and_exits_130() {
    let b = nudenet_bundle();
    let json_path = scratch().join("interrupted.json");
    let (o, _) = interrupted(
        &[
            "bench",
            &b,
            &asset("astronaut.png"),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--duration",
            "120",
            "--json",
            json_path.to_str().unwrap(),
        ],
        std::time::Duration::from_secs(4),
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stdout(&o).contains("; interrupted)"), "{}", stdout(&o));
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    assert_eq!(v["runs"], v["total_ms"]["count"]);
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
    assert_eq!(t["engine"], "tensorrt");
    assert_eq!(t["name"], "sm87-trt10.3");
    assert_eq!(t["sm"], "8.7");
    assert_eq!(t["tensorrt_version"], 100300);
    assert_eq!(t["hardware_compat"], 1);
    let plan = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "tensorrt-plan")
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
    // TensorRT's options without --engine tensorrt are refused, not ignored; so is
    // --engine tensorrt for the families whose bundles carry no plans (llm, vad, embed).
    let o = build_320n(&none, &["--hardware-compat", "ampere+", "--no-fp16"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--no-fp16, --hardware-compat: options of the TensorRT plans"),
        "{}",
        stderr(&o)
    );
    let gguf = asset("SmolLM2-135M-Instruct.Q4_1.gguf");
    let none_s = none.to_str().unwrap();
    let args = [
        "build", "--family", "llm", "--gguf", &gguf, "-o", none_s, "--engine", "tensorrt",
    ];
    refused(&args, 2, "the llm family's bundles carry no TensorRT plans");
    assert!(!none.exists());
    // Its help leaves the plans' options out; given, each is refused naming the family.
    let help = stdout(&tether(&["build", "--family", "llm", "--help"]));
    assert!(
        help.contains("--gguf") && !help.contains("--trtexec") && !help.contains("--engine"),
        "{help}"
    );
    let args = [
        "build",
        "--family",
        "llm",
        "--gguf",
        &gguf,
        "-o",
        none_s,
        "--workspace-mib",
        "64",
    ];
    refused(
        &args,
        2,
        "--workspace-mib: options of TensorRT plans, which the llm family's bundles do not carry",
    );
    assert!(!none.exists());
    // So is it for vad, whose plans would need its fixed sample-rate input (it was ignored).
    let vad = asset("silero_vad_op18_ifless.onnx");
    let args = [
        "build", "--family", "vad", "--onnx", &vad, "-o", none_s, "--engine", "tensorrt",
    ];
    refused(&args, 2, "the vad family's bundles carry no TensorRT plans");
    assert!(!none.exists());
    // A name or version the manifest cannot store is a usage error before any work.
    let long = "v".repeat(256);
    for (opt, value, says) in [
        ("--name", "", "empty: a bundle name has 1 to 255 bytes"),
        (
            "--name",
            long.as_str(),
            "256 bytes, more than the 255 a bundle stores",
        ),
        (
            "--model-version",
            long.as_str(),
            "256 bytes, more than the 255",
        ),
    ] {
        let args = [
            "build", "--family", "llm", "--gguf", &gguf, "-o", none_s, opt, value,
        ];
        refused(&args, 2, says);
        assert!(!none.exists());
    }
}

/// `tether doctor` works on any machine: with no GPU/TensorRT it says so and
/// lists where it looked (CI has neither); output is valid JSON with `--json`.
#[test]
fn doctor_reports_this_machine() {
    let v = json(&tether(&["doctor", "--json"]));
    // The CPU the CPU engine runs on, and the cores this process may use.
    let cores = std::thread::available_parallelism().map_or(0, usize::from) as u64;
    assert_eq!(v["cpu"]["cores_available"], cores, "{}", v["cpu"]);
    assert!(!v["cpu"]["model"].as_str().unwrap_or_default().is_empty());
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
    assert_eq!(v["schema_version"], 2, "{v}");
    // Enumerations are spelled as the text report's words, not as Rust names.
    assert_eq!(
        v["probe"]["cuda"]["search"]["library"], "cuda-driver",
        "{v}"
    );
    assert_eq!(v["probe"]["host"]["arch"], std::env::consts::ARCH, "{v}");
    // Every compiled engine in selection order, each with whether it can run here: the CPU
    // engine always, GPU engines only with a device.
    let engines = v["engines"].as_array().expect("engines list");
    let names: Vec<&str> = engines
        .iter()
        .map(|e| e["engine"].as_str().unwrap())
        .collect();
    assert_eq!(names.last(), Some(&"tract-cpu"), "{names:?}");
    for e in engines {
        let usable = e["usable"].as_bool().expect("usable");
        if e["engine"] == "tract-cpu" {
            assert!(usable, "{e}");
        } else if devices.is_empty() {
            assert!(!usable, "{e}");
        }
    }

    // The text generator's own engines: the CPU kernels' instruction set (one this CPU
    // runs, `TETHER_LLM_ISA` forcing a slower one) and whether the GPU decoder has a device.
    let llm = v["family_engines"]["llm"].as_array().expect("llm engines");
    assert_eq!(llm.len(), 2, "{llm:?}");
    let cpu_line = llm[0].as_str().unwrap();
    assert!(
        ["scalar", "avx2", "avx-vnni", "neon", "neon-dot"]
            .iter()
            .any(|i| cpu_line.starts_with(&format!("CPU engine: {i} kernels"))),
        "{cpu_line}"
    );
    let gpu_line = llm[1].as_str().unwrap();
    assert_eq!(
        gpu_line.contains("none here"),
        devices.is_empty(),
        "{gpu_line}"
    );
    let doctor_with_isa = |isa: &str| {
        Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["doctor"])
            .env("TETHER_LLM_ISA", isa)
            .output()
            .expect("spawn tether")
    };
    let forced = doctor_with_isa("scalar");
    assert!(
        stdout(&forced).contains("llm           CPU engine: scalar kernels")
            && stdout(&forced).contains("TETHER_LLM_ISA=scalar chose it"),
        "{}",
        stdout(&forced)
    );
    // A set this CPU cannot run is not dropped silently: warned about, and doctor says so;
    // a name that is no set at all is told apart from one this CPU lacks.
    let bogus = doctor_with_isa("no-such-isa");
    assert!(
        stdout(&bogus).contains("TETHER_LLM_ISA=no-such-isa is not one of them: ignored")
            && stderr(&bogus)
                .matches(
                    "TETHER_LLM_ISA=no-such-isa: no such instruction set (accepted scalar, avx2, avx-vnni, neon, neon-dot; this CPU runs scalar"
                )
                .count()
                == 1,
        "{}{}",
        stdout(&bogus),
        stderr(&bogus)
    );
    let other = if cfg!(target_arch = "x86_64") {
        "neon"
    } else {
        "avx2"
    };
    let lacking = doctor_with_isa(other);
    assert!(
        stdout(&lacking).contains(&format!(
            "TETHER_LLM_ISA={other} is not one of them: ignored"
        )) && stderr(&lacking).contains(&format!(
            "TETHER_LLM_ISA={other}: not an instruction set this CPU runs (scalar"
        )),
        "{}{}",
        stdout(&lacking),
        stderr(&lacking)
    );

    let text = tether(&["doctor"]);
    assert!(text.status.success());
    let out = stdout(&text);
    assert!(
        out.contains("CUDA driver")
            && out.contains("TensorRT")
            && out.contains("engines")
            && out.contains(&format!("{cores} cores available")),
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
    assert_eq!(tried[0]["kind"], "explicit");
    assert_eq!(tried[0]["place"], "/nonexistent/libnvinfer.so.10");
}

/// A bundle whose strings carry terminal escape sequences.
fn hostile_names_bundle(path: &Path) {
    use tether_bundle::*;
    let mut w = BundleWriter::new(IdentityDesc {
        name: "evil\x1b[2J\x1b]0;pwned\x07".into(),
        family: "detect\r".into(),
        ..Default::default()
    });
    let t = w
        .add_target(TargetDesc {
            name: "cpu\x1b[31m".into(),
            arch: CpuArch::Any,
            sm: None,
            engine: EngineKind::TractCpu,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        })
        .unwrap();
    let s = w
        .add_section(SectionKind::Onnx, "m\u{9b}2J.onnx", Some(t), vec![1, 2, 3])
        .unwrap();
    w.add_tensor(
        s,
        TensorDesc {
            name: "in\npu\u{202e}t".into(),
            mode: IoMode::Input,
            dtype: DType::F32,
            layout: Layout::Nchw,
            dims: vec![1, 3, 8, 8],
        },
    )
    .unwrap();
    w.write(path).unwrap();
}

#[test]
fn inspect_and_verify_escape_control_characters() {
    let p = scratch().join("escapes.bundle");
    hostile_names_bundle(&p);
    let o = tether(&["inspect", p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        !out.chars()
            .any(|c| (c.is_control() && c != '\n') || c == '\u{202e}'),
        "{out:?}"
    );
    assert!(out.contains(r"evil\x1b[2J\x1b]0;pwned\x07"), "{out}");
    assert!(out.contains(r"m\u{9b}2J.onnx"), "{out}");
    assert!(out.contains(r"in\npu\u{202e}t"), "{out}");
    // JSON keeps the exact strings (escaped by JSON itself).
    let v = json(&tether(&["inspect", p.to_str().unwrap(), "--json"]));
    assert_eq!(v["identity"]["name"], "evil\x1b[2J\x1b]0;pwned\x07");
    assert!(!stdout(&tether(&["inspect", p.to_str().unwrap(), "--json"])).contains('\x1b'));
    // verify's messages too.
    let mut bytes = std::fs::read(&p).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    let bad = scratch().join("escapes-bad.bundle");
    std::fs::write(&bad, &bytes).unwrap();
    let o = tether(&["verify", bad.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains('\x1b') && !err.contains('\u{9b}'), "{err:?}");
    assert!(err.contains(r"m\u{9b}2J.onnx"), "{err}");
}

/// Child half of [`tether_rss`]: spawns `tether` with the arguments in
/// `TETHER_RSS_ARGS` (separated by U+001F), stdout into `TETHER_RSS_OUT`,
/// and prints its exit code and peak resident set size (`wait4`).
///
/// The measurement is made from this small, freshly executed process because
/// Linux carries the spawning process's peak RSS over into a child spawned
/// with `vfork`/`CLONE_VM` (as `std::process::Command` does): measured from
/// the test process itself, `tether` would inherit the test's own peak.
#[test]
fn rss_probe_child() {
    let (Some(args), Some(out)) = (
        std::env::var_os("TETHER_RSS_ARGS"),
        std::env::var_os("TETHER_RSS_OUT"),
    ) else {
        return; // only meaningful when spawned by `tether_rss`
    };
    let args = args.into_string().unwrap();
    #[expect(
        clippy::zombie_processes,
        reason = "reaped by wait4 below, which also returns its rusage"
    )]
    let child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args.split('\u{1f}'))
        .env_remove("RUST_LOG")
        .stdout(std::fs::File::create(out).unwrap())
        .spawn()
        .expect("spawn tether");
    let mut status = 0;
    // SAFETY: an all-zero rusage is valid; wait4 writes into both
    // out-parameters for our own child, which std has not reaped.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, &mut usage) };
    assert_eq!(pid, child.id() as i32);
    assert!(libc::WIFEXITED(status), "status {status:#x}");
    println!(
        "RSS-PROBE code={} maxrss_kib={}",
        libc::WEXITSTATUS(status),
        usage.ru_maxrss
    );
}

/// Runs `tether args` with stdout into `out`; returns its exit code and its
/// peak resident set size in bytes.
fn tether_rss(args: &[&str], out: &Path) -> (i32, u64) {
    let o = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "rss_probe_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("TETHER_RSS_ARGS", args.join("\u{1f}"))
        .env("TETHER_RSS_OUT", out)
        .output()
        .expect("spawn the probe");
    let text = stdout(&o);
    let line = text
        .split("RSS-PROBE ")
        .nth(1)
        .unwrap_or_else(|| panic!("probe: {text} {}", stderr(&o)));
    let field = |k: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(k))
            .unwrap_or_else(|| panic!("{line}"))
            .parse()
            .unwrap()
    };
    (field("code=") as i32, field("maxrss_kib=") * 1024)
}

/// A bundle of `sections` sections x `per` tensors each (empty payloads).
fn many_tensor_bundle(path: &Path, sections: u32, per: u32) -> u64 {
    use tether_bundle::*;
    let mut w = BundleWriter::new(IdentityDesc {
        name: "many".into(),
        ..Default::default()
    });
    for s in 0..sections {
        let idx = w
            .add_section(SectionKind::Onnx, &format!("s{s}"), None, Vec::new())
            .unwrap();
        for t in 0..per {
            w.add_tensor(
                idx,
                TensorDesc {
                    name: format!("t{t}"),
                    mode: IoMode::Output,
                    dtype: DType::F16,
                    layout: Layout::Nhwc,
                    dims: vec![1, 8, 8, 3],
                },
            )
            .unwrap();
        }
    }
    w.write(path).unwrap().file_len
}

#[test]
fn inspect_json_streams_a_large_manifest() {
    // 4096 sections x 96 tensors: a 32 MB manifest, ~87 MB of JSON; and half of it.
    const SECTIONS: u32 = 4096;
    const PER: u32 = 96;
    let big = scratch().join("many-tensors.bundle");
    let half = scratch().join("half-tensors.bundle");
    let big_len = many_tensor_bundle(&big, SECTIONS, PER);
    let half_len = many_tensor_bundle(&half, SECTIONS / 2, PER);

    let out = scratch().join("many-tensors.json");
    let (code, rss_half) = tether_rss(&["inspect", half.to_str().unwrap(), "--json"], &out);
    assert_eq!(code, 0);
    let json_half = std::fs::metadata(&out).unwrap().len();
    let (code, rss_big) = tether_rss(&["inspect", big.to_str().unwrap(), "--json"], &out);
    assert_eq!(code, 0);
    let json_big = std::fs::metadata(&out).unwrap().len();
    // Valid JSON, checked without building a tree.
    let f = std::io::BufReader::new(std::fs::File::open(&out).unwrap());
    serde_json::from_reader::<_, serde::de::IgnoredAny>(f).expect("valid JSON");
    let text = std::fs::read_to_string(&out).unwrap();
    assert_eq!(
        text.matches("\"mode\": \"output\"").count(),
        (SECTIONS * PER) as usize
    );
    // Memory grows with the mapped manifest (all of it is read), not with the output: from
    // half the bundle to all of it, peak RSS may grow by the extra manifest plus 8 MB of
    // slack, while the JSON grows by several times that (a document built in memory first
    // would hold it). Comparing two runs of the same process cancels what does not scale,
    // e.g. an emulator's own translation cache under qemu-user.
    let (file_grew, json_grew) = (big_len - half_len, json_big - json_half);
    assert!(
        json_grew > file_grew + (16 << 20),
        "test too small: the JSON grew by {json_grew} bytes"
    );
    let rss_grew = rss_big.saturating_sub(rss_half);
    assert!(
        rss_grew < file_grew + (8 << 20),
        "inspect --json peaked at {rss_half} then {rss_big} bytes: +{rss_grew} for +{file_grew} bytes of bundle and +{json_grew} of JSON"
    );
    eprintln!(
        "inspect --json: peak RSS {rss_half} -> {rss_big} bytes, JSON {json_half} -> {json_big}, bundle {half_len} -> {big_len}"
    );
    for p in [&out, &big, &half] {
        let _ = std::fs::remove_file(p);
    }
}

#[test]
fn non_regular_files_are_refused_not_waited_on() {
    let fifo = scratch().join("fifo.bundle");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    // Reading a FIFO as a bundle: refused at once, not blocked in open().
    let mut child = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["inspect", fifo.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > std::time::Duration::from_secs(30) {
            let _ = child.kill();
            panic!("tether inspect blocked on a FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));

    // Writing a bundle onto a FIFO, a directory, or into a missing directory:
    // refused, with the path given, and the FIFO is still a FIFO.
    use std::os::unix::fs::FileTypeExt;
    let o = build_320n(&fifo, &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("FIFO"), "{}", stderr(&o));
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    let missing = scratch().join("no-such-dir/x.bundle");
    let o = build_320n(&missing, &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("no-such-dir/x.bundle") && !err.contains(".tmp-"),
        "{err}"
    );
}

fn field(name: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/field")
        .join(name);
    assert!(p.is_file(), "missing field case {}", p.display());
    p.to_string_lossy().into_owned()
}

/// The field cases (`tests/field/README.md`): each kind gets the right answer or a clear
/// refusal, never a panic.
#[test]
fn field_cases_get_the_right_answer_or_a_clear_refusal() {
    // EXIF orientation 6: the phone JPEG gives the upright image's detections and size.
    let dyn_bundle = scratch().join("dyn320x640.bundle");
    let o = tether(&[
        "build",
        "--family",
        "detect",
        "--onnx",
        &field("dyn.onnx"),
        "-o",
        dyn_bundle.to_str().unwrap(),
        "--input-size",
        "320x640",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&tether(&[
        "run",
        dyn_bundle.to_str().unwrap(),
        &field("upright.png"),
        &field("exif6.jpg"),
        "--json",
    ]));
    let (up, jpg) = (&v["results"][0]["result"], &v["results"][1]["result"]);
    assert_eq!(up["detections"].as_array().unwrap().len(), 4, "{up}");
    assert_eq!(jpg["orientation_applied"], "Rotate90", "{jpg}");
    assert_eq!(
        (&jpg["image_width"], &jpg["image_height"]),
        (&up["image_width"], &up["image_height"])
    );
    let boxes = |r: &Value| -> Vec<Value> {
        r["detections"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["box"].clone())
            .collect()
    };
    assert_eq!(
        boxes(jpg),
        boxes(up),
        "JPEG compression changes scores, never boxes here"
    );
    // `--ignore-orientation` keeps the stored pixels (and finds nothing, as before the fix).
    let v = json(&tether(&[
        "run",
        dyn_bundle.to_str().unwrap(),
        &field("exif6.jpg"),
        "--json",
        "--ignore-orientation",
    ]));
    assert_eq!(v["results"][0]["result"]["image_width"], 640);

    // Non-finite network outputs are never detections, and are counted.
    let nan_bundle = scratch().join("naninf.bundle");
    let o = tether(&[
        "build",
        "--family",
        "detect",
        "--onnx",
        &field("naninf.onnx"),
        "-o",
        nan_bundle.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tether(&[
        "run",
        nan_bundle.to_str().unwrap(),
        &field("red_square.png"),
        "--json",
    ]);
    let v = json(&o);
    let r = &v["results"][0]["result"];
    assert_eq!(r["nonfinite_anchor_count"], 2, "{r}");
    for d in r["detections"].as_array().unwrap() {
        assert!(d["score"].is_f64(), "{d}");
        assert!(
            d["box"].as_array().unwrap().iter().all(Value::is_f64),
            "{d}"
        );
    }
    assert_eq!(
        stderr(&o).matches("NaN or infinite").count(),
        1,
        "{}",
        stderr(&o)
    );

    // Refusals at build, each naming what it found.
    for (model, says) in [
        ("f16out.onnx", "is f16"),
        ("batch2.onnx", "static batch of 2"),
        ("tiny_bad_pads.onnx", "attribute `pads` has 3 value(s)"),
    ] {
        let out = scratch().join(format!("{model}.bundle"));
        let o = tether(&[
            "build",
            "--family",
            "detect",
            "--onnx",
            &field(model),
            "-o",
            out.to_str().unwrap(),
        ]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "{model}: {e}");
        assert!(e.starts_with("error: ") && e.contains(says), "{model}: {e}");
        assert!(!e.contains("panicked"), "{model}: {e}");
        assert!(!out.exists(), "{model}: no bundle on failure");
    }

    // The same malformed convolution inside a bundle with valid checksums: `run` refuses it
    // with the node and the attribute, no panic.
    use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, Verify};
    let good = Bundle::open(&dyn_bundle, Verify::Eager).unwrap();
    let id = good.identity();
    let mut w = BundleWriter::new(IdentityDesc {
        name: id.name.to_string(),
        family: id.family.to_string(),
        ..IdentityDesc::default()
    });
    let t = good.targets().next().unwrap();
    let target = w
        .add_target(tether_bundle::TargetDesc {
            name: t.name.to_string(),
            arch: tether_bundle::CpuArch::Any,
            sm: None,
            engine: tether_bundle::EngineKind::TractCpu,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        })
        .unwrap();
    for s in good.sections() {
        let payload = if s.kind == SectionKind::Onnx {
            std::fs::read(field("tiny_bad_pads.onnx")).unwrap()
        } else {
            good.section_bytes(&s).unwrap().to_vec()
        };
        let idx = w
            .add_section(s.kind, s.name, s.target.map(|_| target), payload)
            .unwrap();
        for tensor in good.tensors(s.index) {
            w.add_tensor(
                idx,
                tether_bundle::TensorDesc {
                    name: tensor.name.to_string(),
                    mode: tensor.mode,
                    dtype: tensor.dtype,
                    layout: tensor.layout,
                    dims: tensor.dims.iter().collect(),
                },
            )
            .unwrap();
        }
    }
    let bad = scratch().join("resealed-bad-pads.bundle");
    w.write(&bad).unwrap();
    assert_eq!(
        tether(&["verify", bad.to_str().unwrap()]).status.code(),
        Some(0)
    );
    let o = tether(&["run", bad.to_str().unwrap(), &field("upright.png")]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains("attribute `pads`") && !e.contains("panicked"),
        "{e}"
    );
}

/// Inputs that are not regular files, outputs that cannot be written, stdout that is full.
#[test]
fn refusals_of_the_filesystem_are_one_line_errors() {
    let b = nudenet_bundle();
    // Writing to a full stdout is an ordinary error (exit 1), never a panic.
    if Path::new("/dev/full").exists() {
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .args(["inspect", &b])
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(stderr(&o).starts_with("error: "), "{}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        assert!(stderr(&o).contains("writing to stdout"), "{}", stderr(&o));
        // `--help` writes to stdout too: a full disk is an error, not a silent success.
        let full = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_tether"))
            .arg("--help")
            .stdout(full)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).starts_with("error: writing to stdout"),
            "{}",
            stderr(&o)
        );
    }
    // `--device cuda` without a GPU: one error line and one hint line.
    cuda_without_gpu_is_one_error_and_one_hint(&tether(&[
        "run",
        &b,
        &asset("astronaut.png"),
        "--device",
        "cuda",
    ]));
    // A CPU run under `--device auto` without a GPU is quiet (the fallback is normal).
    let o = tether(&["run", &b, &asset("astronaut.png")]);
    assert!(o.status.success());
    assert!(!stderr(&o).contains("WARN"), "{}", stderr(&o));
    // Negative numbers are values (a range error), not unknown options.
    let o = tether(&[
        "run",
        &b,
        &asset("astronaut.png"),
        "--score-threshold",
        "-1",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--score-threshold -1"),
        "{}",
        stderr(&o)
    );
}

/// The PP-OCR bundle (det + rec + cls of rapidocr-onnxruntime 1.4.4), built once per test
/// process; returns the path and the build's stdout.
fn ocr_bundle() -> (String, String) {
    static B: OnceLock<(String, String)> = OnceLock::new();
    B.get_or_init(|| {
        let out = scratch().join("ppocr.bundle");
        let (det, rec, cls) = (
            asset("ch_PP-OCRv4_det_infer.onnx"),
            asset("ch_PP-OCRv4_rec_infer.onnx"),
            asset("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        );
        let o = tether(&[
            "build",
            "--family",
            "ocr",
            "--det",
            &det,
            "--rec",
            &rec,
            "--cls",
            &cls,
            "-o",
            out.to_str().unwrap(),
            "--name",
            "ppocr-v4",
        ]);
        assert!(o.status.success(), "build failed: {}", stderr(&o));
        (out.to_string_lossy().into_owned(), stdout(&o))
    })
    .clone()
}

/// The OCR family's page.png golden (written by its reference script from
/// rapidocr-onnxruntime), embedded.
fn ocr_page_golden() -> Value {
    serde_json::from_str(include_str!("../families/ocr/golden/page.json")).expect("golden JSON")
}

fn quad(v: &Value) -> [[f32; 2]; 4] {
    std::array::from_fn(|i| {
        [
            v[i][0].as_f64().expect("x") as f32,
            v[i][1].as_f64().expect("y") as f32,
        ]
    })
}

#[test]
fn ocr_builds_inspects_and_reads_page_png_like_the_reference() {
    let (b, built) = ocr_bundle();
    assert!(built.contains("family ocr: PP-OCR"), "{built}");
    assert!(built.contains("self-test: embedded"), "{built}");

    // inspect: three networks, the family's configuration, run-time shapes in the manifest.
    let v = json(&tether(&["inspect", &b, "--json"]));
    assert_eq!(v["identity"]["family"], "ocr");
    let nets: Vec<&str> = v["networks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["name"].as_str().unwrap())
        .collect();
    assert_eq!(nets, ["det", "rec", "cls"]);
    let c = &v["family_config"];
    assert_eq!(c["dictionary_entries"], 6624);
    assert_eq!(c["rec_classes"], 6625);
    assert_eq!(c["networks"]["cls"], true);
    assert_eq!(c["rec_widths"].as_array().unwrap().len(), 23);
    assert_eq!(c["det_limit_side_len"], 736);
    assert_eq!(c["self_test"]["text"], "Region-based");
    let section = |name: &str| {
        v["sections"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("no section {name}"))
            .clone()
    };
    assert_eq!(
        section("ocr/det/model.onnx")["tensors"][0]["dims"],
        serde_json::json!([1, 3, -1, -1])
    );
    // The recogniser's output by name: the masked network also has the `valid_widths` input.
    let rec = section("ocr/rec/model.onnx");
    let rec_output = rec["tensors"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] != "x" && t["name"] != "valid_widths")
        .unwrap_or_else(|| panic!("no output in {rec}"))
        .clone();
    assert_eq!(rec_output["dims"], serde_json::json!([1, -1, 6625]));
    let text = tether(&["inspect", &b]);
    assert!(text.status.success());
    assert!(
        stdout(&text).contains("23 recogniser widths (px): 320, 352"),
        "{}",
        stdout(&text)
    );

    // run --json page.png: the reference's lines (IoU >= 0.9, CER <= 1 %, nothing extra).
    let g = ocr_page_golden();
    let v = json(&tether(&["run", &b, &asset("page.png"), "--json"]));
    assert_eq!(v["family"], "ocr");
    assert_eq!(v["engines"]["det"], "tract-cpu");
    assert_eq!(v["engines"]["rec"], "tract-cpu");
    assert_eq!(v["engines"]["cls"], "tract-cpu");
    let r = &v["results"][0]["result"];
    assert_eq!(
        (&r["image_width"], &r["image_height"]),
        (&g["image_size"][0], &g["image_size"][1])
    );
    let ours: Vec<([[f32; 2]; 4], String)> = r["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (quad(&l["polygon"]), l["text"].as_str().unwrap().to_string()))
        .collect();
    let want: Vec<([[f32; 2]; 4], String)> = g["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| (quad(&l["box"]), l["text"].as_str().unwrap().to_string()))
        .collect();
    let c = tether::ocr::compare::compare(
        &want
            .iter()
            .map(|(p, t)| (*p, t.as_str()))
            .collect::<Vec<_>>(),
        &ours
            .iter()
            .map(|(p, t)| (*p, t.as_str()))
            .collect::<Vec<_>>(),
    );
    assert!(c.passes(), "{c:?}\nours: {ours:?}\nreference: {want:?}");
    // As measured against the reference: every text equal.
    assert_eq!(c.edits, 0, "{c:?}");

    // Text output and annotation.
    let png = scratch().join("page.ocr.png");
    let o = tether(&[
        "run",
        &b,
        &asset("page.png"),
        "--annotate",
        png.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("{} text lines", want.len())),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains("\"Region-basedsegmentation\""),
        "{}",
        stdout(&o)
    );
    let img = image::open(&png).expect("annotated PNG");
    assert_eq!(
        (u64::from(img.width()), u64::from(img.height())),
        (
            g["image_size"][0].as_u64().unwrap(),
            g["image_size"][1].as_u64().unwrap()
        )
    );

    // bench: the family's stages.
    let v = json(&tether(&[
        "bench",
        &b,
        &asset("page.png"),
        "--runs",
        "2",
        "--warmup",
        "1",
        "--json",
    ]));
    let stages: Vec<&str> = v["stages_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["preprocess", "det", "db", "crop", "cls", "rec"]);
    assert_eq!(v["runs"], 2);

    // Out-of-range option values are usage errors.
    let o = tether(&["run", &b, &asset("page.png"), "--text-score", "2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));

    // The bundle's self-test on this device: the embedded line through cls + rec.
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("self-test passed on cpu: text"), "{out}");
    // The summary says where it ran (every family's does); `--device auto` is named as the
    // option it is, not as a place ("passed on auto").
    assert!(
        out.contains("\") on tract CPU, worst score deviation"),
        "{out}"
    );
    let o = tether(&["verify", &b, "--self-test"]);
    let out = stdout(&o);
    assert!(
        out.contains("self-test passed (--device auto): text"),
        "{out}"
    );
    // A bundle built without its self-test says so (exit 1), after the checksums.
    let bare = scratch().join("ppocr-bare.bundle");
    let o = tether(&[
        "build",
        "--family",
        "ocr",
        "--det",
        &asset("ch_PP-OCRv4_det_infer.onnx"),
        "--rec",
        &asset("ch_PP-OCRv4_rec_infer.onnx"),
        "--no-self-test",
        "-o",
        bare.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("self-test: not embedded: left out on request"));
    let o = tether(&["verify", bare.to_str().unwrap(), "--self-test"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("carries no self-test"),
        "{}",
        stderr(&o)
    );
    // A detect bundle carries one too (the nudenet model is not the golden's: the expected
    // detections are the build host's CPU engine's, and the source says so).
    let detect = nudenet_bundle();
    let o = tether(&["verify", &detect, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("self-test passed on cpu: ")
            && (stdout(&o).contains(" detections on ") || stdout(&o).contains(" detection on ")),
        "{}",
        stdout(&o)
    );
    let v = json(&tether(&["inspect", &detect, "--json"]));
    let t = &v["family_config"]["self_test"];
    // nudenet keeps nothing on the page: its test is the photo (astronaut, 256x256 RGB) and
    // compares the face it finds there (class, score, box), not a count of 0 (issue 28).
    assert_eq!(
        (&t["pixel_format"], &t["width"], &t["detections"]),
        (
            &serde_json::json!("rgb8"),
            &serde_json::json!(256),
            &serde_json::json!(1)
        ),
        "{t}"
    );
    assert_eq!(t["score_threshold"], Value::Null, "{t}");
    assert!(
        t["source"]
            .as_str()
            .unwrap()
            .contains("CPU engine at build time"),
        "{t}"
    );
}

/// A bundle whose self-test section is in the per-family layout of earlier tethers (format
/// version 1) still opens and runs; `inspect` shows the self-test as unreadable and
/// `verify --self-test` fails (exit 1) naming the version and what to do.
#[test]
fn an_old_format_self_test_is_named_and_the_bundle_still_runs() {
    let onnx = std::fs::read(asset("silero_vad_op18_ifless.onnx")).unwrap();
    let mut w = tether::vad::bundle_of(&onnx, &tether::vad::VadConfig::default(), "old", 0)
        .expect("writer");
    // The first bytes of a version-1 `vad/selftest` section: u16 version 1, u16 reserved,
    // u32 chunks 8, u32 chunk samples 512 (then the tolerance, the PCM and probabilities).
    let mut old = vec![1u8, 0, 0, 0, 8, 0, 0, 0, 0, 2, 0, 0];
    old.resize(32 + (8 * 512 + 8) * 4, 0);
    w.add_section(
        tether::bundle::SectionKind::Reference,
        "vad/selftest",
        None,
        old,
    )
    .unwrap();
    let b = scratch().join("vad-old-selftest.bundle");
    w.write(&b).unwrap();
    let b = b.to_str().unwrap();
    let o = tether(&["run", b, &asset("Noise.wav"), "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = tether(&["inspect", b]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("unreadable: self-test format version 1"),
        "{}",
        stdout(&o)
    );
    let o = tether(&["verify", b, "--self-test", "--device", "cpu"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("self-test format version 1 (the per-family layout of earlier tethers)")
            && e.contains("rebuild the bundle with `tether build`"),
        "{e}"
    );
}

/// One memory bound for an input image, held through every copy: a 23,170 x 23,170 grayscale
/// PNG (half a gigapixel, ~0.5 MB on disk) is decoded as gray (no RGB copy), staged once into
/// the session's frame region (the pipeline's input, as a GPU session stages into pinned
/// memory), letterboxed from there, and annotated at a bounded size. Peak resident memory
/// stays within two frames of the decoded size, two annotation-sized RGB buffers and what the
/// same run takes on a small image (it took 2.17 GB, 3.2 GB with `--annotate`, when gray was
/// converted to RGB first; 1.12 GB now).
#[test]
fn a_huge_gray_png_is_decoded_within_one_memory_bound() {
    const SIDE: u32 = 23_170;
    let png = scratch().join("huge-gray.png");
    {
        // Streamed row by row: the test itself never holds the half-gigabyte image.
        let f = std::io::BufWriter::new(std::fs::File::create(&png).unwrap());
        let mut e = png::Encoder::new(f, SIDE, SIDE);
        e.set_color(png::ColorType::Grayscale);
        e.set_depth(png::BitDepth::Eight);
        let mut enc = e.write_header().unwrap();
        let row = vec![0u8; SIDE as usize];
        let mut w = enc.stream_writer().unwrap();
        for _ in 0..SIDE {
            std::io::Write::write_all(&mut w, &row).unwrap();
        }
        w.finish().unwrap();
    }
    let b = nudenet_bundle();
    let small = scratch().join("huge-small.json");
    let (code, baseline) = tether_rss(&["run", &b, &asset("astronaut.png"), "--json"], &small);
    assert_eq!(code, 0);
    let out = scratch().join("huge.json");
    let annotated = scratch().join("huge.annotated.png");
    let (code, rss) = tether_rss(
        &[
            "run",
            &b,
            png.to_str().unwrap(),
            "--json",
            "--annotate",
            annotated.to_str().unwrap(),
        ],
        &out,
    );
    assert_eq!(
        code,
        0,
        "{}",
        std::fs::read_to_string(&out).unwrap_or_default()
    );
    let decoded = u64::from(SIDE) * u64::from(SIDE);
    let annotation = 4096u64 * 4096 * 3;
    let bound = 2 * decoded + 2 * annotation + baseline + (32 << 20);
    eprintln!(
        "{SIDE}x{SIDE} gray PNG: peak RSS {rss} bytes (decoded {decoded}, bound {bound}, small run {baseline})"
    );
    assert!(
        rss < bound,
        "peak RSS {rss} bytes over the bound {bound} (decoded image {decoded} bytes)"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    let r = &doc["results"][0]["result"];
    assert_eq!(r["image_width"], SIDE, "{doc}");
    assert_eq!(r["image_height"], SIDE, "{doc}");
    let _ = std::fs::remove_file(&png);
    let _ = std::fs::remove_file(&annotated);
}

/// A `--device cuda` run that failed (exit 1: no usable GPU here) printed exactly one
/// `error:` line and one `hint:` line; on a machine with a GPU the run may succeed instead.
fn cuda_without_gpu_is_one_error_and_one_hint(o: &std::process::Output) {
    if o.status.code() == Some(1) {
        let e = stderr(o);
        assert_eq!(e.lines().count(), 2, "{e}");
        assert!(e.starts_with("error: ") && e.contains("\nhint: "), "{e}");
    }
}

/// The Silero VAD bundle (silero-vad 6.2.3's network), built once per test process.
fn vad_bundle() -> (String, String) {
    static B: OnceLock<(String, String)> = OnceLock::new();
    B.get_or_init(|| {
        let out = scratch().join("silero.bundle");
        let onnx = asset("silero_vad_op18_ifless.onnx");
        let o = tether(&[
            "build",
            "--family",
            "vad",
            "--onnx",
            &onnx,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "build failed: {}", stderr(&o));
        (out.to_string_lossy().into_owned(), stdout(&o))
    })
    .clone()
}

/// `bench` on a VAD bundle reports the unit its users think in, the 32 ms chunk: every chunk
/// of every timed run is counted and timed (one probability per chunk in `run`'s JSON), and
/// the per-chunk figures sit beside the per-run ones in the text and the JSON.
#[test]
fn vad_bench_reports_per_chunk_latency() {
    let (b, _) = vad_bundle();
    let wav = asset("Front_Left.wav");
    let chunks =
        json(&tether(&["run", &b, &wav, "--json"]))["results"][0]["result"]["probabilities"]
            .as_array()
            .expect("probabilities")
            .len() as u64;
    let bench = |runs: &str, extra: &[&str]| {
        let mut args = vec!["bench", &b, &wav, "--device", "cpu", "--runs", runs];
        args.extend_from_slice(extra);
        tether(&args)
    };
    let o = bench("3", &["--warmup", "1", "--json", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    assert_eq!(v["runs"], 3);
    assert_eq!(v["units"]["name"], "chunk");
    assert_eq!(v["units"]["count"], 3 * chunks, "{}", v["units"]);
    assert_eq!(v["units"]["ms"]["count"], 3 * chunks);
    let per_chunk = v["units"]["ms"]["mean"].as_f64().unwrap();
    let per_run = v["total_ms"]["mean"].as_f64().unwrap();
    // Chunks are timed one by one inside the run: their sum is at most the run's time.
    assert!(
        per_chunk > 0.0 && per_chunk * chunks as f64 <= per_run * 1.01,
        "per chunk {per_chunk} ms x {chunks} vs per run {per_run} ms"
    );
    let text = stdout(&bench("2", &[]));
    assert!(text.contains(&format!("{} chunks", 2 * chunks)), "{text}");
    assert!(text.contains("per chunk"), "{text}");
    // A WAV without samples: no chunk timed, so no row of zeros and `units` null (as
    // docs/cli-json.md says), not figures that read as measured.
    let empty = scratch().join("no-samples.wav");
    let mut w = b"RIFF".to_vec();
    w.extend_from_slice(&36u32.to_le_bytes());
    w.extend_from_slice(b"WAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes()); // PCM
    w.extend_from_slice(&1u16.to_le_bytes()); // mono
    w.extend_from_slice(&16_000u32.to_le_bytes());
    w.extend_from_slice(&32_000u32.to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data");
    w.extend_from_slice(&0u32.to_le_bytes());
    std::fs::write(&empty, &w).unwrap();
    let e = empty.to_str().unwrap();
    let o = tether(&[
        "bench", &b, e, "--device", "cpu", "--runs", "2", "--json", "-",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(json(&o)["units"].is_null(), "{}", stdout(&o));
    let o = tether(&["bench", &b, e, "--device", "cpu", "--runs", "2"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("0 chunks"), "{}", stdout(&o));
    assert!(!stdout(&o).contains("per chunk"), "{}", stdout(&o));
    // Without an INPUT: a family benchmarked per input says so before its model is loaded
    // (`-v` would log the load: "vad `NAME`: Silero VAD ...").
    let o = tether(&["bench", &b, "-v"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give an INPUT: the vad family is benchmarked on an input"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("Silero VAD"), "{}", stderr(&o));
    // The same with an option of the latency benchmark: still the missing INPUT.
    let o = tether(&["bench", &b, "--warmup", "3"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give an INPUT: the vad family is benchmarked on an input"),
        "{}",
        stderr(&o)
    );
}

/// Ctrl-C in `bench` on a long recording stops the run in flight between chunks (it does
/// not wait for the end of the file) and reports the chunks measured, exit status 130.
#[test]
fn vad_bench_ctrl_c_stops_between_chunks() {
    let (b, _) = vad_bundle();
    // 40 minutes at 8 kHz: longer than the in-memory limit (35 min at 16 kHz), so it is
    // streamed; about 75,000 chunks, far more than a few seconds of work on any CPU here.
    let wav = scratch().join("forty_minutes.wav");
    if !wav.exists() {
        let rate = 8000u32;
        let frames = rate * 60 * 40;
        let mut w = Vec::with_capacity(44 + 2 * frames as usize);
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(36 + 2 * frames).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&16u32.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&rate.to_le_bytes());
        w.extend_from_slice(&(2 * rate).to_le_bytes());
        w.extend_from_slice(&2u16.to_le_bytes());
        w.extend_from_slice(&16u16.to_le_bytes());
        w.extend_from_slice(b"data");
        w.extend_from_slice(&(2 * frames).to_le_bytes());
        // A 300 Hz tone, on for 1 s and off for 1 s.
        for i in 0..frames {
            let on = (i / rate).is_multiple_of(2);
            let x = if on {
                (f64::from(i) * 300.0 * std::f64::consts::TAU / f64::from(rate)).sin() * 8000.0
            } else {
                0.0
            };
            w.extend_from_slice(&(x as i16).to_le_bytes());
        }
        let tmp = wav.with_extension("part");
        std::fs::write(&tmp, &w).unwrap();
        std::fs::rename(&tmp, &wav).unwrap();
    }
    let json_path = scratch().join("vad_interrupted.json");
    let (o, after) = interrupted(
        &[
            "bench",
            &b,
            wav.to_str().unwrap(),
            "--device",
            "cpu",
            "--threads",
            "1",
            "--warmup",
            "0",
            "--runs",
            "5",
            "--json",
            json_path.to_str().unwrap(),
        ],
        std::time::Duration::from_secs(3),
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    // Before the fix a run finished its whole file first (99.7 s on a 10-hour WAV).
    assert!(
        after < std::time::Duration::from_secs(2),
        "exited {after:?} after Ctrl-C"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    assert!(v["runs"].as_u64().unwrap() < 5, "{}", v["runs"]);
}

/// A 32-bit float WAV whose samples are all NaN (or all +inf) is refused naming the file, the
/// first sample's frame and channel and its value, exit 1; before the fix it ran, exit 0,
/// every chunk given the same meaningless probability (0.3487 on this bundle; 0.5146 on the
/// sequence-form v6 bundle, a full-length speech segment).
#[test]
fn vad_refuses_a_float_wav_of_non_finite_samples() {
    let (b, _) = vad_bundle();
    for (name, value, shown) in [("nan", f32::NAN, "NaN"), ("inf", f32::INFINITY, "inf")] {
        let frames = 16_000u32;
        let mut w = Vec::with_capacity(44 + 4 * frames as usize);
        w.extend_from_slice(b"RIFF");
        w.extend_from_slice(&(36 + 4 * frames).to_le_bytes());
        w.extend_from_slice(b"WAVEfmt ");
        w.extend_from_slice(&16u32.to_le_bytes());
        w.extend_from_slice(&3u16.to_le_bytes()); // IEEE float
        w.extend_from_slice(&1u16.to_le_bytes());
        w.extend_from_slice(&16_000u32.to_le_bytes());
        w.extend_from_slice(&(4 * 16_000u32).to_le_bytes());
        w.extend_from_slice(&4u16.to_le_bytes());
        w.extend_from_slice(&32u16.to_le_bytes());
        w.extend_from_slice(b"data");
        w.extend_from_slice(&(4 * frames).to_le_bytes());
        for _ in 0..frames {
            w.extend_from_slice(&value.to_le_bytes());
        }
        let wav = scratch().join(format!("vad_{name}.wav"));
        std::fs::write(&wav, &w).unwrap();
        let path = wav.to_str().unwrap();
        let o = tether(&["run", &b, path, "--probabilities"]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{name}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        let e = stderr(&o);
        assert!(e.contains(path), "{e}");
        assert!(
            e.contains(&format!(
                "the sample at frame 0, channel 0 is {shown}, not a finite number"
            )),
            "{e}"
        );
        assert!(!stdout(&o).contains("speech"), "{}", stdout(&o));
    }
}

#[test]
fn vad_builds_inspects_runs_a_wav_like_the_package_and_self_tests() {
    let (b, built) = vad_bundle();
    // `--device cuda` where there is no GPU: one error line and one hint line, as for every
    // family (the family's error wraps the runtime's; the hint must still be found).
    cuda_without_gpu_is_one_error_and_one_hint(&tether(&[
        "run",
        &b,
        &asset("Noise.wav"),
        "--device",
        "cuda",
    ]));
    // No image to annotate: the option is refused before any work, never ignored.
    let png = scratch().join("vad.annotated.png");
    let o = tether(&[
        "run",
        &b,
        &asset("Noise.wav"),
        "--annotate",
        png.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no image to annotate"),
        "{}",
        stderr(&o)
    );
    assert!(!png.exists());
    assert!(built.contains("family vad: Silero VAD"), "{built}");
    assert!(built.contains("self-test: embedded"), "{built}");
    let v = json(&tether(&["inspect", &b, "--json"]));
    assert_eq!(v["identity"]["family"], "vad");
    assert_eq!(v["family_config"]["sample_rate"], 16000);
    assert_eq!(v["family_config"]["form"], "streaming");
    assert_eq!(v["family_config"]["self_test"]["chunks"], 8);

    // run: the package's segments (families/vad/golden, silero-vad 6.2.3), within a chunk.
    let g: Value =
        serde_json::from_str(include_str!("../families/vad/golden/Front_Center.json")).unwrap();
    let v = json(&tether(&["run", &b, &asset("Front_Center.wav"), "--json"]));
    assert_eq!(v["family"], "vad");
    let r = &v["results"][0]["result"];
    let got = r["segments"].as_array().unwrap();
    let want = g["segments_samples"].as_array().unwrap();
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (s, w) in got.iter().zip(want) {
        for (k, i) in [("start_sample", 0), ("end_sample", 1)] {
            let d = s[k].as_u64().unwrap().abs_diff(w[i].as_u64().unwrap());
            assert!(d <= 512, "{s} vs {w}");
        }
    }
    let probs = r["probabilities"].as_array().unwrap();
    let want_p = g["probs"].as_array().unwrap();
    assert_eq!(probs.len(), want_p.len());
    for (p, w) in probs.iter().zip(want_p) {
        assert!((p.as_f64().unwrap() - w.as_f64().unwrap()).abs() <= 1e-4);
    }
    // A stereo file at another rate: averaged, resampled, segments in seconds.
    let o = tether(&[
        "run",
        &b,
        "families/vad/golden/espeak_robot.wav",
        "--threshold",
        "0.6",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stdout(&o).contains("speech segment"), "{}", stdout(&o));
    assert!(stdout(&o).contains(" s - "), "{}", stdout(&o));
    // Out-of-range values are usage errors; text is not an input of this family.
    let o = tether(&["run", &b, &asset("Noise.wav"), "--threshold", "1.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let o = tether(&["run", &b, "--text", "hello"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("takes no literal text; its inputs are WAV files"),
        "{}",
        stderr(&o)
    );
    // bench: the family's stages.
    let v = json(&tether(&[
        "bench",
        &b,
        &asset("Noise.wav"),
        "--runs",
        "2",
        "--warmup",
        "1",
        "--json",
    ]));
    let stages: Vec<&str> = v["stages_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["silero", "segments"]);
    // A family without a staged path says so (a usage error: the flag does not apply).
    let o = tether(&["bench", &b, &asset("Noise.wav"), "--runs", "1", "--staged"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("the vad family has no staged path"),
        "{}",
        stderr(&o)
    );
    // The bundle's self-test on this device.
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("self-test passed on cpu: 8 chunk probabilities"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn embed_builds_inspects_embeds_texts_and_self_tests() {
    let out = scratch().join("minilm.bundle");
    let o = build_minilm(&out, &[]);
    assert!(o.status.success(), "build failed: {}", stderr(&o));
    assert!(stdout(&o).contains("family embed: 384-d"), "{}", stdout(&o));
    let b = out.to_string_lossy().into_owned();
    // An empty text is refused, not embedded as [CLS][SEP]: the option's value is wrong, so
    // a usage error (exit 2); an empty file is an input that failed (exit 1).
    let o = tether(&["run", &b, "--text", "  "]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("holds no text"), "{}", stderr(&o));
    // An empty one is named by its option, once, not by an empty label ("input : ...").
    let o = tether(&["run", &b, "--text", ""]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("error: --text \"\" holds no text"),
        "{}",
        stderr(&o)
    );
    let v = json(&tether(&["inspect", &b, "--json"]));
    assert_eq!(v["identity"]["family"], "embed");
    assert_eq!(v["family_config"]["dim"], 384);
    assert_eq!(
        v["family_config"]["seq_buckets"],
        serde_json::json!([16, 32, 64, 128, 256])
    );

    // The known pair of the golden (sentence-transformers cosine 0.7553), as two --text
    // inputs (cross-input similarity) and as one file of two lines (pairwise).
    let g: Value =
        serde_json::from_str(include_str!("../families/embed/golden/embeddings.json")).unwrap();
    let pair = &g["known_pair"];
    let (a, c) = (
        pair["texts"][0].as_str().unwrap(),
        pair["texts"][1].as_str().unwrap(),
    );
    let st = pair["cosine_sentence_transformers"].as_f64().unwrap();
    let v = json(&tether(&["run", &b, "--text", a, "--text", c, "--json"]));
    let r = &v["results"];
    assert_eq!(
        r[0]["result"]["texts"][0]["embedding"]
            .as_array()
            .unwrap()
            .len(),
        384
    );
    // The second input's best match is the first input's text.
    let m = &r[1]["result"]["texts"][0]["matches"][0];
    assert_eq!(m["input"], a);
    let cos = m["cosine"].as_f64().unwrap();
    assert!((cos - st).abs() < 0.01, "cosine {cos} vs {st}");
    let file = scratch().join("pair.txt");
    std::fs::write(&file, format!("{a}\n\n{c}\n")).unwrap();
    let o = tether(&["run", &b, file.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("2 embeddings of 384 dimensions"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("cosine("), "{}", stdout(&o));
    // bench counts texts: on a file of two, per text is half a run; `--text` times one.
    let v = json(&tether(&[
        "bench",
        &b,
        file.to_str().unwrap(),
        "--runs",
        "3",
        "--warmup",
        "0",
        "--json",
        "-",
    ]));
    assert_eq!(v["units"]["name"], "text");
    assert_eq!(v["units"]["count"], 6);
    let (per_text, per_run) = (
        v["units"]["ms"]["mean"].as_f64().unwrap(),
        v["total_ms"]["mean"].as_f64().unwrap(),
    );
    assert!(
        (per_text * 2.0 - per_run).abs() <= 1e-2 * per_run,
        "{per_text} {per_run}"
    );
    let v = json(&tether(&[
        "bench", &b, "--text", a, "--runs", "2", "--warmup", "0", "--json", "-",
    ]));
    assert_eq!(v["input"], a);
    assert_eq!(v["units"]["count"], 2);
    let o = tether(&["bench", &b, file.to_str().unwrap(), "--text", a]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A file that is not text is refused by name.
    let o = tether(&["run", &b, &asset("Noise.wav")]);
    assert!(!o.status.success());
    assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
    // Out-of-range build options are usage errors naming the range (4 to 512 tokens).
    for len in ["4096", "2"] {
        let o = build_minilm(&scratch().join("never.bundle"), &["--max-seq-len", len]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("--max-seq-len {len}: accepted 4 to 512")),
            "{}",
            stderr(&o)
        );
    }
    // The bundle's self-test on this device.
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("self-test passed on cpu: embedding of the reference sentence"),
        "{}",
        stdout(&o)
    );
}

/// Build options out of range are usage errors (exit 2), checked before the model is read: a
/// huge `--input-size` is refused at once (it used to run for minutes and gigabytes first).
#[test]
fn detect_build_ranges_exit_2_before_any_work() {
    let onnx = asset("320n.onnx");
    let out = scratch().join("never.bundle");
    for (extra, says) in [
        (
            vec!["--input-size", "100000"],
            "the width 100000 is not one of the accepted 32 to 8192 in steps of 32",
        ),
        (
            vec!["--input-size", "333"],
            "accepted 32 to 8192 in steps of 32",
        ),
        (vec!["--input-size", "8192"], "anchors"),
        (
            vec!["--max-detections", "301"],
            "--max-detections 301: accepted 1 to 300",
        ),
        (
            vec!["--max-detections", "0"],
            "--max-detections 0: accepted 1 to 300",
        ),
        (
            vec!["--score-threshold", "2"],
            "--score-threshold 2: accepted 0 to 1",
        ),
        (
            vec!["--iou-threshold", "-0.5"],
            "--iou-threshold -0.5: accepted 0 to 1",
        ),
    ] {
        let mut args = vec!["build", "--family", "detect", "--onnx", &onnx, "-o"];
        let o_path = out.to_str().unwrap();
        args.push(o_path);
        args.extend(extra.iter().copied());
        let o = tether(&args);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{extra:?}: {}", stderr(&o));
        assert!(!out.exists(), "{extra:?}");
    }
}

/// Issue 28 through the CLI: the field inputs of OCR, VAD and embed get the reference's
/// answer or a clear refusal naming only options that exist (the right values are in
/// `/work/shared/cases/field/families/README.md`, copied into `tests/field/`).
#[test]
fn issue_28_field_inputs_through_the_cli() {
    // VAD: the field WAVs, a low threshold, an image.
    let vad = scratch().join("vad28.bundle");
    let o = tether(&[
        "build",
        "--family",
        "vad",
        "--onnx",
        &asset("silero_vad_op18_ifless.onnx"),
        "-o",
        vad.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let b = vad.to_string_lossy().into_owned();
    let v = json(&tether(&["run", &b, &field("vad_alaw.wav"), "--json"]));
    let r = &v["results"][0]["result"];
    assert_eq!(r["source_format"], "A-law");
    let segs: Vec<[u64; 2]> = r["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            [
                s["start_sample"].as_u64().unwrap(),
                s["end_sample"].as_u64().unwrap(),
            ]
        })
        .collect();
    assert_eq!(segs, [[7712, 15840], [18464, 38880]]);
    let cut = scratch().join("vad_truncated.wav");
    std::fs::write(
        &cut,
        &std::fs::read(field("vad_control_pcm16.wav")).unwrap()[..75_060],
    )
    .unwrap();
    let o = tether(&["run", &b, cut.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&o);
    let r = &v["results"][0]["result"];
    assert_eq!(r["samples_16k"], 37_508);
    assert_eq!(r["truncated"]["declared_data_bytes"], 100_022);
    assert!(
        stderr(&o).contains("shorter than its header says"),
        "{}",
        stderr(&o)
    );
    for t in ["0.01", "0.005", "0"] {
        let o = tether(&["run", &b, &field("vad_control_pcm16.wav"), "--threshold", t]);
        assert!(o.status.success(), "--threshold {t}: {}", stderr(&o));
    }
    let o = tether(&[
        "run",
        &b,
        &field("vad_control_pcm16.wav"),
        "--threshold",
        "1.5",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("neg-threshold"), "{}", stderr(&o));
    let o = tether(&["run", &b, &field("red_square.png")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("not a WAV file (it looks like a PNG image)"),
        "{}",
        stderr(&o)
    );

    // embed: lone CR line ends are three texts, each with its line.
    let e = minilm_bundle();
    let v = json(&tether(&[
        "run",
        &e,
        &field("embed_cr_only_lines.txt"),
        "--json",
    ]));
    let texts = v["results"][0]["result"]["texts"]
        .as_array()
        .unwrap()
        .clone();
    let tokens: Vec<u64> = texts
        .iter()
        .map(|t| t["token_count"].as_u64().unwrap())
        .collect();
    assert_eq!(tokens, [8, 11, 7]);
    let lines: Vec<u64> = texts
        .iter()
        .map(|t| t["source"]["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, [1, 2, 3]);
    let m = &texts[0]["matches"][0];
    assert_eq!(m["text"], 1);
    assert!((m["cosine"].as_f64().unwrap() - 0.7535).abs() < 5e-4, "{m}");

    // embed: 4,096 short lines (as the field file: random robot words): memory bounded by
    // the batch, an output of embeddings and top matches (no pairwise matrix).
    let words = [
        "floor", "door", "forward", "cup", "table", "camera", "wait", "gripper", "left", "station",
        "charging", "stop", "arm", "robot", "right", "kitchen",
    ];
    let mut seed = 28u64;
    let mut text = String::new();
    for _ in 0..4096 {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1442695040888963407);
        let n = 4 + (seed >> 60) as usize;
        for k in 0..n {
            seed = seed
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1442695040888963407);
            text.push_str(words[(seed >> 59) as usize % words.len()]);
            text.push(if k + 1 == n { '\n' } else { ' ' });
        }
    }
    let big = scratch().join("embed_4096_lines.txt");
    std::fs::write(&big, text).unwrap();
    let out = scratch().join("embed_4096.json");
    let (code, rss) = tether_rss(&["run", &e, big.to_str().unwrap(), "--json"], &out);
    assert_eq!(code, 0);
    let size = std::fs::metadata(&out).unwrap().len();
    println!(
        "4096 lines: peak RSS {} MiB, output {} MiB",
        rss >> 20,
        size >> 20
    );
    assert!(rss < 1 << 30, "peak RSS {rss} bytes");
    assert!(size < 64 << 20, "output {size} bytes");
    let v: Value = serde_json::from_slice(&std::fs::read(&out).unwrap()).unwrap();
    let r = &v["results"][0]["result"];
    assert_eq!(r["texts"].as_array().unwrap().len(), 4096);
    assert_eq!(r["texts"][4095]["matches"].as_array().unwrap().len(), 5);
    assert!(r["similarities"].is_null());
    // Every pairwise cosine only when asked, and not for 4,096 texts.
    let o = tether(&["run", &e, big.to_str().unwrap(), "--all-pairs"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--top-k"), "{}", stderr(&o));

    // OCR: text drawn only in the alpha channel of a gray + alpha PNG.
    let ocr = scratch().join("ocr28.bundle");
    let o = tether(&[
        "build",
        "--family",
        "ocr",
        "--det",
        &asset("ch_PP-OCRv4_det_infer.onnx"),
        "--rec",
        &asset("ch_PP-OCRv4_rec_infer.onnx"),
        "--cls",
        &asset("ch_ppocr_mobile_v2.0_cls_infer.onnx"),
        "-o",
        ocr.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let v = json(&tether(&[
        "run",
        ocr.to_str().unwrap(),
        &field("ocr_gray_alpha_transparent.png"),
        "--json",
    ]));
    let lines: Vec<&str> = v["results"][0]["result"]["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["text"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        [
            "The robot must stop at the red door.",
            "Battery level: 87% (charging)",
            "Turn left, then wait for me."
        ]
    );
}

/// The handed SmolLM2-135M-Instruct Q4_1 GGUF built once per test process.
fn smollm2_bundle() -> String {
    static B: OnceLock<String> = OnceLock::new();
    B.get_or_init(|| {
        let out = scratch().join("smollm2.bundle");
        let o = tether(&[
            "build",
            "--family",
            "llm",
            "--gguf",
            &asset("SmolLM2-135M-Instruct.Q4_1.gguf"),
            "-o",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "build failed: {}", stderr(&o));
        // The pinned GGUF: llama.cpp's golden is the self-test, reproduced at build.
        assert!(
            stdout(&o).contains("llm self-test passed") && stdout(&o).contains("llama.cpp"),
            "{}",
            stdout(&o)
        );
        out.to_string_lossy().into_owned()
    })
    .clone()
}

/// The golden chat of the llm family's self-test (llama.cpp's greedy answer).
fn llm_golden_chat() -> Value {
    let g: Value = serde_json::from_str(include_str!("../families/llm/golden/chat.json")).unwrap();
    g["chats"][2].clone()
}

#[test]
fn llm_builds_inspects_and_self_tests() {
    // A GGUF of a version this build does not read: named, with how to re-save it (not the
    // hint of a truncated file).
    let v1 = scratch().join("version1.gguf");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&[0; 16]);
    std::fs::write(&v1, bytes).unwrap();
    let out = scratch().join("version1.bundle");
    let o = refused(
        &[
            "build",
            "--family",
            "llm",
            "--gguf",
            v1.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        1,
        "GGUF version 1 is not supported",
    );
    assert!(
        stderr(&o).contains("re-save the model as GGUF v3") && !stderr(&o).contains("truncated"),
        "{}",
        stderr(&o)
    );
    let b = smollm2_bundle();
    let o = tether(&["inspect", &b]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    for want in [
        "architecture",
        "llama",
        "Q4_1",
        "context length",
        "8192",
        "vocabulary",
        "49152",
        "<|im_end|>",
        "chat template",
        "present",
    ] {
        assert!(text.contains(want), "{want} not in {text}");
    }
    let v = json(&tether(&["inspect", &b, "--json"]));
    // One section per weight tensor: the text lists the first 8 and says how to see all;
    // `--sections` lists every one; JSON always has them all.
    let n = v["sections"].as_array().unwrap().len();
    assert!(n > 32, "{n}");
    let listed = |t: &str| t.lines().filter(|l| l.starts_with("  [")).count();
    // (The llm labels are wider than the others: one column for all.)
    assert!(text.contains(&format!("sections       {n}\n")), "{text}");
    assert!(text.contains("context length 8192\n"), "{text}");
    assert_eq!(listed(&text), 8, "{text}");
    assert!(
        text.contains(&format!(
            "... {} more (`tether inspect BUNDLE --sections`",
            n - 8
        )),
        "{text}"
    );
    assert!(text.contains("targets        none"), "{text}");
    let all = stdout(&tether(&["inspect", &b, "--sections"]));
    assert_eq!(listed(&all), n, "{all}");
    assert!(!all.contains("more (`tether inspect"), "{all}");
    let c = &v["family_config"];
    assert_eq!(v["identity"]["family"], "llm");
    assert_eq!(c["architecture"], "llama");
    assert_eq!(c["context_length"], 8192);
    assert_eq!(c["vocabulary"], 49152);
    assert_eq!(c["chat_template"], true);
    assert_eq!(c["special_tokens"]["eos"]["text"], "<|im_end|>");
    assert!(c["parameters"].as_u64().unwrap() > 100_000_000);
    assert_eq!(c["self_test"]["generated_token_count"], 13);
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("13 of 13 greedy tokens equal"),
        "{}",
        stdout(&o)
    );
}

/// Each command maps its bundle once after its arguments are parsed: `-vv`'s reader line
/// ("opened bundle") appears once for inspect (whose llm description reads the checkpoint),
/// run without INPUT (`--prompt`), bench and verify. (Before, inspect and run opened the file
/// a second time. The argument pre-scan, before logging starts, also maps it to learn the
/// family's options: not counted here.)
#[test]
fn each_command_opens_its_bundle_once() {
    let b = smollm2_bundle();
    for args in [
        vec!["inspect", &b],
        vec!["run", &b, "--prompt", "Hi", "--max-tokens", "1"],
        vec![
            "bench",
            &b,
            "--n-prompt",
            "4",
            "--n-gen",
            "2",
            "--runs",
            "1",
        ],
        vec!["verify", &b],
    ] {
        let mut with_log = args.clone();
        with_log.push("-vv");
        let o = tether(&with_log);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
        let opened = stderr(&o).matches("opened bundle").count();
        assert_eq!(opened, 1, "{args:?}: {}", stderr(&o));
    }
}

/// A copy of `bundle` in the scratch folder, named `name`, with the byte `skip` bytes into
/// its section `section` flipped (its CRC then mismatches), and that section's entry in
/// `inspect --json` (`index`, `offset`, ...).
fn with_section_byte_flipped(
    bundle: &str,
    section: &str,
    skip: u64,
    name: &str,
) -> (PathBuf, Value) {
    let v = json(&tether(&["inspect", bundle, "--json"]));
    let entry = v["sections"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == section)
        .unwrap_or_else(|| panic!("no section {section} in {bundle}"))
        .clone();
    let at = entry["offset"].as_u64().unwrap() + skip;
    let mut bytes = std::fs::read(bundle).unwrap();
    bytes[at as usize] ^= 0xFF;
    let corrupt = scratch().join(name);
    std::fs::write(&corrupt, &bytes).unwrap();
    (corrupt, entry)
}

/// A weight section of an llm bundle with a flipped byte: the CRC error names the section,
/// and the hint is the bundle's (the llm errors carry the bundle error inside).
#[test]
fn a_corrupt_llm_weight_section_is_named_with_the_bundle_hint() {
    let b = smollm2_bundle();
    let (corrupt, section) = with_section_byte_flipped(
        &b,
        "llm/blk.0.ffn_down.weight",
        100,
        "smollm2-corrupt.bundle",
    );
    let o = tether(&[
        "run",
        corrupt.to_str().unwrap(),
        "--prompt",
        "hi",
        "--max-tokens",
        "1",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "section `llm/blk.0.ffn_down.weight` (#{}) CRC mismatch",
            section["index"]
        )) && stderr(&o).contains("hint: the file is not a valid tether bundle"),
        "{}",
        stderr(&o)
    );
    // `inspect` still lists the sections, says in its output that the family's sections
    // cannot be read and why, and exits 1 with that error once on stderr and the bundle's
    // hint, as `run` gives.
    let o = tether(&["inspect", corrupt.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let crc = format!(
        "section `llm/blk.0.ffn_down.weight` (#{}) CRC mismatch",
        section["index"]
    );
    assert!(
        stdout(&o).contains(&format!(
            "unreadable: the llm family could not read the bundle: {crc}"
        )) && stdout(&o).contains("llm/blk.0.ffn_down.weight"),
        "{}",
        stdout(&o)
    );
    assert!(
        stderr(&o).matches("CRC mismatch").count() == 1
            && stderr(&o).contains(&format!("could not read the bundle: {crc}"))
            && stderr(&o).contains("hint: the file is not a valid tether bundle"),
        "{}",
        stderr(&o)
    );
    let o = tether(&["inspect", corrupt.to_str().unwrap(), "--json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value = serde_json::from_str(&stdout(&o)).expect("the JSON document");
    assert!(v["family_config"].is_null(), "{v}");
    assert!(
        v["family_config_error"]
            .as_str()
            .is_some_and(|e| e.contains(&crc)),
        "{v}"
    );
    std::fs::remove_file(&corrupt).unwrap();
}

#[test]
fn llm_run_prompt_greedy_gives_llama_cpp_text() {
    let b = smollm2_bundle();
    let chat = llm_golden_chat();
    let prompt = chat["messages"][0]["content"].as_str().unwrap();
    // Streamed text on stdout, the summary on stderr.
    let o = tether(&["run", &b, "--prompt", prompt, "--temperature", "0"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o).trim_end(), chat["text"].as_str().unwrap());
    assert!(stderr(&o).contains("stop ("), "{}", stderr(&o));
    // JSON: the text, llama.cpp's token ids (end-of-generation id last), the finish reason.
    let v = json(&tether(&[
        "run", &b, "--prompt", prompt, "--temp", "0", "--json",
    ]));
    let r = &v["results"][0]["result"];
    assert_eq!(v["family"], "llm");
    assert_eq!(r["text"], chat["text"]);
    assert_eq!(r["tokens"], chat["generated_ids"]);
    assert_eq!(r["prompt_tokens"], chat["prompt_ids"]);
    assert_eq!(r["finish_reason"], "stop");
    assert!(r["timings"]["generation_tokens_per_s"].as_f64().unwrap() > 0.0);
    // One token: no interval between tokens, so no rate and no percentiles (null, not 0),
    // and the summary says "1 token".
    let v = json(&tether(&[
        "run",
        &b,
        "--prompt",
        prompt,
        "--temp",
        "0",
        "--max-tokens",
        "1",
        "--json",
    ]));
    let t = &v["results"][0]["result"]["timings"];
    assert_eq!(t["generated_token_count"], 1, "{t}");
    assert_eq!(t["generation_ms"], 0.0, "{t}");
    assert!(
        t["generation_tokens_per_s"].is_null() && t["inter_token_ms"].is_null(),
        "{t}"
    );
    let o = tether(&["run", &b, "-p", prompt, "--temp", "0", "--max-tokens", "1"]);
    assert!(
        stderr(&o).contains("; 1 token generated; first token"),
        "{}",
        stderr(&o)
    );
    // --raw bypasses the template (the text's own 5 tokens); --max-tokens ends with `length`.
    let v = json(&tether(&[
        "run",
        &b,
        "--prompt",
        "The capital of France is",
        "--temperature",
        "0",
        "--max-tokens",
        "3",
        "--raw",
        "--json",
    ]));
    let r = &v["results"][0]["result"];
    assert_eq!(r["finish_reason"], "length");
    assert_eq!(r["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(r["prompt_tokens"].as_array().unwrap().len(), 5);
    assert!(r["text"].as_str().unwrap().starts_with(" Paris"), "{r}");
    // The text says which limit ended it: --max-tokens, or a context the prompt and the
    // answer filled (5 prompt tokens in a context of 8: 4 more positions, so 4 tokens).
    let limit = |extra: &[&str]| {
        let mut args = vec![
            "run",
            &b,
            "--prompt",
            "The capital of France is",
            "--temperature",
            "0",
            "--raw",
        ];
        args.extend_from_slice(extra);
        let o = tether(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        // The text streams to stdout, the request's summary to stderr.
        stderr(&o)
    };
    let out = limit(&["--max-tokens", "3"]);
    assert!(out.contains(": length: --max-tokens 3 reached ("), "{out}");
    let out = limit(&["--context", "8", "--max-tokens", "100"]);
    assert!(
        out.contains(": length: the context of 8 tokens is full (")
            && out.contains("4 tokens generated"),
        "{out}"
    );
    // llama.cpp's `--n-predict -1`: no limit but the context's (or the end of the answer).
    let out = limit(&["--context", "8", "--n-predict", "-1"]);
    assert!(
        out.contains(": length: the context of 8 tokens is full (")
            && out.contains("4 tokens generated"),
        "{out}"
    );
    let o = tether(&["run", &b, "--prompt", "hi", "--max-tokens", "-2"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("accepted 1 to 1000000, or -1"),
        "{}",
        stderr(&o)
    );
    // The same prompt as a file with a byte-order mark and `echo`'s final line end: both
    // dropped (as llama.cpp's -f drops the line end), so the same 5 tokens and answer.
    let f = scratch().join("france.txt");
    std::fs::write(&f, "\u{feff}The capital of France is\n").unwrap();
    let v = json(&tether(&[
        "run",
        &b,
        f.to_str().unwrap(),
        "--temperature",
        "0",
        "--max-tokens",
        "3",
        "--raw",
        "--json",
    ]));
    let from_file = &v["results"][0]["result"];
    assert_eq!(
        from_file["prompt_tokens"], r["prompt_tokens"],
        "{from_file}"
    );
    assert_eq!(from_file["text"], r["text"], "{from_file}");
    // Same seed, same sampled text.
    let sampled = |seed: &str| {
        json(&tether(&[
            "run",
            &b,
            "--prompt",
            prompt,
            "--seed",
            seed,
            "--max-tokens",
            "8",
            "--json",
        ]))["results"][0]["result"]["tokens"]
            .clone()
    };
    assert_eq!(sampled("7"), sampled("7"));
}

#[test]
fn llm_bad_options_and_other_families_options_are_named() {
    let b = smollm2_bundle();
    // Another family's option names that family.
    let o = tether(&["run", &b, "--prompt", "hi", "--score-threshold", "0.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--score-threshold is an option of the detect family")
            && stderr(&o).contains("llm family"),
        "{}",
        stderr(&o)
    );
    // Out-of-range sampling values are usage errors naming the option.
    let o = tether(&["run", &b, "--prompt", "hi", "--top-p", "1.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--top-p 1.5"), "{}", stderr(&o));
    // A context beyond the model's: a value out of range, so a usage error (exit 2, as
    // docs/cli.md says), naming the option, the value and the model's bound once.
    let o = tether(&["run", &b, "--prompt", "hi", "--context", "100000"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--context 100000: accepted 1 to 8192 (the model's training context)")
            && stderr(&o).matches("training context").count() == 1,
        "{}",
        stderr(&o)
    );
    // --system is refused where it would be dropped (--raw has no template) or doubled (a
    // chat file with its own system message); bench refuses run's --prompt (and its help
    // leaves it out), and with an INPUT the throughput tests' --n-gen.
    let chat = scratch().join("sys-chat.json");
    std::fs::write(
        &chat,
        r#"[{"role":"system","content":"terse"},{"role":"user","content":"hi"}]"#,
    )
    .unwrap();
    let chat = chat.to_str().unwrap();
    for (args, says) in [
        (
            vec!["run", &b, "-p", "hi", "--raw", "--system", "s"],
            "--system with --raw",
        ),
        (
            vec!["run", &b, "--chat-file", chat, "--system", "s"],
            "has a system message of its own",
        ),
        (
            vec!["bench", &b, "--text", "hi", "--runs", "1", "--n-gen", "4"],
            "--n-prompt and --n-gen set the throughput tests",
        ),
        (
            vec!["bench", &b, "--runs", "1", "--n-gen", "4", "--raw"],
            "--raw: not used by the throughput tests",
        ),
        (
            vec![
                "bench", &b, "--text", "hi", "--runs", "1", "--prompt", "other",
            ],
            "--prompt and --chat-file are options of `tether run`",
        ),
    ] {
        refused(&args, 2, says);
    }
    let o = tether(&["bench", &b, "--help"]);
    assert!(
        !stdout(&o).contains("--prompt") && !stdout(&o).contains("--chat-file"),
        "{}",
        stdout(&o)
    );
    // A role no chat template knows is refused, naming the message and the accepted roles
    // (rendered, it would derail the answer).
    let bogus = scratch().join("bogus-role.json");
    std::fs::write(
        &bogus,
        r#"[{"role":"user","content":"hi"},{"role":"bogus\n","content":"x"}]"#,
    )
    .unwrap();
    refused(
        &["run", &b, "--chat-file", bogus.to_str().unwrap()],
        1,
        "message 1 has the role `bogus\\n`: accepted system, user, assistant, tool",
    );
    // OpenAI-style content parts: the text parts joined by a line break (llama.cpp server's
    // `concat_typed_text`), so the same prompt as that string; an image part is refused.
    let parts = scratch().join("content-parts.json");
    std::fs::write(
        &parts,
        r#"[{"role":"user","content":[{"type":"text","text":"Where is"},{"type":"text","text":"Paris?"}]}]"#,
    )
    .unwrap();
    let joined = scratch().join("content-joined.json");
    std::fs::write(&joined, r#"[{"role":"user","content":"Where is\nParis?"}]"#).unwrap();
    let prompt_of = |f: &std::path::Path| {
        json(&tether(&[
            "run",
            &b,
            "--chat-file",
            f.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-tokens",
            "1",
            "--json",
        ]))["results"][0]["result"]["prompt_tokens"]
            .clone()
    };
    let got = prompt_of(&parts);
    assert!(got.as_array().is_some_and(|a| a.len() > 4), "{got}");
    assert_eq!(got, prompt_of(&joined));
    let image = scratch().join("content-image.json");
    std::fs::write(
        &image,
        r#"[{"role":"user","content":[{"type":"text","text":"What is this?"},{"type":"image_url","image_url":{"url":"x.png"}}]}]"#,
    )
    .unwrap();
    refused(
        &["run", &b, "--chat-file", image.to_str().unwrap()],
        1,
        "message 0: content part 1 is of type `image_url`: this model takes text parts only",
    );
    // An OpenAI-style request body: its keys other than `messages` are said to be unread.
    let body = scratch().join("request-body.json");
    std::fs::write(
        &body,
        r#"{"model":"m","temperature":0,"messages":[{"role":"user","content":"hi"}]}"#,
    )
    .unwrap();
    let o = tether(&[
        "run",
        &b,
        "--chat-file",
        body.to_str().unwrap(),
        "--context",
        "1",
    ]);
    assert!(
        stderr(&o).contains("only `messages` is read; `model`, `temperature` not"),
        "{}",
        stderr(&o)
    );
    // A content of another type is named with the value seen.
    let five = scratch().join("content-number.json");
    std::fs::write(&five, r#"[{"role":"user","content":5}]"#).unwrap();
    refused(
        &["run", &b, "--chat-file", five.to_str().unwrap()],
        1,
        "message 0: `content` is a number (5): a text, or an array of text parts",
    );
    // Text values that begin with '-' are values, as llama-cli takes them (`-p -hello`):
    // here the prompt reaches the context check, not clap's "a value is required".
    for args in [
        ["--prompt", "-hello", "--stop", "---"],
        ["-p", "hi", "--system", "-hello"],
    ] {
        let args = [&["run", &b, "--context", "1"][..], &args[..]].concat();
        refused(&args, 1, "do not fit the context of 1");
    }
    // A prompt file that is a pipe (`<(printf ...)`) is read as standard input is.
    let fifo = scratch().join("prompt.fifo");
    let _ = std::fs::remove_file(&fifo);
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let writer = {
            let f = fifo.clone();
            std::thread::spawn(move || std::fs::write(f, "Where is Paris?"))
        };
        let v = json(&tether(&[
            "run",
            &b,
            "--raw",
            fifo.to_str().unwrap(),
            "--temperature",
            "0",
            "--max-tokens",
            "1",
            "--json",
        ]));
        writer.join().unwrap().unwrap();
        assert_eq!(
            v["results"][0]["result"]["prompt_tokens"]
                .as_array()
                .map(Vec::len),
            Some(4),
            "{v}"
        );
    }
    // A chat file that is not there is named.
    let o = tether(&["run", &b, "--chat-file", "no-such-chat.json"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--chat-file no-such-chat.json: no such file"),
        "{}",
        stderr(&o)
    );
    // An option that two other families take names both.
    let det = nudenet_bundle();
    let img = asset("astronaut.png");
    refused(
        &["run", &det, &img, "--top-k", "3"],
        2,
        "--top-k is an option of the embed and llm families",
    );
    // verify refuses a malformed --device before any work (no checksum line).
    refused(
        &["verify", &b, "--self-test", "--device", "gpu7"],
        2,
        "gpu7",
    );
    // A prompt longer than the context is an error, never cut; nothing was streamed, so
    // stdout stays empty (no stray line end).
    let long = "word ".repeat(200);
    let o = tether(&["run", &b, "--prompt", &long, "--context", "64"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(o.stdout.is_empty(), "{:?}", stdout(&o));
    // A prompt file that is not UTF-8.
    let f = scratch().join("latin1.txt");
    std::fs::write(&f, b"caf\xe9").unwrap();
    let o = tether(&["run", &b, f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("not UTF-8"), "{}", stderr(&o));
    // A negative count names the option and its range, not clap's "invalid digit"; a
    // temperature or penalty that would overflow the scaled logits is refused, not sampled
    // into a wrong answer.
    for (opt, v, says) in [
        (
            "--temperature",
            "1e-38",
            "accepted <= 0 for greedy, or a finite number >= 1e-6",
        ),
        ("--repeat-penalty", "1e-40", "accepted 1e-6 to 1e6"),
        ("--max-tokens", "-3", "accepted 1 to 1000000"),
        ("--seed", "-1", "accepted 0 to 18446744073709551615"),
        ("--top-k", "2.5", "not a whole number"),
        // Beyond f32's range: the text given, not the infinity it would round to.
        ("--temperature", "1e309", "'1e309'"),
        ("--top-p", "NaN", "not a finite number"),
        // Hyphen-led numbers of every form are the option's value, not an unknown option.
        ("--temperature", "-inf", "not a finite number"),
        ("--min-p", "-.5", "0 <= min_p < 1"),
        // Below f32's smallest: the text given, not the 0 it would round to.
        ("--top-p", "1e-46", "'1e-46'"),
    ] {
        let o = refused(&["run", &b, "-p", "hi", opt, v], 2, says);
        assert!(stderr(&o).contains(opt), "{opt} {v}: {}", stderr(&o));
    }
    // Standard input twice: refused, not read empty the second time.
    refused(&["run", &b, "-", "-"], 2, "given more than once");
    // llama-cli's --n-predict is --max-tokens.
    let v = json(&tether(&[
        "run",
        &b,
        "-p",
        "hi",
        "--temp",
        "0",
        "--n-predict",
        "2",
        "--json",
    ]));
    assert_eq!(
        v["results"][0]["result"]["tokens"].as_array().map(Vec::len),
        Some(2),
        "{v}"
    );
    // No prompt at all.
    let o = tether(&["run", &b]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // An empty --text after a good one: refused before any request runs (nothing on stdout).
    refused(
        &[
            "run",
            &b,
            "--text",
            "hi",
            "--text",
            " ",
            "--max-tokens",
            "2",
        ],
        2,
        "--text \" \" holds no text",
    );
    // The prompt's text where a prompt file belongs: an input that failed (exit 1, as any
    // unreadable input), pointing at --text (which run and bench both take).
    let o = tether(&["run", &b, "Where is Paris?"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("no such prompt file") && stderr(&o).contains("--text"),
        "{}",
        stderr(&o)
    );
    // The overflow hint names the limit of --context; the error names the --prompt input by
    // its first words, not its whole text.
    let o = tether(&["run", &b, "--prompt", &long, "--context", "64"]);
    assert!(stderr(&o).contains("training context"), "{}", stderr(&o));
    let line = stderr(&o)
        .lines()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
        .to_string();
    assert!(line.len() < 300 && line.contains(" characters)"), "{line}");
    // A checkpoint that is not there is a path to check, not a corrupt file.
    let out = scratch().join("never-built.bundle");
    let out_s = out.to_str().unwrap();
    let args = [
        "build",
        "--family",
        "llm",
        "--gguf",
        "/no/such.gguf",
        "-o",
        out_s,
    ];
    refused(&args, 1, "hint: check the path of the checkpoint file");
    assert!(!out.exists());
}

/// `tether bench B --device cpu --threads 1` with the llm throughput tests' `--runs`,
/// `--n-prompt`, `--n-gen` and a `--json` file: the Ctrl-C tests' command.
fn cpu_llm_bench<'a>(
    b: &'a str,
    runs: &'a str,
    n_prompt: &'a str,
    n_gen: &'a str,
    json: &'a Path,
) -> Vec<&'a str> {
    vec![
        "bench",
        b,
        "--device",
        "cpu",
        "--threads",
        "1",
        "--runs",
        runs,
        "--n-prompt",
        n_prompt,
        "--n-gen",
        n_gen,
        "--json",
        json.to_str().unwrap(),
    ]
}

/// Ctrl-C during the llm throughput tests ends the test in progress after its current run
/// (not after all its runs): exit 130, the JSON marked interrupted with the runs done, and
/// the report naming the test cut short.
#[test]
fn llm_bench_ctrl_c_stops_between_runs() {
    let b = smollm2_bundle();
    let json_path = scratch().join("llm_interrupted.json");
    // SIGINT past the load and the warm-up run (about a second here).
    let (o, after) = interrupted(
        &cpu_llm_bench(&b, "100000", "8", "0", &json_path),
        std::time::Duration::from_secs(5),
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    // Before the fix the test ran all its runs first (100,000 here).
    assert!(
        after < std::time::Duration::from_secs(5),
        "exited {after:?} after Ctrl-C"
    );
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    let tests = v["tests"].as_array().unwrap();
    assert_eq!(tests.len(), 1, "{v}");
    let runs = tests[0]["runs_per_s"].as_array().unwrap().len();
    assert!((1..100_000).contains(&runs), "{runs} runs");
    assert!(
        stdout(&o).contains(&format!("pp8 ran {runs} of 100000 runs")),
        "{}",
        stdout(&o)
    );
}

/// Ctrl-C during the tg test keeps the time to first token of the pp test before it (its
/// pass runs right after the first pp test; it ran after every test before, so any Ctrl-C
/// dropped its line).
#[test]
fn llm_bench_ctrl_c_keeps_the_time_to_first_token() {
    let b = smollm2_bundle();
    let json_path = scratch().join("llm_interrupted_ttft.json");
    // Load, pp8 and its time to first token take about a second; each tg500 run about 3 s
    // on one thread here: the SIGINT comes inside the tg test.
    let (o, _) = interrupted(
        &cpu_llm_bench(&b, "3", "8", "500", &json_path),
        std::time::Duration::from_secs(4),
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    let v: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true);
    let names: Vec<&str> = v["latencies_ms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"time to first token (pp8)"), "{v}");
    assert!(
        stdout(&o).contains("time to first token (pp8)"),
        "{}",
        stdout(&o)
    );
}

/// `run` without any input names what this bundle's family takes instead: the llm family
/// its `--prompt` and `--chat-file` beside INPUT and `--text`, a detector INPUT alone.
#[test]
fn run_without_input_names_the_familys_ways() {
    let o = tether(&["run", &smollm2_bundle()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give at least one INPUT, --text, --prompt or --chat-file"),
        "{}",
        stderr(&o)
    );
    let o = tether(&["run", &nudenet_bundle()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("give at least one INPUT (`tether run"),
        "{}",
        stderr(&o)
    );
}

/// A GGUF given to `--onnx` is named as a GGUF with the llm build to use (exit 2), not
/// reported as an ONNX parse error.
#[test]
fn a_gguf_given_as_onnx_names_the_llm_build() {
    let gguf = asset("SmolLM2-135M-Instruct.Q4_1.gguf");
    let out = scratch().join("gguf-as-onnx.bundle");
    let o = tether(&[
        "build",
        "--family",
        "detect",
        "--onnx",
        &gguf,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is a GGUF model, not ONNX")
            && stderr(&o).contains("--family llm --gguf"),
        "{}",
        stderr(&o)
    );
    assert!(!out.exists());
}

/// An output named as one of the command's inputs is refused before any work (exit 2) and
/// the input is left as it was: `build -o` over its model, `run --annotate` over its image
/// (also through a link), `bench --json` over its INPUT, and `bench --json FILE` over a
/// file that is not an earlier bench report (a prompt taken as the option's FILE, a
/// tokenizer). An earlier report is replaced.
#[test]
fn outputs_never_replace_inputs() {
    let dir = scratch().join("output-over-input");
    std::fs::create_dir_all(&dir).unwrap();
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    let refused = |args: &[&str], file: &Path, what: &str| {
        let before = std::fs::read(file).unwrap();
        let o = tether(args);
        assert_eq!(o.status.code(), Some(2), "{what}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("which writing there would destroy"),
            "{what}: {}",
            stderr(&o)
        );
        assert_eq!(
            std::fs::read(file).unwrap(),
            before,
            "{what}: the input changed"
        );
    };
    let model = dir.join("vad.onnx");
    std::fs::copy(asset("silero_vad_op18_ifless.onnx"), &model).unwrap();
    refused(
        &[
            "build",
            "--family",
            "vad",
            "--onnx",
            &s(&model),
            "-o",
            &s(&model),
        ],
        &model,
        "build",
    );
    let b = nudenet_bundle();
    let img = dir.join("photo.png");
    std::fs::copy(asset("astronaut.png"), &img).unwrap();
    refused(
        &["run", &b, &s(&img), "--annotate", &s(&img)],
        &img,
        "annotate",
    );
    let link = dir.join("link.png");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&img, &link).unwrap();
    refused(
        &["run", &b, &s(&img), "--annotate", &s(&link)],
        &img,
        "a link",
    );
    refused(
        &["bench", &b, &s(&img), "--runs", "1", "--json", &s(&img)],
        &img,
        "bench --json",
    );
    // A folder of annotations over a later input (an earlier run's annotated image given
    // again): refused before the first input runs, so the later one is not destroyed.
    let shots = dir.join("shots");
    std::fs::create_dir_all(&shots).unwrap();
    let earlier = shots.join("000-photo.annotated.png");
    std::fs::copy(asset("page.png"), &earlier).unwrap();
    refused(
        &[
            "run",
            &b,
            &s(&img),
            &s(&earlier),
            "--annotate",
            &format!("{}/", s(&shots)),
        ],
        &earlier,
        "a later input",
    );
    // A folder that takes no new file is refused before any input runs.
    for to in ["/proc/annotated.png", "/proc/"] {
        let o = tether(&["run", &b, &s(&img), "--json", "--annotate", to]);
        assert_eq!(o.status.code(), Some(1), "{to}: {}", stderr(&o));
        assert!(
            stdout(&o).is_empty() && stderr(&o).contains("creating a temporary file"),
            "{to}: {}",
            stderr(&o)
        );
    }
    // --json and --plot in one file: refused.
    let both = dir.join("both.svg");
    let o = tether(&[
        "bench",
        &b,
        &s(&img),
        "--runs",
        "1",
        "--json",
        &s(&both),
        "--plot",
        &s(&both),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("name the same file"), "{}", stderr(&o));
    // `--annotate FILE/` where FILE is a file: named as such, the file left alone.
    let not_dir = format!("{}/", s(&img));
    let o = tether(&["run", &b, &s(&img), "--annotate", &not_dir]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("is an existing file, not a folder"),
        "{}",
        stderr(&o)
    );
    // `bench --json FILE` over a file that is not an earlier bench report: a prompt, also
    // one that is JSON, and a tokenizer.
    let llm = smollm2_bundle();
    for (name, text) in [
        ("prompt.txt", "What is the capital of France?\n"),
        (
            "prompt.json",
            "{\"instruction\": \"Summarise the robot log\"}\n",
        ),
        ("tokenizer.json", "{\"version\": \"1.0\", \"model\": {}}\n"),
    ] {
        let f = dir.join(name);
        std::fs::write(&f, text).unwrap();
        let o = tether(&["bench", &llm, "--runs", "1", "--json", &s(&f)]);
        assert_eq!(o.status.code(), Some(2), "{name}: {}", stderr(&o));
        assert!(
            stderr(&o).contains("not an earlier `tether bench` report"),
            "{name}: {}",
            stderr(&o)
        );
        assert_eq!(std::fs::read_to_string(&f).unwrap(), text, "{name} changed");
    }
    // An earlier report is replaced, and so is an empty file.
    let report = dir.join("report.json");
    std::fs::write(&report, "").unwrap();
    for round in 0..2 {
        let o = tether(&["bench", &b, &s(&img), "--runs", "1", "--json", &s(&report)]);
        assert!(o.status.success(), "round {round}: {}", stderr(&o));
        let v: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
        assert_eq!(v["command"], "bench", "{v}");
    }
}

/// Ctrl-C during `run` over many inputs of a family whose runs are not cancellable
/// (detect): the input in flight finishes, no other starts, and the JSON lists the inputs
/// done and says it was interrupted (exit 130; before, the process died of the signal with
/// nothing printed).
#[test]
fn run_ctrl_c_reports_the_inputs_done() {
    let b = nudenet_bundle();
    let img = asset("astronaut.png");
    const N: usize = 5000;
    let mut args = vec!["run", b.as_str(), "--json"];
    args.extend(std::iter::repeat_n(img.as_str(), N));
    // Past the load (well under a second here), long before the 5,000 frames end.
    let (o, after) = interrupted(&args, std::time::Duration::from_secs(3));
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        after < std::time::Duration::from_secs(5),
        "exited {after:?} after Ctrl-C"
    );
    let v: Value = serde_json::from_slice(&o.stdout).expect("one JSON document");
    assert_eq!(v["interrupted"], true, "{v}");
    let done = v["results"].as_array().unwrap();
    assert!((1..N).contains(&done.len()), "{} results", done.len());
    assert!(done.iter().all(|r| r["result"].is_object()), "{v}");
    // In text the results done are printed, and stderr says the rest did not run.
    args.retain(|a| *a != "--json");
    let (o, _) = interrupted(&args, std::time::Duration::from_secs(3));
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(stdout(&o).contains("FACE_FEMALE"), "{}", stdout(&o));
    assert!(
        stderr(&o).contains("interrupted by Ctrl-C after ")
            && stderr(&o).contains(" of 5000 inputs"),
        "{}",
        stderr(&o)
    );
}

/// A second Ctrl-C ends the process at once (exit 130), without waiting for the run in
/// flight as the first does; nothing is reported, and no JSON is written.
#[test]
fn second_ctrl_c_does_not_wait_for_the_run_in_flight() {
    let b = smollm2_bundle();
    let json_path = scratch().join("llm_second_ctrl_c.json");
    // One pp4096 run on one thread takes far longer than the test waits (its warm-up run
    // first): the first SIGINT comes inside the warm-up, the second 0.3 s later.
    let (o, after) = interrupted_at(
        &cpu_llm_bench(&b, "1", "4096", "0", &json_path),
        &[
            std::time::Duration::from_secs(3),
            std::time::Duration::from_millis(300),
        ],
    );
    assert_eq!(o.status.code(), Some(130), "{}", stderr(&o));
    assert!(
        after < std::time::Duration::from_secs(2),
        "exited {after:?} after the second Ctrl-C"
    );
    assert!(stderr(&o).contains("second Ctrl-C"), "{}", stderr(&o));
    assert!(!json_path.exists(), "a JSON report was written");
}

#[test]
fn llm_bench_reports_pp_and_tg_tokens_per_second() {
    let b = smollm2_bundle();
    // The smallest throughput run: one pp8 and one tg4.
    let quick = [
        "bench",
        &b,
        "--runs",
        "1",
        "--n-prompt",
        "8",
        "--n-gen",
        "4",
    ];
    let o = tether(&[
        "bench",
        &b,
        "--runs",
        "1",
        "--n-prompt",
        "16,32",
        "--n-gen",
        "8",
        "--threads",
        "2",
        "--json",
        "-",
    ]);
    let v = json(&o);
    assert_eq!(v["mode"], "throughput");
    let names: Vec<&str> = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["pp16", "pp32", "tg8"]);
    for t in v["tests"].as_array().unwrap() {
        assert!(t["mean_per_s"].as_f64().unwrap() > 0.0, "{t}");
        assert_eq!(t["runs_per_s"].as_array().unwrap().len(), 1);
        // One run: no sample deviation (null, not a 0 that reads as no spread).
        assert!(t["stddev_per_s"].is_null(), "{t}");
    }
    assert_eq!(v["notes"]["threads"], "2");
    // Text report; an option of the latency benchmark is refused, not ignored.
    let o = tether(&quick);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("pp8") && stdout(&o).contains("tg4"),
        "{}",
        stdout(&o)
    );
    // The report's line whose first word is `w`.
    let line_of = |o: &std::process::Output, w: &str| {
        stdout(o)
            .lines()
            .find(|l| l.trim_start().starts_with(w))
            .map(str::to_owned)
    };
    // One timed run has no sample deviation: the text says so instead of printing 0.
    let pp8 = line_of(&o, "pp8");
    assert!(
        pp8.as_deref()
            .is_some_and(|l| l.contains("± n/a") && l.trim_end().ends_with("n/a")),
        "{}",
        stdout(&o)
    );
    // The thread count and the kernels are said once, in the header (`cpu threads`,
    // `engine`), not again among the family's notes (the JSON keeps both notes).
    let lines_starting = |w: &str| {
        stdout(&o)
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(w))
            .count()
    };
    assert_eq!(lines_starting("threads"), 0, "{}", stdout(&o));
    assert_eq!(lines_starting("kernels"), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("cpu threads"), "{}", stdout(&o));
    // Three inter-token intervals: their p99.9 is their maximum, and the report says so.
    assert!(
        stdout(&o).contains("note: in a line of fewer than 1000 samples p99.9 is the maximum"),
        "{}",
        stdout(&o)
    );
    // One token a run has no interval between tokens: the line says n/a, not 0 ms.
    let one_token = [&quick[..6], &["--n-gen", "1"]].concat(); // quick with --n-gen 1
    let o = tether(&one_token);
    assert!(o.status.success(), "{}", stderr(&o));
    // In the JSON its figures are null (no samples), not 0.
    let o_json = tether(&[&one_token[..], &["--json", "-"]].concat());
    let v = json(&o_json);
    let itl = v["latencies_ms"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["name"] == "inter-token")
        .expect("an inter-token line");
    assert_eq!(itl["count"], 0, "{itl}");
    for k in ["p50", "p99", "p99.9", "max", "mean"] {
        assert!(itl[k].is_null(), "{itl}");
    }
    // `--json /dev/stdout` into a pipe (as here): printed, as `--json -`, not refused as a
    // FIFO that an atomic file write cannot replace.
    let v = json(&tether(&[&quick[..], &["--json", "/dev/stdout"]].concat()));
    assert_eq!(v["mode"], "throughput", "{v}");
    // A report file ends with a line break, as the printed form does.
    let rep = scratch().join("bench-newline.json");
    let _ = std::fs::remove_file(&rep);
    let o_rep = tether(&[&quick[..], &["--json", rep.to_str().unwrap()]].concat());
    assert_eq!(o_rep.status.code(), Some(0), "{}", stderr(&o_rep));
    assert!(std::fs::read_to_string(&rep).unwrap().ends_with("}\n"));
    // An output that cannot be written (a folder) is refused before any run.
    let dir = scratch().join("bench-json-dir");
    std::fs::create_dir_all(&dir).unwrap();
    let o_dir = tether(&[&quick[..], &["--json", dir.to_str().unwrap()]].concat());
    assert_eq!(o_dir.status.code(), Some(1), "{}", stderr(&o_dir));
    assert!(
        stderr(&o_dir).contains("it is a directory") && stdout(&o_dir).is_empty(),
        "{}",
        stderr(&o_dir)
    );
    // So is a regular file in a folder that takes no new files (the temporary file of the
    // atomic write cannot be made there), with a hint that fits.
    let o_proc = tether(&[&quick[..], &["--json", "/proc/version"]].concat());
    assert_eq!(o_proc.status.code(), Some(1), "{}", stderr(&o_proc));
    assert!(
        stderr(&o_proc).contains("creating a temporary file next to it")
            && stderr(&o_proc).contains("the folder takes no new files")
            && stdout(&o_proc).is_empty(),
        "{}",
        stderr(&o_proc)
    );
    let itl = line_of(&o, "inter-token");
    assert!(
        itl.as_deref()
            .is_some_and(|l| l.split_whitespace().skip(1).collect::<Vec<_>>()
                == ["0", "n/a", "n/a", "n/a", "n/a", "n/a"]),
        "{}",
        stdout(&o)
    );
    // One token a run is "1 token", four are "4 tokens".
    let words = |l: Option<String>| -> Vec<String> {
        l.map(|l| l.split_whitespace().take(3).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    assert_eq!(
        words(line_of(&o, "tg1")),
        ["tg1", "1", "token"],
        "{}",
        stdout(&o)
    );
    assert_eq!(
        words(line_of(&o, "pp8")),
        ["pp8", "8", "tokens"],
        "{}",
        stdout(&o)
    );
    let o = tether(&["bench", &b, "--rate", "10"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // A test whose runs spread more than 2.5 % (cv) is warned about under the table, as the
    // latency benchmark warns of its total; one that does not is not.
    let o = tether(&[
        "bench",
        &b,
        "--runs",
        "3",
        "--n-prompt",
        "8",
        "--n-gen",
        "4",
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    for test in ["pp8", "tg4"] {
        let row = stdout(&o)
            .lines()
            .find(|l| l.trim_start().starts_with(test))
            .map(str::to_owned)
            .unwrap_or_default();
        let cv: f64 = row
            .split_whitespace()
            .last()
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("{test}: no cv in {row:?}"));
        let warned = stdout(&o).contains(&format!("warning: {test}'s coefficient of variation"));
        // (The table rounds to 0.01: at 2.50 either is right.)
        if (cv - 2.5).abs() > 0.005 {
            assert_eq!(warned, cv > 2.5, "{test} cv {cv}: {}", stdout(&o));
        }
    }
    // Tests beyond the context are refused before any runs (exit 2), naming the option.
    for (args, says) in [
        (
            vec!["--n-prompt", "8", "--n-gen", "40", "--context", "32"],
            "--n-gen 40: the test needs 40 positions, beyond the context of 32",
        ),
        (
            vec!["--n-prompt", "8,64", "--n-gen", "4", "--context", "32"],
            "--n-prompt 64: the test needs 64 positions",
        ),
        // A default is named as one, and a larger context is offered up to the model's.
        (
            vec!["--n-gen", "4", "--context", "256"],
            "--n-prompt 512 (the default): the test needs 512 positions, beyond the context of 256; give smaller tests or a larger --context (at most 8192",
        ),
    ] {
        let mut a = vec!["bench", &b, "--runs", "1"];
        a.extend(args.iter().copied());
        refused(&a, 2, says);
    }
    // Generation options the throughput tests do not use are refused (exit 2), named, before
    // any test runs: --max-tokens (the tests generate --n-gen), --stop, and on the CPU the
    // sampler's (its tests sample nothing, as llama-bench's).
    for (args, want) in [
        (vec!["--max-tokens", "4"], "--max-tokens: not used"),
        (vec!["--stop", "x"], "--stop: not used"),
        (
            vec!["--temperature", "0.5", "--seed", "3"],
            "--temperature, --seed: not used",
        ),
    ] {
        let mut a = quick.to_vec();
        a.extend(args.iter().copied());
        refused(&a, 2, want);
    }
}

/// `tether run BUNDLE --help` shows the values the bundle was built with beside the options
/// that default to them (the help text gives the build-time default, which the bundle's
/// values override at run time): a VAD bundle built with other segment parameters.
#[test]
fn run_help_shows_the_bundles_own_values() {
    let out = scratch().join("silero-tuned.bundle");
    let onnx = asset("silero_vad_op18_ifless.onnx");
    let o = tether(&[
        "build",
        "--family",
        "vad",
        "--onnx",
        &onnx,
        "--threshold",
        "0.6",
        "--min-speech-ms",
        "400",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "build failed: {}", stderr(&o));
    let o = tether(&["run", out.to_str().unwrap(), "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = stdout(&o);
    // clap wraps long help lines: compare with the whitespace runs as single spaces.
    let flat = help.split_whitespace().collect::<Vec<_>>().join(" ");
    for want in [
        "[this bundle: 0.6]",
        "[this bundle: 400]",
        "[this bundle: 100]",
        "[this bundle: 30]",
    ] {
        assert!(flat.contains(want), "{want} not in:\n{help}");
    }
    assert!(flat.contains("(build default 0.5;"), "{help}");
    // Without a bundle there is no bundle's value to show.
    let o = tether(&["run", "--help"]);
    assert!(!stdout(&o).contains("this bundle:"), "{}", stdout(&o));
    // A bundle whose configuration does not read (a flipped byte: CRC mismatch): the help
    // says so instead of leaving the build defaults to look like the values that apply.
    let (corrupt, _) = with_section_byte_flipped(
        out.to_str().unwrap(),
        "vad/config",
        4,
        "silero-tuned-corrupt.bundle",
    );
    let o = tether(&["run", corrupt.to_str().unwrap(), "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let flat = stdout(&o).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        flat.contains(&format!(
            "note: the configuration of {} does not read (",
            corrupt.display()
        )) && flat.contains("CRC mismatch")
            && !flat.contains("this bundle:"),
        "{}",
        stdout(&o)
    );
}

/// `tether run BUNDLE --help` lists the options of the bundle's family only (issue 28: the
/// llm bundle's help listed `--annotate`, `--precision` and bench's `--n-prompt`, which its
/// `run` refuses or ignores), and says what the family's INPUTs are; an option the family
/// does not take is refused before any work (exit 2), never ignored.
#[test]
fn run_help_lists_only_the_bundles_family_options() {
    let embed = minilm_bundle();
    let (ocr, vad, llm) = (ocr_bundle().0, vad_bundle().0, smollm2_bundle());
    let detect = nudenet_bundle();
    // (bundle, family, what INPUT is, options it lists)
    let cases = [
        (
            &detect,
            "detect",
            "PNG or JPEG images",
            &[
                "--annotate",
                "--precision",
                "--score-threshold",
                "--iou-threshold",
            ][..],
        ),
        (
            &ocr,
            "ocr",
            "PNG or JPEG images",
            &["--annotate", "--precision", "--text-score", "--no-cls"][..],
        ),
        (
            &vad,
            "vad",
            "WAV files",
            &[
                "--precision",
                "--threshold",
                "--min-speech-ms",
                "--probabilities",
            ][..],
        ),
        (
            &embed,
            "embed",
            "UTF-8 text files",
            &["--text", "--precision", "--top-k", "--all-pairs"][..],
        ),
        (
            &llm,
            "llm",
            "Prompt files",
            &["--text", "--prompt", "--max-tokens", "--top-k", "--context"][..],
        ),
    ];
    // Every option of `run` that some family does not take.
    let partial = [
        "--text",
        "--annotate",
        "--precision",
        "--score-threshold",
        "--iou-threshold",
        "--text-score",
        "--no-cls",
        "--threshold",
        "--min-speech-ms",
        "--probabilities",
        "--top-k",
        "--all-pairs",
        "--prompt",
        "--max-tokens",
        "--context",
        "--n-prompt",
        "--n-gen",
    ];
    for (bundle, family, inputs, own) in cases {
        let o = tether(&["run", bundle, "--help"]);
        assert!(o.status.success(), "{family}: {}", stderr(&o));
        let help = stdout(&o);
        assert!(
            help.contains(&format!("Run a bundle of the {family} family")),
            "{help}"
        );
        assert!(help.contains(&format!("[INPUT]...  {inputs}")), "{help}");
        let listed = |opt: &str| help.lines().any(|l| l.split_whitespace().any(|w| w == opt));
        for opt in partial {
            assert_eq!(
                listed(opt),
                own.contains(&opt),
                "{family}: {opt} in run --help:\n{help}"
            );
        }
    }
    // Without a bundle, `run --help` lists every family's options but those only `bench`
    // takes; `bench --help` lists them. An option two families define says what it means to
    // each (`--top-k`: embed's neighbours, llm's sampler), not only the first family's sense.
    for (cmd, bench_only_listed) in [("run", false), ("bench", true)] {
        let o = tether(&[cmd, "--help"]);
        assert!(o.status.success(), "{cmd}: {}", stderr(&o));
        let help = stdout(&o);
        for opt in ["--n-prompt", "--n-gen"] {
            let listed = help.lines().any(|l| l.split_whitespace().any(|w| w == opt));
            assert_eq!(listed, bench_only_listed, "{opt} in {cmd} --help:\n{help}");
        }
        let top_k = help
            .lines()
            .find(|l| l.split_whitespace().any(|w| w == "--top-k"))
            .unwrap_or_else(|| panic!("no --top-k in {cmd} --help:\n{help}"));
        assert!(
            top_k.contains("embed: For each text") && top_k.contains("llm: Keep the K most likely"),
            "{cmd} --help: {top_k}"
        );
    }
    // A BUNDLE that is a file but does not open: the help says so under every family's
    // options (it cannot list the bundle's).
    let empty = scratch().join("empty-for-help.bundle");
    std::fs::write(&empty, b"").unwrap();
    let o = tether(&["run", empty.to_str().unwrap(), "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "note: {} does not open as a bundle (file truncated",
            empty.display()
        )) && stdout(&o).contains("the options above are every family's"),
        "{}",
        stdout(&o)
    );
    // A BUNDLE path that names nothing: the same note, saying so.
    let missing = scratch().join("no-such-for-help.bundle");
    let o = tether(&["run", missing.to_str().unwrap(), "--help"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!(
            "note: {} does not open as a bundle (no such file): the options above are every family's",
            missing.display()
        )),
        "{}",
        stdout(&o)
    );
    // Refused before any work, naming the option and the family.
    let img = asset("astronaut.png");
    for (args, want) in [
        (
            vec!["run", &detect, "--text", "hi", &img],
            "--text: the detect family takes no literal text",
        ),
        (
            vec!["bench", &vad, "--text", "hi"],
            "--text: the vad family takes no literal text",
        ),
        (
            vec!["run", &vad, "--n-gen", "3", "x.wav"],
            "--n-gen is an option of the llm family's `tether bench`",
        ),
        (
            vec!["run", &llm, "--precision", "fp16", "-p", "hi"],
            "--precision: the llm family",
        ),
        (
            vec!["run", &llm, "--n-prompt", "8", "-p", "hi"],
            "options of `tether bench`",
        ),
    ] {
        refused(&args, 2, want);
    }
}

/// `verify --self-test` takes `--threads` with `run`'s default and prints both (issue 28:
/// "one default, one option, both printed"); `--threads` without `--self-test` is a usage
/// error, not ignored.
#[test]
fn verify_self_test_takes_and_prints_run_s_threads() {
    let (b, _) = vad_bundle();
    let wav = asset("Front_Center.wav");
    let run = stderr(&tether(&["run", &b, &wav, "--device", "cpu"]));
    let default = run
        .lines()
        .find_map(|l| l.strip_prefix("CPU engine threads: "))
        .unwrap_or_else(|| panic!("run prints no thread count: {run}"));
    // `2 (cores available)` in run's words; `2, cores available` in verify's.
    let (n, why) = default.split_once(" (").expect("N (why)");
    let why = why.trim_end_matches(')');
    let o = tether(&["verify", &b, "--self-test", "--device", "cpu"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stdout(&o).contains(&format!("(CPU engine threads: {n}, {why})")),
        "{}",
        stdout(&o)
    );
    let o = tether(&[
        "verify",
        &b,
        "--self-test",
        "--device",
        "cpu",
        "--threads",
        "1",
    ]);
    assert!(
        stdout(&o).contains("(CPU engine threads: 1, --threads)"),
        "{}",
        stdout(&o)
    );
    let v = json(&tether(&[
        "verify",
        &b,
        "--self-test",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--json",
    ]));
    assert_eq!(v["self_test"]["cpu_threads"], 1);
    assert_eq!(v["self_test"]["cpu_threads_why"], "--threads");
    let o = tether(&["verify", &b, "--threads", "1"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("--threads is for --self-test"),
        "{}",
        stderr(&o)
    );
}

/// Error polish (issue 28): an option out of range is reported as the option's error, not as
/// "loading BUNDLE: ..."; the help command is printed once, not in the message and again in
/// the hint.
#[test]
fn usage_errors_name_the_option_once_without_loading() {
    let (b, _) = vad_bundle();
    let wav = asset("Front_Center.wav");
    let o = tether(&["run", &b, &wav, "--threshold", "1.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    // Every range reads as `whole`'s refusals do: `accepted LO to HI`.
    assert!(
        stderr(&o).starts_with("error: --threshold 1.5: accepted 0 to 1\n"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("loading"), "{}", stderr(&o));
    let o = tether(&["run", &b, &wav, "--min-speech-ms", "-4"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).starts_with("error: --min-speech-ms -4: accepted 0 to 3600000\n"),
        "{}",
        stderr(&o)
    );
    let o = tether(&["run", &b, &wav, "--text-score", "0.5"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let help = format!("`tether run {b} --help`");
    assert_eq!(stderr(&o).matches(&help).count(), 1, "{}", stderr(&o));
}

/// embed's text output quotes a long text by its first 60 characters and its length, not in
/// full in every cosine line (issue 28: "echoed in full"); the JSON keeps it whole, and the
/// cut to the model's sequence length is said with where it falls.
#[test]
fn embed_text_output_shortens_a_long_text_and_json_keeps_it() {
    let b = minilm_bundle();
    let long = "robot ".repeat(400);
    let long = long.trim_end();
    let o = tether(&["run", &b, "--text", long, "--text", "a cat"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains(long), "{out}");
    let quoted = format!("{:?} (2399 characters)", format!("{}…", &long[..60]));
    assert!(out.contains(&quoted), "{out}");
    assert!(out.lines().all(|l| l.len() < 400), "{out}");
    assert!(
        out.contains("only the first 256 (up to character 1523)"),
        "{out}"
    );
    let v = json(&tether(&["run", &b, "--text", long, "--json"]));
    let text = &v["results"][0]["result"]["texts"][0]["text"];
    assert_eq!(text.as_str(), Some(long), "{v}");
}

/// A model file of the wrong kind is named with what was expected (a fresh user's reports,
/// session 40): a PNG as embed's tokenizer, an empty folder as a Hugging Face directory, a
/// bundle or a PNG given to `--gguf`.
#[test]
fn build_names_a_wrong_model_file_and_what_it_should_be() {
    let out = scratch().join("never-built.bundle");
    let o = tether(&[
        "build",
        "--family",
        "embed",
        "--onnx",
        &asset("all-minilm-l6-v2-int8.onnx"),
        "--tokenizer",
        &asset("page.png"),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("--tokenizer {}: ", asset("page.png")))
            && stderr(&o).contains("(the tokenizer.json of a Hugging Face model is expected)"),
        "{}",
        stderr(&o)
    );
    let empty = scratch().join("empty-hf-dir");
    std::fs::create_dir_all(&empty).unwrap();
    let o = tether(&[
        "build",
        "--family",
        "llm",
        "--hf-dir",
        empty.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("config.json`: no such file (a Hugging Face model directory holds"),
        "{}",
        stderr(&o)
    );
    let (vad, _) = vad_bundle();
    for (file, says, hint) in [
        (
            vad.clone(),
            "0x89 0x54 0x42 0x4e (a tether bundle's) where a GGUF file has `GGUF`",
            "hint: this is a bundle `tether build` wrote already",
        ),
        (
            asset("page.png"),
            "0x89 0x50 0x4e 0x47 where a GGUF file has `GGUF`",
            "hint: --gguf takes a GGUF file",
        ),
    ] {
        let o = tether(&[
            "build",
            "--family",
            "llm",
            "--gguf",
            &file,
            "-o",
            out.to_str().unwrap(),
        ]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(says) && stderr(&o).contains(hint),
            "{}",
            stderr(&o)
        );
    }
    assert!(!out.exists());
}

/// An image family given a file that is no image says what the file looks like (as the vad
/// family does for a file that is no WAV), instead of the decoder's "The image format could
/// not be determined"; and the vad family recognises a tether bundle.
#[test]
fn a_file_of_the_wrong_kind_is_named_by_what_it_looks_like() {
    let b = nudenet_bundle();
    let (vad, _) = vad_bundle();
    let empty = scratch().join("empty-input.png");
    std::fs::write(&empty, b"").unwrap();
    for (input, looks) in [
        (asset("Noise.wav"), "WAV audio"),
        (vad.clone(), "a tether bundle"),
        (empty.to_str().unwrap().to_string(), "an empty file"),
    ] {
        let o = tether(&["run", &b, &input, "--device", "cpu"]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!(
                "{input}: not an image this build decodes (it looks like {looks}); PNG and JPEG are read"
            )),
            "{}",
            stderr(&o)
        );
    }
    let o = tether(&["run", &vad, &b]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "error: WAV {b}: not a WAV file (it looks like a tether bundle)"
        )),
        "{}",
        stderr(&o)
    );
}

/// Without an INPUT (the llm family takes `--prompt`), a bundle path that does not open is
/// A checkpoint path that names a device or a pipe is reported as such (exit 1) with a hint
/// to give the file itself, not the hint for a truncated or corrupt checkpoint.
#[test]
fn a_checkpoint_that_is_not_a_regular_file_gets_its_own_hint() {
    let out = scratch().join("from-dev-null.bundle");
    let o = tether(&[
        "build",
        "--family",
        "llm",
        "--gguf",
        "/dev/null",
        "-o",
        out.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("it is a character device, not a regular file"),
        "{e}"
    );
    assert!(e.contains("hint: give the checkpoint file itself"), "{e}");
    assert!(!e.contains("truncated"), "{e}");
    assert!(!out.exists());
}

/// reported as itself: a folder, a device, a missing file (exit 1), not as a missing INPUT.
#[test]
fn a_bundle_path_that_does_not_open_is_reported_without_an_input() {
    let dir = scratch().join("a-folder-not-a-bundle");
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.to_str().unwrap();
    for (args, says) in [
        (
            vec!["run", d, "--prompt", "hi"],
            "it is a directory, not a regular file",
        ),
        (vec!["run", d], "it is a directory, not a regular file"),
        (
            vec!["run", "/dev/null", "--prompt", "hi"],
            "it is a character device, not a regular file",
        ),
    ] {
        let o = tether(&args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(
            !stderr(&o).contains("give at least one INPUT"),
            "{}",
            stderr(&o)
        );
    }
    // A malformed --device is still the usage error, before the bundle is looked at.
    let o = tether(&["run", d, "x.png", "--device", "tpu"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("--device"), "{}", stderr(&o));
}
