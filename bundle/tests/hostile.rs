//! A corpus of deliberately broken bundles. Each test builds a valid bundle
//! with the writer, damages it in one specific way, and checks that the
//! reader reports that damage with the right error variant and a message
//! naming the section and the values seen.

mod common;

use common::*;
use tether_bundle::raw::HEADER_SIZE_V1;
use tether_bundle::*;
use zerocopy::little_endian::{I64, U16, U32, U64};

fn msg(e: &BundleError) -> String {
    e.to_string()
}

#[track_caller]
fn assert_msg(e: &BundleError, parts: &[&str]) {
    let m = msg(e);
    for p in parts {
        assert!(m.contains(p), "message {m:?} does not contain {p:?}");
    }
}

#[test]
fn sample_is_valid() {
    let b = Bundle::from_vec(sample(), Verify::Eager).unwrap();
    let r = b.verify_all().unwrap();
    assert_eq!(r.sections_checked, 5);
    assert_eq!(r.bytes_checked, b.file_len());
}

// ----- truncation --------------------------------------------------------------

#[test]
fn truncated_within_header_at_every_length() {
    let full = sample();
    let header_size = header(&full).header_size.get() as usize;
    assert_eq!(header_size, HEADER_SIZE_V1);
    for len in 0..=header_size {
        let e = open_err(full[..len].to_vec(), Verify::Lazy);
        match &e {
            BundleError::Truncated { needed, actual, .. } => {
                assert_eq!(*actual, len as u64, "len {len}");
                assert!(*needed > len as u64, "len {len}: {e}");
            }
            other => panic!("len {len}: expected Truncated, got {other:?}"),
        }
        assert_msg(&e, &[&format!("the file has {len}")]);
    }
}

#[test]
fn truncated_beyond_header() {
    let full = sample();
    let total = full.len();
    let mut lengths: Vec<usize> = (HEADER_SIZE_V1 + 1..total).step_by(331).collect();
    lengths.extend([total - 1, manifest_end(&full), manifest_end(&full) - 1]);
    for len in lengths {
        for verify in [Verify::Eager, Verify::Lazy] {
            let e = open_err(full[..len].to_vec(), verify);
            assert!(
                matches!(e, BundleError::Truncated { what: "file", needed, actual }
                    if needed == total as u64 && actual == len as u64),
                "len {len}: {e:?}"
            );
            assert_msg(&e, &[&total.to_string(), &len.to_string()]);
        }
    }
}

#[test]
fn longer_than_declared() {
    let mut b = sample();
    let n = b.len();
    b.push(0);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(e, BundleError::FileLengthMismatch { declared, actual }
            if declared == n as u64 && actual == n as u64 + 1),
        "{e:?}"
    );
}

// ----- header ----------------------------------------------------------------------

#[test]
fn bad_magic() {
    let mut b = sample();
    b[1] = b'X';
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(e, BundleError::BadMagic { found } if found[1] == b'X'),
        "{e:?}"
    );
    assert_msg(&e, &["not a tether bundle", "8958424e44"]);
}

#[test]
fn newer_major_rejected() {
    let b = mutated(|b| header_mut(b).major = U16::new(2));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::UnsupportedVersion {
                found_major: 2,
                found_minor: 1,
                supported_major: 1,
                supported_minor: 1
            }
        ),
        "{e:?}"
    );
    assert_msg(&e, &["2.1", "major version 1"]);
}

#[test]
fn older_major_rejected_even_with_bad_crc() {
    let mut b = sample();
    header_mut(&mut b).major = U16::new(0);
    header_mut(&mut b).minor = U16::new(9);
    let e = open_err(b, Verify::Lazy);
    assert!(matches!(
        e,
        BundleError::UnsupportedVersion {
            found_major: 0,
            found_minor: 9,
            ..
        }
    ));
    assert_msg(&e, &["0.9"]);
}

#[test]
fn newer_minor_same_sizes_is_read() {
    let b = mutated(|b| header_mut(b).minor = U16::new(3));
    let b = Bundle::from_vec(b, Verify::Eager).unwrap();
    assert_eq!(b.format_version(), (1, 3));
    b.verify_all().unwrap();
}

