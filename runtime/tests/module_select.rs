//! Engine selection in the model API: a bundle whose only engine cannot run here is refused
//! with a message naming the offer and the device.

use std::sync::Arc;

use tether_bundle::{
    Bundle, BundleWriter, CpuArch, EngineKind, IdentityDesc, SectionKind, TargetDesc, Verify,
};
use tether_runtime::{COMPILED_BACKENDS, Device, Error, Model, ModelOptions};

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
    // On the CPU a TensorRT plan is never runnable.
    let cpu = ModelOptions {
        device: Device::Cpu,
        ..ModelOptions::default()
    };
    let err = Model::from_bundle(bundle, &cpu).unwrap_err();
    let msg = err.to_string();
    if !COMPILED_BACKENDS.contains(&tether_runtime::EngineKind::TensorRt) {
        assert!(matches!(err, Error::NotCompiledIn { .. }), "{msg}");
        return;
    }
    assert!(matches!(err, Error::Refused { .. }), "{msg}");
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
    let cpu = ModelOptions {
        device: Device::Cpu,
        ..ModelOptions::default()
    };
    let model = Model::from_bundle(bundle, &cpu).unwrap();
    assert!(model.networks().is_empty());
    let err = model.single_network().unwrap_err();
    assert!(matches!(err, Error::NoSuchNetwork { .. }), "{err}");
    assert!(err.to_string().contains("it has: none"), "{err}");
}
