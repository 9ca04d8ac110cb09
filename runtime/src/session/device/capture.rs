//! Capturing a [`DeviceSession`]'s run into CUDA graphs at load, and checking a replay on
//! poisoned buffers against an eager run before the session is handed out (field.md 2: a
//! replay that silently returns stale data is the failure to prevent).
//!
//! With a request state, every reference run and every replay starts from zeroed state memory
//! and reset positions, so that they compare byte for byte; with a recurrent state there is
//! one set of graphs per state parity, each checked on its own.

use crate::backend::{CaptureSafety, Enqueue, RunError};
use crate::cuda::{CudaError, Graph};
use crate::error::Error;
use crate::session::RegionId;
use crate::session::spec::{Check, RegionKind};

use super::{DStep, DeviceSession, ExecMode, IoMemory, Segment, enqueue_step};

/// A run split into segments: `Ok((a, b))` steps `a..b` captured as one graph, `Err(i)` step
/// `i` launched eagerly between graphs.
type RunSplit = Vec<Result<(usize, usize), usize>>;

impl DeviceSession {
    /// Capture the run's graphs (one set per state parity), then check a replay against the
    /// eager run; sets the execution mode and its note.
    pub(super) fn capture(&mut self) -> Result<(), Error> {
        let parities = if self.pairs.is_empty() { 1 } else { 2 };
        let (split, eager_reasons) = self.split_segments(0..self.steps.len());
        let mut eager = Vec::with_capacity(parities);
        let mut sets: Vec<Vec<Segment>> = Vec::with_capacity(parities);
        for parity in 0..parities {
            // The reference run of this parity, from a fresh state (without a state, the
            // warm-up run is the reference).
            if !self.states.is_empty() {
                self.zero_states()?;
                self.parity = parity;
                self.run()?;
            }
            eager.push(self.snapshot()?);
            match self.capture_set(&split, parity) {
                Ok(segments) => sets.push(segments),
                Err(e) => {
                    self.note = format!("graph capture failed, running eagerly: {e}");
                    log::warn!("{}", self.note);
                    return Ok(());
                }
            }
        }
        let nodes: usize = sets
            .iter()
            .flatten()
            .map(|s| match s {
                Segment::Graph(g) => g.nodes(),
                Segment::Eager(_) => 0,
            })
            .sum();
        let mut sets = sets.into_iter();
        self.segments = sets.next().unwrap_or_default();
        self.alt_segments = sets.next().unwrap_or_default();
        self.mode = if eager_reasons.is_empty() {
            ExecMode::WholeGraph
        } else {
            ExecMode::SplitGraphs
        };
        let mismatch = self.check_replay(&eager)?;
        let what = self.describe(parities, nodes, &eager_reasons);
        match mismatch {
            None => {
                self.note = format!("{what}; replay on poisoned buffers matches the eager run");
                if self.device_io && self.states.is_empty() && self.steps.len() >= 2 {
                    let device = self.capture_device_io(&eager[0])?;
                    self.note = format!("{}; {device}", self.note);
                }
            }
            Some(why) => {
                self.segments.clear();
                self.alt_segments.clear();
                self.mode = ExecMode::Eager;
                self.note =
                    format!("graphs disabled: the replay differs from the eager run: {why}");
                log::error!("{}", self.note);
            }
        }
        Ok(())
    }

    /// The graphs of a run on device memory (the steps between the upload and the
    /// download), then their check: on poisoned buffers, the upload enqueued eagerly, the
    /// graphs launched, the download enqueued eagerly, every region compared with the eager
    /// reference. A failed capture or a mismatch leaves no graphs (such runs are then
    /// eager) and says why; returns the note's part.
    fn capture_device_io(&mut self, eager: &[Vec<u8>]) -> Result<String, Error> {
        let last = self.steps.len() - 1;
        let (split, _) = self.split_segments(1..last);
        match self.capture_set(&split, 0) {
            Ok(segments) => self.device_segments = segments,
            Err(e) => {
                let note = format!("device-I/O runs eager: their capture failed: {e}");
                log::warn!("{note}");
                return Ok(note);
            }
        }
        let nodes: usize = self
            .device_segments
            .iter()
            .map(|s| match s {
                Segment::Graph(g) => g.nodes(),
                Segment::Eager(_) => 0,
            })
            .sum();
        self.poison()?;
        self.stream.bind().map_err(CudaError::from)?;
        self.enqueue(0, Enqueue::Eager)?;
        self.launch(IoMemory::Device)?;
        self.enqueue(last, Enqueue::Eager)?;
        self.stream.synchronize().map_err(CudaError::from)?;
        let replay = self.snapshot()?;
        for (i, r) in self.regions.iter().enumerate() {
            if let Err(why) = r.check.compare(&eager[i], &replay[i]) {
                self.device_segments.clear();
                let note = format!(
                    "device-I/O graphs disabled: their replay differs from the eager run: \
                     region `{}`: {why}",
                    r.name
                );
                log::error!("{note}");
                return Ok(note);
            }
        }
        Ok(format!(
            "device-I/O graphs ({nodes} nodes, no staging copies) match the eager run"
        ))
    }

