//! `tether inspect` and `tether verify`.
//!
//! `inspect --json` streams its document (schema: `docs/cli-json.md`)
//! straight from the bundle's manifest to standard output: nothing is
//! collected, so time and memory are linear in the output, whatever the
//! number of sections and tensors.

use std::borrow::Cow;
use std::fmt::Display;
use std::io::{self, BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use serde::Serialize;
use serde::ser::Serializer;
use serde_json::{Value, json};
use tether_bundle::{Bundle, Section, Target, TensorInfo, Verify};

use super::text::Escaped;

/// Version of the `inspect --json` document (`schema_version`). Raised on
/// any change that can break a reader of the previous version (a key
/// removed or renamed, a value's meaning or spelling changed); adding keys
/// does not raise it.
pub const INSPECT_SCHEMA_VERSION: u32 = 2;

/// Arguments of `tether inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Print JSON instead of text (schema: docs/cli-json.md).
    #[arg(long)]
    json: bool,
    /// List every section (text output; JSON always lists every one). Without it a bundle
    /// of more than 32 sections (an LLM has one per weight tensor) lists its first 8.
    #[arg(long)]
    sections: bool,
}

/// Sections listed in text without `--sections` when there are more than
/// [`SECTIONS_IN_FULL`].
const SECTIONS_SHOWN: usize = 8;
/// Up to this many sections are always listed in text.
const SECTIONS_IN_FULL: usize = 32;

/// Arguments of `tether verify`.
#[derive(Args, Debug)]
pub struct VerifyArgs {
    /// The bundle.
    bundle: PathBuf,
    /// Also run the self-test the bundle carries (its reference input through the family's
    /// pipeline on --device, compared with the reference output recorded at build time).
    #[arg(long)]
    self_test: bool,
    /// Device for --self-test: auto, cpu, cuda, cuda:N.
    #[arg(long, default_value = "auto", requires = "self_test")]
    device: String,
    /// For --self-test (the same option and default as `run` and `bench`).
    #[command(flatten)]
    threads: crate::cli::run::ThreadsArg,
    /// Print one JSON document instead of the text lines (the same exit status;
    /// `docs/cli-json.md`).
    #[arg(long)]
    json: bool,
}

/// An enum value as FORMAT.md section 5 spells it; an unknown raw value as
/// `unknown(N)`.
fn format_name<T: Display>(name: Option<&'static str>, value: T) -> Cow<'static, str> {
    name.map_or_else(|| Cow::Owned(value.to_string()), Cow::Borrowed)
}

// ----- the JSON document -------------------------------------------------------
//
// Each level is a small struct whose lists serialize from the bundle's
// iterators (`collect_seq`), so the document is written as it is read.
// Adding a block means adding a field to `InspectDoc`.

#[derive(Serialize)]
struct InspectDoc<'a> {
    schema_version: u32,
    /// `inspect`, as run's, verify's and bench's documents name their command.
    command: &'static str,
    path: Option<String>,
    file_len: u64,
    format_version: String,
    identity: IdentityDoc<'a>,
    targets: TargetsDoc<'a>,
    sections: SectionsDoc<'a>,
    networks: Vec<NetworkDoc>,
    /// The family's own configuration (`null` for a family this tether does not know, or
    /// whose sections cannot be read).
    family_config: serde_json::Value,
    /// Why the family's sections cannot be read (`null` when they can, or the family is
    /// not known).
    family_config_error: Option<&'a str>,
}

/// One network: its engine sections (one per target), grouped by name (FORMAT.md 4.8).
#[derive(Serialize)]
struct NetworkDoc {
    name: String,
    sections: Vec<u32>,
}

