//! Where TensorRT's messages go: the `log` facade, per-severity counters, a
//! fixed-size ring of recent error messages (the logger) and a fixed-size
//! store per error recorder. Safe code only; the C-ABI callbacks in `ffi.rs`
//! hand their arguments over here. Nothing here allocates while TensorRT
//! reports (the stores are fixed arrays behind a `Mutex`).

use std::ffi::CStr;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// `nvinfer1::ILogger::Severity`, and how tether maps it onto `log` levels
/// (target `tensorrt`): internal error and error -> `error`, warning ->
/// `warn`, info -> `debug`, verbose -> `trace`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Severity {
    /// `kINTERNAL_ERROR` (0).
    InternalError,
    /// `kERROR` (1).
    Error,
    /// `kWARNING` (2).
    Warning,
    /// `kINFO` (3).
    Info,
    /// `kVERBOSE` (4).
    Verbose,
}

impl Severity {
    /// Decodes TensorRT's value (anything unknown counts as verbose).
    pub fn from_raw(raw: i32) -> Self {
        match raw {
            0 => Self::InternalError,
            1 => Self::Error,
            2 => Self::Warning,
            3 => Self::Info,
            _ => Self::Verbose,
        }
    }

    fn level(self) -> log::Level {
        match self {
            Self::InternalError | Self::Error => log::Level::Error,
            Self::Warning => log::Level::Warn,
            Self::Info => log::Level::Debug,
            Self::Verbose => log::Level::Trace,
        }
    }
}

/// Messages TensorRT sent to tether's logger since the process started,
/// by severity: `[internal error, error, warning, info, verbose]`.
pub fn logger_message_counts() -> [u64; 5] {
    let mut out = [0; 5];
    for (o, c) in out.iter_mut().zip(COUNTS.iter()) {
        *o = c.load(Ordering::Relaxed);
    }
    out
}

static COUNTS: [AtomicU64; 5] = [const { AtomicU64::new(0) }; 5];

const TEXT_CAP: usize = 1024;
const RING_LEN: usize = 16;

#[derive(Clone, Copy)]
struct Line {
    seq: u64,
    severity: Severity,
    len: usize,
    text: [u8; TEXT_CAP],
}

const EMPTY_LINE: Line = Line {
    seq: 0,
    severity: Severity::Verbose,
    len: 0,
    text: [0; TEXT_CAP],
};

struct Ring {
    next_seq: u64,
    lines: [Line; RING_LEN],
}

/// Recent warning-or-worse logger messages (the latest 16, each cut at 1023 bytes).
static RING: Mutex<Ring> = Mutex::new(Ring {
    next_seq: 1,
    lines: [EMPTY_LINE; RING_LEN],
});

fn copy_text(dst: &mut [u8], src: &[u8]) -> usize {
    // Keep room for a NUL; cut on a UTF-8 boundary.
    let mut n = src.len().min(dst.len() - 1);
    while n > 0 && n < src.len() && (src[n] & 0xC0) == 0x80 {
        n -= 1;
    }
    dst[..n].copy_from_slice(&src[..n]);
    dst[n] = 0;
    n
}

/// Called by the logger callback for every message.
pub(super) fn on_log(severity: i32, msg: &CStr) {
    let sev = Severity::from_raw(severity);
    COUNTS[sev as usize].fetch_add(1, Ordering::Relaxed);
    let level = sev.level();
    if log::log_enabled!(target: "tensorrt", level) {
        log::log!(target: "tensorrt", level, "{}", msg.to_string_lossy());
    }
    if matches!(
        sev,
        Severity::InternalError | Severity::Error | Severity::Warning
    ) {
        let mut ring = RING.lock().unwrap_or_else(|e| e.into_inner());
        let seq = ring.next_seq;
        ring.next_seq += 1;
        let slot = &mut ring.lines[(seq as usize) % RING_LEN];
        slot.seq = seq;
        slot.severity = sev;
        slot.len = copy_text(&mut slot.text, msg.to_bytes());
    }
}

/// A point in the logger's message stream, to collect what came after it.
#[derive(Debug, Clone, Copy)]
pub(super) struct LogMark(u64);

/// Marks the current end of the logger ring.
pub(super) fn log_mark() -> LogMark {
    LogMark(RING.lock().unwrap_or_else(|e| e.into_inner()).next_seq)
}

