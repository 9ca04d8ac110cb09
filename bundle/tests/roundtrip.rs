//! Writer → reader round trips, the on-file layout, atomic writes, mmap
//! alignment, and the writer's input validation.

mod common;

use common::*;
use sha2::{Digest, Sha256};
use tether_bundle::*;

#[test]
fn round_trip_every_field() {
    let bytes = sample();
    let b = Bundle::from_vec(bytes.clone(), Verify::Eager).unwrap();
    assert_eq!(b.format_version(), (FORMAT_MAJOR, FORMAT_MINOR));
    assert_eq!(b.file_len(), bytes.len() as u64);
    assert_eq!(b.path(), None);
    assert_eq!(b.as_bytes(), &bytes[..]);
    assert_eq!(&bytes[..8], &MAGIC);

    let id = b.identity();
    assert_eq!(id.name, "yolo-nano-coco");
    assert_eq!(id.family, "detect");
    assert_eq!(id.model_version, "2.1.0");
    assert_eq!(id.tool_version, "tether-pack 0.1.0");
    assert_eq!(id.created_unix_s, 1_760_000_000);
    let mut sha = Sha256::new();
    for s in b.sections() {
        sha.update(b.section_bytes(&s).unwrap());
    }
    assert_eq!(id.content_digest, <[u8; 32]>::from(sha.finalize()));
    assert_eq!(id.content_digest_hex().len(), 64);

    let targets: Vec<_> = b.targets().collect();
    assert_eq!(b.targets().len(), 2);
    assert_eq!(targets[0].name, "cpu-x86_64");
    assert_eq!(targets[0].arch, CpuArch::X86_64);
    assert_eq!(targets[0].sm, None);
    assert_eq!(targets[0].engine, EngineKind::TractCpu);
    assert_eq!(targets[0].tensorrt_version_parts(), None);
    let orin = b.target(1).unwrap();
    assert_eq!(orin, targets[1]);
    assert_eq!(orin.index, 1);
    assert_eq!(orin.name, "orin-sm87-trt10");
    assert_eq!(orin.arch, CpuArch::Aarch64);
    assert_eq!(orin.sm, Some((8, 7)));
    assert_eq!(orin.engine, EngineKind::TensorRt);
    assert_eq!(orin.tensorrt_version, 100300);
    assert_eq!(orin.tensorrt_version_parts(), Some((10, 3, 0)));
    assert_eq!(orin.hardware_compat, 1);
    assert!(orin.is_version_compatible() && orin.excludes_lean_runtime());
    // The record as engine selection takes it: the same fields, the one
    // vocabulary.
    let offer = orin.offer().unwrap();
    assert_eq!(
        offer,
        tether_targets::Offer {
            index: 1,
            engine: EngineKind::TensorRt,
            arch: CpuArch::Aarch64,
            sm: Some(tether_targets::Sm::new(8, 7)),
            tensorrt_version: 100300,
            hardware_compat: 1,
            flags: TARGET_FLAG_VERSION_COMPATIBLE | TARGET_FLAG_EXCLUDE_LEAN_RUNTIME,
        }
    );
    assert_eq!(
        targets[0].offer().map(|o| o.engine),
        Some(EngineKind::TractCpu)
    );
    assert!(matches!(
        b.target(2),
        Err(BundleError::TargetNotFound { index: 2, count: 2 })
    ));

    let sections: Vec<_> = b.sections().collect();
    assert_eq!(b.sections().len(), 5);
    let names: Vec<_> = sections.iter().map(|s| s.name).collect();
    assert_eq!(names, SECTION_NAMES);
    let kinds: Vec<_> = sections.iter().map(|s| s.kind).collect();
    assert_eq!(
        kinds,
        [
            SectionKind::Onnx,
            SectionKind::TensorRtPlan,
            SectionKind::Labels,
            SectionKind::Blob,
            SectionKind::FamilyConfig
        ]
    );
    assert_eq!(sections[1].target, Some(1));
    assert_eq!(sections[4].target, Some(0));
    assert_eq!(sections[4].flags, 0x8000_0001);
    assert_eq!(b.section_data("model.onnx").unwrap(), &pattern(5000, 1)[..]);
    assert_eq!(b.section_data("plan.orin").unwrap(), &pattern(9000, 2)[..]);
    assert_eq!(
        b.section_data("labels.txt").unwrap(),
        b"person\nbicycle\ncar\n"
    );
    assert_eq!(b.section_data("empty.bin").unwrap(), b"");
    for s in &sections {
        assert_eq!(s.offset % SECTION_ALIGN, 0, "{}", s.name);
        assert_eq!(s.crc32, crc32fast::hash(b.section_bytes(s).unwrap()));
        assert_eq!(b.section_at(s.index).unwrap(), *s);
        assert!(b.is_section_verified(s.index));
    }
    let e = b.section("nope").unwrap_err();
    assert!(matches!(&e, BundleError::MissingSection { name } if name == "nope"));
    assert_eq!(e.to_string(), "no section named `nope`");

    assert_eq!(
        b.find_section(SectionKind::TensorRtPlan, Some(1))
            .unwrap()
            .name,
        "plan.orin"
    );
    assert_eq!(
        b.find_section(SectionKind::Onnx, None).unwrap().name,
        "model.onnx"
    );
    assert!(b.find_section(SectionKind::TensorRtPlan, None).is_none());
    assert!(b.find_section(SectionKind::Tokenizer, None).is_none());

    assert_eq!(b.tensor_count(), 4);
    for s in [0, 1] {
        let t: Vec<_> = b.tensors(s).collect();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].name, "images");
        assert_eq!(t[0].section, s);
        assert_eq!(t[0].mode, IoMode::Input);
        assert_eq!(t[0].dtype, DType::F32);
        assert_eq!(t[0].layout, Layout::Nchw);
        assert_eq!(t[0].dims.to_vec(), [-1, 3, 640, 640]);
        assert_eq!(t[0].dims.len(), 4);
        assert!(t[0].dims.is_dynamic());
        assert_eq!(t[0].dims.get(1), Some(3));
        assert_eq!(t[0].dims.get(4), None);
        assert_eq!(t[0].dims.as_slice()[2].get(), 640);
        assert_eq!(t[0].element_count(), None);
        assert_eq!(t[1].name, "output0");
        assert_eq!(t[1].mode, IoMode::Output);
        assert_eq!(t[1].dtype, DType::F16);
        assert_eq!(t[1].dims.iter().collect::<Vec<_>>(), [-1, 84, 8400]);
        assert_eq!(format!("{:?}", t[1].dims), "[-1, 84, 8400]");
    }
    assert_eq!(b.tensors(2).count(), 0);
    assert_eq!(b.tensors(999).count(), 0);
    assert_eq!(b.all_tensors().count(), 4);

    let r = b.verify_all().unwrap();
    assert_eq!(
        r,
        VerifyReport {
            bytes_checked: bytes.len() as u64,
            sections_checked: 5
        }
    );
}