fn networks(b: &Bundle) -> Vec<NetworkDoc> {
    let mut out: Vec<NetworkDoc> = Vec::new();
    for s in b.sections() {
        if !matches!(
            s.kind,
            tether_bundle::SectionKind::Onnx | tether_bundle::SectionKind::TensorRtPlan
        ) {
            continue;
        }
        let name = tether_bundle::network_of(s.name);
        match out.iter_mut().find(|n| n.name == name) {
            Some(n) => n.sections.push(s.index),
            None => out.push(NetworkDoc {
                name: name.to_string(),
                sections: vec![s.index],
            }),
        }
    }
    out
}

/// What the bundle's family says of it: its description, nothing for a family this tether
/// does not know, or the error that stopped it reading the family's sections (a section
/// corrupt or of another version): `inspect` prints the rest of the bundle, names that error
/// and exits 1.
type FamilyDescription =
    std::result::Result<Option<tether_family::family::Description>, Unreadable>;

/// The family's sections could not be read: the error (its chain kept, so that the report
/// gives the bundle's hint) and its one-line message, printed in the output.
struct Unreadable {
    error: anyhow::Error,
    message: String,
}

fn family_description(b: &Arc<Bundle>) -> FamilyDescription {
    let Some(family) = tether_family::family::find(tether::families::REGISTRY, b.identity().family)
    else {
        return Ok(None);
    };
    family.describe(b).map(Some).map_err(|e| {
        let error = e.context(format!(
            "the {} family could not read the bundle",
            family.name()
        ));
        let message = crate::cli::message(&error);
        Unreadable { error, message }
    })
}

#[derive(Serialize)]
struct IdentityDoc<'a> {
    name: &'a str,
    family: &'a str,
    model_version: &'a str,
    tool_version: &'a str,
    created_unix_s: u64,
    content_digest_sha256: String,
}

struct TargetsDoc<'a>(&'a Bundle);

impl Serialize for TargetsDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.targets().map(TargetDoc::from))
    }
}

#[derive(Serialize)]
struct TargetDoc<'a> {
    index: u32,
    name: &'a str,
    arch: Cow<'static, str>,
    sm: Option<String>,
    engine: Cow<'static, str>,
    tensorrt_version: u32,
    hardware_compat: u32,
    flags: u32,
}

impl<'a> From<Target<'a>> for TargetDoc<'a> {
    fn from(t: Target<'a>) -> Self {
        TargetDoc {
            index: t.index,
            name: t.name,
            arch: Cow::Owned(t.arch.to_string()),
            sm: t.sm.map(|(a, b)| format!("{a}.{b}")),
            engine: format_name(t.engine.name(), t.engine),
            tensorrt_version: t.tensorrt_version,
            hardware_compat: t.hardware_compat,
            flags: t.flags,
        }
    }
}

struct SectionsDoc<'a>(&'a Bundle);

impl Serialize for SectionsDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let b = self.0;
        s.collect_seq(b.sections().map(|sec| SectionDoc::new(b, sec)))
    }
}

#[derive(Serialize)]
struct SectionDoc<'a> {
    index: u32,
    name: &'a str,
    kind: Cow<'static, str>,
    target: Option<u32>,
    offset: u64,
    length: u64,
    crc32: String,
    flags: u32,
    tensors: TensorsDoc<'a>,
}

impl<'a> SectionDoc<'a> {
    fn new(b: &'a Bundle, s: Section<'a>) -> Self {
        SectionDoc {
            index: s.index,
            name: s.name,
            kind: format_name(s.kind.name(), s.kind),
            target: s.target,
            offset: s.offset,
            length: s.length,
            crc32: format!("{:08x}", s.crc32),
            flags: s.flags,
            tensors: TensorsDoc(b, s.index),
        }
    }
}

struct TensorsDoc<'a>(&'a Bundle, u32);

impl Serialize for TensorsDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.tensors(self.1).map(TensorDoc::from))
    }
}

#[derive(Serialize)]
struct TensorDoc<'a> {
    name: &'a str,
    mode: Cow<'static, str>,
    dtype: Cow<'static, str>,
    layout: Cow<'static, str>,
    dims: DimsDoc<'a>,
}

