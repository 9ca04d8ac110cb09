//! Enumerations stored in the manifest as raw integers.
//!
//! Every enum has an `Unknown(raw)` variant: a value this reader does not
//! know (written by a newer minor version, or garbage) is reported, not
//! rejected. `from_raw(x).raw() == x` holds for every `x`.

use std::fmt;
use std::str::FromStr;

/// Error returned by the `FromStr` impls of this module's enums.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} `{value}` (expected one of: {expected})")]
pub struct ParseEnumError {
    /// Which enum was being parsed, e.g. `"dtype"`.
    pub what: &'static str,
    /// The input (truncated to 64 characters).
    pub value: String,
    /// The accepted spellings, separated by spaces.
    pub expected: &'static str,
}

macro_rules! raw_enum {
    (
        $(#[$meta:meta])*
        $name:ident : $raw:ty, $what:literal {
            $( $(#[$vmeta:meta])* $variant:ident = $value:literal, $text:literal ),+ $(,)?
        }
    ) => {
        $(#[$meta])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vmeta])* $variant, )+
            /// A raw value this reader does not know.
            Unknown($raw),
        }

        impl $name {
            /// Decodes the on-disk value; unknown values become `Unknown(raw)`.
            pub const fn from_raw(raw: $raw) -> Self {
                match raw {
                    $( $value => Self::$variant, )+
                    other => Self::Unknown(other),
                }
            }

            /// The on-disk value.
            pub const fn raw(self) -> $raw {
                match self {
                    $( Self::$variant => $value, )+
                    Self::Unknown(other) => other,
                }
            }

            /// The lower-case name used by `Display` and `FromStr`
            /// (`None` for `Unknown`).
            pub const fn name(self) -> Option<&'static str> {
                match self {
                    $( Self::$variant => Some($text), )+
                    Self::Unknown(_) => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match self.name() {
                    Some(n) => f.write_str(n),
                    None => write!(f, "unknown({})", self.raw()),
                }
            }
        }

        impl FromStr for $name {
            type Err = ParseEnumError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok(Self::$variant), )+
                    _ => Err(ParseEnumError {
                        what: $what,
                        value: crate::error::clip(s),
                        expected: concat!($( $text, " " ),+).trim_ascii_end(),
                    }),
                }
            }
        }
    };
}

raw_enum! {
    /// What a section holds. Stored as `u32` (1..=8 defined).
    SectionKind: u32, "section kind" {
        /// An ONNX model (protobuf bytes).
        Onnx = 1, "onnx",
        /// A serialized TensorRT engine (plan), for one target.
        TensorRtPlan = 2, "tensorrt-plan",
        /// Class labels (UTF-8 text, one per line).
        Labels = 3, "labels",
        /// Family-specific configuration (format defined by the family).
        FamilyConfig = 4, "family-config",
        /// Tokenizer data.
        Tokenizer = 5, "tokenizer",
        /// Input normalisation parameters.
        Normalization = 6, "normalization",
        /// Reference inputs/outputs for self-tests.
        Reference = 7, "reference",
        /// Opaque bytes.
        Blob = 8, "blob",
    }
}

pub use tether_targets::{CpuArch, EngineKind};

/// Table 5.2: the manifest code of a CPU architecture (`any` 0, `x86_64` 1,
/// `aarch64` 2).
pub const fn arch_code(arch: CpuArch) -> u16 {
    match arch {
        CpuArch::Any => 0,
        CpuArch::X86_64 => 1,
        CpuArch::Aarch64 => 2,
    }
}

/// Table 5.3: the manifest code of an engine kind (`tract-cpu` 1,
/// `tract-cuda` 2, `tensorrt` 3, `cuda-native` 4; 0 is `none`, a target with
/// no engine).
pub const fn engine_code(engine: EngineKind) -> u16 {
    match engine {
        EngineKind::TractCpu => 1,
        EngineKind::TractCuda => 2,
        EngineKind::TensorRt => 3,
        EngineKind::CudaNative => 4,
    }
}

/// A target record's `arch` (table 5.2): an architecture of the platform
/// vocabulary, or a code this reader does not know (a newer minor version
/// wrote it, or garbage), reported, not rejected. `from_raw(x).raw() == x`.
///
/// `Debug` and `Display` show the architecture itself (`X86_64`, `x86_64`)
/// when it is known.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArchCode {
    /// A known architecture.
    Known(CpuArch),
    /// A raw value this reader does not know.
    Unknown(u16),
}

