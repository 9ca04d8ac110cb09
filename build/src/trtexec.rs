//! Building plans by driving NVIDIA's `trtexec` (what `tether build --engine
//! tensorrt` calls). tether links no TensorRT builder: `trtexec` ships with
//! every TensorRT install (JetPack: `/usr/src/tensorrt/bin/trtexec`).
//!
//! Flags used (trtexec's own help, NVIDIA/TensorRT `samples/common/sampleOptions.cpp`):
//! `--onnx=<file>`, `--saveEngine=<file>`, `--memPoolSize=workspace:<N>M`,
//! `--skipInference` (build only), `--fp16` (only when this trtexec offers it:
//! TensorRT 11 dropped weakly-typed precision flags and takes precision from
//! the ONNX model), `--versionCompatible`, `--excludeLeanRuntime`,
//! `--hardwareCompatibilityLevel=none|ampere+|sameComputeCapability`,
//! `--minShapes/--optShapes/--maxShapes=name:AxBxC` (optimization profile 0).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use tether_runtime::tensorrt::HardwareCompatibility;
use tether_targets::{FLAG_EXCLUDE_LEAN_RUNTIME, FLAG_VERSION_COMPATIBLE, TrtVersion};

use tether_runtime::tensorrt::{PlanHeader, PlanTarget};

/// Environment variable naming the `trtexec` executable.
pub const ENV_TRTEXEC: &str = "TETHER_TRTEXEC";

/// Folders searched for `trtexec` after [`ENV_TRTEXEC`] and `PATH`: the
/// JetPack / Debian package location, then the usual tar-archive homes.
pub const TRTEXEC_DIRS: &[&str] = &[
    "/usr/src/tensorrt/bin",
    "/usr/local/tensorrt/bin",
    "/opt/tensorrt/bin",
];

/// One dynamic input's range for optimization profile 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileShape {
    /// Input tensor name.
    pub name: String,
    /// Smallest shape.
    pub min: Vec<i64>,
    /// Shape to tune for.
    pub opt: Vec<i64>,
    /// Largest shape.
    pub max: Vec<i64>,
}

/// What to build.
#[derive(Debug, Clone)]
pub struct TrtexecOptions {
    /// The `trtexec` to run; `None` searches [`ENV_TRTEXEC`], `PATH`, [`TRTEXEC_DIRS`].
    pub trtexec: Option<PathBuf>,
    /// ONNX model.
    pub onnx: PathBuf,
    /// Where to write the plan.
    pub output: PathBuf,
    /// Ask for FP16 kernels where this trtexec allows it (`--fp16`, TensorRT 10.x).
    pub fp16: bool,
    /// Builder workspace limit, MiB (`--memPoolSize=workspace:<N>M`).
    pub workspace_mib: u64,
    /// Build a version-compatible plan (`--versionCompatible`).
    pub version_compatible: bool,
    /// Leave the lean runtime out of a version-compatible plan (`--excludeLeanRuntime`).
    pub exclude_lean_runtime: bool,
    /// Hardware-compatibility level (`--hardwareCompatibilityLevel`).
    pub hardware_compatibility: HardwareCompatibility,
    /// Shapes for dynamic inputs (optimization profile 0).
    pub profile: Vec<ProfileShape>,
    /// More flags, passed as given after tether's.
    pub extra_args: Vec<String>,
}

impl TrtexecOptions {
    /// Defaults: FP16 where allowed, 1024 MiB workspace, not
    /// version-compatible, no hardware compatibility, static shapes.
    pub fn new(onnx: impl Into<PathBuf>, output: impl Into<PathBuf>) -> Self {
        Self {
            trtexec: None,
            onnx: onnx.into(),
            output: output.into(),
            fp16: true,
            workspace_mib: 1024,
            version_compatible: false,
            exclude_lean_runtime: false,
            hardware_compatibility: HardwareCompatibility::None,
            profile: Vec::new(),
            extra_args: Vec::new(),
        }
    }
}

