//! The checked-in C header `include/tether/tether.h` is what cbindgen (used as a library,
//! configured by `cbindgen.toml`) generates from this crate's source today.
//!
//! Regenerate it after changing the C API:
//! `TETHER_BLESS_HEADER=1 cargo test --release -p tether-capi --test header`.

use std::path::Path;

#[test]
fn checked_in_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen could not generate the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let header = dir.join("include/tether/tether.h");
    if std::env::var_os("TETHER_BLESS_HEADER").is_some_and(|v| v == "1") {
        std::fs::write(&header, &generated).expect("write the header");
        eprintln!("wrote {}", header.display());
        return;
    }
    let checked_in = std::fs::read(&header).unwrap_or_default();
    if checked_in != generated {
        let fresh = std::env::temp_dir().join(format!("tether-{}.h", std::process::id()));
        std::fs::write(&fresh, &generated).expect("write the generated header");
        panic!(
            "{} is not what cbindgen generates from capi/src (generated copy: {}; compare with \
             `diff -u {} {}`). Regenerate it with \
             `TETHER_BLESS_HEADER=1 cargo test --release -p tether-capi --test header` and commit it.",
            header.display(),
            fresh.display(),
            header.display(),
            fresh.display()
        );
    }
}
