//! `robot-loop` as a robot runs it: a bounded run finishes with its summary and exit 0; a
//! Ctrl-C (SIGINT) lets the frame in flight finish, prints the summary and exits 130.
//!
//! Uses the nudenet `320n.onnx` model from `tests/fetch-assets` (`TETHER_ASSETS`).

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

fn asset(name: &str) -> PathBuf {
    let dir = std::env::var_os("TETHER_ASSETS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.assets"),
        PathBuf::from,
    );
    let p = dir.join(name);
    assert!(
        p.is_file(),
        "missing test asset {}: run `tests/fetch-assets` first",
        p.display()
    );
    p
}

/// The 320n detection bundle, built once per test process with the family's recipe.
fn bundle() -> PathBuf {
    static B: OnceLock<PathBuf> = OnceLock::new();
    B.get_or_init(|| {
        let onnx = std::fs::read(asset("320n.onnx")).expect("read 320n.onnx");
        let (writer, _) = tether_detect::recipe::build(
            &onnx,
            &tether_detect::recipe::BuildOptions {
                common: tether_detect::recipe::BuildCommon::named("320n"),
                input_size: Some((320, 320)),
                ..Default::default()
            },
            &mut |_| {},
        )
        .expect("build the bundle");
        let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("robot-loop");
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let path = dir.join("320n.bundle");
        writer.write(&path).expect("write the bundle");
        path
    })
    .clone()
}

fn robot_loop() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_robot-loop"));
    c.arg(bundle())
        .args(["--device", "cpu", "--size", "320x240"]);
    c
}

#[test]
fn a_bounded_run_ends_with_its_summary() {
    let o = robot_loop()
        .args(["--frames", "4", "--hz", "20"])
        .output()
        .expect("spawn robot-loop");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let summary = out
        .lines()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary line in:\n{out}"));
    assert!(summary.starts_with("summary: 4 frames"), "{summary}");
    assert!(!summary.contains("Ctrl-C"), "{summary}");
    // Every result reached the consumer (the channel holds more than 4).
    assert!(summary.contains("0 results dropped"), "{summary}");
    assert!(summary.contains("4 consumed"), "{summary}");
}

#[test]
fn ctrl_c_finishes_the_frame_prints_the_summary_and_exits_130() {
    let mut child = robot_loop()
        .args(["--hz", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn robot-loop");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    // Wait for the loop to run, then for a first consumed result.
    for l in lines.by_ref() {
        let l = l.expect("read stdout");
        seen.push(l.clone());
        if l.starts_with("frame ") {
            break;
        }
        assert!(Instant::now() < deadline, "no frame after 120 s: {seen:?}");
    }
    std::thread::sleep(Duration::from_millis(300));
    // SAFETY: kill(2) with the child's pid (alive: we have not waited on it) and SIGINT.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(rc, 0);
    let rest: Vec<String> = lines.map(|l| l.expect("read stdout")).collect();
    let status = child.wait().expect("wait");
    let summary = rest
        .iter()
        .find(|l| l.starts_with("summary: "))
        .unwrap_or_else(|| panic!("no summary after Ctrl-C: {seen:?} {rest:?}"));
    assert!(summary.contains("(stopped by Ctrl-C)"), "{summary}");
    assert_eq!(status.code(), Some(130), "{summary}");
}