impl<'a> From<TensorInfo<'a>> for TensorDoc<'a> {
    fn from(t: TensorInfo<'a>) -> Self {
        TensorDoc {
            name: t.name,
            mode: format_name(t.mode.name(), t.mode),
            dtype: format_name(t.dtype.name(), t.dtype),
            layout: format_name(t.layout.name(), t.layout),
            dims: DimsDoc(t.dims),
        }
    }
}

struct DimsDoc<'a>(tether_bundle::Dims<'a>);

impl Serialize for DimsDoc<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter())
    }
}

fn manifest_doc<'a>(b: &'a Arc<Bundle>, family: &'a FamilyDescription) -> InspectDoc<'a> {
    let id = b.identity();
    let (major, minor) = b.format_version();
    InspectDoc {
        schema_version: INSPECT_SCHEMA_VERSION,
        command: "inspect",
        path: b.path().map(|p| p.display().to_string()),
        file_len: b.file_len(),
        format_version: format!("{major}.{minor}"),
        identity: IdentityDoc {
            name: id.name,
            family: id.family,
            model_version: id.model_version,
            tool_version: id.tool_version,
            created_unix_s: id.created_unix_s,
            content_digest_sha256: id.content_digest_hex(),
        },
        targets: TargetsDoc(b),
        sections: SectionsDoc(b),
        networks: networks(b),
        family_config: match family {
            Ok(Some(d)) => {
                let mut json = d.json.clone();
                super::shortest_f32(&mut json);
                json
            }
            _ => serde_json::Value::Null,
        },
        family_config_error: family.as_ref().err().map(|u| u.message.as_str()),
    }
}

// ----- text ----------------------------------------------------------------------

/// When a bundle was built, from its `created_unix_s`: `on 2026-12-04 21:17:03 UTC`, or
/// `(no build time: unix time 0)` for a reproducible build that recorded none
/// (`SOURCE_DATE_EPOCH=0`), or `(unix time N)` beyond the dates `jiff` represents.
fn built_at(unix_s: u64) -> String {
    if unix_s == 0 {
        return "(no build time: unix time 0)".into();
    }
    match i64::try_from(unix_s).map(jiff::Timestamp::from_second) {
        Ok(Ok(t)) => format!("on {}", t.strftime("%Y-%m-%d %H:%M:%S UTC")),
        _ => format!("(unix time {unix_s})"),
    }
}

