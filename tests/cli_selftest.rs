//! `tether doctor --self-test` on a machine without a GPU, TensorRT or
//! trtexec (CI): the generated model must still run on the CPU, the SKIP
//! lines must name what is missing, and the exit status must be 4 ("could
//! not check TensorRT here").
//!
//! The expected CPU checksum is recomputed here from the model's formulas
//! (documented in `src/cli/selftest.rs`), independently of the CLI's code.

use std::process::{Command, Output};

use serde_json::Value;

/// The documented exit status for "nothing failed, but TensorRT could not be
/// checked here".
const EXIT_CANNOT_CHECK: i32 = 4;

fn tether(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(args)
        .env_remove("RUST_LOG")
        // Make sure no TensorRT or trtexec is picked up from the environment.
        .env_remove("TETHER_TENSORRT_LIB")
        .env_remove("TETHER_TRTEXEC")
        .output()
        .expect("spawn tether")
}

/// `y = Relu(Conv3x3(x, W, B, pads 1)) + x` on `[1, 3, 32, 32]`, from the
/// formulas, summed in f64: every value is a multiple of 1/64, so the sum is
/// exact and must match the CLI's to the last digit.
fn expected_checksum() -> f64 {
    let x = |c: i64, h: i64, w: i64| -> f64 {
        if !(0..32).contains(&h) || !(0..32).contains(&w) {
            return 0.0;
        }
        ((c * 7 + h * 3 + w * 5) % 17) as f64 / 8.0 - 1.0
    };
    let wt =
        |o: i64, i: i64, kh: i64, kw: i64| ((o * 5 + i * 3 + kh * 2 + kw) % 7) as f64 / 8.0 - 0.375;
    let mut sum = 0.0;
    for o in 0..3 {
        for h in 0..32 {
            for w in 0..32 {
                let mut s = (o as f64 - 1.0) / 4.0;
                for i in 0..3 {
                    for kh in 0..3 {
                        for kw in 0..3 {
                            s += wt(o, i, kh, kw) * x(i, h + kh - 1, w + kw - 1);
                        }
                    }
                }
                sum += s.max(0.0) + x(o, h, w);
            }
        }
    }
    sum
}

fn gpu_stack_absent() -> bool {
    // This test is about hosts without the TensorRT stack; on a GPU host with
    // TensorRT and trtexec the self-test runs the device steps instead.
    let o = tether(&["doctor", "--self-test", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("doctor --json prints JSON");
    v["self_test"]["exit_code"] == EXIT_CANNOT_CHECK
}

#[test]
fn expected_checksum_is_the_worked_out_value() {
    assert_eq!(expected_checksum(), 1630.109375);
}

#[test]
fn self_test_runs_the_cpu_steps_and_skips_the_rest_with_reasons() {
    if !gpu_stack_absent() {
        eprintln!(
            "skipped: this host has GPU + TensorRT + trtexec; see docs/evidence/tensorrt-selftest.md"
        );
        return;
    }
    let o = tether(&["doctor", "--self-test"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(EXIT_CANNOT_CHECK), "stdout:\n{out}");
    // The existing doctor report is still there.
    assert!(out.contains("tether        "), "{out}");
    assert!(out.contains("engines       "), "{out}");
    // Steps 1-2 ran and passed, with the checksum computed independently here.
    assert!(out.contains("[PASS] onnx"), "{out}");
    let cpu = out
        .lines()
        .find(|l| l.contains("[PASS] cpu"))
        .unwrap_or_else(|| panic!("no passing cpu step:\n{out}"));
    let want = format!("checksum {:.6}", expected_checksum());
    assert!(cpu.contains(&want), "cpu line `{cpu}` lacks `{want}`");
    // The device steps are skipped, and the reasons name what is missing.
    for step in ["build", "eager", "graph"] {
        assert!(out.contains(&format!("[SKIP] {step}")), "{step}:\n{out}");
    }
    assert!(!out.contains("[FAIL]"), "{out}");
    let verdict = out
        .lines()
        .find(|l| l.starts_with("verdict: "))
        .unwrap_or_else(|| panic!("no verdict line:\n{out}"));
    assert!(
        verdict.starts_with("verdict: cannot check TensorRT here: "),
        "{verdict}"
    );
    let mut named = 0;
    for (step, what) in [
        ("gpu", "no CUDA GPU"),
        ("tensorrt", "no TensorRT library"),
        ("trtexec", "no trtexec"),
    ] {
        if out.contains(&format!("[SKIP] {step}")) {
            named += 1;
            assert!(verdict.contains(what), "verdict lacks `{what}`: {verdict}");
            let line = out
                .lines()
                .find(|l| l.contains(&format!("[SKIP] {step}")))
                .unwrap_or_default();
            assert!(line.contains(what), "`{line}` lacks `{what}`");
        }
    }
    assert!(named > 0, "no missing piece named:\n{out}");
}

#[test]
fn self_test_json_has_steps_verdict_and_checksum() {
    let o = tether(&["doctor", "--self-test", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let t = &v["self_test"];
    assert_eq!(o.status.code(), t["exit_code"].as_i64().map(|c| c as i32));
    // The JSON prints the engine's f32 sum as its shortest round-trip decimal
    // (docs/cli-json.md, "Numbers"): read back as an f32 it is exact.
    assert_eq!(
        t["cpu_checksum"].as_f64().map(|x| x as f32),
        Some(expected_checksum() as f32)
    );
    let steps = t["steps"].as_array().expect("steps");
    let names: Vec<&str> = steps.iter().filter_map(|s| s["name"].as_str()).collect();
    assert_eq!(
        names,
        [
            "onnx", "cpu", "gpu", "tensorrt", "trtexec", "build", "eager", "graph"
        ]
    );
    assert_eq!(steps[1]["status"], "PASS");
    if t["exit_code"] == EXIT_CANNOT_CHECK {
        assert!(!t["missing"].as_array().expect("missing").is_empty());
    }
}

#[test]
fn doctor_without_self_test_keeps_exit_zero() {
    let o = tether(&["doctor"]);
    assert_eq!(o.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&o.stdout).contains("self-test"));
}
