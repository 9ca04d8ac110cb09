//! Engine selection in the module API: a bundle whose only engine cannot run
//! here is refused with a message naming the offer and the device.

use std::sync::Arc;

use tether_bundle::{
    Bundle, BundleWriter, CpuArch, EngineKind, IdentityDesc, SectionKind, TargetDesc, Verify,
};
use tether_runtime::{Module, ModuleError, ModuleOptions};

#[test]
fn a_plan_only_bundle_is_refused_without_a_gpu() {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "plan-only".into(),
        family: "detect".into(),
        ..IdentityDesc::default()
    });
    let t = w
        .add_target(TargetDesc {
            name: "sm87-trt10.3".into(),
            arch: CpuArch::Aarch64,
            sm: Some((8, 7)),
            engine: EngineKind::TensorRt,
            tensorrt_version: 100300,
            hardware_compat: 0,
            flags: 0,
        })
        .unwrap();
    w.add_section(
        SectionKind::TensorRtPlan,
        "plan",
        Some(t),
        b"not a real plan".to_vec(),
    )
    .unwrap();
    let bundle = Arc::new(Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap());
    // This runtime's engines run on the CPU (Module::device_facts), so a
    // TensorRT plan is never runnable here.
    let err = Module::from_bundle(bundle, &ModuleOptions::default()).unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ModuleError::Refused { .. }), "{msg}");
    assert!(msg.contains("plan-only"), "{msg}");
    assert!(
        msg.contains("sm_87") && msg.contains("10.3"),
        "offer not named: {msg}"
    );
    assert!(
        msg.contains(std::env::consts::ARCH),
        "device not named: {msg}"
    );
}

#[test]
fn a_bundle_with_no_engine_is_refused() {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "empty".into(),
        ..IdentityDesc::default()
    });
    w.add_section(SectionKind::Labels, "labels", None, b"a\n".to_vec())
        .unwrap();
    let bundle = Arc::new(Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap());
    let err = Module::from_bundle(bundle, &ModuleOptions::default()).unwrap_err();
    assert!(err.to_string().contains("offers no engine"), "{err}");
}
