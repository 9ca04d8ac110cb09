//! Writes small valid bundles into `corpus/read_bundle/` as fuzzing seeds:
//! `cargo +nightly run --bin gen_corpus` (from `bundle/fuzz/`).

use tether_bundle::*;

fn writer(sections: usize) -> BundleWriter {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "seed".into(),
        family: "detect".into(),
        model_version: "1".into(),
        tool_version: "gen_corpus".into(),
        created_unix_s: 1,
    });
    let t = w
        .add_target(TargetDesc {
            name: "orin".into(),
            arch: CpuArch::Aarch64,
            sm: Some((8, 7)),
            engine: EngineKind::TensorRt,
            tensorrt_version: 100300,
            hardware_compat: 0,
            flags: TARGET_FLAG_EXCLUDE_LEAN_RUNTIME,
        })
        .unwrap();
    let kinds = [
        SectionKind::TensorRtPlan,
        SectionKind::Labels,
        SectionKind::Blob,
    ];
    for i in 0..sections {
        let kind = kinds[i % kinds.len()];
        let s = w
            .add_section(
                kind,
                &format!("s{i}"),
                (i == 0).then_some(t),
                vec![i as u8 + 1; 16],
            )
            .unwrap();
        if kind.is_engine() {
            for (name, mode) in [("in", IoMode::Input), ("out", IoMode::Output)] {
                w.add_tensor(
                    s,
                    TensorDesc {
                        name: name.into(),
                        mode,
                        dtype: DType::F16,
                        layout: Layout::Nhwc,
                        dims: vec![DYNAMIC_DIM, 4, 4, 3],
                    },
                )
                .unwrap();
            }
        }
    }
    w
}

fn main() {
    let dir = std::path::Path::new("corpus/read_bundle");
    std::fs::create_dir_all(dir).unwrap();
    let mut seeds = vec![
        ("empty.bundle", writer(0).to_bytes().unwrap()),
        ("one.bundle", writer(1).to_bytes().unwrap()),
        ("three.bundle", writer(3).to_bytes().unwrap()),
    ];
    let mut w = writer(1);
    w.emulate_newer_minor(2, 8, 0x5a);
    seeds.push(("newer-minor.bundle", w.to_bytes().unwrap()));
    // Two engine sections (#0 and #3), then the same file with its tensor
    // records no longer grouped by section (sections 3, 0, 0, 3), which the
    // reader indexes differently.
    let four = writer(4).to_bytes().unwrap();
    seeds.push(("four.bundle", four.clone()));
    let mut mixed = four;
    // Header: the tensors TableRef is at 104 (offset u64, count u32,
    // record_size u32); FORMAT.md sections 3 and 4.1.
    let offset = u64::from_le_bytes(mixed[104..112].try_into().unwrap()) as usize;
    let stride = u32::from_le_bytes(mixed[116..120].try_into().unwrap()) as usize;
    for (i, section) in [(0usize, 3u32), (2, 0)] {
        let field = offset + i * stride + 8; // TensorRecord.section
        mixed[field..field + 4].copy_from_slice(&section.to_le_bytes());
    }
    assert!(tether_bundle::raw::reseal(&mut mixed));
    let b = Bundle::from_vec(mixed.clone(), Verify::Eager).expect("ungrouped seed is valid");
    assert_eq!(b.tensors(3).len(), 2);
    seeds.push(("ungrouped-tensors.bundle", mixed));
    for (name, bytes) in seeds {
        println!("{name}: {} bytes", bytes.len());
        std::fs::write(dir.join(name), bytes).unwrap();
    }
}
