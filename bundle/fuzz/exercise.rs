//! What the `read_bundle` fuzz target does with one input; shared with
//! `bundle/tests/fuzz_corpus.rs`, which replays the kept corpus through it as
//! an ordinary test. Must never panic on any input: errors are fine, a
//! failed assertion is a bug.

use tether_bundle::{Bundle, SECTION_ALIGN, Verify};

/// Opens `bytes` in `verify` mode and calls every accessor.
pub fn exercise(bytes: Vec<u8>, verify: Verify) {
    let b = match Bundle::from_vec(bytes, verify) {
        Ok(b) => b,
        Err(e) => {
            let _ = e.to_string();
            return;
        }
    };
    let id = b.identity();
    let _ = (
        id.name,
        id.family,
        id.model_version,
        id.tool_version,
        id.content_digest_hex(),
    );
    let _ = (b.format_version(), b.file_len(), b.path(), format!("{b:?}"));
    // An in-memory bundle cannot change under us.
    assert!(!b.changed_while_open());
    assert!(b.ensure_unchanged().is_ok());

    assert_eq!(b.targets().len(), b.target_count() as usize);
    assert_eq!(b.targets().count(), b.target_count() as usize);
    for t in b.targets() {
        assert_eq!(b.target(t.index).ok(), Some(t));
        let _ = (
            t.excludes_lean_runtime(),
            t.is_version_compatible(),
            t.tensorrt_version_parts(),
        );
        let _ = format!("{} {}", t.arch, t.engine);
    }
    let _ = b.target(b.target_count());

    assert_eq!(b.sections().len(), b.section_count() as usize);
    assert_eq!(b.sections().count(), b.section_count() as usize);
    let mut tensors_seen = 0usize;
    // The per-section lookup against a plain filter of the whole table
    // (quadratic, so only for small tables).
    let cross_check = u64::from(b.section_count()) * u64::from(b.tensor_count()) <= 1 << 16;
    for s in b.sections() {
        assert_eq!(s.offset % SECTION_ALIGN, 0);
        assert!(
            s.offset
                .checked_add(s.length)
                .is_some_and(|e| e <= b.file_len())
        );
        if let Some(t) = s.target {
            assert!(t < b.target_count());
        }
        // Names are unique, so lookup by name finds this very section.
        assert_eq!(b.section(s.name).map(|x| x.index).ok(), Some(s.index));
        let _ = b.find_section(s.kind, s.target);
        let copy = b.section_vec(&s);
        match b.section_bytes(&s) {
            Ok(data) => {
                assert_eq!(data.len() as u64, s.length);
                assert_eq!(copy.as_deref().ok(), Some(data));
            }
            Err(e) => {
                // Eager mode verified everything at open.
                assert_eq!(verify, Verify::Lazy, "{e}");
                assert!(copy.is_err());
            }
        }
        let tensors = b.tensors(s.index);
        let announced = tensors.len();
        let mut yielded = 0usize;
        let mut last = None;
        for t in tensors {
            assert_eq!(t.section, s.index);
            assert!(last.is_none_or(|l| l < t.index), "table order");
            last = Some(t.index);
            yielded += 1;
            assert!(t.dims.len() <= tether_bundle::MAX_RANK);
            let _ = (
                t.element_count(),
                t.byte_size(),
                t.dims.to_vec(),
                t.dims.is_dynamic(),
            );
            let _ = format!(
                "{} {} {} {} {:?}",
                t.name, t.mode, t.dtype, t.layout, t.dims
            );
        }
        assert_eq!(yielded, announced, "Tensors::len is exact");
        tensors_seen += yielded;
        if cross_check {
            let want: Vec<u32> = b
                .all_tensors()
                .filter(|t| t.section == s.index)
                .map(|t| t.index)
                .collect();
            let got: Vec<u32> = b.tensors(s.index).rev().map(|t| t.index).rev().collect();
            assert_eq!(got, want);
        }
    }
    // Every tensor belongs to exactly one section (validated at open).
    assert_eq!(tensors_seen, b.tensor_count() as usize);
    assert_eq!(b.all_tensors().len(), b.tensor_count() as usize);
    assert_eq!(b.all_tensors().count(), b.tensor_count() as usize);
    assert_eq!(b.tensors(b.section_count()).len(), 0);
    let _ = b.section_at(b.section_count());
    let _ = b.section("");
    match b.verify_all() {
        Ok(r) => {
            assert_eq!(r.bytes_checked, b.file_len());
            assert_eq!(r.sections_checked, b.section_count());
        }
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// The whole fuzz iteration: the input as is in both modes, then re-sealed
/// (header, manifest and whole-file CRCs recomputed) so that mutations reach
/// the record validation behind the checksums.
pub fn run(data: &[u8]) {
    exercise(data.to_vec(), Verify::Lazy);
    exercise(data.to_vec(), Verify::Eager);
    let mut sealed = data.to_vec();
    if tether_bundle::raw::reseal(&mut sealed) {
        exercise(sealed, Verify::Lazy);
    }
}