fn write_text(
    b: &Arc<Bundle>,
    family: &FamilyDescription,
    all_sections: bool,
    out: &mut impl Write,
) -> io::Result<()> {
    let id = b.identity();
    let (major, minor) = b.format_version();
    let described = family.as_ref().ok().and_then(Option::as_ref);
    // One label column, as wide as the longest label (a family's own, e.g. llm's
    // `context length`, may be longer than the common ones).
    let w = described
        .iter()
        .flat_map(|d| {
            d.lines
                .iter()
                .map(|(k, _)| Escaped(k).to_string().chars().count())
        })
        .chain([10])
        .max()
        .unwrap_or(10);
    writeln!(out, "{:<w$} {}", "bundle", Escaped(id.name))?;
    writeln!(out, "{:<w$} {}", "family", Escaped(id.family))?;
    writeln!(out, "{:<w$} {}", "model", Escaped(id.model_version))?;
    writeln!(
        out,
        "{:<w$} {} {}",
        "built by",
        Escaped(id.tool_version),
        built_at(id.created_unix_s)
    )?;
    writeln!(
        out,
        "{:<w$} {major}.{minor}, {} bytes",
        "format",
        b.file_len()
    )?;
    writeln!(out, "{:<w$} sha256:{}", "digest", id.content_digest_hex())?;
    match family {
        Ok(Some(d)) => {
            for (k, v) in &d.lines {
                writeln!(out, "{:<w$} {}", Escaped(k).to_string(), Escaped(v))?;
            }
        }
        Ok(None) => {}
        Err(u) => writeln!(out, "{:<w$} unreadable: {}", "config", Escaped(&u.message))?,
    }
    for n in networks(b) {
        let secs: Vec<String> = n.sections.iter().map(|i| format!("[{i}]")).collect();
        writeln!(
            out,
            "{:<w$} {} (sections {})",
            "network",
            Escaped(&n.name),
            secs.join(" ")
        )?;
    }
    if b.targets().next().is_none() {
        // No engine sections: the family runs its own code on every device (e.g. llm).
        writeln!(out, "{:<w$} none", "targets")?;
    } else {
        writeln!(out, "targets")?;
    }
    for t in b.targets() {
        // `any` (no constraint) is said in words; a target without an SM runs on any GPU
        // or none, which needs no mention.
        let arch = match t.arch.to_string() {
            a if a == "any" => "any architecture".to_string(),
            a => a,
        };
        let sm = t.sm.map_or(String::new(), |(a, b)| format!(", sm_{a}{b}"));
        let trt = t
            .tensorrt_version_parts()
            .map_or(String::new(), |(a, b, c)| format!(", TensorRT {a}.{b}.{c}"));
        writeln!(
            out,
            "  [{}] {:<12} {} on {arch}{sm}{trt}",
            t.index,
            Escaped(t.name),
            t.engine,
        )?;
    }
    let count = b.sections().count();
    let shown = if all_sections || count <= SECTIONS_IN_FULL {
        count
    } else {
        SECTIONS_SHOWN
    };
    writeln!(out, "{:<w$} {count}", "sections")?;
    let width = b
        .sections()
        .take(shown)
        .map(|s| Escaped(s.name).to_string().chars().count())
        .max()
        .unwrap_or(0)
        .max(24);
    for s in b.sections().take(shown) {
        let target = s.target.map_or("-".to_string(), |t| t.to_string());
        writeln!(
            out,
            "  [{}] {:<width$} {:<13} target {target:<2} offset {:>10} length {:>10} crc32 {:08x}",
            s.index,
            Escaped(s.name).to_string(),
            s.kind.to_string(),
            s.offset,
            s.length,
            s.crc32
        )?;
        for t in b.tensors(s.index) {
            write!(out, "        {} {} {}[", t.mode, Escaped(t.name), t.dtype)?;
            for (i, d) in t.dims.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                if d < 0 {
                    write!(out, "{sep}?")?;
                } else {
                    write!(out, "{sep}{d}")?;
                }
            }
            writeln!(out, "] {}", t.layout)?;
        }
    }
    if shown < count {
        writeln!(
            out,
            "  ... {} more (`tether inspect BUNDLE --sections` lists every one)",
            count - shown
        )?;
    }
    Ok(())
}

/// Run `tether inspect`.
pub fn inspect(a: &InspectArgs) -> Result<ExitCode> {
    let b = match Bundle::open(&a.bundle, Verify::Lazy) {
        Ok(b) => Arc::new(b),
        Err(_) if let Some(f) = crate::cli::run::model_format(&a.bundle) => {
            return Err(crate::cli::run::model_not_bundle(
                &a.bundle,
                f,
                "inspect model.bundle",
            ));
        }
        Err(e) => {
            return Err(anyhow::Error::new(e).context(format!("opening {}", a.bundle.display())));
        }
    };
    let family = family_description(&b);
    let mut out = BufWriter::with_capacity(1 << 16, io::stdout().lock());
    let written = if a.json {
        serde_json::to_writer_pretty(&mut out, &manifest_doc(&b, &family))
            .map_err(io::Error::from)
            .and_then(|()| writeln!(out))
    } else {
        write_text(&b, &family, a.sections, &mut out)
    };
    written
        .and_then(|()| out.flush())
        .map_err(|e| anyhow::anyhow!("writing to stdout: {e}"))?;
    // The manifest was read from the mapping while printing.
    b.ensure_unchanged()?;
    // What could be read was printed; a family section that could not be is an error of
    // the bundle's content (exit 1), as `run` would meet it at load.
    if let Err(u) = family {
        return Err(u.error.context(a.bundle.display().to_string()));
    }
    Ok(ExitCode::SUCCESS)
}

