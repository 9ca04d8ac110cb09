//! The shared library's SONAME is `libtether.so`, the name it is installed under
//! (`install.sh`), whatever cargo names the file (`libtether_capi.so`).

fn main() {
    let target = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if target == "linux" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libtether.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