#[test]
fn newer_minor_with_larger_records_is_read() {
    let base = Bundle::from_vec(sample(), Verify::Eager).unwrap();
    let mut w = sample_writer();
    w.emulate_newer_minor(7, 24, 0xA5);
    let bytes = w.to_bytes().unwrap();
    let h = header(&bytes);
    assert_eq!(h.header_size.get() as usize, HEADER_SIZE_V1 + 24);
    assert_eq!(h.sections.record_size.get(), 40 + 24);
    assert_eq!(h.tensors.record_size.get(), 80 + 24);
    let newer = Bundle::from_vec(bytes, Verify::Eager).unwrap();
    assert_eq!(newer.format_version(), (1, 7));
    assert_eq!(newer.identity(), base.identity());
    assert!(newer.targets().eq(base.targets()));
    assert_eq!(newer.sections().len(), base.sections().len());
    for (a, b) in newer.sections().zip(base.sections()) {
        assert_eq!(
            (a.index, a.kind, a.name, a.target),
            (b.index, b.kind, b.name, b.target)
        );
        assert_eq!((a.flags, a.length, a.crc32), (b.flags, b.length, b.crc32));
        assert_eq!(
            newer.section_bytes(&a).unwrap(),
            base.section_bytes(&b).unwrap()
        );
        let ta: Vec<_> = newer
            .tensors(a.index)
            .map(|t| (t.name, t.dtype, t.dims.to_vec()))
            .collect();
        let tb: Vec<_> = base
            .tensors(b.index)
            .map(|t| (t.name, t.dtype, t.dims.to_vec()))
            .collect();
        assert_eq!(ta, tb);
    }
    newer.verify_all().unwrap();
}

#[test]
fn header_size_too_small() {
    let mut b = sample();
    header_mut(&mut b).header_size = U32::new(100);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::HeaderTooSmall {
                header_size: 100,
                min: 144
            }
        ),
        "{e:?}"
    );
}

#[test]
fn header_crc_flip() {
    let mut b = sample();
    let stored = header(&b).header_crc32.get();
    header_mut(&mut b).header_crc32 = U32::new(stored ^ 0x10);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(e, BundleError::HeaderCrcMismatch { stored: s, computed: c }
            if s == stored ^ 0x10 && c == stored),
        "{e:?}"
    );
    assert_msg(
        &e,
        &[
            &format!("{:#010x}", stored ^ 0x10),
            &format!("{stored:#010x}"),
        ],
    );

    // A flipped bit anywhere in the header (here: a reserved byte).
    let mut b = sample();
    b[140] ^= 1;
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::HeaderCrcMismatch { .. }
    ));
}

#[test]
fn manifest_crc_flip() {
    // The stored CRC is wrong (header CRC fixed so the header itself is fine).
    let mut b = sample();
    let stored = header(&b).manifest_crc32.get();
    header_mut(&mut b).manifest_crc32 = U32::new(stored ^ 1);
    fix_header_crc(&mut b);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(e, BundleError::ManifestCrcMismatch { stored: s, computed: c }
            if s == stored ^ 1 && c == stored),
        "{e:?}"
    );
    assert_msg(&e, &["manifest CRC mismatch", &format!("{stored:#010x}")]);

    // A manifest byte is damaged.
    let mut b = sample();
    let at = section_name_offset(&b, 0);
    b[at] ^= 0x20;
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(e, BundleError::ManifestCrcMismatch { stored: s, .. } if s == stored),
        "{e:?}"
    );
}

#[test]
fn manifest_out_of_range() {
    let b = mutated(|b| {
        let len = b.len() as u64;
        header_mut(b).manifest_length = U64::new(len);
    });
    let e = open_err(b, Verify::Lazy);
    assert!(matches!(e, BundleError::ManifestOutOfRange { .. }), "{e:?}");
    let b = mutated(|b| header_mut(b).manifest_offset = U64::new(16));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::ManifestOutOfRange {
                offset: 16,
                min_offset: 144,
                ..
            }
        ),
        "{e:?}"
    );
    let b = mutated(|b| header_mut(b).manifest_offset = U64::new(u64::MAX));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::ManifestOutOfRange { .. }
    ));
}

// ----- tables ------------------------------------------------------------------------