#[test]
fn static_shapes_have_sizes() {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "s".into(),
        ..Default::default()
    });
    let s = w
        .add_section(SectionKind::TensorRtPlan, "p", None, vec![0; 10])
        .unwrap();
    for (name, dims, dtype) in [
        ("a", vec![1, 3, 4, 4], DType::F16),
        ("scalar", vec![], DType::I64),
    ] {
        w.add_tensor(
            s,
            TensorDesc {
                name: name.into(),
                mode: IoMode::Input,
                dtype,
                layout: Layout::Unspecified,
                dims,
            },
        )
        .unwrap();
    }
    let b = Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap();
    let t: Vec<_> = b.tensors(0).collect();
    assert_eq!(t[0].element_count(), Some(48));
    assert_eq!(t[0].byte_size(), Some(96));
    assert!(t[1].dims.is_empty());
    assert_eq!(t[1].element_count(), Some(1));
    assert_eq!(t[1].byte_size(), Some(8));
}

#[test]
fn layout_is_deterministic_and_padded() {
    let a = sample();
    let b = sample();
    assert_eq!(a, b, "same input, same bytes");
    let bundle = Bundle::from_vec(a.clone(), Verify::Lazy).unwrap();
    let mut prev_end = manifest_end(&a) as u64;
    for s in bundle.sections() {
        assert!(s.offset >= prev_end);
        assert!(s.offset - prev_end < SECTION_ALIGN);
        assert!(
            a[prev_end as usize..s.offset as usize]
                .iter()
                .all(|&x| x == 0),
            "padding before {}",
            s.name
        );
        prev_end = s.offset + s.length;
    }
    assert_eq!(prev_end, a.len() as u64, "file ends with the last section");
}