/// Error and internal-error messages logged since `mark` (oldest first).
pub(super) fn errors_since(mark: LogMark) -> Vec<String> {
    let ring = RING.lock().unwrap_or_else(|e| e.into_inner());
    let mut lines: Vec<&Line> = ring
        .lines
        .iter()
        .filter(|l| {
            l.seq >= mark.0 && matches!(l.severity, Severity::InternalError | Severity::Error)
        })
        .collect();
    lines.sort_by_key(|l| l.seq);
    lines
        .iter()
        .map(|l| String::from_utf8_lossy(&l.text[..l.len]).into_owned())
        .collect()
}

/// Capacity of one error recorder (errors beyond it set the overflow flag
/// and are only logged).
pub const RECORDER_CAPACITY: usize = 16;
/// Bytes kept per description (with the NUL). TensorRT documents
/// `kMAX_DESC_LENGTH` = 127, but TensorRT 11.4 was seen passing longer
/// descriptions (its "magicTag" serialization message is about 380 bytes),
/// so up to 1023 bytes are kept.
const DESC_CAP: usize = 1024;

/// One error TensorRT reported to an error recorder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedError {
    /// `nvinfer1::ErrorCode` value (1 unspecified, 2 internal, 3 invalid
    /// argument, 4 invalid config, 5 failed allocation, 6 failed
    /// initialization, 7 failed execution, 8 failed computation, 9 invalid
    /// state, 10 unsupported state).
    pub code: i32,
    /// TensorRT's description.
    pub description: String,
}

#[derive(Clone, Copy)]
struct Entry {
    code: i32,
    len: usize,
    text: [u8; DESC_CAP],
}

/// The storage behind one error recorder: fixed capacity, entries never move
/// (so a description pointer stays valid until [`ErrorStore::clear`]).
pub(super) struct ErrorStore {
    count: usize,
    overflowed: bool,
    entries: [Entry; RECORDER_CAPACITY],
}

impl ErrorStore {
    pub(super) const fn new() -> Self {
        Self {
            count: 0,
            overflowed: false,
            entries: [Entry {
                code: 0,
                len: 0,
                text: [0; DESC_CAP],
            }; RECORDER_CAPACITY],
        }
    }

    /// Records one error; also sends it to the `log` facade.
    pub(super) fn report(&mut self, code: i32, desc: &CStr) {
        log::error!(target: "tensorrt", "error {code}: {}", desc.to_string_lossy());
        if self.count == RECORDER_CAPACITY {
            self.overflowed = true;
            return;
        }
        let e = &mut self.entries[self.count];
        e.code = code;
        e.len = copy_text(&mut e.text, desc.to_bytes());
        self.count += 1;
    }

    pub(super) fn clear(&mut self) {
        self.count = 0;
        self.overflowed = false;
    }

    pub(super) fn len(&self) -> usize {
        self.count
    }

    pub(super) fn overflowed(&self) -> bool {
        self.overflowed
    }

    pub(super) fn code(&self, i: usize) -> Option<i32> {
        (i < self.count).then(|| self.entries[i].code)
    }

    /// The NUL-terminated description of entry `i`.
    pub(super) fn desc(&self, i: usize) -> Option<&[u8]> {
        (i < self.count).then(|| &self.entries[i].text[..=self.entries[i].len])
    }

    pub(super) fn to_vec(&self) -> Vec<RecordedError> {
        self.entries[..self.count]
            .iter()
            .map(|e| RecordedError {
                code: e.code,
                description: String::from_utf8_lossy(&e.text[..e.len]).into_owned(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn store_keeps_fixed_capacity_and_overflows() {
        let mut s = ErrorStore::new();
        for i in 0..(RECORDER_CAPACITY as i32 + 3) {
            s.report(2, c"boom");
            assert!(s.len() <= RECORDER_CAPACITY, "{i}");
        }
        assert!(s.overflowed());
        assert_eq!(s.desc(0).unwrap(), b"boom\0");
        assert_eq!(s.code(0), Some(2));
        assert!(s.code(RECORDER_CAPACITY).is_none());
        s.clear();
        assert_eq!(s.len(), 0);
        assert!(!s.overflowed());
    }

    #[test]
    fn long_messages_are_cut_on_char_boundaries() {
        let mut buf = [0u8; 8];
        let n = copy_text(&mut buf, "aaaaaé€".as_bytes());
        assert!(std::str::from_utf8(&buf[..n]).is_ok());
        assert_eq!(buf[n], 0);
    }

    #[test]
    fn ring_collects_errors_after_a_mark() {
        let mark = log_mark();
        on_log(1, c"first failure");
        on_log(3, c"just info");
        on_log(0, c"internal");
        let got = errors_since(mark);
        assert!(got.contains(&"first failure".to_string()));
        assert!(got.contains(&"internal".to_string()));
        assert!(!got.iter().any(|m| m == "just info"));
        assert!(logger_message_counts()[3] >= 1);
    }
}
