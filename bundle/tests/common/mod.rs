//! Shared helpers for the integration tests: a sample bundle and typed
//! access to the on-disk records of an image so tests can mutate them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use tether_bundle::raw::{
    FileHeader, HEADER_CRC_OFFSET, IdentityRecord, SectionRecord, TableRef, TargetRecord,
    TensorRecord, header_crc,
};
use tether_bundle::*;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

pub const SECTION_NAMES: [&str; 5] = [
    "model.onnx",
    "plan.orin",
    "labels.txt",
    "empty.bin",
    "config.json",
];

/// Deterministic pseudo-random bytes.
pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn sample_writer() -> BundleWriter {
    let mut w = BundleWriter::new(IdentityDesc {
        name: "yolo-nano-coco".into(),
        family: "detect".into(),
        model_version: "2.1.0".into(),
        tool_version: "tether-pack 0.1.0".into(),
        created_unix_s: 1_760_000_000,
    });
    let cpu = w
        .add_target(TargetDesc {
            name: "cpu-x86_64".into(),
            arch: CpuArch::X86_64,
            sm: None,
            engine: EngineKind::TractCpu,
            tensorrt_version: 0,
            hardware_compat: 0,
            flags: 0,
        })
        .unwrap();
    assert_eq!(cpu, 0);
    let orin = w
        .add_target(TargetDesc {
            name: "orin-sm87-trt10".into(),
            arch: CpuArch::Aarch64,
            sm: Some((8, 7)),
            engine: EngineKind::TensorRt,
            tensorrt_version: 100300,
            hardware_compat: 1,
            flags: TARGET_FLAG_VERSION_COMPATIBLE | TARGET_FLAG_EXCLUDE_LEAN_RUNTIME,
        })
        .unwrap();
    let onnx = w
        .add_section(SectionKind::Onnx, "model.onnx", None, pattern(5000, 1))
        .unwrap();
    let plan = w
        .add_section(
            SectionKind::TensorRtPlan,
            "plan.orin",
            Some(orin),
            pattern(9000, 2),
        )
        .unwrap();
    w.add_section(
        SectionKind::Labels,
        "labels.txt",
        None,
        b"person\nbicycle\ncar\n".to_vec(),
    )
    .unwrap();
    w.add_section(SectionKind::Blob, "empty.bin", None, Vec::new())
        .unwrap();
    w.add_section_with_flags(
        SectionKind::FamilyConfig,
        "config.json",
        Some(cpu),
        0x8000_0001,
        br#"{"conf":0.25}"#.to_vec(),
    )
    .unwrap();
    for s in [onnx, plan] {
        w.add_tensor(
            s,
            TensorDesc {
                name: "images".into(),
                mode: IoMode::Input,
                dtype: DType::F32,
                layout: Layout::Nchw,
                dims: vec![DYNAMIC_DIM, 3, 640, 640],
            },
        )
        .unwrap();
        w.add_tensor(
            s,
            TensorDesc {
                name: "output0".into(),
                mode: IoMode::Output,
                dtype: DType::F16,
                layout: Layout::Unspecified,
                dims: vec![DYNAMIC_DIM, 84, 8400],
            },
        )
        .unwrap();
    }
    w
}

pub fn sample() -> Vec<u8> {
    sample_writer().to_bytes().unwrap()
}

// ----- typed mutation of an image -------------------------------------------

pub fn header(b: &[u8]) -> &FileHeader {
    FileHeader::ref_from_prefix(b).unwrap().0
}

pub fn header_mut(b: &mut [u8]) -> &mut FileHeader {
    FileHeader::mut_from_prefix(b).unwrap().0
}

fn rec_mut<T: FromBytes + IntoBytes + KnownLayout + Immutable>(
    b: &mut [u8],
    t: TableRef,
    i: u32,
) -> &mut T {
    let off = t.offset.get() as usize + i as usize * t.record_size.get() as usize;
    T::mut_from_prefix(&mut b[off..]).unwrap().0
}

pub fn identity_mut(b: &mut [u8]) -> &mut IdentityRecord {
    let t = header(b).identity;
    rec_mut(b, t, 0)
}

pub fn target_mut(b: &mut [u8], i: u32) -> &mut TargetRecord {
    let t = header(b).targets;
    rec_mut(b, t, i)
}

pub fn section_mut(b: &mut [u8], i: u32) -> &mut SectionRecord {
    let t = header(b).sections;
    rec_mut(b, t, i)
}

pub fn section(b: &[u8], i: u32) -> SectionRecord {
    let t = header(b).sections;
    let off = t.offset.get() as usize + i as usize * t.record_size.get() as usize;
    SectionRecord::read_from_prefix(&b[off..]).unwrap().0
}

pub fn tensor_mut(b: &mut [u8], i: u32) -> &mut TensorRecord {
    let t = header(b).tensors;
    rec_mut(b, t, i)
}

/// Absolute file offset of the string that section `i`'s name refers to.
pub fn section_name_offset(b: &[u8], i: u32) -> usize {
    let s = section(b, i);
    header(b).strings.offset.get() as usize + s.name.offset.get() as usize
}

pub fn manifest_end(b: &[u8]) -> usize {
    let h = header(b);
    (h.manifest_offset.get() + h.manifest_length.get()) as usize
}

/// Recomputes only the header CRC.
pub fn fix_header_crc(b: &mut [u8]) {
    let hs = header(b).header_size.get() as usize;
    let crc = header_crc(&b[..hs]).unwrap();
    b[HEADER_CRC_OFFSET..HEADER_CRC_OFFSET + 4].copy_from_slice(&crc.to_le_bytes());
}

/// Recomputes the whole-file, manifest and header CRCs.
pub fn reseal(b: &mut [u8]) {
    assert!(tether_bundle::raw::reseal(b));
}

/// Applies `f`, reseals, and returns the image.
pub fn mutated(f: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut b = sample();
    f(&mut b);
    reseal(&mut b);
    b
}

pub fn open_err(bytes: Vec<u8>, verify: Verify) -> BundleError {
    match Bundle::from_vec(bytes, verify) {
        Ok(b) => panic!("expected an error, bundle opened: {b:?}"),
        Err(e) => e,
    }
}

/// Exercises every accessor (the results are not checked).
pub fn touch_everything(b: &Bundle) {
    let id = b.identity();
    let _ = (id.name.len(), id.content_digest_hex());
    let _ = (b.format_version(), b.file_len(), b.path());
    for t in b.targets() {
        let _ = (
            t.excludes_lean_runtime(),
            t.tensorrt_version_parts(),
            b.target(t.index),
        );
    }
    let _ = b.target(u32::MAX);
    for s in b.sections() {
        let _ = b.section_bytes(&s);
        let _ = b.section(s.name);
        let _ = b.find_section(s.kind, s.target);
        for t in b.tensors(s.index) {
            let _ = (t.element_count(), t.byte_size(), t.dims.to_vec());
            let _ = format!("{} {} {} {:?}", t.dtype, t.mode, t.layout, t.dims);
        }
    }
    let _ = b.all_tensors().count();
    let _ = b.section_at(u32::MAX);
    let _ = b.section("no such section");
    let _ = b.verify_all();
    let _ = format!("{b:?}");
}

// ----- temporary directories (no external crate) ----------------------------

pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        use std::sync::atomic::{AtomicU32, Ordering};
        static N: AtomicU32 = AtomicU32::new(0);
        let p = std::env::temp_dir().join(format!(
            "tether-bundle-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