/// `verify --self-test`: the family's embedded self-test on `--device`. Exit 0 when it passes,
/// 3 when the bundle's networks do not reproduce the recorded output on this device, 1 when it
/// cannot run (no self-test in the bundle, unknown family, device unavailable).
/// The self-test's verdict: the family's report and how long it took (ms).
fn self_test(
    a: &VerifyArgs,
    bundle: Bundle,
    threads: usize,
) -> Result<(tether_family::selftest::Report, f64)> {
    let shown = a.bundle.display().to_string();
    let family_name = bundle.identity().family.to_string();
    let family = tether_family::family::find(tether::families::REGISTRY, &family_name)
        .with_context(|| {
            format!(
                "{shown}: family {:?} is not one this tool knows ({})",
                Escaped(&family_name),
                tether_family::family::names(tether::families::REGISTRY)
            )
        })?;
    let options = tether_family::family::RunOptions {
        device: a.device.clone(),
        threads: Some(threads),
        ..Default::default()
    };
    let t0 = Instant::now();
    let Some(t) = family.self_test(std::sync::Arc::new(bundle), &options)? else {
        anyhow::bail!("{shown}: the bundle carries no self-test ({family_name} family)");
    };
    Ok((t, t0.elapsed().as_secs_f64() * 1e3))
}

/// Milliseconds to the microsecond (the clock's figures beyond are noise).
fn round_us(ms: f64) -> f64 {
    (ms * 1e3).round() / 1e3
}

/// The self-test's report as JSON (`docs/cli-json.md`, `tether verify --json`).
fn self_test_json(
    device: &str,
    (threads, why): (usize, &str),
    t: &tether_family::selftest::Report,
    ms: f64,
) -> Value {
    use tether_family::selftest::Bound;
    json!({
        "device": device,
        "cpu_threads": threads,
        "cpu_threads_why": why,
        "passed": t.passed,
        "summary": t.summary,
        "source": t.source,
        "ms": round_us(ms),
        "checks": t.checks.iter().map(|c| {
            let (kind, limit) = match c.bound {
                Bound::AtMost(l) => ("at_most", l),
                Bound::AtLeast(l) => ("at_least", l),
            };
            json!({
                // NaN (an output that was not a number) prints as null.
                "name": c.name,
                "value": c.value.is_finite().then_some(c.value),
                "bound": kind,
                "limit": limit,
                "at": c.at,
            })
        }).collect::<Vec<_>>(),
    })
}