impl ArchCode {
    /// Decodes the on-disk value.
    pub const fn from_raw(raw: u16) -> Self {
        match raw {
            0 => Self::Known(CpuArch::Any),
            1 => Self::Known(CpuArch::X86_64),
            2 => Self::Known(CpuArch::Aarch64),
            other => Self::Unknown(other),
        }
    }
    /// The on-disk value.
    pub const fn raw(self) -> u16 {
        match self {
            Self::Known(a) => arch_code(a),
            Self::Unknown(raw) => raw,
        }
    }
    /// The architecture, when known.
    pub const fn known(self) -> Option<CpuArch> {
        match self {
            Self::Known(a) => Some(a),
            Self::Unknown(_) => None,
        }
    }
}

impl From<CpuArch> for ArchCode {
    fn from(a: CpuArch) -> Self {
        Self::Known(a)
    }
}

impl PartialEq<CpuArch> for ArchCode {
    fn eq(&self, other: &CpuArch) -> bool {
        *self == Self::Known(*other)
    }
}

impl fmt::Debug for ArchCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known(a) => fmt::Debug::fmt(a, f),
            Self::Unknown(raw) => write!(f, "Unknown({raw})"),
        }
    }
}

impl fmt::Display for ArchCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Known(a) => fmt::Display::fmt(a, f),
            Self::Unknown(raw) => write!(f, "unknown({raw})"),
        }
    }
}

/// A target record's `engine` (table 5.3): an engine kind of the platform
/// vocabulary, `none` (code 0: a target with no engine), or a code this
/// reader does not know, reported, not rejected. `from_raw(x).raw() == x`.
///
/// `Debug` shows the engine kind itself (`TensorRt`) when it is known;
/// `Display` the manifest name (`tensorrt`).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineCode {
    /// Code 0: no engine.
    NoEngine,
    /// A known engine kind.
    Known(EngineKind),
    /// A raw value this reader does not know.
    Unknown(u16),
}

impl EngineCode {
    /// Decodes the on-disk value.
    pub const fn from_raw(raw: u16) -> Self {
        match raw {
            0 => Self::NoEngine,
            1 => Self::Known(EngineKind::TractCpu),
            2 => Self::Known(EngineKind::TractCuda),
            3 => Self::Known(EngineKind::TensorRt),
            4 => Self::Known(EngineKind::CudaNative),
            other => Self::Unknown(other),
        }
    }
    /// The on-disk value.
    pub const fn raw(self) -> u16 {
        match self {
            Self::NoEngine => 0,
            Self::Known(e) => engine_code(e),
            Self::Unknown(raw) => raw,
        }
    }
    /// The engine kind, when known.
    pub const fn known(self) -> Option<EngineKind> {
        match self {
            Self::Known(e) => Some(e),
            Self::NoEngine | Self::Unknown(_) => None,
        }
    }
    /// The manifest name (`none`, `tract-cpu`, `tract-cuda`, `tensorrt`,
    /// `cuda-native`); `None` for unknown codes.
    pub const fn name(self) -> Option<&'static str> {
        match self {
            Self::NoEngine => Some("none"),
            Self::Known(EngineKind::TractCpu) => Some("tract-cpu"),
            Self::Known(EngineKind::TractCuda) => Some("tract-cuda"),
            Self::Known(EngineKind::TensorRt) => Some("tensorrt"),
            Self::Known(EngineKind::CudaNative) => Some("cuda-native"),
            Self::Unknown(_) => None,
        }
    }
}

impl From<EngineKind> for EngineCode {
    fn from(e: EngineKind) -> Self {
        Self::Known(e)
    }
}

impl PartialEq<EngineKind> for EngineCode {
    fn eq(&self, other: &EngineKind) -> bool {
        *self == Self::Known(*other)
    }
}

impl fmt::Debug for EngineCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoEngine => f.write_str("None"),
            Self::Known(e) => fmt::Debug::fmt(e, f),
            Self::Unknown(raw) => write!(f, "Unknown({raw})"),
        }
    }
}

impl fmt::Display for EngineCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "unknown({})", self.raw()),
        }
    }
}

