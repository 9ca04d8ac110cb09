//! `tether inspect` and `tether verify`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde_json::{Value, json};
use tether_bundle::{Bundle, Verify};

/// Arguments of `tether inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tether verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle.
    bundle: PathBuf,
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().fold(String::new(), |mut s, b| {
        let _ = write!(s, "{b:02x}");
        s
    })
}

fn manifest_json(b: &Bundle) -> Value {
    let id = b.identity();
    let (major, minor) = b.format_version();
    let targets: Vec<Value> = b
        .targets()
        .map(|t| {
            json!({
                "index": t.index,
                "name": t.name,
                "arch": format!("{:?}", t.arch),
                "sm": t.sm.map(|(a, b)| format!("{a}.{b}")),
                "engine": format!("{:?}", t.engine),
                "tensorrt_version": t.tensorrt_version,
                "hardware_compat": t.hardware_compat,
                "flags": t.flags,
            })
        })
        .collect();
    let sections: Vec<Value> = b
        .sections()
        .map(|s| {
            let tensors: Vec<Value> = b
                .tensors(s.index)
                .map(|t| {
                    json!({
                        "name": t.name,
                        "mode": format!("{:?}", t.mode),
                        "dtype": t.dtype.to_string(),
                        "layout": format!("{:?}", t.layout),
                        "dims": t.dims.iter().collect::<Vec<i64>>(),
                    })
                })
                .collect();
            json!({
                "index": s.index,
                "name": s.name,
                "kind": format!("{:?}", s.kind),
                "target": s.target,
                "offset": s.offset,
                "length": s.length,
                "crc32": format!("{:08x}", s.crc32),
                "flags": s.flags,
                "tensors": tensors,
            })
        })
        .collect();
    json!({
        "path": b.path().map(|p| p.display().to_string()),
        "file_len": b.file_len(),
        "format_version": format!("{major}.{minor}"),
        "identity": {
            "name": id.name,
            "family": id.family,
            "model_version": id.model_version,
            "tool_version": id.tool_version,
            "created_unix_s": id.created_unix_s,
            "content_digest_sha256": hex(&id.content_digest),
        },
        "targets": targets,
        "sections": sections,
    })
}

fn print_text(b: &Bundle) {
    let id = b.identity();
    let (major, minor) = b.format_version();
    println!("bundle     {}", id.name);
    println!("family     {}", id.family);
    println!("model      {}", id.model_version);
    println!(
        "built by   {} (unix time {})",
        id.tool_version, id.created_unix_s
    );
    println!("format     {major}.{minor}, {} bytes", b.file_len());
    println!("digest     sha256:{}", hex(&id.content_digest));
    println!("targets");
    for t in b.targets() {
        let sm =
            t.sm.map_or("any".to_string(), |(a, b)| format!("sm_{a}{b}"));
        let trt = if t.tensorrt_version == 0 {
            String::new()
        } else {
            let v = t.tensorrt_version;
            format!(", TensorRT {}.{}.{}", v / 10000, v / 100 % 100, v % 100)
        };
        println!(
            "  [{}] {:<12} {:?} on {:?}, {sm}{trt}",
            t.index, t.name, t.engine, t.arch
        );
    }
    println!("sections");
    for s in b.sections() {
        let target = s.target.map_or("-".to_string(), |t| t.to_string());
        println!(
            "  [{}] {:<24} {:<13} target {target:<2} offset {:>10} length {:>10} crc32 {:08x}",
            s.index,
            s.name,
            format!("{:?}", s.kind),
            s.offset,
            s.length,
            s.crc32
        );
        for t in b.tensors(s.index) {
            let dims: Vec<String> = t
                .dims
                .iter()
                .map(|d| {
                    if d < 0 {
                        "?".to_string()
                    } else {
                        d.to_string()
                    }
                })
                .collect();
            println!(
                "        {:?} {} {}[{}] {:?}",
                t.mode,
                t.name,
                t.dtype,
                dims.join(", "),
                t.layout
            );
        }
    }
}

/// Run `tether inspect`.
pub fn inspect(a: &InspectArgs) -> Result<ExitCode> {
    let b = Bundle::open(&a.bundle, Verify::Lazy)
        .with_context(|| format!("opening {}", a.bundle.display()))?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&manifest_json(&b))?);
    } else {
        print_text(&b);
    }
    Ok(ExitCode::SUCCESS)
}

/// Run `tether verify`: structure at open, then every checksum.
pub fn verify(a: &VerifyArgs) -> Result<ExitCode> {
    let t0 = Instant::now();
    let opened = Bundle::open(&a.bundle, Verify::Lazy);
    let result = opened.and_then(|b| b.verify_all().map(|r| (b, r)));
    match result {
        Ok((b, r)) => {
            let secs = t0.elapsed().as_secs_f64();
            println!(
                "ok: {} ({} bytes, {} sections, header/manifest/section CRC32s, whole-file CRC32 and content SHA-256 all match) in {:.1} ms",
                a.bundle.display(),
                b.file_len(),
                r.sections_checked,
                secs * 1e3
            );
            Ok(ExitCode::SUCCESS)
        }
        // Not a verdict on the content: an ordinary error (exit 1).
        Err(e @ tether_bundle::BundleError::Io { .. }) => {
            Err(anyhow::Error::from(e).context(format!("opening {}", a.bundle.display())))
        }
        Err(e) => {
            eprintln!("corrupt: {}: {e}", a.bundle.display());
            Ok(ExitCode::from(3))
        }
    }
}
