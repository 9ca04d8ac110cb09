//! Which engine of a bundle to run on this device: a pure, allocation-free
//! function of the bundle's target records ([`Offer`]) and the device's
//! facts ([`DeviceFacts`]).
//!
//! # Order
//!
//! 1. [`Rule::ExactPlan`]: a TensorRT plan built for this GPU's compute
//!    capability with exactly the loaded TensorRT version.
//! 2. [`Rule::HardwareCompatiblePlan`]: a plan built with
//!    `HardwareCompatibilityLevel::kAMPERE_PLUS` on another Ampere-or-newer
//!    GPU, with exactly the loaded TensorRT version (never on an integrated
//!    GPU).
//! 3. [`Rule::VersionCompatiblePlan`]: a version-compatible plan built by an
//!    older TensorRT. Plans for the same SM are preferred to
//!    hardware-compatible ones, then the newest plan.
//! 4. The portable engines: [`Rule::PortableGpu`] (tether's native GPU
//!    engine, tract-cuda) when the device has an NVIDIA GPU and a CUDA driver,
//!    then [`Rule::PortableCpu`] (tract on the CPU).
//!
//! Within a rule, the lower bundle index wins (the bundle author's order).
//!
//! Whether a TensorRT plan may run at all is decided by
//! [`compat::check_plan`], the same function the
//! runtime's deserialize gate calls; its module documentation lists the
//! rules and their sources.

use core::fmt;

use crate::compat::{self, PlanRecord, PlanRule, Reject};
use crate::vocab::{
    CpuArch, CudaVersion, EngineKind, FLAG_EXCLUDE_LEAN_RUNTIME, FLAG_VERSION_COMPATIBLE, GpuFacts,
    HardwareCompat, Sm, TrtLibrary, TrtVersion,
};

/// One target record of a bundle: an engine the bundle offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Offer {
    /// Index of the target record in the bundle.
    pub index: u32,
    /// Which engine.
    pub engine: EngineKind,
    /// CPU architecture the engine is for ([`CpuArch::Any`] for ONNX on
    /// tract).
    pub arch: CpuArch,
    /// TensorRT: the compute capability the plan was built on. tract-cuda:
    /// an optional minimum. tract CPU: ignored.
    pub sm: Option<Sm>,
    /// TensorRT version that built the plan, `MAJOR*10000+MINOR*100+PATCH`;
    /// 0 for non-TensorRT engines.
    pub tensorrt_version: u32,
    /// Raw `HardwareCompatibilityLevel` (0 none, 1 Ampere+, 2 same compute
    /// capability).
    pub hardware_compat: u32,
    /// [`FLAG_VERSION_COMPATIBLE`] | [`FLAG_EXCLUDE_LEAN_RUNTIME`].
    pub flags: u32,
}