#[test]
fn empty_bundle_round_trips() {
    let w = BundleWriter::new(IdentityDesc {
        name: "empty".into(),
        ..Default::default()
    });
    let b = Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap();
    assert_eq!(b.sections().len(), 0);
    assert_eq!(b.targets().len(), 0);
    assert_eq!(b.identity().name, "empty");
    assert_eq!(b.identity().family, "");
    assert_eq!(
        b.identity().content_digest,
        <[u8; 32]>::from(Sha256::digest(b""))
    );
    assert_eq!(b.verify_all().unwrap().sections_checked, 0);
}

#[test]
fn write_is_atomic_and_mmap_sections_are_page_aligned() {
    let dir = TempDir::new("mmap");
    let path = dir.path().join("model.bundle");
    std::fs::write(&path, b"old contents").unwrap();
    let summary = sample_writer().write(&path).unwrap();
    assert_eq!(summary.path, path);
    assert_eq!(summary.sections, 5);
    let bytes = std::fs::read(&path).unwrap();
    assert_eq!(bytes, sample(), "write() and to_bytes() agree");
    assert_eq!(summary.file_len, bytes.len() as u64);
    assert_eq!(summary.file_crc32, header(&bytes).file_crc32.get());
    // Only the final file is left in the directory.
    let entries: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, ["model.bundle"]);

    for verify in [Verify::Eager, Verify::Lazy] {
        let b = Bundle::open(&path, verify).unwrap();
        assert_eq!(b.path(), Some(path.as_path()));
        assert_eq!(b.identity().content_digest, summary.content_digest);
        assert_eq!(
            b.as_bytes().as_ptr() as usize % 4096,
            0,
            "mapping is page aligned"
        );
        for s in b.sections() {
            let data = b.section_bytes(&s).unwrap();
            assert_eq!(data.len() as u64, s.length);
            assert_eq!(
                data.as_ptr() as usize % SECTION_ALIGN as usize,
                0,
                "section {} at {:p}",
                s.name,
                data.as_ptr()
            );
        }
        b.verify_all().unwrap();
    }

    // Rewriting while a bundle is open (atomic rename) leaves the open
    // mapping intact.
    let open = Bundle::open(&path, Verify::Lazy).unwrap();
    let mut w = sample_writer();
    w.add_section(SectionKind::Blob, "more", None, vec![7; 10])
        .unwrap();
    w.write(&path).unwrap();
    assert_eq!(open.sections().len(), 5);
    open.verify_all().unwrap();
    assert_eq!(
        Bundle::open(&path, Verify::Eager).unwrap().sections().len(),
        6
    );
}

