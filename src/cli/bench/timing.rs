//! The timed part of `tether bench`: each way of running ([`Variant`]: graphs, eager, or the
//! only one) with what it measured, and the loop that times runs closed loop (back to back)
//! or open loop (released on a fixed schedule, late releases skipped as a camera drops
//! frames), counting missed deadlines, interleaving variants frame by frame, stopping at the
//! run count, the duration or Ctrl-C.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};
use tether_family::family::{Environment, Input, Runner};

use super::stats::Stage;

/// One way of running (graphs, eager, or the only one): its runner and what it measured.
pub(super) struct Variant {
    pub(super) name: &'static str,
    pub(super) runner: Box<dyn Runner>,
    pub(super) env: Environment,
    /// Host wall time of each `Runner::run` (the host time per call).
    pub(super) total: Stage,
    pub(super) stages: Vec<(String, Stage)>,
    /// Host time a run spent beyond the GPU time of its GPU-timed stages.
    pub(super) overhead: Option<Stage>,
    /// With `--floor`: the bare launch + wait after each run, and each run's host time
    /// beyond it (run minus the floor after it).
    pub(super) floor: Option<(Stage, Stage)>,
    /// With `--floor`: wall time spent in the bare launches (not part of the throughput).
    pub(super) floor_wall: Duration,
    pub(super) runs: u64,
    pub(super) missed: u64,
    pub(super) skipped: u64,
    /// The units runs are made of ([`Runner::units`]: a VAD's chunks, an embedder's texts),
    /// once a run reported some.
    pub(super) units: Option<UnitStats>,
}

/// What the runs' units measured: how many, and the host time of each.
pub(super) struct UnitStats {
    /// Singular name (`chunk`, `text`).
    pub(super) name: &'static str,
    /// Units processed by the timed runs (those of a run Ctrl-C cut short included).
    pub(super) count: u64,
    /// Host time per unit: each unit's own time where the family times them one by one,
    /// else each run's time over its unit count (one sample per run).
    pub(super) time: Stage,
}

impl Variant {
    /// Run once (untimed) so that the runner prepares its session, then read how it
    /// executes.
    pub(super) fn prepare(&mut self, input: &dyn Input) -> Result<()> {
        self.runner.run(input)?;
        self.env = self.runner.environment();
        self.overhead = (!self.env.gpu_timed.is_empty()).then(Stage::new);
        Ok(())
    }

    /// Record the units of the run that just ended (`total_ms`: its host time).
    pub(super) fn record_units(&mut self, total_ms: f64) {
        let Some(u) = self.runner.units() else {
            return;
        };
        let stats = self.units.get_or_insert_with(|| UnitStats {
            name: u.name,
            count: 0,
            time: Stage::new(),
        });
        stats.count += u.count;
        if !u.times_ms.is_empty() {
            for &ms in u.times_ms {
                stats.time.record_ms(ms);
            }
        } else if u.count > 0 {
            stats.time.record_ms(total_ms / u.count as f64);
        }
    }

    pub(super) fn record(&mut self, service: Duration) {
        let total_ms = service.as_secs_f64() * 1e3;
        self.record_units(total_ms);
        self.total.record_ms(total_ms);
        if self.floor.is_some() {
            // Per-stage timing is off: the stages the runner lists hold no times.
            self.runs += 1;
            return;
        }
        let mut gpu_ms = 0.0;
        for (name, ms) in self.runner.stage_times() {
            if self.env.gpu_timed.contains(&name) {
                gpu_ms += ms;
            }
            match self.stages.iter_mut().find(|(n, _)| *n == name) {
                Some((_, s)) => s.record_ms(ms),
                None => {
                    let mut s = Stage::new();
                    s.record_ms(ms);
                    self.stages.push((name, s));
                }
            }
        }
        if let Some(o) = &mut self.overhead {
            o.record_ms((total_ms - gpu_ms).max(0.0));
        }
        self.runs += 1;
    }

    /// One timed run: the whole run, or (`staged`) the run on the staged input (checked
    /// to exist before timing).
    pub(super) fn run(&mut self, input: &dyn Input, staged: bool) -> Result<()> {
        if staged {
            self.runner
                .run_staged()
                .context("this family has no staged path (--staged)")?
        } else {
            self.runner.run(input)
        }
    }