/// A plan trtexec built, and the target record for the bundle's manifest.
#[derive(Debug, Clone)]
pub struct BuiltPlan {
    /// The plan file written.
    pub plan_path: PathBuf,
    /// Size of the plan, bytes.
    pub plan_bytes: u64,
    /// Target record: TensorRT version (from trtexec's output), SM of the
    /// building GPU, hardware-compatibility level, flags.
    pub target: PlanTarget,
    /// GPU trtexec built on (its "Selected Device" line), if printed.
    pub device_name: Option<String>,
    /// Whether `--fp16` was passed.
    pub fp16_applied: bool,
    /// The trtexec run: executable and arguments.
    pub command: Vec<String>,
    /// trtexec's combined output (stdout then stderr).
    pub log: String,
}

/// Why building with trtexec failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrtexecError {
    /// No trtexec found.
    #[error("trtexec not found (set {ENV_TRTEXEC} or put it on PATH); tried: {}", .tried.join(", "))]
    NotFound {
        /// Every path tried.
        tried: Vec<String>,
    },
    /// trtexec could not be started.
    #[error("could not run {path}: {reason}")]
    Spawn {
        /// Executable.
        path: String,
        /// The OS error.
        reason: String,
    },
    /// This trtexec lacks a flag the options need.
    #[error("{path} does not offer {flag} (TensorRT {version}); it is needed for {why}")]
    Unsupported {
        /// Executable.
        path: String,
        /// The flag.
        flag: &'static str,
        /// trtexec's TensorRT version, or "unknown".
        version: String,
        /// The option that needs it.
        why: &'static str,
    },
    /// trtexec exited with failure.
    #[error("trtexec failed ({status}): {command}\n{tail}")]
    Failed {
        /// Exit status.
        status: String,
        /// The command line.
        command: String,
        /// The last lines of its output.
        tail: String,
    },
    /// Its output names no TensorRT version.
    #[error(
        "trtexec output names no TensorRT version (looked for \"TensorRT version: X.Y.Z\" and \"[TensorRT vNNNNNN]\"):\n{tail}"
    )]
    NoVersion {
        /// The last lines of its output.
        tail: String,
    },
    /// trtexec succeeded but left no plan.
    #[error("trtexec reported success but wrote no plan at {path}")]
    NoPlanWritten {
        /// The expected plan path.
        path: String,
    },
}

