//! The statistics of one stage of `tether bench`: latencies in a fixed-memory histogram
//! (`hdrhistogram`, 1 ns to 1 h at three significant digits: a few hundred KiB per stage
//! however many frames run), read as percentiles, mean, standard deviation and coefficient of
//! variation.

use hdrhistogram::Histogram;
use serde_json::{Value, json};

/// Latency statistics of one stage, from a fixed-memory histogram (nanosecond resolution,
/// three significant digits).
pub(super) struct Stage {
    pub(super) hist: Histogram<u64>,
    /// Nanoseconds added before recording, so that a difference down to `-offset_ns` can be
    /// recorded (0 for times; [`BEYOND_FLOOR_OFFSET_NS`] for `beyond-floor`).
    pub(super) offset_ns: u64,
    /// The exact sum of what was recorded, in ms: the mean comes from it (the histogram's
    /// would be of its buckets, and saturates below `-offset_ns`).
    sum_ms: f64,
    /// The exact least and greatest values recorded, in ms (the histogram's are its
    /// buckets' bounds, up to 0.1 % off: one run's min and max would differ).
    min_ms: f64,
    max_ms: f64,
}

/// A coefficient of variation (sd / mean) above which a benchmark's figures are called noisy
/// (2.5 %, a warning under the table of either benchmark).
pub(super) const NOISY_CV: f64 = 0.025;

/// The offset of the `beyond-floor` histogram: paired differences down to -50 us are
/// recorded as they are (lower ones at -50 us), at a resolution of 32 to 64 ns where the
/// differences lie (0 to 50 us: 50 to 100 us recorded, three significant digits).
pub(super) const BEYOND_FLOOR_OFFSET_NS: u64 = 50_000;

impl Stage {
    pub(super) fn new() -> Self {
        Self::with_offset(0)
    }
    pub(super) fn with_offset(offset_ns: u64) -> Self {
        Stage {
            // 1 ns .. 1 hour, 3 significant figures: a fixed few hundred KiB whatever the runs.
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("static bounds"),
            offset_ns,
            sum_ms: 0.0,
            min_ms: f64::INFINITY,
            max_ms: f64::NEG_INFINITY,
        }
    }
    pub(super) fn record_ms(&mut self, ms: f64) {
        self.sum_ms += ms;
        self.min_ms = self.min_ms.min(ms);
        self.max_ms = self.max_ms.max(ms);
        let ns = (ms * 1e6 + self.offset_ns as f64)
            .round()
            .clamp(1.0, 3.6e12) as u64;
        // In bounds by the clamp: recording cannot fail.
        let _ = self.hist.record(ns);
    }
    pub(super) fn to_ms(&self, ns: f64) -> f64 {
        (ns - self.offset_ns as f64) / 1e6
    }
    /// The `q` quantile, from the histogram (to 0.1 %), kept within the exact least and
    /// greatest values (a bucket's bound may lie beyond them).
    pub(super) fn ms(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            // Nothing recorded: 0, as min, max and mean say (not the offset's negative).
            return 0.0;
        }
        let v = self.to_ms(self.hist.value_at_quantile(q) as f64);
        v.clamp(self.min_ms, self.max_ms)
    }
    /// The least value recorded (exact); 0 when none was.
    pub(super) fn min(&self) -> f64 {
        if self.hist.is_empty() {
            0.0
        } else {
            self.min_ms
        }
    }
    /// The greatest value recorded (exact); 0 when none was.
    pub(super) fn max(&self) -> f64 {
        if self.hist.is_empty() {
            0.0
        } else {
            self.max_ms
        }
    }
    /// The mean of the values recorded (exact); 0 when none was.
    pub(super) fn mean(&self) -> f64 {
        match self.hist.len() {
            0 => 0.0,
            n => self.sum_ms / n as f64,
        }
    }
    pub(super) fn stddev(&self) -> f64 {
        self.hist.stdev() / 1e6
    }
    /// Coefficient of variation (standard deviation over mean).
    pub(super) fn cv(&self) -> f64 {
        let m = self.mean();
        if m > 0.0 && self.offset_ns == 0 {
            self.stddev() / m
        } else {
            0.0
        }
    }
    /// The figures as JSON; with nothing recorded (Ctrl-C in the warm-up) every figure is
    /// `null` and `count` 0, as the throughput tests' latency lines (schema 5), not a 0 that
    /// reads as a measured time.
    pub(super) fn stats(&self) -> Value {
        if self.hist.is_empty() {
            return json!({
                "min": null, "p50": null, "p90": null, "p99": null, "p99.9": null,
                "max": null, "mean": null, "stddev": null, "cv": null, "count": 0,
            });
        }
        json!({
            "min": self.min(),
            "p50": self.ms(0.50),
            "p90": self.ms(0.90),
            "p99": self.ms(0.99),
            "p99.9": self.ms(0.999),
            "max": self.max(),
            "mean": self.mean(),
            "stddev": self.stddev(),
            "cv": self.cv(),
            "count": self.hist.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stage_statistics_come_from_the_histogram() {
        let mut s = Stage::new();
        for i in 1..=1000 {
            s.record_ms(i as f64 / 100.0); // 0.01 .. 10 ms
        }
        let v = s.stats();
        let close = |k: &str, want: f64| {
            let got = v[k].as_f64().unwrap();
            assert!((got - want).abs() <= want * 0.002, "{k}: {got} vs {want}");
        };
        close("min", 0.01);
        close("p50", 5.0);
        close("p90", 9.0);
        close("p99", 9.9);
        close("p99.9", 9.99);
        close("max", 10.0);
        close("mean", 5.005);
        // Population standard deviation of 0.01..10 step 0.01: sqrt((n^2 - 1) / 12) * 0.01.
        close("stddev", ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt() * 0.01);
        assert_eq!(v["count"], 1000);
        // One run: min, max and mean are that run's value exactly, not bucket bounds.
        let mut one = Stage::new();
        one.record_ms(197.591);
        let v = one.stats();
        for k in ["min", "p50", "p99.9", "max", "mean"] {
            assert_eq!(v[k], 197.591, "{k}: {v}");
        }
        // Nothing recorded: null figures, count 0.
        let v = Stage::new().stats();
        assert_eq!(v["count"], 0);
        for k in [
            "min", "p50", "p90", "p99", "p99.9", "max", "mean", "stddev", "cv",
        ] {
            assert!(v[k].is_null(), "{k}: {v}");
        }
    }
}
