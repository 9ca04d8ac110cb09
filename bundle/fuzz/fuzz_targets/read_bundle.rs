//! Feeds arbitrary bytes to the bundle reader: open (both verification
//! modes), every accessor, and `verify_all`. A second pass re-seals the
//! input (recomputes the header, manifest and whole-file CRCs) so that
//! mutations reach the table and record validation behind the checksums.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tether_bundle::{Bundle, SECTION_ALIGN, Verify};

fn exercise(bytes: Vec<u8>, verify: Verify) {
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

    assert_eq!(b.targets().len(), b.target_count() as usize);
    assert_eq!(b.targets().count(), b.target_count() as usize);
    for t in b.targets() {
        assert_eq!(b.target(t.index).ok(), Some(t));
        let _ = (
            t.is_lean(),
            t.is_version_compatible(),
            t.tensorrt_version_parts(),
        );
        let _ = format!("{} {}", t.arch, t.engine);
    }
    let _ = b.target(b.target_count());

    assert_eq!(b.sections().len(), b.section_count() as usize);
    assert_eq!(b.sections().count(), b.section_count() as usize);
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
        match b.section_bytes(&s) {
            Ok(data) => assert_eq!(data.len() as u64, s.length),
            Err(e) => {
                // Eager mode verified everything at open.
                assert_eq!(verify, Verify::Lazy, "{e}");
            }
        }
        for t in b.tensors(s.index) {
            assert_eq!(t.section, s.index);
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
    }
    assert_eq!(b.all_tensors().count(), b.tensor_count() as usize);
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

fuzz_target!(|data: &[u8]| {
    exercise(data.to_vec(), Verify::Lazy);
    exercise(data.to_vec(), Verify::Eager);
    let mut sealed = data.to_vec();
    if tether_bundle::raw::reseal(&mut sealed) {
        exercise(sealed, Verify::Lazy);
    }
});