/// Builds a plan with trtexec and returns everything the manifest's target
/// record needs.
///
/// # Errors
/// [`TrtexecError`]: trtexec missing or failing, a needed flag missing, no
/// version in its output, no plan written.
pub fn build_plan_with_trtexec(options: &TrtexecOptions) -> Result<BuiltPlan, TrtexecError> {
    let exe = find_trtexec(options.trtexec.as_deref())?;
    let exe_s = exe.display().to_string();
    let help = run(&exe, &[OsString::from("--help")])?;
    let help_text = format!("{}{}", help.0, help.1);
    let help_version = parse_version(&help_text);
    let version_label = help_version.map_or_else(|| "unknown".to_string(), |v| v.to_string());
    let offers = |flag: &str| help_text.contains(flag);
    let need = |flag: &'static str, why: &'static str| -> Result<(), TrtexecError> {
        if offers(flag) {
            Ok(())
        } else {
            Err(TrtexecError::Unsupported {
                path: exe_s.clone(),
                flag,
                version: version_label.clone(),
                why,
            })
        }
    };

    let mut args: Vec<String> = vec![
        format!("--onnx={}", options.onnx.display()),
        format!("--saveEngine={}", options.output.display()),
        format!("--memPoolSize=workspace:{}M", options.workspace_mib),
        "--skipInference".to_string(),
    ];
    let fp16_applied = options.fp16 && offers("--fp16");
    if fp16_applied {
        args.push("--fp16".to_string());
    }
    let mut flags = 0;
    if options.version_compatible {
        need("--versionCompatible", "a version-compatible plan")?;
        args.push("--versionCompatible".to_string());
        flags |= FLAG_VERSION_COMPATIBLE;
        if options.exclude_lean_runtime {
            need("--excludeLeanRuntime", "excluding the lean runtime")?;
            args.push("--excludeLeanRuntime".to_string());
            flags |= FLAG_EXCLUDE_LEAN_RUNTIME;
        }
    }
    if options.hardware_compatibility != HardwareCompatibility::None {
        need("--hardwareCompatibilityLevel", "a hardware-compatible plan")?;
        args.push(format!(
            "--hardwareCompatibilityLevel={}",
            options.hardware_compatibility.trtexec_name()
        ));
    }
    if !options.profile.is_empty() {
        let join = |pick: fn(&ProfileShape) -> &Vec<i64>| -> String {
            options
                .profile
                .iter()
                .map(|p| {
                    let dims: Vec<String> = pick(p).iter().map(i64::to_string).collect();
                    format!("{}:{}", p.name, dims.join("x"))
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        args.push(format!("--minShapes={}", join(|p| &p.min)));
        args.push(format!("--optShapes={}", join(|p| &p.opt)));
        args.push(format!("--maxShapes={}", join(|p| &p.max)));
    }
    args.extend(options.extra_args.iter().cloned());

    let _ = std::fs::remove_file(&options.output);
    let os_args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let command_line = format!("{} {}", exe_s, args.join(" "));
    log::info!("building TensorRT plan: {command_line}");
    let output = Command::new(&exe)
        .args(&os_args)
        .output()
        .map_err(|e| TrtexecError::Spawn {
            path: exe_s.clone(),
            reason: e.to_string(),
        })?;
    let log_text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if !output.status.success() {
        return Err(TrtexecError::Failed {
            status: output.status.to_string(),
            command: command_line,
            tail: tail(&log_text),
        });
    }
    let version =
        parse_version(&log_text)
            .or(help_version)
            .ok_or_else(|| TrtexecError::NoVersion {
                tail: tail(&log_text),
            })?;
    let plan_bytes = std::fs::metadata(&options.output)
        .map(|m| m.len())
        .unwrap_or(0);
    if plan_bytes == 0 {
        return Err(TrtexecError::NoPlanWritten {
            path: options.output.display().to_string(),
        });
    }
    if let Ok(head) = read_head(&options.output)
        && let Some(h) = PlanHeader::parse(&head)
        && h.version != version
    {
        log::warn!(
            "plan header says TensorRT {} but trtexec printed {}",
            h.version,
            version
        );
    }
    let mut command = vec![exe_s];
    command.extend(args);
    Ok(BuiltPlan {
        plan_path: options.output.clone(),
        plan_bytes,
        target: PlanTarget {
            tensorrt_version: version.0,
            sm: parse_compute_capability(&log_text),
            hardware_compat: options.hardware_compatibility.raw(),
            flags,
        },
        device_name: parse_after(&log_text, "Selected Device:"),
        fp16_applied,
        command,
        log: log_text,
    })
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut buf = vec![0u8; 64];
    let mut f = std::fs::File::open(path)?;
    let n = f.read(&mut buf)?;
    buf.truncate(n);
    Ok(buf)
}

fn run(exe: &Path, args: &[OsString]) -> Result<(String, String), TrtexecError> {
    // ETXTBSY ("Text file busy"): the executable was written moments ago and
    // another thread of this process forked while its write descriptor was
    // open, so a child briefly holds it open for writing (a known fork/exec
    // race, e.g. rust-lang/rust#114554). It clears once that child execs:
    // retry a few times before reporting it.
    const ETXTBSY: i32 = 26;
    let mut attempt = 0;
    let out = loop {
        match Command::new(exe).args(args).output() {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && attempt < 20 => {
                attempt += 1;
                std::thread::sleep(std::time::Duration::from_millis(10 * attempt));
            }
            other => break other,
        }
    }
    .map_err(|e| TrtexecError::Spawn {
        path: exe.display().to_string(),
        reason: e.to_string(),
    })?;
    Ok((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// Finds trtexec: `explicit`, then [`ENV_TRTEXEC`], then `PATH`, then [`TRTEXEC_DIRS`].
///
/// # Errors
/// [`TrtexecError::NotFound`] listing every path tried.
pub fn find_trtexec(explicit: Option<&Path>) -> Result<PathBuf, TrtexecError> {
    let mut tried = Vec::new();
    for c in trtexec_candidates(
        explicit,
        std::env::var_os(ENV_TRTEXEC),
        std::env::var_os("PATH"),
    ) {
        if c.is_file() {
            return Ok(c);
        }
        tried.push(c.display().to_string());
    }
    Err(TrtexecError::NotFound { tried })
}

/// The paths [`find_trtexec`] tries, in order, each once (a folder both on `PATH` and in
/// [`TRTEXEC_DIRS`], or twice on `PATH`, is tried and reported once).
fn trtexec_candidates(
    explicit: Option<&Path>,
    env: Option<std::ffi::OsString>,
    path: Option<std::ffi::OsString>,
) -> Vec<PathBuf> {
    if let Some(p) = explicit {
        return vec![p.to_path_buf()];
    }
    let mut all: Vec<PathBuf> = Vec::new();
    all.extend(env.filter(|e| !e.is_empty()).map(PathBuf::from));
    if let Some(path) = path {
        all.extend(std::env::split_paths(&path).map(|d| d.join("trtexec")));
    }
    all.extend(TRTEXEC_DIRS.iter().map(|d| Path::new(d).join("trtexec")));
    let mut out: Vec<PathBuf> = Vec::with_capacity(all.len());
    for c in all {
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}

fn tail(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

fn parse_after(text: &str, key: &str) -> Option<String> {
    text.lines().find_map(|l| {
        let i = l.find(key)?;
        Some(l[i + key.len()..].trim().to_string())
    })
}

/// The TensorRT version in trtexec's output: its "TensorRT version: X.Y.Z"
/// line, else the "[TensorRT vNNNNNN]" tag of its `&&&& RUNNING` line
/// (`MAJOR*10000+MINOR*100+PATCH` since 10.0; `MAJOR*1000+MINOR*100+PATCH`
/// before).
pub fn parse_version(text: &str) -> Option<TrtVersion> {
    if let Some(v) = parse_after(text, "TensorRT version:") {
        let mut it = v
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u32>().ok());
        if let (Some(Some(a)), Some(Some(b)), Some(Some(c))) = (it.next(), it.next(), it.next()) {
            return Some(TrtVersion::new(a, b, c));
        }
    }
    let i = text.find("[TensorRT v")?;
    let digits: String = text[i + "[TensorRT v".len()..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let n: u32 = digits.parse().ok()?;
    if n >= 100_000 {
        Some(TrtVersion(n))
    } else {
        Some(TrtVersion::new(n / 1000, (n / 100) % 10, n % 100))
    }
}

/// The building GPU's compute capability from trtexec's "Compute
/// Capability: M.m" device-information line.
pub fn parse_compute_capability(text: &str) -> Option<(u8, u8)> {
    let v = parse_after(text, "Compute Capability:")?;
    let (a, b) = v.split_once('.')?;
    let b: String = b.chars().take_while(char::is_ascii_digit).collect();
    Some((a.trim().parse().ok()?, b.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each folder is tried once, in order: the environment variable, `PATH`, then the
    /// install folders not already on `PATH`; an explicit path is the only candidate.
    #[test]
    fn trtexec_candidates_are_tried_once_each_in_order() {
        let path =
            std::env::join_paths(["/opt/x/bin", "/usr/src/tensorrt/bin", "/opt/x/bin"]).unwrap();
        let c = trtexec_candidates(None, Some("/e/trtexec".into()), Some(path));
        let c: Vec<String> = c.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            c,
            [
                "/e/trtexec",
                "/opt/x/bin/trtexec",
                "/usr/src/tensorrt/bin/trtexec",
                "/usr/local/tensorrt/bin/trtexec",
                "/opt/tensorrt/bin/trtexec",
            ]
        );
        let only = trtexec_candidates(Some(Path::new("/my/trtexec")), None, None);
        assert_eq!(only, [PathBuf::from("/my/trtexec")]);
    }

    #[test]
    fn parses_versions() {
        assert_eq!(
            parse_version("[11/30/2026-18:00:00] [I] TensorRT version: 10.3.0\n"),
            Some(TrtVersion::new(10, 3, 0))
        );
        assert_eq!(
            parse_version("&&&& RUNNING TensorRT.trtexec [TensorRT v110400] [b106] # trtexec"),
            Some(TrtVersion::new(11, 4, 0))
        );
        assert_eq!(
            parse_version("&&&& RUNNING TensorRT.trtexec [TensorRT v8601] # trtexec"),
            Some(TrtVersion::new(8, 6, 1))
        );
        assert_eq!(parse_version("nothing"), None);
    }

    #[test]
    fn parses_compute_capability() {
        assert_eq!(
            parse_compute_capability("[I] Compute Capability: 8.7\n[I] SMs: 16"),
            Some((8, 7))
        );
        assert_eq!(
            parse_compute_capability("[I] Compute Capability: 10.1"),
            Some((10, 1))
        );
        assert_eq!(parse_compute_capability("none"), None);
    }
}
