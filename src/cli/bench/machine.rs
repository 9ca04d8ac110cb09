//! What `tether bench` says of the machine it ran on (the header of its report and the
//! `environment` of its JSON): the device and GPU, drivers and libraries, the CPU, its cores
//! and frequency governors, the board and power mode on a Jetson, the engines chosen and how
//! runs execute; and the default of `--threads`.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tether_family::family::{Environment, Execution, MappedIo, Precision, SyncPolicy};

/// The default of `--threads`: 1 under a real-time scheduling policy (`SCHED_FIFO`,
/// `SCHED_RR`) or when every core this process may run on is isolated
/// (`/sys/devices/system/cpu/isolated`); else the cores available to it (affinity mask and
/// cgroup quota, as [`std::thread::available_parallelism`] counts them). Returns the count
/// and why.
pub fn default_threads() -> (usize, &'static str) {
    // SAFETY: sched_getscheduler(0) reads the calling process's policy; no memory is passed.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy == libc::SCHED_FIFO || policy == libc::SCHED_RR {
        return (1, "real-time scheduling policy");
    }
    if let Some(allowed) = affinity()
        && let Some(isolated) = std::fs::read_to_string("/sys/devices/system/cpu/isolated")
            .ok()
            .and_then(|s| parse_cpu_list(&s))
        && !allowed.is_empty()
        && allowed.iter().all(|c| isolated.contains(c))
    {
        return (1, "isolated cores");
    }
    match std::thread::available_parallelism() {
        Ok(n) => (n.get(), "cores available"),
        Err(_) => (1, "core count unknown"),
    }
}

/// The CPUs this process may run on.
fn affinity() -> Option<Vec<usize>> {
    // SAFETY: cpu_set_t is plain data; zeroed is a valid empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a live cpu_set_t of the size passed.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return None;
    }
    Some(
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: `i` is below CPU_SETSIZE and `set` is initialised.
            .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
            .collect(),
    )
}

/// Parse a kernel CPU list (`0-3,8,10-11`); `None` when malformed, empty for an empty list.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 65_536 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// What `bench` knows of the machine it ran on.
pub(super) struct Machine {
    pub(super) lines: Vec<(&'static str, String)>,
}

impl Machine {
    pub(super) fn probe(
        env: &Environment,
        sync: SyncPolicy,
        staging: MappedIo,
        precision: Precision,
        threads_why: &str,
    ) -> Self {
        let report = tether_targets::probe::probe();
        let mut lines: Vec<(&'static str, String)> = Vec::new();
        lines.push(("tether", env!("CARGO_PKG_VERSION").to_string()));
        lines.push(("device", env.device.clone()));
        if let Some(g) = report.cuda.devices.first() {
            lines.push((
                "gpu",
                format!(
                    "{} (sm_{}, {} MiB)",
                    g.name,
                    g.sm.number(),
                    g.total_memory_bytes >> 20
                ),
            ));
        }
        if let Some(v) = report.cuda.driver_version {
            lines.push(("cuda driver", v.to_string()));
        }
        lines.push(("cpu", cpu_model()));
        lines.push((
            "cores",
            std::thread::available_parallelism().map_or_else(|_| "?".into(), |n| n.to_string()),
        ));
        lines.push(("cpu governor", governors()));
        if let Some(m) = &report.model {
            lines.push(("board", m.clone()));
        }
        if let Some(p) = &report.power_mode {
            lines.push((
                "power mode",
                format!("{} ({})", p.id, p.name.as_deref().unwrap_or("unnamed")),
            ));
        } else if report.l4t.is_some() {
            lines.push(("power mode", "unreadable".into()));
        }
        if env.execution.on_gpu() {
            use tether_runtime::tensorrt::{LoadOptions, TensorRt};
            use tether_targets::libs::{self, Library};
            lines.push((
                "tensorrt",
                match TensorRt::load_with(&LoadOptions::new(None)) {
                    Ok((lib, _)) => format!("{} {}", lib.version(), lib.flavor()),
                    Err(_) => "not found".into(),
                },
            ));
            let search = tether_targets::ProbeOptions::system().search_env();
            let cudnn = libs::identify(&libs::search_list(Library::Cudnn, &search, None));
            lines.push((
                "cudnn",
                match (cudnn.version, cudnn.path) {
                    (Some(v), Some(p)) => format!("{v} ({p})"),
                    (None, Some(p)) => format!("found ({p})"),
                    _ => "not found".into(),
                },
            ));
        }
        for (net, why) in &env.engine_choice {
            lines.push(("engine", format!("{net}: {why}")));
        }
        lines.push((
            "execution",
            if env.execution_note.is_empty() {
                env.execution.to_string()
            } else {
                format!("{} ({})", env.execution, env.execution_note)
            },
        ));
        if env.execution.on_gpu() {
            lines.push(("sync", sync.as_str().to_string()));
            lines.push((
                "staging",
                match env.staging {
                    Some(s) if s != staging => format!("{} ({})", staging.as_str(), s.as_str()),
                    _ => staging.as_str().to_string(),
                },
            ));
            lines.push(("precision", precision.as_str().to_string()));
        } else if env.execution == Execution::Host {
            if sync != SyncPolicy::Spin {
                lines.push((
                    "sync",
                    format!(
                        "{} asked, but this bundle runs on the CPU: no GPU to wait for",
                        sync.as_str()
                    ),
                ));
            }
            if staging != MappedIo::Auto {
                lines.push((
                    "staging",
                    format!(
                        "{} asked, but this bundle runs on the CPU: nothing is staged",
                        staging.as_str()
                    ),
                ));
            }
        }
        lines.push((
            "cpu threads",
            format!("{} ({threads_why})", env.cpu_threads.max(1)),
        ));
        Machine { lines }
    }

    pub(super) fn json(&self) -> Value {
        let mut m = serde_json::Map::new();
        let mut engines = serde_json::Map::new();
        for (k, v) in &self.lines {
            if *k == "engine" {
                if let Some((net, why)) = v.split_once(": ") {
                    engines.insert(net.to_string(), json!(why));
                }
            } else {
                m.insert(k.replace(' ', "_"), json!(v));
            }
        }
        m.insert("engine_choice".into(), Value::Object(engines));
        Value::Object(m)
    }
}

/// The host CPU's name ([`tether_targets::cpu_model`]).
pub(crate) use tether_targets::cpu_model;

/// The CPU frequency governors in use (`performance`, `schedutil x4, performance x4`), or
/// why none can be read (virtual machines have no cpufreq).
fn governors() -> String {
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..4096 {
        let p = format!("/sys/devices/system/cpu/cpu{i}/cpufreq/scaling_governor");
        match std::fs::read_to_string(&p) {
            Ok(g) => *counts.entry(g.trim().to_string()).or_default() += 1,
            Err(_) if i == 0 => return "unreadable (no cpufreq: a virtual machine?)".into(),
            Err(_) => break,
        }
    }
    if counts.len() == 1 {
        return counts.into_keys().next().unwrap_or_default();
    }
    counts
        .iter()
        .map(|(g, n)| format!("{g} x{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_as_the_kernel_writes_them() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("\n"), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn default_threads_is_at_least_one() {
        let (n, why) = default_threads();
        assert!(n >= 1, "{why}");
    }
}