raw_enum! {
    /// Element type of a tensor. Stored as `u8`.
    DType: u8, "dtype" {
        /// IEEE 754 binary32.
        F32 = 1, "f32",
        /// IEEE 754 binary16.
        F16 = 2, "f16",
        /// bfloat16.
        BF16 = 3, "bf16",
        /// Signed 8-bit integer.
        I8 = 4, "i8",
        /// Unsigned 8-bit integer.
        U8 = 5, "u8",
        /// Signed 32-bit integer.
        I32 = 6, "i32",
        /// Signed 64-bit integer.
        I64 = 7, "i64",
        /// Boolean, one byte per element.
        Bool = 8, "bool",
    }
}

raw_enum! {
    /// Whether a tensor is an engine input or output. Stored as `u8`.
    IoMode: u8, "I/O mode" {
        /// Engine input.
        Input = 1, "input",
        /// Engine output.
        Output = 2, "output",
    }
}

raw_enum! {
    /// Memory layout of an image-like tensor. Stored as `u8`.
    Layout: u8, "layout" {
        /// No particular layout (non-image tensors).
        Unspecified = 0, "unspecified",
        /// Batch, channels, height, width.
        Nchw = 1, "nchw",
        /// Batch, height, width, channels.
        Nhwc = 2, "nhwc",
    }
}

impl DType {
    /// Size of one element in bytes; `None` for `Unknown`.
    pub const fn size_bytes(self) -> Option<usize> {
        match self {
            DType::F32 | DType::I32 => Some(4),
            DType::F16 | DType::BF16 => Some(2),
            DType::I8 | DType::U8 | DType::Bool => Some(1),
            DType::I64 => Some(8),
            DType::Unknown(_) => None,
        }
    }
}

impl SectionKind {
    /// `true` for sections that hold a model an engine loads
    /// ([`Onnx`](Self::Onnx), [`TensorRtPlan`](Self::TensorRtPlan)); only
    /// these may carry a tensor table.
    pub const fn is_engine(self) -> bool {
        matches!(self, SectionKind::Onnx | SectionKind::TensorRtPlan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_cover_the_vocabulary() {
        for r in 0..=300u16 {
            assert_eq!(ArchCode::from_raw(r).raw(), r);
            assert_eq!(EngineCode::from_raw(r).raw(), r);
        }
        for a in [CpuArch::Any, CpuArch::X86_64, CpuArch::Aarch64] {
            assert_eq!(ArchCode::from_raw(arch_code(a)), a);
        }
        for e in [
            EngineKind::TensorRt,
            EngineKind::CudaNative,
            EngineKind::TractCuda,
            EngineKind::TractCpu,
        ] {
            assert_eq!(EngineCode::from_raw(engine_code(e)), e);
        }
    }

    #[test]
    fn raw_round_trip() {
        for r in 0..=20u32 {
            assert_eq!(SectionKind::from_raw(r).raw(), r);
        }
        for r in 0..=255u8 {
            assert_eq!(DType::from_raw(r).raw(), r);
            assert_eq!(IoMode::from_raw(r).raw(), r);
            assert_eq!(Layout::from_raw(r).raw(), r);
        }
        assert_eq!(SectionKind::from_raw(0), SectionKind::Unknown(0));
        assert_eq!(SectionKind::from_raw(2), SectionKind::TensorRtPlan);
    }

    #[test]
    fn display_and_parse() {
        assert_eq!(DType::F32.to_string(), "f32");
        assert_eq!(DType::Unknown(99).to_string(), "unknown(99)");
        assert_eq!("bf16".parse::<DType>(), Ok(DType::BF16));
        assert_eq!(ArchCode::from_raw(2), CpuArch::Aarch64);
        assert_eq!(ArchCode::from_raw(2).to_string(), "aarch64");
        assert_eq!(format!("{:?}", ArchCode::from_raw(1)), "X86_64");
        assert_eq!(EngineCode::from_raw(3), EngineKind::TensorRt);
        assert_eq!(EngineCode::from_raw(3).to_string(), "tensorrt");
        assert_eq!(format!("{:?}", EngineCode::from_raw(1)), "TractCpu");
        assert_eq!(EngineCode::from_raw(0).to_string(), "none");
        assert_eq!(EngineCode::from_raw(55).to_string(), "unknown(55)");
        let e = "f128".parse::<DType>().unwrap_err();
        assert!(e.to_string().contains("f32 f16 bf16"), "{e}");
        assert_eq!(DType::BF16.size_bytes(), Some(2));
        assert_eq!(DType::Unknown(9).size_bytes(), None);
    }
}
