//! The deserialize gate: before a plan is handed to TensorRT, its bundle
//! target record is checked against the *loaded* library and the *actual*
//! GPU, so that the user sees one message naming both sides instead of
//! TensorRT's "magic tag does not match" or "expecting compute 7.2 got
//! compute 8.7".
//!
//! The rules are not here: [`check_plan_compatibility`] is a thin wrapper of
//! [`tether_targets::compat::check_plan`], the one rule function engine
//! selection uses too (its documentation lists every rule and its source).
//! `runtime/tests/compat_table.rs` runs the one table of cases,
//! [`tether_targets::compat::table::CASES`], through this gate.

use std::fmt;

use tether_targets::compat::{self, PlanRecord, PlanVerdict, Reject};
use tether_targets::{GpuFacts, Sm, TrtLibrary, TrtVersion};

/// A plan's target record in the bundle's encoding: what `trtexec` reports
/// for a plan it built (`tether_build::trtexec::BuiltPlan::target`) and what
/// `tether_bundle::TargetDesc` stores. [`PlanTarget::record`] gives the rules'
/// [`PlanRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanTarget {
    /// TensorRT version that built the plan, `MAJOR*10000 + MINOR*100 + PATCH`.
    pub tensorrt_version: u32,
    /// Compute capability `(major, minor)` of the GPU the plan was built on,
    /// if recorded.
    pub sm: Option<(u8, u8)>,
    /// Hardware-compatibility level: 0 none, 1 Ampere+, 2 same compute capability.
    pub hardware_compat: u32,
    /// [`tether_targets::FLAG_VERSION_COMPATIBLE`] |
    /// [`tether_targets::FLAG_EXCLUDE_LEAN_RUNTIME`].
    pub flags: u32,
}

impl PlanTarget {
    /// The building TensorRT version.
    pub fn version(&self) -> TrtVersion {
        TrtVersion(self.tensorrt_version)
    }

    /// The record as the compatibility rules take it.
    pub fn record(&self) -> PlanRecord {
        PlanRecord {
            tensorrt: TrtVersion(self.tensorrt_version),
            sm: self.sm.map(|(major, minor)| Sm::new(major, minor)),
            hardware_compat: self.hardware_compat,
            flags: self.flags,
        }
    }
}

impl From<&tether_bundle::Target<'_>> for PlanTarget {
    /// The TensorRT fields of a bundle's target record (meaningful when its
    /// engine is TensorRT).
    fn from(t: &tether_bundle::Target<'_>) -> Self {
        Self {
            tensorrt_version: t.tensorrt_version,
            sm: t.sm,
            hardware_compat: t.hardware_compat,
            flags: t.flags,
        }
    }
}

/// The gate refused a plan: nothing was deserialized. The reason names the
/// plan's side and the library's or GPU's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompatError {
    /// Why, as the rules say it.
    pub reject: Reject,
}

impl fmt::Display for CompatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TensorRT plan refused before deserializing: {}",
            self.reject
        )
    }
}

impl std::error::Error for CompatError {}

/// May a plan described by `record` be deserialized by `library` on `gpu`?
/// [`compat::check_plan`] with both sides present. Pure: no I/O, no TensorRT
/// call.
///
/// # Errors
/// [`CompatError`] with the [`Reject`] of the first rule broken.
pub fn check_plan_compatibility(
    record: &PlanRecord,
    library: &TrtLibrary,
    gpu: GpuFacts,
) -> Result<PlanVerdict, CompatError> {
    compat::check_plan(*record, Some(*library), Some(gpu)).map_err(|reject| CompatError { reject })
}

/// What the first bytes of a serialized plan say (the header trtexec's
/// `--getPlanVersionOnly` reads, NVIDIA/TensorRT `samples/common/sampleEngines.cpp`):
/// a little-endian `u32` tag `0x74727466` ("ftrt"), a `u32` serialization
/// version, and for serialization version 0 the building TensorRT's
/// major, minor, patch and build as single bytes at offsets 24..28.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanHeader {
    /// Version that serialized the plan.
    pub version: TrtVersion,
    /// Its build number.
    pub build: u8,
}

/// The plan tag, `"ftrt"` read as a little-endian `u32`.
pub const PLAN_TAG: u32 = 0x7472_7466;

impl PlanHeader {
    /// Reads the header, `None` when the bytes do not start like a plan of
    /// serialization version 0 (then only TensorRT can say more).
    pub fn parse(plan: &[u8]) -> Option<Self> {
        let head = plan.get(..28)?;
        let tag = u32::from_le_bytes([head[0], head[1], head[2], head[3]]);
        let serialization = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if tag != PLAN_TAG || serialization != 0 {
            return None;
        }
        Some(Self {
            version: TrtVersion::new(
                u32::from(head[24]),
                u32::from(head[25]),
                u32::from(head[26]),
            ),
            build: head[27],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_target_converts_every_field() {
        let t = PlanTarget {
            tensorrt_version: 101602,
            sm: Some((8, 7)),
            hardware_compat: 2,
            flags: 3,
        };
        assert_eq!(
            t.record(),
            PlanRecord {
                tensorrt: TrtVersion::new(10, 16, 2),
                sm: Some(Sm::new(8, 7)),
                hardware_compat: 2,
                flags: 3,
            }
        );
        assert_eq!(t.version().to_string(), "10.16.2");
        let none = PlanTarget { sm: None, ..t };
        assert_eq!(none.record().sm, None);
    }

    #[test]
    fn gate_message_names_both_sides() {
        let e = check_plan_compatibility(
            &PlanTarget {
                tensorrt_version: 100300,
                sm: Some((8, 7)),
                hardware_compat: 0,
                flags: 0,
            }
            .record(),
            &TrtLibrary::full(TrtVersion::new(10, 10, 0)),
            GpuFacts::integrated(Sm::new(8, 7)),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("10.3.0") && e.contains("10.10.0"), "{e}");
        assert!(
            e.starts_with("TensorRT plan refused before deserializing"),
            "{e}"
        );
    }

    #[test]
    fn plan_header() {
        let mut bytes = vec![0u8; 64];
        bytes[..4].copy_from_slice(&PLAN_TAG.to_le_bytes());
        bytes[24..28].copy_from_slice(&[11, 4, 0, 106]);
        let h = PlanHeader::parse(&bytes).unwrap();
        assert_eq!(h.version, TrtVersion::new(11, 4, 0));
        assert_eq!(h.build, 106);
        assert_eq!(&bytes[..4], b"ftrt");
        assert!(PlanHeader::parse(&bytes[..20]).is_none());
        assert!(PlanHeader::parse(b"not a plan at all, definitely not a plan").is_none());
    }
}
