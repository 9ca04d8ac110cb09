//! Where a model runs, and what this build can run.

use std::fmt;
use std::str::FromStr;

use tether_targets::EngineKind;

/// Where a model runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Device {
    /// The first CUDA GPU when this build has a device backend and a driver reports a
    /// device; otherwise the CPU (said once in the log at `info` level: normal on a machine
    /// without a GPU).
    #[default]
    Auto,
    /// The CPU (tract).
    Cpu,
    /// CUDA device `ordinal`; an error when it cannot be used.
    Cuda(usize),
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// A device string that is not `auto`, `cpu`, `cuda` or `cuda:N`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("`{0}`: expected auto, cpu, cuda or cuda:N")]
pub struct ParseDeviceError(pub String);

impl FromStr for Device {
    type Err = ParseDeviceError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            _ => s
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| ParseDeviceError(s.chars().take(64).collect())),
        }
    }
}

/// The backends compiled into this build, in the order selection prefers them among
/// equally admissible offers: TensorRT plans, the native GPU engine, tract-cuda, tract on the
/// CPU. This list, and nothing else, feeds engine selection.
pub const COMPILED_BACKENDS: &[EngineKind] = &[
    #[cfg(feature = "tensorrt")]
    EngineKind::TensorRt,
    #[cfg(feature = "cuda-native")]
    EngineKind::CudaNative,
    #[cfg(feature = "tract-cuda")]
    EngineKind::TractCuda,
    #[cfg(feature = "tract-cpu")]
    EngineKind::TractCpu,
];

/// Whether `kind` is compiled into this build.
pub fn compiled(kind: EngineKind) -> bool {
    COMPILED_BACKENDS.contains(&kind)
}

/// Whether this build has any backend that runs on a CUDA device.
pub const fn has_device_backend() -> bool {
    cfg!(any(
        feature = "tensorrt",
        feature = "cuda-native",
        feature = "tract-cuda"
    ))
}

/// `tensorrt, cuda-native, tract-cpu` (for messages).
pub fn compiled_list() -> String {
    if COMPILED_BACKENDS.is_empty() {
        return "none".into();
    }
    COMPILED_BACKENDS
        .iter()
        .map(|k| k.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        for (s, d) in [
            ("auto", Device::Auto),
            ("cpu", Device::Cpu),
            ("cuda", Device::Cuda(0)),
            ("cuda:3", Device::Cuda(3)),
        ] {
            assert_eq!(s.parse::<Device>(), Ok(d));
        }
        assert_eq!(Device::Cuda(2).to_string(), "cuda:2");
        assert!("gpu".parse::<Device>().is_err());
        assert!("cuda:x".parse::<Device>().is_err());
    }
}