#[test]
fn record_size_too_small() {
    let b = mutated(|b| header_mut(b).sections.record_size = U32::new(39));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::RecordTooSmall {
                table: "sections",
                record_size: 39,
                min: 40
            }
        ),
        "{e:?}"
    );
    assert_msg(&e, &["sections", "39", "40"]);

    let b = mutated(|b| header_mut(b).tensors.record_size = U32::new(0));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::RecordTooSmall {
            table: "tensors",
            record_size: 0,
            min: 80
        }
    ));
}

#[test]
fn string_table_record_size() {
    let b = mutated(|b| header_mut(b).strings.record_size = U32::new(2));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::BadStringTable { record_size: 2 }
    ));
}

#[test]
fn table_out_of_range() {
    let b = mutated(|b| {
        let len = b.len() as u64;
        header_mut(b).tensors.offset = U64::new(len);
    });
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::TableOutOfRange {
                table: "tensors",
                count: 4,
                record_size: 80,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(&e, &["tensors table", "outside the manifest"]);

    // Counts and sizes whose product would overflow a u32.
    let b = mutated(|b| {
        header_mut(b).tensors.count = U32::new(u32::MAX);
        header_mut(b).tensors.record_size = U32::new(u32::MAX);
    });
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::TableOutOfRange {
            table: "tensors",
            ..
        }
    ));

    // Offset + length overflowing a u64.
    let b = mutated(|b| header_mut(b).targets.offset = U64::new(u64::MAX - 3));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::TableOutOfRange {
            table: "targets",
            ..
        }
    ));

    // A table placed in the header, before the manifest.
    let b = mutated(|b| header_mut(b).identity.offset = U64::new(0));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::TableOutOfRange {
            table: "identity",
            ..
        }
    ));
}

#[test]
fn tables_overlap() {
    let b = mutated(|b| {
        let t = header(b).targets.offset;
        header_mut(b).sections.offset = t;
        header_mut(b).sections.count = U32::new(1);
    });
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::TableOverlap {
                first: "targets",
                second: "sections"
            }
        ),
        "{e:?}"
    );
}

#[test]
fn identity_count() {
    for count in [0, 2] {
        let b = mutated(|b| header_mut(b).identity.count = U32::new(count));
        let e = open_err(b, Verify::Lazy);
        assert!(
            matches!(e, BundleError::BadIdentityCount { count: c } if c == count),
            "{e:?}"
        );
    }
}

#[test]
fn too_many_sections() {
    let b = mutated(|b| header_mut(b).sections.count = U32::new(MAX_SECTIONS as u32 + 1));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::TooManySections {
                count: 4097,
                max: 4096
            }
        ),
        "{e:?}"
    );
    assert_msg(&e, &["4097", "4096"]);
    let b = mutated(|b| header_mut(b).sections.count = U32::new(u32::MAX));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::TooManySections { .. }
    ));
}

// ----- strings -----------------------------------------------------------------------

#[test]
fn string_ref_out_of_range() {
    let b = mutated(|b| section_mut(b, 2).name.offset = U32::new(60_000));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::StringOutOfRange {
                table: "sections",
                index: 2,
                field: "name",
                offset: 60_000,
                ..
            }
        ),
        "{e:?}"
    );
    assert_msg(&e, &["sections record #2", "60000"]);

    // offset + len overflowing u32.
    let b = mutated(|b| {
        let t = target_mut(b, 1);
        t.name.offset = U32::new(u32::MAX);
        t.name.len = U32::new(10);
    });
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::StringOutOfRange {
            table: "targets",
            index: 1,
            ..
        }
    ));
}