impl Offer {
    /// A plain TensorRT plan record (no hardware or version compatibility).
    pub const fn tensorrt(index: u32, arch: CpuArch, sm: Sm, tensorrt_version: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TensorRt,
            arch,
            sm: Some(sm),
            tensorrt_version,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// A tract-cuda record for any architecture and any GPU.
    pub const fn tract_cuda(index: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TractCuda,
            arch: CpuArch::Any,
            sm: None,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// A tract CPU record for any architecture.
    pub const fn tract_cpu(index: u32) -> Self {
        Self {
            index,
            engine: EngineKind::TractCpu,
            arch: CpuArch::Any,
            sm: None,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        }
    }
    /// The same record with `flags`.
    pub const fn with_flags(mut self, flags: u32) -> Self {
        self.flags = flags;
        self
    }
    /// The same record with hardware-compatibility level `raw`.
    pub const fn with_hardware_compat(mut self, raw: u32) -> Self {
        self.hardware_compat = raw;
        self
    }
    /// Whether [`FLAG_VERSION_COMPATIBLE`] is set.
    pub const fn version_compatible(&self) -> bool {
        self.flags & FLAG_VERSION_COMPATIBLE != 0
    }
    /// Whether [`FLAG_EXCLUDE_LEAN_RUNTIME`] is set.
    pub const fn lean_runtime_excluded(&self) -> bool {
        self.flags & FLAG_EXCLUDE_LEAN_RUNTIME != 0
    }
    /// The TensorRT fields of the record, for
    /// [`compat::check_plan`].
    pub const fn plan_record(&self) -> PlanRecord {
        PlanRecord {
            tensorrt: TrtVersion(self.tensorrt_version),
            sm: self.sm,
            hardware_compat: self.hardware_compat,
            flags: self.flags,
        }
    }
}

impl fmt::Display for Offer {
    /// `#0 TensorRT plan sm_87 TensorRT 10.3.0 aarch64 [version-compatible]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {}", self.index, self.engine)?;
        if self.engine == EngineKind::TensorRt {
            f.write_str(" plan")?;
            if let Some(sm) = self.sm {
                write!(f, " sm_{}", sm.number())?;
            }
            write!(f, " TensorRT {}", TrtVersion(self.tensorrt_version))?;
        } else if let Some(sm) = self.sm {
            write!(f, " (sm_{}+)", sm.number())?;
        }
        if self.arch != CpuArch::Any {
            write!(f, " {}", self.arch)?;
        }
        match HardwareCompat::from_raw(self.hardware_compat) {
            Some(HardwareCompat::None) => {}
            Some(HardwareCompat::AmperePlus) => f.write_str(" [hardware-compatible: Ampere+]")?,
            Some(HardwareCompat::SameComputeCapability) => {
                f.write_str(" [hardware-compatible: same compute capability]")?
            }
            None => write!(f, " [hardware-compat {}?]", self.hardware_compat)?,
        }
        if self.version_compatible() {
            f.write_str(" [version-compatible]")?;
        }
        if self.lean_runtime_excluded() {
            f.write_str(" [lean runtime excluded]")?;
        }
        Ok(())
    }
}

/// What selection needs to know about a device. Build it from
/// [`ProbeReport::device_facts`](crate::probe::ProbeReport::device_facts)
/// or [`TargetDescriptor::facts`](crate::TargetDescriptor::facts).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct DeviceFacts {
    /// Host CPU architecture.
    pub arch: CpuArch,
    /// The GPU engines would run on, if any.
    pub gpu: Option<GpuFacts>,
    /// The TensorRT library found: version and flavor.
    pub tensorrt: Option<TrtLibrary>,
    /// CUDA driver version (`cuDriverGetVersion`, e.g. 12060).
    pub cuda_driver: Option<u32>,
}

impl DeviceFacts {
    /// A device with no GPU and no TensorRT.
    pub const fn cpu_only(arch: CpuArch) -> Self {
        Self {
            arch,
            gpu: None,
            tensorrt: None,
            cuda_driver: None,
        }
    }
}

impl fmt::Display for DeviceFacts {
    /// `aarch64, GPU sm_87 (integrated), TensorRT 10.3.0 (full), CUDA driver 12.6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.arch)?;
        match self.gpu {
            Some(g) => write!(f, ", GPU {g}")?,
            None => f.write_str(", no NVIDIA GPU")?,
        }
        match self.tensorrt {
            Some(l) => write!(f, ", TensorRT {} ({})", l.version, l.flavor.as_str())?,
            None => f.write_str(", no TensorRT library")?,
        }
        if let Some(d) = self.cuda_driver {
            write!(f, ", CUDA driver {}", CudaVersion(d))?;
        }
        Ok(())
    }
}

/// Why the chosen engine was allowed to run, best first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
#[cfg_attr(feature = "serde", serde(rename_all = "kebab-case"))]
pub enum Rule {
    /// Same compute capability and same TensorRT version.
    ExactPlan,
    /// Hardware-compatible (Ampere+) plan, same TensorRT version.
    HardwareCompatiblePlan,
    /// Version-compatible plan run by a newer (or equal) TensorRT.
    VersionCompatiblePlan,
    /// tract-cuda on the GPU.
    PortableGpu,
    /// tract on the CPU.
    PortableCpu,
}