    /// With `--floor`: a bare launch + wait of the captured graph(s), timed, and the paired
    /// difference to the run before it (`service`).
    pub(super) fn record_floor(&mut self, service: Duration) -> Result<()> {
        let t0 = Instant::now();
        self.runner
            .launch_floor()
            .context("this family offers no bare graph launch (--floor)")??;
        let floor = t0.elapsed();
        if let Some((f, beyond)) = &mut self.floor {
            let d = service.as_secs_f64() - floor.as_secs_f64();
            f.record_ms(floor.as_secs_f64() * 1e3);
            beyond.record_ms(d * 1e3);
            self.floor_wall += floor;
        }
        Ok(())
    }

    /// Runs per second of the wall time the runs took (the bare launches of `--floor`
    /// left out).
    pub(super) fn throughput(&self, wall_s: f64) -> f64 {
        self.per_second(self.runs, wall_s)
    }

    /// Units per second of the same wall time (0 when runs have no units).
    pub(super) fn unit_throughput(&self, wall_s: f64) -> f64 {
        self.per_second(self.units.as_ref().map_or(0, |u| u.count), wall_s)
    }

    fn per_second(&self, n: u64, wall_s: f64) -> f64 {
        let busy = wall_s - self.floor_wall.as_secs_f64();
        if busy > 0.0 { n as f64 / busy } else { 0.0 }
    }

    /// `(name, clock, stage)` rows: the total, every stage, the host overhead.
    pub(super) fn rows(&self) -> Vec<(String, &'static str, &Stage)> {
        let mut v = vec![("total".to_string(), "host", &self.total)];
        for (n, s) in &self.stages {
            let clock = if self.env.gpu_timed.contains(n) {
                "gpu"
            } else {
                "host"
            };
            v.push((n.clone(), clock, s));
        }
        if let Some(o) = &self.overhead {
            v.push(("host-overhead".to_string(), "host", o));
        }
        if let Some((floor, beyond)) = &self.floor {
            v.push(("floor".to_string(), "host", floor));
            v.push(("beyond-floor".to_string(), "host", beyond));
        }
        v
    }

    pub(super) fn json(&self, wall_s: f64, rate: bool, deadline: bool) -> Value {
        json!({
            "name": self.name,
            "execution": self.env.execution.as_str(),
            "execution_note": self.env.execution_note,
            "runs": self.runs,
            "missed_deadlines": deadline.then_some(self.missed),
            "skipped_frames": rate.then_some(self.skipped),
            "throughput_fps": self.throughput(wall_s),
            "total_ms": self.total.stats(),
            "stages_ms": self.stage_json(),
            "units": self.units_json(wall_s),
        })
    }

    /// The runs' units where some were timed: `None` for a family without units, an input
    /// with none (an empty WAV) and Ctrl-C in the warm-up, whose figures would read as
    /// measured zeros.
    pub(super) fn timed_units(&self) -> Option<&UnitStats> {
        self.units.as_ref().filter(|u| !u.time.hist.is_empty())
    }

    /// `{name, count, per_second, ms}` of the runs' units, or null ([`Variant::timed_units`]).
    pub(super) fn units_json(&self, wall_s: f64) -> Value {
        match self.timed_units() {
            None => Value::Null,
            Some(u) => json!({
                "name": u.name,
                "count": u.count,
                "per_second": self.unit_throughput(wall_s),
                "ms": u.time.stats(),
            }),
        }
    }

    pub(super) fn stage_json(&self) -> Vec<Value> {
        self.rows()
            .into_iter()
            .skip(1)
            .map(|(n, clock, s)| json!({ "stage": n, "clock": clock, "stats": s.stats() }))
            .collect()
    }
}

/// A variant named `name` running on `runner`, nothing measured yet.
pub(super) fn variant(name: &'static str, runner: Box<dyn Runner>) -> Variant {
    let env = runner.environment();
    let overhead = (!env.gpu_timed.is_empty()).then(Stage::new);
    Variant {
        name,
        runner,
        env,
        total: Stage::new(),
        stages: Vec::new(),
        overhead,
        floor: None,
        floor_wall: Duration::ZERO,
        runs: 0,
        missed: 0,
        skipped: 0,
        units: None,
    }
}