#[test]
fn string_too_long() {
    let b = mutated(|b| identity_mut(b).family.len = U32::new(256));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::StringTooLong {
                table: "identity",
                field: "family",
                len: 256,
                max: 255,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn non_utf8_string() {
    let b = mutated(|b| {
        let at = section_name_offset(b, 1);
        b[at + 2] = 0xFF;
    });
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(
            e,
            BundleError::InvalidUtf8 {
                table: "sections",
                index: 1,
                field: "name",
                valid_up_to: 2,
                ..
            }
        ),
        "{e:?}"
    );
    // The section's name cannot be read, so the message names its index,
    // plus a lossy rendering of the bytes.
    assert_msg(&e, &["sections record #1", "pl\u{fffd}n.orin"]);
}

#[test]
fn hostile_string_in_error_is_truncated() {
    // A 255-byte tensor name in a tensor pointing at a bad section: the
    // message carries at most 64 characters of it.
    let mut w = BundleWriter::new(IdentityDesc {
        name: "x".into(),
        ..Default::default()
    });
    let s = w
        .add_section(SectionKind::Onnx, "m", None, vec![1])
        .unwrap();
    let long = "n".repeat(255);
    w.add_tensor(
        s,
        TensorDesc {
            name: long.clone(),
            mode: IoMode::Input,
            dtype: DType::F32,
            layout: Layout::Nchw,
            dims: vec![1],
        },
    )
    .unwrap();
    let mut b = w.to_bytes().unwrap();
    tensor_mut(&mut b, 0).section = U32::new(7);
    reseal(&mut b);
    let e = open_err(b, Verify::Lazy);
    match &e {
        BundleError::BadTensorSection {
            name,
            section: 7,
            count: 1,
            index: 0,
        } => {
            assert_eq!(name.chars().count(), MAX_ERROR_STRING_CHARS + 1);
            assert!(name.ends_with('…'));
        }
        other => panic!("{other:?}"),
    }
    assert!(!msg(&e).contains(&long));
}

// ----- sections ----------------------------------------------------------------------

#[test]
fn section_crc_flip_eager_fails_at_open() {
    let b = mutated(|b| {
        let off = section(b, 1).offset.get() as usize;
        b[off + 100] ^= 0x01;
    });
    let stored = section(&b, 1).crc32.get();
    let e = open_err(b, Verify::Eager);
    assert!(
        matches!(&e, BundleError::SectionCrcMismatch { section, stored: s, computed }
            if section.index == 1 && section.name.as_deref() == Some("plan.orin")
               && *s == stored && *computed != stored),
        "{e:?}"
    );
    assert_msg(
        &e,
        &[
            "section `plan.orin` (#1) CRC mismatch",
            &format!("stored {stored:#010x}"),
        ],
    );
}

#[test]
fn section_crc_flip_lazy_fails_on_access_only() {
    let b = mutated(|b| {
        let off = section(b, 1).offset.get() as usize;
        b[off + 100] ^= 0x01;
    });
    let bundle = Bundle::from_vec(b, Verify::Lazy).expect("lazy open does not read payloads");
    assert!(!bundle.is_section_verified(0));
    // Other sections are still readable.
    for name in ["model.onnx", "labels.txt", "empty.bin", "config.json"] {
        bundle.section_data(name).unwrap();
    }
    assert!(bundle.is_section_verified(0));
    let plan = bundle.section("plan.orin").unwrap();
    for _ in 0..2 {
        let e = bundle.section_bytes(&plan).unwrap_err();
        assert!(
            matches!(&e, BundleError::SectionCrcMismatch { section, .. } if section.index == 1),
            "{e:?}"
        );
        assert_msg(&e, &["`plan.orin`"]);
    }
    assert!(!bundle.is_section_verified(1));
    // Metadata of the broken section is still available.
    assert_eq!(bundle.tensors(1).count(), 2);
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(&e, BundleError::SectionCrcMismatch { section, .. } if section.index == 1),
        "{e:?}"
    );
}

#[test]
fn section_offset_misaligned() {
    let b = mutated(|b| {
        let s = section_mut(b, 1);
        s.offset = U64::new(s.offset.get() + 8);
    });
    let off = section(&b, 1).offset.get();
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::SectionMisaligned { section, offset, align: 4096 }
            if section.index == 1 && *offset == off),
        "{e:?}"
    );
    assert_msg(&e, &["`plan.orin`", &off.to_string(), "4096"]);
}

#[test]
fn overlapping_sections() {
    let b = mutated(|b| {
        let first = section(b, 0).offset;
        section_mut(b, 1).offset = first;
    });
    let s0 = section(&b, 0);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::SectionOverlap { section, previous, previous_end, .. }
            if section.index == 1 && previous.index == 0
               && *previous_end == s0.offset.get() + s0.length.get()),
        "{e:?}"
    );
    assert_msg(&e, &["`plan.orin` (#1)", "`model.onnx` (#0)"]);
}

