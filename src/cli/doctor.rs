//! `tether doctor`: what this machine is and which engines it can run.
//!
//! Works with no GPU, no CUDA and no TensorRT: each missing piece is reported
//! with how many places were searched (`-v`: every place, and what happened
//! there; `--json`: the same, structured). Reads no `nvidia-smi` or NVML
//! (Jetson has neither). The places are the ones `tether run` searches: one
//! list, from `tether_targets::libs`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::Args;
use serde_json::{Value, json};

/// Version of the `doctor --json` document (`schema_version`; docs/cli-json.md). Raised when a
/// key is removed or renamed or a value changes meaning; keys may be added without it.
pub const DOCTOR_SCHEMA_VERSION: u32 = 2;
use tether_runtime::tensorrt::{LoadOptions, TensorRt};
use tether_targets::libs::{self, Library, LibraryInfo, SearchReport};

/// Arguments of `tether doctor`.
#[derive(Args, Debug)]
pub struct DoctorArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
    /// Use this TensorRT library (a file such as `libnvinfer.so.10`, or the
    /// folder holding it) instead of searching; the same as setting
    /// `TETHER_TENSORRT_LIB`.
    #[arg(long, value_name = "PATH")]
    tensorrt_lib: Option<PathBuf>,
    /// Also check TensorRT end to end: generate a small ONNX model, run it on
    /// the CPU, build a plan with trtexec, run it through tether's TensorRT
    /// engine eagerly and as a CUDA graph, compare. Exit 0 usable, 1 a step
    /// failed, 4 could not check here (the SKIP lines say what is missing).
    #[arg(long)]
    self_test: bool,
}

