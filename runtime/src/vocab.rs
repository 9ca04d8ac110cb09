//! The run-time vocabulary: the words the model API, device sessions, the families and the
//! `tether` CLI share for how a network is computed and how a GPU run meets the host.
//!
//! - [`Precision`]: arithmetic of the GPU engines that have a choice (`--precision`);
//! - [`SyncPolicy`]: how the host waits for the GPU (`--sync`);
//! - [`MappedIo`]: where a device session's host staging lives (`--staging`).
//!
//! One definition each, available without the `cuda` feature (a CPU-only build still parses
//! and prints them), each with [`std::str::FromStr`] and `as_str` for the command line: the
//! CLI words are the ones `as_str` returns. The CUDA-specific meaning (context and event
//! flags) lives in the device layer (`cuda/`), which imports this module and nothing imports
//! back.

use std::fmt;
use std::str::FromStr;

/// A command-line word that names none of a vocabulary's values.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{value}`: expected {expected}")]
pub struct ParseVocabError {
    /// The word given.
    pub value: String,
    /// The accepted words, for the message (`fp32, tf32 or fp16`).
    pub expected: &'static str,
}

/// Parse `s` as one of `values` (`(word, value)`), else a [`ParseVocabError`] listing
/// `expected`.
fn parse<T: Copy>(
    s: &str,
    values: &[(&str, T)],
    expected: &'static str,
) -> Result<T, ParseVocabError> {
    values
        .iter()
        .find(|(word, _)| *word == s)
        .map(|&(_, v)| v)
        .ok_or_else(|| ParseVocabError {
            value: s.to_string(),
            expected,
        })
}

/// Arithmetic precision a backend may use (`--precision`). The CPU engine computes in fp32
/// whatever is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Precision {
    /// IEEE fp32 storage and arithmetic, TF32 tensor-core math off (the default).
    #[default]
    Fp32,
    /// fp32 storage with TF32 tensor-core math for convolutions and matrix products, where
    /// the backend supports it.
    Tf32,
    /// fp16 storage, fp32 accumulation, where the backend supports it (opt-in; tolerances
    /// per family in its README).
    Fp16,
}

impl Precision {
    const WORDS: [(&'static str, Precision); 3] = [
        ("fp32", Precision::Fp32),
        ("tf32", Precision::Tf32),
        ("fp16", Precision::Fp16),
    ];

    /// `fp32`, `tf32`, `fp16`.
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Tf32 => "tf32",
            Precision::Fp16 => "fp16",
        }
    }
}

impl FromStr for Precision {
    type Err = ParseVocabError;
    fn from_str(s: &str) -> Result<Self, ParseVocabError> {
        parse(s, &Self::WORDS, "fp32, tf32 or fp16")
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How the host waits for the GPU (`--sync`).
///
/// The trade-off is latency against a CPU core: spinning answers within a microsecond of the
/// GPU finishing but burns the core; blocking frees it but pays a wake-up (tens of
/// microseconds, more on Tegra after idle periods); yielding is in between. With the `cuda`
/// feature the policy is applied twice: as the primary context's scheduling flag
/// (`CU_CTX_SCHED_*`, see `cuda::Context::new`) and, independently of whoever set that flag,
/// by how `cuda::Stream::synchronize` waits on its completion event.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum SyncPolicy {
    /// Busy-poll the completion event (`cuEventQuery` in a loop). Lowest latency. Default.
    #[default]
    Spin,
    /// Poll and `std::thread::yield_now()` between polls.
    Yield,
    /// Sleep in the driver until the event fires (`CU_EVENT_BLOCKING_SYNC` +
    /// `cuEventSynchronize`). Frees the CPU; wake-up latency. The command-line word is
    /// `block`.
    Blocking,
}

impl SyncPolicy {
    const WORDS: [(&'static str, SyncPolicy); 3] = [
        ("spin", SyncPolicy::Spin),
        ("yield", SyncPolicy::Yield),
        ("block", SyncPolicy::Blocking),
    ];

    /// `spin`, `yield`, `block`.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncPolicy::Spin => "spin",
            SyncPolicy::Yield => "yield",
            SyncPolicy::Blocking => "block",
        }
    }
}

impl FromStr for SyncPolicy {
    type Err = ParseVocabError;
    fn from_str(s: &str) -> Result<Self, ParseVocabError> {
        parse(s, &Self::WORDS, "spin, yield or block")
    }
}

impl fmt::Display for SyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a device session's host staging lives (`--staging`): the input frame and the
/// results in page-locked host memory, copied by nodes of the graph, or mapped into the
/// device's address space (zero-copy: kernels read and write them over the bus).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MappedIo {
    /// Mapped on integrated GPUs (Jetson, DRIVE), copied on discrete ones (`auto`).
    #[default]
    Auto,
    /// Inputs and outputs mapped: no copy nodes; on a discrete GPU every read of the frame
    /// crosses the bus (`mapped`).
    Always,
    /// Never mapped: an upload node before the first step, a download node after the last
    /// (`copy`).
    Never,
    /// Outputs mapped, inputs copied (`mapped-outputs`). On a discrete GPU the stage or
    /// network that writes an output writes it over the bus into the host staging, and the
    /// download node goes; the input still arrives in one bulk copy. For outputs a kernel
    /// writes sparsely (a detection list): an output a network writes in full is better
    /// copied.
    Outputs,
}

impl MappedIo {
    const WORDS: [(&'static str, MappedIo); 4] = [
        ("auto", MappedIo::Auto),
        ("copy", MappedIo::Never),
        ("mapped", MappedIo::Always),
        ("mapped-outputs", MappedIo::Outputs),
    ];

    /// `auto`, `copy`, `mapped`, `mapped-outputs`.
    pub fn as_str(self) -> &'static str {
        match self {
            MappedIo::Auto => "auto",
            MappedIo::Never => "copy",
            MappedIo::Always => "mapped",
            MappedIo::Outputs => "mapped-outputs",
        }
    }
}

impl FromStr for MappedIo {
    type Err = ParseVocabError;
    fn from_str(s: &str) -> Result<Self, ParseVocabError> {
        parse(s, &Self::WORDS, "auto, copy, mapped or mapped-outputs")
    }
}

impl fmt::Display for MappedIo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_parses_back_to_its_value() {
        for (w, v) in Precision::WORDS {
            assert_eq!(w.parse::<Precision>(), Ok(v));
            assert_eq!(v.as_str(), w);
        }
        for (w, v) in SyncPolicy::WORDS {
            assert_eq!(w.parse::<SyncPolicy>(), Ok(v));
            assert_eq!(v.as_str(), w);
        }
        for (w, v) in MappedIo::WORDS {
            assert_eq!(w.parse::<MappedIo>(), Ok(v));
            assert_eq!(v.as_str(), w);
        }
    }

    #[test]
    fn unknown_words_name_the_value_and_the_choices() {
        let e = "fp8".parse::<Precision>().unwrap_err();
        assert_eq!(e.to_string(), "`fp8`: expected fp32, tf32 or fp16");
        let e = "sometimes".parse::<SyncPolicy>().unwrap_err();
        assert_eq!(e.to_string(), "`sometimes`: expected spin, yield or block");
        let e = "zero-copy".parse::<MappedIo>().unwrap_err();
        assert!(
            e.to_string()
                .contains("auto, copy, mapped or mapped-outputs")
        );
        // The value names, not the Rust names.
        assert!("blocking".parse::<SyncPolicy>().is_err());
        assert!("never".parse::<MappedIo>().is_err());
    }
}