#[test]
fn sections_out_of_order() {
    // Section 2 moved before section 1 (no byte overlap with its own data,
    // but the table must be in file order).
    let b = mutated(|b| {
        let first = section(b, 0).offset;
        section_mut(b, 2).offset = first;
    });
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::SectionOverlap { .. }
    ));
}

#[test]
fn section_out_of_range() {
    let b = mutated(|b| {
        let s = section_mut(b, 4);
        s.length = U64::new(s.length.get() + 1);
    });
    let len = b.len() as u64;
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::SectionOutOfRange { section, file_len, .. }
            if section.index == 4 && *file_len == len),
        "{e:?}"
    );
    assert_msg(&e, &["`config.json` (#4)", &len.to_string()]);

    // offset + length overflowing u64.
    let b = mutated(|b| section_mut(b, 0).length = U64::new(u64::MAX));
    assert!(matches!(
        open_err(b, Verify::Lazy),
        BundleError::SectionOutOfRange { .. }
    ));

    // A section pointing at the header (aligned, but inside the manifest area).
    let b = mutated(|b| section_mut(b, 0).offset = U64::new(0));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::SectionOutOfRange { offset: 0, .. }),
        "{e:?}"
    );
}

#[test]
fn duplicate_section_names() {
    let b = mutated(|b| {
        let n = section(b, 0).name;
        section_mut(b, 3).name = n;
    });
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::DuplicateSection { name, first: 0, second: 3 } if name == "model.onnx"),
        "{e:?}"
    );
    assert_msg(&e, &["model.onnx", "#0", "#3"]);
}

#[test]
fn bad_target_ref() {
    let b = mutated(|b| section_mut(b, 2).target = U32::new(9));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::BadTargetRef { section, target: 9, count: 2 } if section.index == 2),
        "{e:?}"
    );
    assert_msg(&e, &["`labels.txt`", "#9"]);
}

// ----- tensors -----------------------------------------------------------------------

#[test]
fn bad_tensor_records() {
    let b = mutated(|b| tensor_mut(b, 1).section = U32::new(77));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::BadTensorSection { index: 1, section: 77, count: 5, name } if name == "output0"),
        "{e:?}"
    );

    let b = mutated(|b| tensor_mut(b, 2).rank = 9);
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::RankTooLarge { tensor, rank: 9 } if tensor == "images"),
        "{e:?}"
    );

    let b = mutated(|b| tensor_mut(b, 0).dims[2] = I64::new(-2));
    let e = open_err(b, Verify::Lazy);
    assert!(
        matches!(&e, BundleError::InvalidDim { tensor, axis: 2, value: -2 } if tensor == "images"),
        "{e:?}"
    );

    // Values beyond the rank are ignored.
    let b = mutated(|b| tensor_mut(b, 0).dims[7] = I64::new(-99));
    Bundle::from_vec(b, Verify::Eager).unwrap();
}

// ----- unknown values are reported, not rejected ------------------------------------

#[test]
fn unknown_enum_values_are_reported() {
    let b = mutated(|b| {
        section_mut(b, 2).kind = U32::new(99);
        let t = target_mut(b, 0);
        t.arch = U16::new(77);
        t.engine = U16::new(55);
        let t = tensor_mut(b, 0);
        t.mode = 9;
        t.dtype = 200;
        t.layout = 42;
    });
    let b = Bundle::from_vec(b, Verify::Eager).unwrap();
    assert_eq!(b.section_at(2).unwrap().kind, SectionKind::Unknown(99));
    let t = b.target(0).unwrap();
    assert_eq!(
        (t.arch, t.engine),
        (ArchCode::Unknown(77), EngineCode::Unknown(55))
    );
    // A target this reader cannot decode is no engine to choose.
    assert_eq!(t.offer(), None);
    let t = b.tensors(0).next().unwrap();
    assert_eq!(
        (t.mode, t.dtype, t.layout),
        (IoMode::Unknown(9), DType::Unknown(200), Layout::Unknown(42))
    );
    assert_eq!(t.byte_size(), None);
    b.verify_all().unwrap();
}

