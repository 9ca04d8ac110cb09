//! The report of `tether bench`: the text table (per variant: every stage's percentiles,
//! the deadline and floor lines, the eager/graph ratio) and the JSON document
//! (`docs/cli-json.md`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use serde_json::{Value, json};
use tether_bundle::Bundle;
use tether_family::family::{Family, Input};

use super::BenchArgs;
use super::machine::Machine;
use super::timing::Variant;
use crate::cli::escape;
use crate::cli::run::JSON_SCHEMA_VERSION;
use crate::outln;

/// Everything the report needs.
pub(super) struct Summary<'a> {
    pub(super) args: &'a BenchArgs,
    pub(super) bundle: &'a Bundle,
    pub(super) family: &'static dyn Family,
    pub(super) input: &'a dyn Input,
    pub(super) engines: &'a BTreeMap<String, String>,
    pub(super) machine: &'a Machine,
    pub(super) variants: &'a [Variant],
    pub(super) wall: f64,
    pub(super) interrupted: bool,
    pub(super) deadline: Option<Duration>,
}

impl Summary<'_> {
    pub(super) fn mode_line(&self) -> String {
        let a = self.args;
        let mut s = match a.rate {
            Some(hz) => format!("open loop at {hz} Hz"),
            None => "closed loop".to_string(),
        };
        if let Some(d) = self.deadline {
            s.push_str(&format!(", deadline {:.3} ms", d.as_secs_f64() * 1e3));
        }
        if a.staged {
            s.push_str(", staged input");
        }
        if a.floor {
            s.push_str(", bare-launch floor after each run");
        }
        s
    }

    /// The setup the figures belong to, in one line (the plot's header): device (and GPU),
    /// engine of each network, CPU threads, runs and warm-up, variants.
    pub(super) fn setup_line(&self) -> String {
        let get = |k: &str| {
            self.machine
                .lines
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.as_str())
        };
        let mut parts = Vec::new();
        match get("gpu") {
            Some(g) => parts.push(format!("{} ({g})", get("device").unwrap_or("?"))),
            None => parts.push(get("device").unwrap_or("?").to_string()),
        }
        let engines: Vec<String> = self
            .engines
            .iter()
            .map(|(net, e)| format!("{net} on {e}"))
            .collect();
        parts.push(engines.join(", "));
        if let Some(t) = get("cpu threads") {
            parts.push(format!("CPU threads {t}"));
        }
        let v0 = &self.variants[0];
        parts.push(format!(
            "{} timed run{} after {} warm-up{}",
            v0.runs,
            if v0.runs == 1 { "" } else { "s" },
            self.args.warmup,
            if self.interrupted {
                " (interrupted)"
            } else {
                ""
            }
        ));
        if self.variants.len() > 1 {
            parts.push(format!(
                "variants {} (solid) / {} (dashed), interleaved",
                self.variants[0].name, self.variants[1].name
            ));
        }
        parts.join(" | ")
    }

    pub(super) fn json(&self) -> Value {
        let a = self.args;
        let v0 = &self.variants[0];
        let rate = a.rate.is_some();
        let has_deadline = self.deadline.is_some();
        let mut doc = json!({
            "schema_version": JSON_SCHEMA_VERSION,
            "command": "bench",
            "bundle": { "path": a.bundle.display().to_string(), "name": self.bundle.identity().name },
            "family": self.family.name(),
            "input": self.input.label(),
            "engines": self.engines,
            "environment": self.machine.json(),
            "runs": v0.runs,
            "warmup": a.warmup,
            "mode": if rate { "open-loop" } else { "closed-loop" },
            "staged": a.staged,
            "floor": a.floor,
            "rate_hz": a.rate,
            "deadline_ms": self.deadline.map(|d| d.as_secs_f64() * 1e3),
            "missed_deadlines": has_deadline.then_some(v0.missed),
            "skipped_frames": rate.then_some(v0.skipped),
            "throughput_fps": v0.throughput(self.wall),
            "wall_s": self.wall,
            "interrupted": self.interrupted,
            "total_ms": v0.total.stats(),
            "stages_ms": v0.stage_json(),
            "units": v0.units_json(self.wall),
            "variants": self.variants.iter().map(|v| v.json(self.wall, rate, has_deadline)).collect::<Vec<_>>(),
        });
        if let Some(r) = self.ratio() {
            doc["ratio_eager_over_graph"] = r;
        }
        doc
    }

    /// Eager over graph, for the total: `p50`, `p99`, `p99.9`, `mean`.
    fn ratio(&self) -> Option<Value> {
        let g = self.variants.iter().find(|v| v.name == "graph")?;
        let e = self.variants.iter().find(|v| v.name == "eager")?;
        if g.runs == 0 || e.runs == 0 {
            return None;
        }
        let r = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
        Some(json!({
            "p50": r(e.total.ms(0.5), g.total.ms(0.5)),
            "p99": r(e.total.ms(0.99), g.total.ms(0.99)),
            "p99.9": r(e.total.ms(0.999), g.total.ms(0.999)),
            "mean": r(e.total.mean(), g.total.mean()),
        }))
    }

    pub(super) fn print(&self) -> Result<()> {
        let a = self.args;
        outln!(
            "{} on {} ({}; {} warm-up{})",
            a.bundle.display(),
            escape(self.input.label()),
            self.mode_line(),
            a.warmup,
            if self.interrupted {
                "; interrupted"
            } else {
                ""
            }
        )?;
        for (k, v) in &self.machine.lines {
            outln!("  {:<13} {}", k, escape(v))?;
        }
        for v in self.variants {
            outln!()?;
            let fps = v.throughput(self.wall);
            let units = match &v.units {
                Some(u) => format!(
                    "; {} {}s, {:.1} {}s/s",
                    u.count,
                    u.name,
                    v.unit_throughput(self.wall),
                    u.name
                ),
                None => String::new(),
            };
            outln!(
                "  [{}] {} run{}, {:.1} runs/s{units}{}",
                v.name,
                v.runs,
                if v.runs == 1 { "" } else { "s" },
                fps,
                if self.variants.len() > 1 {
                    " (interleaved)"
                } else {
                    ""
                }
            )?;
            if v.runs == 0 && v.units.is_none() {
                outln!("  nothing was timed: Ctrl-C came before the first timed run ended")?;
                continue;
            }
            outln!(
                "  {:<14} {:>5} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8} {:>6}",
                "stage",
                "clock",
                "min ms",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "p99.9 ms",
                "max ms",
                "mean ms",
                "sd ms",
                "cv %"
            )?;
            // A unit row only where units were timed, not a row of zeros.
            let unit_row = v
                .timed_units()
                .map(|u| (format!("per {}", u.name), "host", &u.time));
            // A run Ctrl-C cut short is not a run: with none, only the units it measured.
            let rows = if v.runs == 0 { Vec::new() } else { v.rows() };
            for (name, clock, s) in rows.into_iter().chain(unit_row) {
                outln!(
                    "  {:<14} {:>5} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.3} {:>6.2}",
                    escape(&name),
                    clock,
                    s.min(),
                    s.ms(0.5),
                    s.ms(0.9),
                    s.ms(0.99),
                    s.ms(0.999),
                    s.max(),
                    s.mean(),
                    s.stddev(),
                    s.cv() * 100.0
                )?;
            }
            if let Some((_, beyond)) = &v.floor {
                outln!(
                    "  host time beyond a bare graph launch + wait (paired): p50 {:.2} us, p99 {:.2} us, p99.9 {:.2} us, mean {:.2} us",
                    beyond.ms(0.5) * 1e3,
                    beyond.ms(0.99) * 1e3,
                    beyond.ms(0.999) * 1e3,
                    beyond.mean() * 1e3
                )?;
            }
            if v.total.cv() > super::stats::NOISY_CV {
                outln!(
                    "  warning: the total's coefficient of variation is {:.1} % (> {} %): the figures are noisy",
                    v.total.cv() * 100.0,
                    super::stats::NOISY_CV * 100.0
                )?;
            }
            if let Some(d) = self.deadline {
                outln!(
                    "  deadline {:.3} ms: {} of {} frames missed it{}",
                    d.as_secs_f64() * 1e3,
                    v.missed,
                    v.runs,
                    match a.rate {
                        Some(_) =>
                            format!("; {} releases skipped (a whole period late)", v.skipped),
                        None => String::new(),
                    }
                )?;
            }
        }
        if let Some(r) = self.ratio() {
            let f = |k: &str| r[k].as_f64().unwrap_or(0.0);
            outln!()?;
            outln!(
                "  eager / graph (total): p50 {:.3}x, p99 {:.3}x, p99.9 {:.3}x, mean {:.3}x",
                f("p50"),
                f("p99"),
                f("p99.9"),
                f("mean")
            )?;
        }
        Ok(())
    }
}
