//! `build_plan_with_trtexec` against fake `trtexec` scripts that check the
//! flags they receive and write a placeholder plan, one imitating TensorRT
//! 10.10 (offers `--fp16`) and one imitating TensorRT 11.4 (does not).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use tether_build::trtexec::{ProfileShape, TrtexecError, TrtexecOptions, build_plan_with_trtexec};
use tether_runtime::tensorrt::HardwareCompatibility;

fn temp_dir(tag: &str) -> PathBuf {
    let d = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("trtexec-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes a fake trtexec. `--help` prints a help text (with or without
/// `--fp16`); a build checks each `want` flag is present and each `deny`
/// flag absent (exit 3 otherwise, naming it), prints trtexec-like
/// device/version lines and writes a placeholder plan to `--saveEngine`.
fn fake_trtexec(
    dir: &Path,
    tag: u32,
    version: &str,
    cc: &str,
    with_fp16: bool,
    want: &[&str],
    deny: &[&str],
) -> PathBuf {
    let path = dir.join("trtexec");
    let fp16_help = if with_fp16 {
        "  --fp16                             Enable fp16 precision, in addition to fp32 (default = disabled)\n"
    } else {
        ""
    };
    let mut checks = String::new();
    for w in want {
        checks.push_str(&format!(
            "case \" $* \" in *\" {w} \"*) ;; *) echo \"missing flag {w}\" >&2; exit 3;; esac\n"
        ));
    }
    for d in deny {
        checks.push_str(&format!(
            "case \" $* \" in *\" {d}\"*) echo \"unexpected flag {d}\" >&2; exit 3;; esac\n"
        ));
    }
    let script = format!(
        r#"#!/bin/sh
echo "&&&& RUNNING TensorRT.trtexec [TensorRT v{tag}] [b31] # trtexec $*"
if [ "$1" = "--help" ]; then
cat <<'EOF'
=== Build Options ===
  --onnx=<file>                      ONNX model
  --saveEngine=<file>                Save the serialized engine
  --memPoolSize=poolspec             Specify the size constraints of the designated memory pool(s)
{fp16_help}  --versionCompatible, --vc          Mark the engine as version compatible
  --excludeLeanRuntime               When --versionCompatible is enabled, exclude the lean runtime
  --hardwareCompatibilityLevel=mode  none, ampere+, sameComputeCapability
  --skipInference                    Exit after the engine has been built
EOF
exit 0
fi
{checks}
out=""
for a in "$@"; do
  case "$a" in --saveEngine=*) out="${{a#--saveEngine=}}";; esac
done
[ -n "$out" ] || {{ echo "no --saveEngine" >&2; exit 4; }}
echo "[11/30/2026-18:00:00] [I] === Device Information ==="
echo "[11/30/2026-18:00:00] [I] Selected Device: Fake GPU"
echo "[11/30/2026-18:00:00] [I] Compute Capability: {cc}"
echo "[11/30/2026-18:00:00] [I] TensorRT version: {version}"
printf 'placeholder plan' > "$out"
echo "&&&& PASSED TensorRT.trtexec [TensorRT v{tag}] [b31] # trtexec $*"
"#
    );
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn builds_with_tensorrt_10_flags() {
    let dir = temp_dir("10");
    let onnx = dir.join("model.onnx");
    std::fs::write(&onnx, b"onnx").unwrap();
    let plan = dir.join("model.plan");
    let exe = fake_trtexec(
        &dir,
        101000,
        "10.10.0",
        "8.7",
        true,
        &[
            &format!("--onnx={}", onnx.display()),
            &format!("--saveEngine={}", plan.display()),
            "--memPoolSize=workspace:512M",
            "--skipInference",
            "--fp16",
            "--versionCompatible",
            "--excludeLeanRuntime",
            "--minShapes=images:1x3x320x320",
            "--optShapes=images:1x3x640x640",
            "--maxShapes=images:4x3x640x640",
        ],
        &["--hardwareCompatibilityLevel"],
    );
    let mut o = TrtexecOptions::new(&onnx, &plan);
    o.trtexec = Some(exe.clone());
    o.workspace_mib = 512;
    o.version_compatible = true;
    o.exclude_lean_runtime = true;
    o.profile = vec![ProfileShape {
        name: "images".into(),
        min: vec![1, 3, 320, 320],
        opt: vec![1, 3, 640, 640],
        max: vec![4, 3, 640, 640],
    }];
    let built = build_plan_with_trtexec(&o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(built.target.tensorrt_version, 101000);
    assert_eq!(built.target.sm, Some((8, 7)));
    assert_eq!(built.target.hardware_compat, 0);
    assert_eq!(
        built.target.flags,
        tether_targets::FLAG_VERSION_COMPATIBLE | tether_targets::FLAG_EXCLUDE_LEAN_RUNTIME
    );
    assert!(built.fp16_applied);
    assert_eq!(built.device_name.as_deref(), Some("Fake GPU"));
    assert_eq!(built.plan_bytes, "placeholder plan".len() as u64);
    assert_eq!(std::fs::read(&plan).unwrap(), b"placeholder plan");
    assert_eq!(built.command[0], exe.display().to_string());
}

#[test]
fn builds_with_tensorrt_11_without_fp16() {
    let dir = temp_dir("11");
    let onnx = dir.join("m.onnx");
    std::fs::write(&onnx, b"onnx").unwrap();
    let plan = dir.join("m.plan");
    let exe = fake_trtexec(
        &dir,
        110400,
        "11.4.0",
        "9.0",
        false,
        &[
            "--skipInference",
            "--memPoolSize=workspace:1024M",
            "--hardwareCompatibilityLevel=ampere+",
        ],
        &["--fp16", "--versionCompatible", "--minShapes"],
    );
    let mut o = TrtexecOptions::new(&onnx, &plan);
    o.trtexec = Some(exe);
    o.hardware_compatibility = HardwareCompatibility::AmperePlus;
    let built = build_plan_with_trtexec(&o).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(built.target.tensorrt_version, 110400);
    assert_eq!(built.target.sm, Some((9, 0)));
    assert_eq!(built.target.hardware_compat, 1);
    assert_eq!(built.target.flags, 0);
    assert!(!built.fp16_applied, "TensorRT 11 trtexec has no --fp16");
}

#[test]
fn reports_failures_and_missing_trtexec() {
    let dir = temp_dir("fail");
    let plan = dir.join("x.plan");
    // Demands a flag tether does not pass: trtexec exits 3, the error carries its output.
    let exe = fake_trtexec(&dir, 101000, "10.10.0", "8.7", true, &["--int8"], &[]);
    let mut o = TrtexecOptions::new(dir.join("x.onnx"), &plan);
    o.trtexec = Some(exe);
    match build_plan_with_trtexec(&o) {
        Err(TrtexecError::Failed { tail, .. }) => {
            assert!(tail.contains("missing flag --int8"), "{tail}")
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    o.trtexec = Some(dir.join("no-such-trtexec"));
    match build_plan_with_trtexec(&o) {
        Err(e @ TrtexecError::NotFound { .. }) => {
            assert!(e.to_string().contains("no-such-trtexec"))
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
}