#[test]
fn open_errors_name_the_path() {
    let dir = TempDir::new("open");
    let missing = dir.path().join("missing.bundle");
    let e = Bundle::open(&missing, Verify::Eager).unwrap_err();
    assert!(matches!(&e, BundleError::Io { op: "opening", .. }), "{e:?}");
    assert!(e.to_string().contains("missing.bundle"), "{e}");

    let empty = dir.path().join("empty.bundle");
    std::fs::write(&empty, b"").unwrap();
    let e = Bundle::open(&empty, Verify::Eager).unwrap_err();
    assert!(
        matches!(
            e,
            BundleError::Truncated {
                what: "magic",
                actual: 0,
                ..
            }
        ),
        "{e:?}"
    );

    // A missing directory is named, with the path the caller gave (not the
    // temporary file's).
    let e = sample_writer()
        .write(dir.path().join("no-such-dir/x.bundle"))
        .unwrap_err();
    assert!(
        matches!(
            &e,
            BundleError::File(files::FileError::MissingDirectory { .. })
        ),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("no-such-dir/x.bundle") && !msg.contains(".tmp-"),
        "{msg}"
    );
}

#[test]
fn bundle_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Bundle>();
    check::<BundleError>();
}

#[test]
fn lazy_verification_across_threads() {
    let b = Bundle::from_vec(sample(), Verify::Lazy).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for sec in b.sections() {
                    b.section_bytes(&sec).unwrap();
                }
            });
        }
    });
    assert!((0..5).all(|i| b.is_section_verified(i)));
}

// ----- writer validation -------------------------------------------------------------

fn tensor(name: &str, dims: Vec<i64>) -> TensorDesc {
    TensorDesc {
        name: name.into(),
        mode: IoMode::Input,
        dtype: DType::F32,
        layout: Layout::Nchw,
        dims,
    }
}

#[test]
fn writer_rejects_bad_input() {
    let mut w = sample_writer();

    let e = w
        .add_section(SectionKind::Blob, "model.onnx", None, vec![])
        .unwrap_err();
    assert!(
        matches!(&e, BundleError::DuplicateSection { name, first: 0, second: 5 } if name == "model.onnx")
    );

    let e = w
        .add_section(SectionKind::Blob, "", None, vec![])
        .unwrap_err();
    assert!(matches!(
        e,
        BundleError::EmptyName {
            what: "section name"
        }
    ));

    let long = "x".repeat(MAX_NAME_LEN + 1);
    let e = w
        .add_section(SectionKind::Blob, &long, None, vec![])
        .unwrap_err();
    assert!(matches!(
        &e,
        BundleError::NameTooLong {
            what: "section name",
            len: 256,
            ..
        }
    ));
    assert!(
        !e.to_string().contains(&long),
        "name is truncated in the message"
    );
    w.add_section(SectionKind::Blob, &"y".repeat(MAX_NAME_LEN), None, vec![])
        .unwrap();

    let e = w
        .add_section(SectionKind::Blob, "t", Some(2), vec![])
        .unwrap_err();
    assert!(matches!(
        e,
        BundleError::TargetNotFound { index: 2, count: 2 }
    ));

    let e = w.add_tensor(0, tensor("images", vec![1])).unwrap_err();
    assert!(
        matches!(&e, BundleError::DuplicateTensor { section, tensor } if section == "model.onnx" && tensor == "images")
    );

    let e = w.add_tensor(0, tensor("deep", vec![1; 9])).unwrap_err();
    assert!(matches!(&e, BundleError::RankTooLarge { tensor, rank: 9 } if tensor == "deep"));
    assert!(e.to_string().contains("maximum 8"));
    w.add_tensor(0, tensor("rank8", vec![1; 8])).unwrap();

    let e = w.add_tensor(0, tensor("neg", vec![1, -3])).unwrap_err();
    assert!(matches!(
        e,
        BundleError::InvalidDim {
            axis: 1,
            value: -3,
            ..
        }
    ));

    let e = w.add_tensor(2, tensor("x", vec![1])).unwrap_err();
    assert!(
        matches!(&e, BundleError::NotAnEngineSection { section, kind: SectionKind::Labels } if section == "labels.txt")
    );

    let e = w.add_tensor(99, tensor("x", vec![1])).unwrap_err();
    assert!(matches!(e, BundleError::SectionNotFound { index: 99, .. }));

    let e = w
        .add_target(TargetDesc {
            name: "bad".into(),
            arch: CpuArch::Any,
            sm: Some((0, 5)),
            engine: EngineKind::TensorRt,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        })
        .unwrap_err();
    assert!(matches!(
        e,
        BundleError::InvalidSm {
            major: 0,
            minor: 5,
            ..
        }
    ));

    // The writer is still usable after rejected calls.
    Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager)
        .unwrap()
        .verify_all()
        .unwrap();
}