/// Run `tether doctor`; `verbose` (`-v`) lists every place searched.
pub fn run(a: &DoctorArgs, verbose: u8) -> Result<ExitCode> {
    let report = tether_targets::probe::probe();
    let trt = TensorRt::load_with(&LoadOptions::new(a.tensorrt_lib.as_deref()));
    let env = tether_targets::ProbeOptions::system().search_env();
    let others: Vec<LibraryInfo> = [Library::Cudnn, Library::Cublas]
        .into_iter()
        .map(|l| libs::identify(&libs::search_list(l, &env, None)))
        .collect();
    let self_test = a
        .self_test
        .then(|| super::selftest::run(a.tensorrt_lib.as_deref()));
    // The engines compiled into this build, in selection order, and whether this machine can
    // run each: GPU engines need a GPU, TensorRT plans also the library.
    let gpu = !report.cuda.devices.is_empty();
    let engines: Vec<(tether_runtime::EngineKind, bool)> = tether_runtime::COMPILED_BACKENDS
        .iter()
        .map(|&k| {
            let usable = match k {
                tether_runtime::EngineKind::TensorRt => gpu && trt.is_ok(),
                tether_runtime::EngineKind::TractCpu => true,
                _ => gpu,
            };
            (k, usable)
        })
        .collect();
    // The CPU the tract engine runs on: model name and the cores this process may use
    // (affinity and cgroup quota, as the CPU engine's default thread count reads them).
    let cpu_model = crate::cli::bench::machine::cpu_model();
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    if a.json {
        let tensorrt: Value = match &trt {
            Ok((lib, search)) => json!({
                "found": true,
                "version": lib.version().to_string(),
                "build": lib.build(),
                "flavor": lib.flavor().as_str(),
                "path": lib.path().display().to_string(),
                "search": search,
            }),
            Err(e) => json!({
                "found": false,
                "error": e.to_string(),
                "search": e.search(),
            }),
        };
        let mut libraries = serde_json::Map::new();
        for info in &others {
            libraries.insert(
                info.library.name().to_lowercase(),
                json!({
                    "found": info.path.is_some(),
                    "path": info.path,
                    "version": info.version,
                    "search": info.search,
                }),
            );
        }
        let engines: Vec<Value> = engines
            .iter()
            .map(|(k, usable)| json!({ "engine": k.id(), "usable": usable }))
            .collect();
        let family_engines: serde_json::Map<String, Value> = tether::families::REGISTRY
            .iter()
            .filter_map(|f| {
                let lines = f.own_engines();
                (!lines.is_empty()).then(|| (f.name().to_string(), json!(lines)))
            })
            .collect();
        let mut doc = json!({
            "schema_version": DOCTOR_SCHEMA_VERSION,
            "tether": env!("CARGO_PKG_VERSION"),
            "engines": engines,
            "family_engines": family_engines,
            "probe": serde_json::to_value(&report)?,
            "cpu": { "model": cpu_model, "cores_available": cores },
            "tensorrt": tensorrt,
            "libraries": libraries,
        });
        if let Some(t) = &self_test {
            doc["self_test"] = t.to_json();
        }
        crate::cli::shortest_f32(&mut doc);
        crate::outln!("{}", serde_json::to_string_pretty(&doc)?)?;
    } else {
        crate::outln!("tether        {}", env!("CARGO_PKG_VERSION"))?;
        crate::outln!("cpu           {cpu_model}, {cores} cores available to this process")?;
        crate::cli::write_out(format_args!("{report}"))?;
        let mut searches: Vec<&SearchReport> = vec![&report.cuda.search];
        match &trt {
            Ok((lib, search)) => {
                crate::outln!(
                    "TensorRT      {} {} ({})",
                    lib.version(),
                    lib.flavor(),
                    lib.path().display()
                )?;
                searches.push(search);
            }
            Err(e) => {
                crate::outln!("TensorRT      {}", not_found(e.search()))?;
                searches.push(e.search());
            }
        }
        for info in &others {
            match (&info.path, &info.version) {
                (Some(p), Some(v)) => crate::outln!("{:<14}{v} ({p})", info.library.name())?,
                (Some(p), None) => crate::outln!("{:<14}found ({p})", info.library.name())?,
                (None, _) => {
                    crate::outln!("{:<14}{}", info.library.name(), not_found(&info.search))?
                }
            }
            searches.push(&info.search);
        }
        let engines = engines
            .iter()
            .filter(|(_, usable)| *usable)
            .map(|(k, _)| match k {
                tether_runtime::EngineKind::TensorRt => {
                    "TensorRT plans for this device".to_string()
                }
                k => k.to_string(),
            })
            .collect::<Vec<_>>()
            .join(", ");
        crate::outln!("engines       {engines}")?;
        for f in tether::families::REGISTRY {
            for line in f.own_engines() {
                crate::outln!("{:<14}{line}", f.name())?;
            }
        }
        if verbose > 0 {
            for s in searches {
                crate::outln!("{} search ({}):", s.library, s.files.join(", "))?;
                for t in &s.tried {
                    crate::outln!("  {t}")?;
                }
                if !s.site_packages.is_empty() {
                    crate::outln!(
                        "  pip folders looked for in: {}",
                        s.site_packages.join(", ")
                    )?;
                }
                let untried = s.places - s.tried.len().min(s.places);
                if untried > 0 {
                    crate::outln!("  ({untried} later places not tried)")?;
                }
            }
        } else if searches.iter().any(|s| s.tried.len() > 1) {
            crate::outln!("(`tether doctor -v` or `--json` lists every place searched)")?;
        }
        if let Some(t) = &self_test {
            t.print()?;
        }
    }
    Ok(self_test.map_or(ExitCode::SUCCESS, |t| ExitCode::from(t.exit_code)))
}

/// `not found (searched 6 places and 10 Python site-packages)`, with the first
/// library that was there but could not be used.
fn not_found(search: &SearchReport) -> String {
    use tether_targets::libs::Outcome;
    let broken = search.tried.iter().find_map(|t| match &t.outcome {
        Outcome::Failed { file, reason } | Outcome::Rejected { file, reason } => {
            Some(format!("; {file}: {reason}"))
        }
        _ => None,
    });
    format!(
        "not found ({}{})",
        search.searched(),
        broken.unwrap_or_default()
    )
}