/// An offer and why it was not taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Rejected {
    /// The offer.
    pub offer: Offer,
    /// Why it cannot run here.
    pub reason: Reject,
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.offer, self.reason)
    }
}

/// The engine to run, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct Choice {
    /// Index of the chosen target record.
    pub index: u32,
    /// Its engine kind.
    pub engine: EngineKind,
    /// The rule that admitted it.
    pub rule: Rule,
    /// The whole record.
    pub offer: Offer,
    /// The device it was chosen for.
    pub device: DeviceFacts,
    /// The runtime must call `IRuntime::setEngineHostCodeAllowed(true)`
    /// before deserializing: a version-compatible plan that embeds its lean
    /// runtime ([`compat::PlanVerdict::host_code_required`]).
    pub host_code_required: bool,
    /// The first offer of a better kind that could not run (to say why a
    /// portable engine was chosen), if any.
    pub passed_over: Option<Rejected>,
    /// How many offers could not run on this device.
    pub rejected: u32,
}

impl fmt::Display for Choice {
    /// One line for the log, e.g. `engine #0: TensorRT plan sm_87 TensorRT
    /// 10.3.0 aarch64 - exact match for this device (aarch64, GPU sm_87
    /// (integrated), TensorRT 10.3.0, CUDA driver 12.6)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "engine {} - ", self.offer)?;
        match self.rule {
            Rule::ExactPlan => f.write_str("exact match for this device")?,
            Rule::HardwareCompatiblePlan => f.write_str("hardware-compatible plan for this GPU")?,
            Rule::VersionCompatiblePlan => write!(
                f,
                "version-compatible plan run by the newer library{}",
                if self.host_code_required {
                    " (lean runtime from the plan: host code allowed)"
                } else {
                    ""
                }
            )?,
            Rule::PortableGpu => f.write_str("portable GPU engine")?,
            Rule::PortableCpu => f.write_str("portable CPU engine")?,
        }
        write!(f, " ({})", self.device)?;
        if let Some(p) = self.passed_over {
            write!(f, "; not used: {p}")?;
            if self.rejected > 1 {
                write!(f, " (+{} more)", self.rejected - 1)?;
            }
        }
        Ok(())
    }
}

/// How many rejected offers a [`Refusal`] lists; more are counted.
pub const MAX_LISTED: usize = 16;

/// No offer of the bundle can run on the device. Names the device and, for
/// each offer (up to [`MAX_LISTED`]), what it is and why it cannot run.
/// `Copy`, `'static` and allocation-free.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Refusal {
    device: DeviceFacts,
    listed: [Option<Rejected>; MAX_LISTED],
    total: usize,
}

impl Refusal {
    /// The device that was refused.
    pub fn device(&self) -> &DeviceFacts {
        &self.device
    }
    /// Number of offers in the bundle (0: the bundle offers no engine).
    pub fn offered(&self) -> usize {
        self.total
    }
    /// The first [`MAX_LISTED`] offers and why each cannot run.
    pub fn rejected(&self) -> impl Iterator<Item = &Rejected> {
        self.listed.iter().flatten()
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.total == 0 {
            return write!(
                f,
                "the bundle offers no engine at all (device: {})",
                self.device
            );
        }
        write!(
            f,
            "no engine in the bundle can run on this device ({}); the bundle offers {}: ",
            self.device, self.total
        )?;
        for (i, r) in self.rejected().enumerate() {
            if i > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{r}")?;
        }
        if self.total > MAX_LISTED {
            write!(f, "; and {} more", self.total - MAX_LISTED)?;
        }
        Ok(())
    }
}

impl std::error::Error for Refusal {}

#[cfg(feature = "serde")]
impl serde::Serialize for Refusal {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        struct List<'a>(&'a Refusal);
        impl serde::Serialize for List<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_seq(self.0.rejected())
            }
        }
        let mut st = s.serialize_struct("Refusal", 3)?;
        st.serialize_field("device", &self.device)?;
        st.serialize_field("offered", &self.total)?;
        st.serialize_field("rejected", &List(self))?;
        st.end()
    }
}