#[test]
fn writer_validates_identity() {
    let w = BundleWriter::new(IdentityDesc::default());
    assert!(matches!(
        w.to_bytes(),
        Err(BundleError::EmptyName {
            what: "bundle name"
        })
    ));
    let w = BundleWriter::new(IdentityDesc {
        name: "n".into(),
        tool_version: "v".repeat(300),
        ..Default::default()
    });
    assert!(matches!(
        w.to_bytes(),
        Err(BundleError::NameTooLong {
            what: "tool version",
            len: 300,
            ..
        })
    ));
}

#[test]
fn writer_caps_section_count() {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "many".into(),
        ..Default::default()
    });
    for i in 0..MAX_SECTIONS {
        w.add_section(SectionKind::Blob, &format!("s{i}"), None, Vec::new())
            .unwrap();
    }
    let e = w
        .add_section(SectionKind::Blob, "one-too-many", None, Vec::new())
        .unwrap_err();
    assert!(matches!(
        e,
        BundleError::TooManySections {
            count: 4097,
            max: 4096
        }
    ));
    // The maximum itself reads back (and duplicate detection scales).
    let b = Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap();
    assert_eq!(b.sections().len(), MAX_SECTIONS);
    assert_eq!(b.section("s4095").unwrap().index, 4095);
    b.verify_all().unwrap();
}

/// The hexdump in FORMAT.md section 11 is exactly what the writer produces
/// for that input, and decodes as the text there says.
#[test]
fn format_md_example_matches_writer() {
    let doc = include_str!("../FORMAT.md");
    let example = doc.split("## 11. Example").nth(1).unwrap();
    let mut expected = Vec::new();
    for line in example.lines().filter(|l| l.get(8..9) == Some(":")) {
        let hex_part = line[10..].split("  ").next().unwrap();
        let hex: String = hex_part.chars().filter(|c| !c.is_whitespace()).collect();
        for i in (0..hex.len()).step_by(2) {
            expected.push(u8::from_str_radix(&hex[i..i + 2], 16).unwrap());
        }
    }
    assert_eq!(expected.len(), 273);

    let mut w = BundleWriter::new(IdentityDesc {
        name: "seed".into(),
        family: "detect".into(),
        model_version: "1".into(),
        tool_version: "gen_corpus".into(),
        created_unix_s: 1,
    });
    w.add_target(TargetDesc {
        name: "orin".into(),
        arch: CpuArch::Aarch64,
        sm: Some((8, 7)),
        engine: EngineKind::TensorRt,
        tensorrt_version: 100300,
        hardware_compat: 0,
        flags: TARGET_FLAG_EXCLUDE_LEAN_RUNTIME,
    })
    .unwrap();
    assert_eq!(w.to_bytes().unwrap(), expected);

    let b = Bundle::from_vec(expected, Verify::Eager).unwrap();
    let h = header(b.as_bytes());
    assert_eq!(h.header_crc32.get(), 0xc43f8ccf);
    assert_eq!(h.manifest_crc32.get(), 0x7dc2b4b4);
    assert_eq!(h.file_crc32.get(), 0x7dc2b4b4);
    assert_eq!(crc32fast::hash(b"123456789"), 0xCBF43926);
    b.verify_all().unwrap();
}