/// Run `tether verify`: structure at open, then every checksum (then, with `--self-test`, the
/// family's self-test). Exit 0 when everything holds, 3 when the bundle is corrupt or its
/// self-test fails, 1 when it cannot be read at all.
pub fn verify(a: &VerifyArgs) -> Result<ExitCode> {
    if a.threads.given() && !a.self_test {
        crate::usage!("--threads is for --self-test (the checksums run on one thread)");
    }
    // A malformed --device is a usage error before any work, as in `run` and `bench`.
    if let Err(e) = a.device.parse::<tether_runtime::Device>() {
        crate::usage!("--device {e}");
    }
    let t0 = Instant::now();
    let opened = Bundle::open(&a.bundle, Verify::Lazy);
    // A model file is not a corrupt bundle: say what it is and what to type.
    if opened.is_err()
        && let Some(f) = crate::cli::run::model_format(&a.bundle)
    {
        return Err(crate::cli::run::model_not_bundle(
            &a.bundle,
            f,
            "verify model.bundle",
        ));
    }
    let result = opened.and_then(|b| b.verify_all().map(|r| (b, r)));
    let shown = a.bundle.display().to_string();
    let doc = |verdict: &str, b: Option<(&Bundle, u32)>, error: Option<String>| {
        json!({
            "schema_version": crate::cli::run::JSON_SCHEMA_VERSION,
            "command": "verify",
            "bundle": shown,
            "verdict": verdict,
            "file_len": b.map(|(b, _)| b.file_len()),
            "checked_section_count": b.map(|(_, n)| n),
            "error": error,
            "ms": round_us(t0.elapsed().as_secs_f64() * 1e3),
            "self_test": Value::Null,
        })
    };
    match result {
        Ok((b, r)) => {
            let secs = t0.elapsed().as_secs_f64();
            let mut d = doc("ok", Some((&b, r.sections_checked)), None);
            if !a.json {
                crate::outln!(
                    "ok: {} ({} bytes, {} sections, header/manifest/section CRC32s, whole-file CRC32 and content SHA-256 all match) in {:.1} ms",
                    Escaped(&shown),
                    b.file_len(),
                    r.sections_checked,
                    secs * 1e3
                )?;
            }
            if !a.self_test {
                if a.json {
                    crate::outln!("{}", serde_json::to_string_pretty(&crate::cli::tidy(d))?)?;
                }
                return Ok(ExitCode::SUCCESS);
            }
            let (threads, threads_why) = a.threads.resolve();
            let (t, ms) = self_test(a, b, threads)?;
            let code = if t.passed {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(3)
            };
            if a.json {
                if !t.passed {
                    d["verdict"] = json!("self-test failed");
                }
                d["self_test"] = self_test_json(&a.device, (threads, threads_why), &t, ms);
                crate::outln!("{}", serde_json::to_string_pretty(&crate::cli::tidy(d))?)?;
            } else {
                // `--device auto` is a choice, not a place: the summary says where it ran.
                let on = if a.device == "auto" {
                    " (--device auto)".to_string()
                } else {
                    format!(" on {}", a.device)
                };
                if t.passed {
                    crate::outln!(
                        "self-test passed{on}: {} in {ms:.1} ms (CPU engine threads: {threads}, {threads_why})",
                        Escaped(&t.summary)
                    )?;
                } else {
                    eprintln!(
                        "self-test FAILED{on}: {}: {} (CPU engine threads: {threads}, {threads_why})",
                        Escaped(&shown),
                        Escaped(&t.summary)
                    );
                }
            }
            Ok(code)
        }
        // Not a verdict on the content: an ordinary error (exit 1).
        Err(
            e @ (tether_bundle::BundleError::Io { .. }
            | tether_bundle::BundleError::File(_)
            | tether_bundle::BundleError::ChangedWhileOpen { .. }),
        ) => Err(anyhow::Error::from(e).context(format!("opening {shown}"))),
        // An input (image, audio) given where the bundle belongs: a usage mistake, not a
        // damaged bundle; the hint says which argument comes first.
        Err(e @ tether_bundle::BundleError::BadMagic { found })
            if crate::cli::known_format(&found).is_some() =>
        {
            Err(anyhow::Error::from(e).context(format!("opening {shown}")))
        }
        Err(e) => {
            if a.json {
                let d = doc("corrupt", None, Some(e.to_string()));
                crate::outln!("{}", serde_json::to_string_pretty(&crate::cli::tidy(d))?)?;
            } else {
                eprintln!("corrupt: {}: {}", Escaped(&shown), Escaped(&e.to_string()));
            }
            Ok(ExitCode::from(3))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::built_at;

    #[test]
    fn built_at_is_the_utc_date_and_time() {
        // Values checked against `date -u -d @N`.
        assert_eq!(built_at(1), "on 1970-01-01 00:00:01 UTC");
        assert_eq!(built_at(951_782_400), "on 2000-02-29 00:00:00 UTC");
        assert_eq!(built_at(1_796_413_203), "on 2026-12-04 19:40:03 UTC");
        assert_eq!(built_at(4_107_542_399), "on 2100-02-28 23:59:59 UTC");
        assert_eq!(built_at(0), "(no build time: unix time 0)");
        assert_eq!(built_at(u64::MAX), "(unix time 18446744073709551615)");
    }
}