/// When and how long the timed runs go.
pub(super) struct Schedule {
    /// Timed runs of each variant (`u64::MAX`: until the duration ends).
    pub(super) runs: u64,
    /// Stop after this long, if set.
    pub(super) duration: Option<Duration>,
    /// Open loop: a release every period; closed loop (back to back) when `None`.
    pub(super) period: Option<Duration>,
    /// The deadline of each frame, from its release (or its start, back to back).
    pub(super) deadline: Option<Duration>,
    /// Run on the staged input (`--staged`).
    pub(super) staged: bool,
    /// Measure the bare launch after each run (`--floor`).
    pub(super) floor: bool,
    /// Show a progress bar (on a terminal).
    pub(super) show: bool,
}

/// Time runs of `variants` on `input` as `schedule` says, the variants interleaved frame by
/// frame, until each has run `schedule.runs` times, the duration ends or `stop` is set
/// (Ctrl-C). Returns the wall time in seconds.
///
/// # Errors
/// A failed run.
pub(super) fn run_timed(
    variants: &mut [Variant],
    input: &dyn Input,
    schedule: &Schedule,
    stop: &AtomicBool,
) -> Result<f64> {
    let duration_s = schedule.duration.map(|d| d.as_secs());
    let bar = progress(schedule.runs, duration_s, schedule.show);
    let started = Instant::now();
    let end = schedule.duration.map(|d| started + d);
    let n = variants.len();
    let mut release_index = 0u64;
    let mut frame = 0u64;
    loop {
        let v = (frame % n as u64) as usize;
        if variants[v].runs >= schedule.runs
            || stop.load(Ordering::SeqCst)
            || end.is_some_and(|e| Instant::now() >= e)
        {
            break;
        }
        // When this frame is released: now (closed loop) or on the fixed schedule.
        let release = match schedule.period {
            None => Instant::now(),
            Some(p) => {
                let mut release = started + p.mul_f64(release_index as f64);
                let now = Instant::now();
                if now >= release + p {
                    // A whole period late: the releases missed are dropped, as a camera's.
                    let k = ((now - started).as_secs_f64() / p.as_secs_f64()).floor() as u64;
                    variants[v].skipped += k.saturating_sub(release_index);
                    release_index = k;
                    release = started + p.mul_f64(k as f64);
                } else if release > now && !sleep_until(release, stop) {
                    break;
                }
                release_index += 1;
                release
            }
        };
        let t0 = Instant::now();
        variants[v].run(input, schedule.staged)?;
        let done = Instant::now();
        if stop.load(Ordering::SeqCst) && variants[v].runner.canceller().is_some() {
            // Ctrl-C may have cut this run short (a cancellable runner stops between its
            // units): its units count, the run does not.
            variants[v].record_units((done - t0).as_secs_f64() * 1e3);
            break;
        }
        // The deadline counts from the release; back to back the release is the start.
        if schedule
            .deadline
            .is_some_and(|d| done - release.min(t0) > d)
        {
            variants[v].missed += 1;
        }
        variants[v].record(done - t0);
        if schedule.floor {
            variants[v].record_floor(done - t0)?;
        }
        frame += 1;
        if frame.is_multiple_of(16) || schedule.period.is_some() {
            match duration_s {
                Some(_) => bar.set_position(started.elapsed().as_secs()),
                None => bar.set_position(variants[0].runs),
            }
        }
    }
    bar.finish_and_clear();
    Ok(started.elapsed().as_secs_f64())
}

/// Sleep until `t`, waking at least every 50 ms to see Ctrl-C; `false` when stopped.
fn sleep_until(t: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::SeqCst) {
            return false;
        }
        let now = Instant::now();
        if now >= t {
            return true;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(50)));
    }
}

fn progress(runs: u64, duration: Option<u64>, show: bool) -> ProgressBar {
    if !show || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let (len, template) = match duration {
        Some(s) => (s, "{bar:30} {pos}/{len} s eta {eta}"),
        None => (runs, "{bar:30} {pos}/{len} runs {per_sec} eta {eta}"),
    };
    let bar = ProgressBar::new(len);
    bar.set_style(ProgressStyle::with_template(template).expect("static template"));
    bar
}
