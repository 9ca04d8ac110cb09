//! Adding a TensorRT plan to a bundle: one target record (what the plan needs to run) and
//! one section named `<family>/<network>/plan.<target>` with its I/O tensors.

use tether_bundle::{
    BundleError, BundleWriter, CpuArch, EngineKind, SectionKind, TargetDesc, TensorDesc,
    network_section_name,
};

use crate::trtexec::BuiltPlan;

/// The target name tether gives a plan: `sm90-trt11.4` (or `any-trt11.4` without an SM).
pub fn target_name(built: &BuiltPlan) -> String {
    let t = &built.target;
    let v = t.tensorrt_version;
    let sm =
        t.sm.map_or("any".to_string(), |(ma, mi)| format!("sm{ma}{mi}"));
    format!("{sm}-trt{}.{}", v / 10000, v / 100 % 100)
}

/// The CPU architecture of this build (a plan's host code, if any, is for it).
pub fn host_arch() -> CpuArch {
    if cfg!(target_arch = "aarch64") {
        CpuArch::Aarch64
    } else {
        CpuArch::X86_64
    }
}

/// Add `plan` (the bytes `built` describes) for network `network` of a `family` bundle:
/// a target record from `built.target` and a `tensorrt-plan` section with `tensors` (the
/// network's I/O at the shapes the plan was built for). Returns the section name.
///
/// # Errors
/// [`BundleError`] from the writer (duplicate names, too many sections, ...).
pub fn add_plan(
    writer: &mut BundleWriter,
    family: &str,
    network: &str,
    built: &BuiltPlan,
    plan: Vec<u8>,
    tensors: &[TensorDesc],
) -> Result<String, BundleError> {
    let name = target_name(built);
    let t = &built.target;
    let target = writer.add_target(TargetDesc {
        name: name.clone(),
        arch: host_arch(),
        sm: t.sm,
        engine: EngineKind::TensorRt,
        tensorrt_version: t.tensorrt_version,
        hardware_compat: t.hardware_compat,
        flags: t.flags,
    })?;
    let section_name = network_section_name(family, network, &format!("plan.{name}"));
    let section =
        writer.add_section(SectionKind::TensorRtPlan, &section_name, Some(target), plan)?;
    for t in tensors {
        writer.add_tensor(section, t.clone())?;
    }
    Ok(section_name)
}