// ----- full verification -------------------------------------------------------------

#[test]
fn nonzero_padding_found_by_verify_all() {
    // Between the manifest and the first section.
    let b = mutated(|b| {
        let at = manifest_end(b) + 3;
        b[at] = 0x5a;
    });
    let at = manifest_end(&b) as u64 + 3;
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(&e, BundleError::NonZeroPadding { offset, value: 0x5a, region }
            if *offset == at && region.contains("`model.onnx` (#0)")),
        "{e:?}"
    );
    assert_msg(&e, &["0x5a", &at.to_string()]);

    // Between two sections.
    let b = mutated(|b| {
        let s = section(b, 0);
        let at = (s.offset.get() + s.length.get()) as usize + 10;
        b[at] = 1;
    });
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(&e, BundleError::NonZeroPadding { region, .. } if region.contains("`plan.orin` (#1)")),
        "{e:?}"
    );

    // Between the header and the manifest: a 148-byte header (newer minor)
    // leaves a 4-byte gap before the 8-aligned manifest.
    let mut w = sample_writer();
    w.emulate_newer_minor(1, 4, 0);
    let mut b = w.to_bytes().unwrap();
    assert_eq!(header(&b).manifest_offset.get(), 152);
    b[150] = 9;
    reseal(&mut b);
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(&e, BundleError::NonZeroPadding { offset: 150, value: 9, region } if region.contains("between the header and the manifest")),
        "{e:?}"
    );

    // After the last section.
    let b = mutated(|b| {
        b.extend_from_slice(&[0, 0, 7, 0]);
        let n = b.len() as u64;
        header_mut(b).file_length = U64::new(n);
    });
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(&e, BundleError::NonZeroPadding { value: 7, region, .. } if region.contains("after the last section")),
        "{e:?}"
    );
}

#[test]
fn trailing_zero_padding_is_accepted() {
    let b = mutated(|b| {
        b.extend_from_slice(&[0; 100]);
        let n = b.len() as u64;
        header_mut(b).file_length = U64::new(n);
    });
    Bundle::from_vec(b, Verify::Eager)
        .unwrap()
        .verify_all()
        .unwrap();
}

#[test]
fn file_crc_mismatch() {
    let mut b = sample();
    let stored = header(&b).file_crc32.get();
    header_mut(&mut b).file_crc32 = U32::new(!stored);
    fix_header_crc(&mut b);
    let len = b.len() as u64;
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(e, BundleError::FileCrcMismatch { start: 144, end, stored: s, computed: c }
            if end == len && s == !stored && c == stored),
        "{e:?}"
    );
    assert_msg(&e, &["whole-file CRC", &format!("{stored:#010x}")]);
}

#[test]
fn digest_mismatch() {
    let b = mutated(|b| identity_mut(b).content_digest[5] ^= 0xff);
    let bundle = Bundle::from_vec(b, Verify::Eager).unwrap();
    let stored = bundle.identity().content_digest;
    let e = bundle.verify_all().unwrap_err();
    assert!(
        matches!(e, BundleError::DigestMismatch { stored: s, computed } if s == stored && computed != stored),
        "{e:?}"
    );
    assert_msg(&e, &[&bundle.identity().content_digest_hex()]);
}

// ----- random damage never panics -----------------------------------------------------

#[test]
fn random_damage_never_panics() {
    let base = sample();
    let meta_end = manifest_end(&base);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut opened = 0;
    for round in 0..3000 {
        let mut b = base.clone();
        for _ in 0..1 + next() % 4 {
            // Mostly hit the header and the manifest, where parsing happens.
            let at = if next() % 8 == 0 {
                next() as usize % b.len()
            } else {
                next() as usize % meta_end
            };
            b[at] = next() as u8;
        }
        if next() % 4 == 0 {
            let cut = next() as usize % b.len();
            b.truncate(cut);
        }
        if round % 2 == 0 {
            let _ = tether_bundle::raw::reseal(&mut b);
        }
        let verify = if round % 3 == 0 {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        if let Ok(bundle) = Bundle::from_vec(b, verify) {
            opened += 1;
            touch_everything(&bundle);
        }
    }
    assert!(opened > 0);
}