/// Where an accepted offer ranks: rule, then a rule-specific sub-rank (lower
/// is better), then newer plan first, then lower index.
type Rank = (Rule, u8, core::cmp::Reverse<u32>, u32);

/// Whether and how `offer` can run on `device`. TensorRT offers are decided
/// by [`compat::check_plan`].
///
/// # Errors
///
/// The [`Reject`] of the first rule the offer breaks.
pub fn evaluate(offer: &Offer, device: &DeviceFacts) -> Result<Rule, Reject> {
    evaluate_ranked(offer, device).map(|r| r.0)
}

fn evaluate_ranked(offer: &Offer, device: &DeviceFacts) -> Result<Rank, Reject> {
    if !offer.arch.runs_on(device.arch) {
        return Err(Reject::ArchMismatch {
            offer: offer.arch,
            device: device.arch,
        });
    }
    let late = core::cmp::Reverse(0);
    match offer.engine {
        EngineKind::TractCpu => Ok((Rule::PortableCpu, 0, late, offer.index)),
        EngineKind::CudaNative | EngineKind::TractCuda => {
            // A GPU is only ever known through a loaded CUDA driver.
            let gpu = device.gpu.ok_or(Reject::NoGpu)?;
            if let Some(minimum) = offer.sm
                && gpu.sm < minimum
            {
                return Err(Reject::SmBelowMinimum {
                    minimum,
                    device: gpu.sm,
                });
            }
            Ok((Rule::PortableGpu, 0, late, offer.index))
        }
        EngineKind::TensorRt => {
            let v = compat::check_plan(offer.plan_record(), device.tensorrt, device.gpu)?;
            let newest = core::cmp::Reverse(offer.tensorrt_version);
            Ok(match v.rule {
                PlanRule::Exact => (Rule::ExactPlan, 0, newest, offer.index),
                PlanRule::HardwareCompatible => {
                    (Rule::HardwareCompatiblePlan, 0, newest, offer.index)
                }
                PlanRule::VersionCompatible => (
                    Rule::VersionCompatiblePlan,
                    u8::from(!v.same_sm),
                    newest,
                    offer.index,
                ),
            })
        }
    }
}