    /// Runs of capturable steps among `steps`, split at executors that are not (with the
    /// reasons).
    fn split_segments(&self, steps: std::ops::Range<usize>) -> (RunSplit, Vec<String>) {
        let mut split = Vec::new();
        let (mut start, end) = (steps.start, steps.end);
        let mut eager_reasons = Vec::new();
        for (i, s) in self.steps.iter().enumerate().take(end).skip(start) {
            if let DStep::Network {
                name,
                safety: CaptureSafety::Unsafe(why),
                ..
            } = s
            {
                if start < i {
                    split.push(Ok((start, i)));
                }
                split.push(Err(i));
                eager_reasons.push(format!("`{name}` runs eagerly: {why}"));
                start = i + 1;
            }
        }
        if start < end {
            split.push(Ok((start, end)));
        }
        (split, eager_reasons)
    }

    /// The graphs of one state parity.
    fn capture_set(&mut self, split: &RunSplit, parity: usize) -> Result<Vec<Segment>, CudaError> {
        let mut segments = Vec::with_capacity(split.len());
        for seg in split {
            match *seg {
                Err(i) => segments.push(Segment::Eager(i)),
                Ok((a, b)) => {
                    let (steps, inputs, outputs, events) = (
                        &mut self.steps,
                        &self.inputs,
                        &mut self.outputs,
                        &self.events,
                    );
                    let graph = Graph::capture(&self.stream, |s| -> Result<(), RunError> {
                        for i in a..b {
                            enqueue_step(
                                s,
                                steps,
                                inputs,
                                outputs,
                                events,
                                i,
                                Enqueue::Capturing,
                                parity,
                            )?;
                        }
                        Ok(())
                    })?;
                    segments.push(Segment::Graph(graph));
                }
            }
        }
        Ok(segments)
    }

    /// Replay once per parity on poisoned buffers (from the reference run's starting state)
    /// and compare every region with the reference: `Some(why)` at the first difference.
    fn check_replay(&mut self, eager: &[Vec<Vec<u8>>]) -> Result<Option<String>, Error> {
        let parities = eager.len();
        for (parity, eager) in eager.iter().enumerate() {
            self.poison()?;
            if !self.states.is_empty() {
                self.zero_states()?;
                self.parity = parity;
            }
            self.run()?;
            let replay = self.snapshot()?;
            for (i, r) in self.regions.iter().enumerate() {
                if let Err(why) = r.check.compare(&eager[i], &replay[i]) {
                    let at = if parities == 2 {
                        format!("state parity {parity}: ")
                    } else {
                        String::new()
                    };
                    return Ok(Some(format!("{at}region `{}`: {why}", r.name)));
                }
            }
        }
        Ok(None)
    }

    /// What was captured, for the note.
    fn describe(&self, parities: usize, nodes: usize, eager_reasons: &[String]) -> String {
        let per_parity = if parities == 2 {
            " (one set per state parity)"
        } else {
            ""
        };
        match self.mode {
            ExecMode::WholeGraph if parities == 2 => {
                format!("one graph per run, two graphs of {nodes} nodes in all{per_parity}")
            }
            ExecMode::WholeGraph => format!("one graph of {nodes} nodes"),
            _ => format!(
                "{} graphs ({nodes} nodes){per_parity}; {}",
                self.segments
                    .iter()
                    .chain(&self.alt_segments)
                    .filter(|s| matches!(s, Segment::Graph(_)))
                    .count(),
                eager_reasons.join("; ")
            ),
        }
    }

    /// Every checked region's bytes (outputs from their staging).
    fn snapshot(&mut self) -> Result<Vec<Vec<u8>>, Error> {
        let mut snap = Vec::with_capacity(self.regions.len());
        for i in 0..self.regions.len() {
            let id = RegionId(i as u16);
            let r = &self.regions[i];
            if matches!(r.check, Check::Skip) {
                snap.push(Vec::new());
                continue;
            }
            let mut v = vec![0u8; r.bytes];
            match r.kind {
                RegionKind::Output => v.copy_from_slice(self.output(id)?),
                _ => self.read_region(id, &mut v)?,
            }
            snap.push(v);
        }
        Ok(snap)
    }

    /// Fill every checked region with NaN (or 0xff bytes), and the output staging with 0xff;
    /// inputs read in place from mapped staging are left alone (they are the input).
    fn poison(&mut self) -> Result<(), Error> {
        self.stream.bind().map_err(CudaError::from)?;
        for (i, r) in self.regions.iter().enumerate() {
            if matches!(r.check, Check::Skip) {
                continue;
            }
            let dev = self.device.regions[i];
            let staged_in_place = r.kind != RegionKind::Internal
                && self
                    .inputs
                    .iter()
                    .chain(&self.outputs)
                    .any(|s| s.region.index() == i && s.mapped);
            if r.kind == RegionKind::Input && staged_in_place {
                continue; // the input itself
            }
            if !staged_in_place && dev.bytes > 0 {
                // SAFETY: the region lies in the arena and is dev.bytes long.
                unsafe {
                    if dev.bytes.is_multiple_of(4) && dev.ptr.0.is_multiple_of(4) {
                        self.stream.memset_u32(dev.ptr, 0x7fc0_0000, dev.bytes / 4) // NaN
                    } else {
                        self.stream.memset_u8(dev.ptr, 0xff, dev.bytes)
                    }
                }
                .map_err(CudaError::from)?;
            }
        }
        for s in &mut self.outputs {
            s.host.as_mut_slice().fill(0xff);
        }
        self.stream.synchronize().map_err(CudaError::from)?;
        Ok(())
    }
}