/// Picks the engine of a bundle to run on a device, or says exactly why none
/// can run. Pure and allocation-free; see the [module docs](self) for the
/// order and the TensorRT rules it follows.
///
/// # Errors
///
/// [`Refusal`] when no offer can run (including a bundle with no offers); it
/// names the device and every offer with its reason.
#[expect(
    clippy::result_large_err,
    reason = "the refusal lists every offer without allocating; it is built once per bundle load, never on the hot path"
)]
pub fn select_engine(offers: &[Offer], device: &DeviceFacts) -> Result<Choice, Refusal> {
    let mut best: Option<(Rank, &Offer)> = None;
    let mut rejected = 0u32;
    let mut listed = [None; MAX_LISTED];
    for (i, offer) in offers.iter().enumerate() {
        match evaluate_ranked(offer, device) {
            Ok(rank) => {
                if best.as_ref().is_none_or(|(b, _)| rank < *b) {
                    best = Some((rank, offer));
                }
            }
            Err(reason) => {
                rejected += 1;
                if let Some(slot) = listed.get_mut(i) {
                    *slot = Some(Rejected {
                        offer: *offer,
                        reason,
                    });
                }
            }
        }
    }
    let Some(((rule, ..), offer)) = best else {
        return Err(Refusal {
            device: *device,
            listed,
            total: offers.len(),
        });
    };
    // The first rejected offer of an engine kind that would have ranked above
    // the chosen one (TensorRT above portable, tract-cuda above CPU).
    let kind_rank = |k: EngineKind| match k {
        EngineKind::TensorRt => 0,
        EngineKind::CudaNative | EngineKind::TractCuda => 1,
        EngineKind::TractCpu => 2,
    };
    // Of those, the one that came closest to running (right architecture and
    // GPU but another TensorRT beats another architecture): the most useful
    // single reason to log.
    let mut passed_over: Option<(u8, Rejected)> = None;
    for o in offers
        .iter()
        .filter(|o| kind_rank(o.engine) < kind_rank(offer.engine))
    {
        if let Err(reason) = evaluate(o, device) {
            let c = reason.closeness();
            if passed_over.as_ref().is_none_or(|(b, _)| c > *b) {
                passed_over = Some((c, Rejected { offer: *o, reason }));
            }
        }
    }
    let passed_over = passed_over.map(|(_, r)| r);
    Ok(Choice {
        index: offer.index,
        engine: offer.engine,
        rule,
        offer: *offer,
        device: *device,
        host_code_required: offer.engine == EngineKind::TensorRt
            && compat::check_plan(offer.plan_record(), device.tensorrt, device.gpu)
                .is_ok_and(|v| v.host_code_required),
        passed_over,
        rejected,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{self, TrtSpec};

    const A64: CpuArch = CpuArch::Aarch64;
    const X64: CpuArch = CpuArch::X86_64;
    const TRT103: u32 = 100300;
    const TRT1013: u32 = 101303;
    const TRT1016: u32 = 101602;
    const TRT114: u32 = 110400;

    /// Orin, JetPack 6.2: sm_87 iGPU, TensorRT 10.3.0, CUDA 12.6.
    const ORIN_JP62: DeviceFacts = DeviceFacts {
        arch: A64,
        gpu: Some(GpuFacts {
            sm: Sm::new(8, 7),
            integrated: true,
        }),
        tensorrt: Some(TrtLibrary::full(TrtVersion(TRT103))),
        cuda_driver: Some(12060),
    };
    /// Thor, JetPack 7.1: sm_110 iGPU, TensorRT 10.13.3, CUDA 13.0.
    const THOR_JP71: DeviceFacts = DeviceFacts {
        arch: A64,
        gpu: Some(GpuFacts {
            sm: Sm::new(11, 0),
            integrated: true,
        }),
        tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1013))),
        cuda_driver: Some(13000),
    };
    /// The H200 gpu-host with the TensorRT 11.4 lean runtime.
    const H200: DeviceFacts = DeviceFacts {
        arch: X64,
        gpu: Some(GpuFacts {
            sm: Sm::new(9, 0),
            integrated: false,
        }),
        tensorrt: Some(TrtLibrary::full(TrtVersion(TRT114))),
        cuda_driver: Some(13000),
    };
    const CPU_X64: DeviceFacts = DeviceFacts::cpu_only(X64);
    const CPU_A64: DeviceFacts = DeviceFacts::cpu_only(A64);

    /// A bundle built for the three GPU targets plus the portable engines.
    fn full_bundle() -> [Offer; 5] {
        [
            Offer::tensorrt(0, X64, Sm::new(9, 0), TRT114),
            Offer::tensorrt(1, A64, Sm::new(8, 7), TRT103),
            Offer::tensorrt(2, A64, Sm::new(11, 0), TRT1013),
            Offer::tract_cuda(3),
            Offer::tract_cpu(4),
        ]
    }

    #[derive(Debug)]
    enum Want {
        Pick(u32, Rule),
        Refuse,
    }

    #[test]
    fn table() {
        use Want::*;
        let vc = FLAG_VERSION_COMPATIBLE;
        let cases: &[(&str, &[Offer], DeviceFacts, Want)] = &[
            (
                "orin exact",
                &full_bundle(),
                ORIN_JP62,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "thor exact",
                &full_bundle(),
                THOR_JP71,
                Pick(2, Rule::ExactPlan),
            ),
            ("h200 exact", &full_bundle(), H200, Pick(0, Rule::ExactPlan)),
            (
                "cpu-only x86 takes tract cpu",
                &full_bundle(),
                CPU_X64,
                Pick(4, Rule::PortableCpu),
            ),
            (
                "cpu-only arm takes tract cpu",
                &full_bundle(),
                CPU_A64,
                Pick(4, Rule::PortableCpu),
            ),
            (
                "orin without tensorrt takes tract-cuda",
                &full_bundle(),
                DeviceFacts {
                    tensorrt: None,
                    ..ORIN_JP62
                },
                Pick(3, Rule::PortableGpu),
            ),
            (
                "orin on jetpack 7.2 (trt 10.16) cannot run the 10.3 plan",
                &full_bundle(),
                DeviceFacts {
                    tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1016))),
                    ..ORIN_JP62
                },
                Pick(3, Rule::PortableGpu),
            ),
            (
                "orin jp7.2 takes a version-compatible 10.3 plan",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(vc),
                    Offer::tract_cpu(1),
                ],
                DeviceFacts {
                    tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1016))),
                    ..ORIN_JP62
                },
                Pick(0, Rule::VersionCompatiblePlan),
            ),
            (
                "exact beats version-compatible",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), 100000).with_flags(vc),
                    Offer::tensorrt(1, A64, Sm::new(8, 7), TRT103),
                ],
                ORIN_JP62,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "newest version-compatible plan first",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 7), 100000).with_flags(vc),
                    Offer::tensorrt(1, A64, Sm::new(8, 7), 101000).with_flags(vc),
                ],
                DeviceFacts {
                    tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1016))),
                    ..ORIN_JP62
                },
                Pick(1, Rule::VersionCompatiblePlan),
            ),
            (
                "sm_80 plan fails on orin with no kernel image",
                &[
                    Offer::tensorrt(0, A64, Sm::new(8, 0), TRT103),
                    Offer::tract_cpu(1),
                ],
                ORIN_JP62,
                Pick(1, Rule::PortableCpu),
            ),
            (
                "ampere+ plan refused on orin (JetPack)",
                &[Offer::tensorrt(0, A64, Sm::new(8, 6), TRT103).with_hardware_compat(1)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "ampere+ plan from an A100 runs on H200",
                &[
                    Offer::tensorrt(0, X64, Sm::new(8, 0), TRT114).with_hardware_compat(1),
                    Offer::tract_cuda(1),
                ],
                H200,
                Pick(0, Rule::HardwareCompatiblePlan),
            ),
            (
                "exact beats hardware-compatible",
                &[
                    Offer::tensorrt(0, X64, Sm::new(8, 0), TRT114).with_hardware_compat(1),
                    Offer::tensorrt(1, X64, Sm::new(9, 0), TRT114),
                ],
                H200,
                Pick(1, Rule::ExactPlan),
            ),
            (
                "hardware-compatible beats version-compatible",
                &[
                    Offer::tensorrt(0, X64, Sm::new(9, 0), 110000).with_flags(vc),
                    Offer::tensorrt(1, X64, Sm::new(8, 9), TRT114).with_hardware_compat(1),
                ],
                H200,
                Pick(1, Rule::HardwareCompatiblePlan),
            ),
            (
                "same-compute-capability plan from another sm refused",
                &[Offer::tensorrt(0, X64, Sm::new(8, 9), TRT114).with_hardware_compat(2)],
                H200,
                Refuse,
            ),
            (
                "h200 with trt 11.4 runs a version-compatible trt 10 plan",
                &[Offer::tensorrt(0, X64, Sm::new(9, 0), 101300).with_flags(vc)],
                H200,
                Pick(0, Rule::VersionCompatiblePlan),
            ),
            (
                "but not one whose lean runtime was excluded",
                &[Offer::tensorrt(0, X64, Sm::new(9, 0), 101300)
                    .with_flags(vc | FLAG_EXCLUDE_LEAN_RUNTIME)],
                H200,
                Refuse,
            ),
            (
                "trt 8.6 version-compatible plan is refused by trt 11",
                &[Offer::tensorrt(0, X64, Sm::new(9, 0), 80600).with_flags(vc)],
                H200,
                Refuse,
            ),
            (
                "x86 plan never runs on arm",
                &[Offer::tensorrt(0, X64, Sm::new(8, 7), TRT103)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "patch mismatch refused",
                &[Offer::tensorrt(0, A64, Sm::new(8, 7), 100301)],
                ORIN_JP62,
                Refuse,
            ),
            (
                "thor sm_101 plan refused under CUDA 13 (sm_110)",
                &[Offer::tensorrt(0, A64, Sm::new(10, 1), TRT1013)],
                THOR_JP71,
                Refuse,
            ),
            ("empty bundle", &[], H200, Refuse),
            (
                "tract-cuda minimum sm",
                &[
                    Offer {
                        sm: Some(Sm::new(9, 0)),
                        ..Offer::tract_cuda(0)
                    },
                    Offer::tract_cpu(1),
                ],
                ORIN_JP62,
                Pick(1, Rule::PortableCpu),
            ),
            (
                "lower index wins a tie",
                &[Offer::tract_cpu(5), Offer::tract_cpu(2)],
                CPU_X64,
                Pick(2, Rule::PortableCpu),
            ),
            (
                "unknown flag bit refuses the plan",
                &[Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(4)],
                ORIN_JP62,
                Refuse,
            ),
        ];
        for (name, offers, device, want) in cases {
            let got = select_engine(offers, device);
            match (want, &got) {
                (Pick(i, r), Ok(c)) => {
                    assert_eq!((c.index, c.rule), (*i, *r), "{name}: {c}");
                }
                (Refuse, Err(_)) => {}
                _ => panic!("{name}: wanted {want:?}, got {got:?}"),
            }
        }
    }

    /// The compatibility table drives selection too: a bundle with the one
    /// plan of each case is picked exactly when the rules accept it, under
    /// the same rule, and refused with exactly the rules' reason.
    #[test]
    fn compat_table_drives_selection() {
        for c in crate::compat::table::CASES {
            let arch = if c.gpu.is_some_and(|g| g.integrated) {
                A64
            } else {
                X64
            };
            let offer = Offer {
                index: 0,
                engine: EngineKind::TensorRt,
                arch,
                sm: c.plan.sm,
                tensorrt_version: c.plan.tensorrt.0,
                hardware_compat: c.plan.hardware_compat,
                flags: c.plan.flags,
            };
            assert_eq!(offer.plan_record(), c.plan, "{}", c.name);
            let device = DeviceFacts {
                arch,
                gpu: c.gpu,
                tensorrt: c.library,
                cuda_driver: c.gpu.map(|_| 13000),
            };
            match c.want {
                Ok(v) => {
                    let rule = match v.rule {
                        PlanRule::Exact => Rule::ExactPlan,
                        PlanRule::HardwareCompatible => Rule::HardwareCompatiblePlan,
                        PlanRule::VersionCompatible => Rule::VersionCompatiblePlan,
                    };
                    assert_eq!(evaluate(&offer, &device), Ok(rule), "{}", c.name);
                    let choice = select_engine(&[offer], &device).unwrap();
                    assert_eq!(choice.rule, rule, "{}", c.name);
                    assert_eq!(
                        choice.host_code_required, v.host_code_required,
                        "{}",
                        c.name
                    );
                }
                Err(reason) => {
                    assert_eq!(evaluate(&offer, &device), Err(reason), "{}", c.name);
                    let refusal = select_engine(&[offer], &device).unwrap_err();
                    assert_eq!(
                        refusal.rejected().next().map(|r| r.reason),
                        Some(reason),
                        "{}",
                        c.name
                    );
                }
            }
        }
    }

    #[test]
    fn reasons_name_both_sides() {
        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 0), TRT103)],
            &ORIN_JP62,
        )
        .unwrap_err();
        let s = r.to_string();
        assert!(s.contains("sm_80") && s.contains("sm_87"), "{s}");
        assert!(s.contains("TensorRT 10.3.0"), "{s}");
        assert_eq!(r.offered(), 1);
        assert_eq!(
            r.rejected().next().map(|x| x.reason),
            Some(Reject::SmMismatch {
                plan: Sm::new(8, 0),
                device: Sm::new(8, 7),
                level: HardwareCompat::None,
            })
        );

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 7), 100301)],
            &ORIN_JP62,
        )
        .unwrap_err();
        let s = r.to_string();
        assert!(s.contains("10.3.1") && s.contains("10.3.0"), "{s}");

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(8, 6), TRT103).with_hardware_compat(1)],
            &ORIN_JP62,
        )
        .unwrap_err();
        assert!(r.to_string().contains("JetPack or DRIVE OS"), "{r}");

        let r = select_engine(
            &[Offer::tensorrt(0, A64, Sm::new(10, 1), TRT1013)],
            &THOR_JP71,
        )
        .unwrap_err();
        assert!(r.to_string().contains("sm_101 under CUDA 12.x"), "{r}");

        let r = select_engine(&[], &CPU_X64).unwrap_err();
        assert!(r.to_string().contains("no engine at all"), "{r}");
    }

    #[test]
    fn choice_line_explains_fallback() {
        let c = select_engine(&full_bundle(), &CPU_A64).unwrap();
        let s = c.to_string();
        assert!(s.contains("portable CPU engine"), "{s}");
        assert!(s.contains("not used: #1"), "{s}");
        assert!(s.contains("needs an NVIDIA GPU"), "{s}");
        assert!(!s.contains('\n'));
        assert_eq!(c.rejected, 4);

        // Orin on JetPack 7.2: the sm_87 plan is the useful reason, not the
        // x86_64 one listed first.
        let jp72 = DeviceFacts {
            tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1016))),
            ..ORIN_JP62
        };
        let c = select_engine(&full_bundle(), &jp72).unwrap();
        assert_eq!(c.engine, EngineKind::TractCuda);
        assert_eq!(c.passed_over.map(|p| p.offer.index), Some(1), "{c}");
        assert!(c.to_string().contains("library is 10.16.2"), "{c}");

        let c = select_engine(&full_bundle(), &ORIN_JP62).unwrap();
        assert!(c.to_string().contains("exact match"), "{c}");
        assert!(c.passed_over.is_none());
        assert!(!c.host_code_required);
    }

    #[test]
    fn host_code_flag() {
        let dev = DeviceFacts {
            tensorrt: Some(TrtLibrary::full(TrtVersion(TRT1016))),
            ..ORIN_JP62
        };
        let vc = Offer::tensorrt(0, A64, Sm::new(8, 7), TRT103).with_flags(FLAG_VERSION_COMPATIBLE);
        assert!(select_engine(&[vc], &dev).unwrap().host_code_required);
        // Without its lean runtime the plan needs a library of its own
        // version, and carries no host code.
        let lean = vc.with_flags(FLAG_VERSION_COMPATIBLE | FLAG_EXCLUDE_LEAN_RUNTIME);
        assert!(select_engine(&[lean], &dev).is_err());
        assert!(
            !select_engine(&[lean], &ORIN_JP62)
                .unwrap()
                .host_code_required
        );
    }

    #[test]
    fn refusal_lists_at_most_max() {
        let offers: Vec<Offer> = (0..20)
            .map(|i| Offer::tensorrt(i, X64, Sm::new(9, 0), TRT114))
            .collect();
        let r = select_engine(&offers, &CPU_A64).unwrap_err();
        assert_eq!(r.rejected().count(), MAX_LISTED);
        assert!(r.to_string().ends_with("and 4 more"), "{r}");
    }

    #[test]
    fn descriptors_run_their_own_plans() {
        // Every descriptor release with an exact TensorRT version runs a plan
        // built for it, and refuses the same plan on another release's SM.
        for t in descriptor::TARGETS {
            for rel in t.releases {
                let TrtSpec::Exact(v) = rel.tensorrt else {
                    continue;
                };
                let facts = t.facts(rel);
                let plan = Offer::tensorrt(0, t.arch, rel.sm, v.0);
                assert_eq!(
                    facts.tensorrt.map(|l| l.flavor),
                    Some(crate::vocab::LibraryFlavor::Full)
                );
                let c = select_engine(&[plan], &facts).unwrap();
                assert_eq!(c.rule, Rule::ExactPlan, "{} {}", t.id, rel.name);
            }
        }
    }
}
