//! The probe against fake root trees (JetPack 6 Orin, JetPack 7 Thor,
//! JetPack 7.2 Orin, a bare x86_64 server) and against this machine.
//!
//! Tests that need a CUDA driver compile `fixtures/fake_libcuda.c` with
//! `$TETHER_TEST_CC` (default `cc`); when that compiler is missing or makes
//! a library this process cannot load (cross testing without setting
//! `TETHER_TEST_CC`), they say so and skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use tether_targets::libs::{Outcome, PlaceKind};
use tether_targets::probe::{self, PowerModeSource, ProbeOptions};
use tether_targets::{
    CpuArch, EngineKind, JetPackMatch, L4tVersion, Offer, Rule, Sm, TrtLibrary, TrtVersion,
    select_engine,
};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// A private copy of a fixture tree (so a test can add a fake driver).
struct Tree(PathBuf);

impl Tree {
    fn copy(name: &str) -> Self {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let dst = std::env::temp_dir().join(format!(
            "tether-targets-{}-{}-{name}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dst);
        copy_dir(&fixture(name), &dst);
        Tree(dst)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// Compiles the fake driver into `dir/libcuda.so.1` with extra `-D`
/// definitions. `false` (with a message) when no usable compiler is there.
fn fake_driver(dir: &Path, defines: &[&str]) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let cc = std::env::var("TETHER_TEST_CC").unwrap_or_else(|_| "cc".to_string());
    let out = dir.join("libcuda.so.1");
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(fixture("fake_libcuda.c"))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status();
    match status {
        Ok(s) if s.success() => true,
        other => {
            eprintln!("skipping: cannot build the fake libcuda with {cc:?}: {other:?}");
            false
        }
    }
}

/// Compiles `fake_nvlibs.c` into `dir/name`; `false` (with a message) when
/// no usable compiler is there.
fn fake_nvlib(dir: &Path, name: &str, defines: &[&str]) -> bool {
    std::fs::create_dir_all(dir).unwrap();
    let cc = std::env::var("TETHER_TEST_CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(dir.join(name))
        .arg(fixture("fake_nvlibs.c"))
        .args(defines.iter().map(|d| format!("-D{d}")))
        .status();
    match status {
        Ok(s) if s.success() => true,
        other => {
            eprintln!("skipping: cannot build the fake {name} with {cc:?}: {other:?}");
            false
        }
    }
}

/// The probe loaded the fake driver; `false` (with a message) when this
/// process could not load it (wrong architecture for the compiler used).
fn driver_loaded(r: &probe::ProbeReport) -> bool {
    if r.cuda.library.is_some() {
        return true;
    }
    eprintln!(
        "skipping: the fake libcuda did not load here (set TETHER_TEST_CC to a compiler for this target): {:?}",
        r.cuda.search.tried
    );
    false
}

fn fake_opts(root: &Path) -> ProbeOptions {
    let mut o = ProbeOptions::fake(root);
    o.arch = CpuArch::Aarch64;
    o
}

#[test]
fn jetpack6_orin_files_without_driver() {
    let r = probe::probe_with(&fake_opts(&fixture("jetpack6-agx-orin")));
    let l4t = r.l4t.as_ref().expect("L4T");
    assert_eq!(l4t.release.version, L4tVersion::new(36, 4, 3));
    let JetPackMatch::Exact(jp) = l4t.jetpack else {
        panic!("{:?}", l4t.jetpack)
    };
    assert_eq!(jp.jetpack, "6.2");
    assert_eq!(r.expected_tensorrt(), Some(TrtVersion::new(10, 3, 0)));
    assert_eq!(
        r.model.as_deref(),
        Some("NVIDIA Jetson AGX Orin Developer Kit")
    );
    assert_eq!(r.host.kernel.as_deref(), Some("5.15.148-tegra"));
    assert_eq!(r.host.distro.as_deref(), Some("Ubuntu 22.04.5 LTS"));
    let pm = r.power_mode.as_ref().expect("power mode");
    assert_eq!((pm.id, pm.name.as_deref()), (0, Some("MAXN")));
    assert_eq!(pm.source, PowerModeSource::Status);
    assert_eq!(pm.default_id, Some(2));

    // No driver in the tree: every place was tried and reported, the L4T
    // user-space directory first.
    assert!(r.cuda.library.is_none());
    assert!(r.cuda.devices.is_empty());
    let tried = &r.cuda.search.tried;
    assert_eq!(tried[0].kind, PlaceKind::L4tUserspace);
    assert!(tried[0].place.ends_with("usr/lib/aarch64-linux-gnu/nvidia"));
    assert!(tried.iter().all(|a| a.outcome == Outcome::NotFound));
    assert!(
        tried
            .iter()
            .any(|a| a.place.ends_with("/opt/nvidia/l4t-gpu-libs/openrm"))
    );
    // Each directory once: the L4T directory is not repeated as a system one.
    let mut places: Vec<&str> = tried.iter().map(|t| t.place.as_str()).collect();
    let n = places.len();
    places.sort_unstable();
    places.dedup();
    assert_eq!(places.len(), n, "{tried:?}");
    assert_eq!(r.cuda.search.places, n);
    assert!(
        r.notes.iter().any(|n| n.starts_with("no GPU")),
        "{:?}",
        r.notes
    );
    assert!(r.target.is_none());

    // Without a GPU, selection falls back to the CPU engine and says why.
    let facts = r.device_facts(None);
    assert_eq!(facts.gpu, None);
    let offers = [
        Offer::tensorrt(0, CpuArch::Aarch64, Sm::new(8, 7), 100300),
        Offer::tract_cpu(1),
    ];
    let c = select_engine(&offers, &facts).unwrap();
    assert_eq!((c.index, c.rule), (1, Rule::PortableCpu));

    let text = r.to_string();
    for want in [
        "R36.4.3",
        "JetPack 6.2",
        "MAXN",
        "CUDA driver   not found (searched",
        "no GPU",
    ] {
        assert!(text.contains(want), "missing {want:?} in:\n{text}");
    }
}

#[test]
fn jetpack6_orin_with_fake_driver() {
    let tree = Tree::copy("jetpack6-agx-orin");
    if !fake_driver(&tree.0.join("usr/lib/aarch64-linux-gnu/nvidia"), &[]) {
        return;
    }
    let r = probe::probe_with(&fake_opts(&tree.0));
    if !driver_loaded(&r) {
        return;
    }
    eprintln!("{r}");
    assert_eq!(
        r.cuda.driver_version.map(|v| v.to_string()).as_deref(),
        Some("12.6")
    );
    assert_eq!(r.cuda.devices.len(), 1, "{:?}", r.cuda);
    let g = &r.cuda.devices[0];
    assert_eq!(g.name, "Orin");
    assert_eq!(g.sm, Sm::new(8, 7));
    assert!(g.integrated);
    assert_eq!(g.total_memory_bytes, 62841 * 1024 * 1024);
    assert_eq!(r.target.map(|t| t.id), Some("jetson-agx-orin"));
    // The first place loaded it; nothing after it was tried.
    assert_eq!(r.cuda.search.tried.len(), 1, "{:?}", r.cuda.search);
    assert!(matches!(
        r.cuda.search.tried[0].outcome,
        Outcome::Loaded { .. }
    ));
    assert!(r.cuda.search.places > 1);

    // With the JetPack 6.2 TensorRT, the Orin plan wins.
    let facts = r.device_facts(r.expected_tensorrt_library());
    assert_eq!(
        facts.tensorrt,
        Some(TrtLibrary::full(TrtVersion::new(10, 3, 0)))
    );
    let offers = [
        Offer::tensorrt(0, CpuArch::X86_64, Sm::new(9, 0), 110400),
        Offer::tensorrt(1, CpuArch::Aarch64, Sm::new(8, 7), 100300),
        Offer::tract_cuda(2),
        Offer::tract_cpu(3),
    ];
    let c = select_engine(&offers, &facts).unwrap();
    assert_eq!(
        (c.index, c.engine, c.rule),
        (1, EngineKind::TensorRt, Rule::ExactPlan)
    );
    // Without TensorRT, tract-cuda.
    let c = select_engine(&offers, &r.device_facts(None)).unwrap();
    assert_eq!(c.engine, EngineKind::TractCuda);
    assert!(c.to_string().contains("no TensorRT library"), "{c}");
}

#[test]
fn jetpack7_thor_with_fake_driver() {
    let tree = Tree::copy("jetpack7-agx-thor");
    // JetPack 7.0/7.1 put libcuda in the SBSA multiarch directory.
    let ok = fake_driver(
        &tree.0.join("usr/lib/aarch64-linux-gnu"),
        &[
            "FAKE_DRIVER=13000",
            "FAKE_NAME=\"NVIDIA Thor\"",
            "FAKE_MAJOR=11",
            "FAKE_MINOR=0",
            "FAKE_MEM_MIB=125772",
        ],
    );
    let r = probe::probe_with(&fake_opts(&tree.0));
    let l4t = r.l4t.as_ref().unwrap();
    assert_eq!(l4t.release.version, L4tVersion::new(38, 2, 2));
    assert_eq!(l4t.jetpack.jetpack(), Some("7.0"));
    // No saved status: the configuration's default (120W, id 1).
    let pm = r.power_mode.as_ref().unwrap();
    assert_eq!((pm.id, pm.name.as_deref()), (1, Some("120W")));
    assert_eq!(pm.source, PowerModeSource::ConfigDefault);
    if !ok || !driver_loaded(&r) {
        return;
    }
    assert_eq!(r.cuda.devices[0].sm, Sm::new(11, 0));
    assert_eq!(r.target.map(|t| t.id), Some("jetson-agx-thor"));
    let facts = r.device_facts(Some(TrtLibrary::full(TrtVersion::new(10, 13, 3))));
    let offers = [
        Offer::tensorrt(0, CpuArch::Aarch64, Sm::new(8, 7), 100300),
        Offer::tensorrt(1, CpuArch::Aarch64, Sm::new(11, 0), 101303),
        Offer::tract_cpu(2),
    ];
    let c = select_engine(&offers, &facts).unwrap();
    assert_eq!((c.index, c.rule), (1, Rule::ExactPlan));
}

#[test]
fn jetpack72_thor_finds_openrm_libcuda() {
    // JetPack 7.2 moved libcuda to /opt/nvidia/l4t-gpu-libs/openrm.
    let tree = Tree::copy("jetpack7-agx-thor");
    std::fs::write(
        tree.0.join("etc/nv_tegra_release"),
        "# R39 (release), REVISION: 2.0, GCID: 45755727, BOARD: generic, EABI: aarch64, DATE: Mon Jun  1 09:28:48 PM UTC 2026\n# KERNEL_VARIANT: oot\n",
    )
    .unwrap();
    if !fake_driver(
        &tree.0.join("opt/nvidia/l4t-gpu-libs/openrm"),
        &["FAKE_DRIVER=13020", "FAKE_MAJOR=11", "FAKE_MINOR=0"],
    ) {
        return;
    }
    let r = probe::probe_with(&fake_opts(&tree.0));
    if !driver_loaded(&r) {
        return;
    }
    assert!(
        r.cuda
            .library
            .as_deref()
            .unwrap()
            .ends_with("opt/nvidia/l4t-gpu-libs/openrm/libcuda.so.1")
    );
    assert_eq!(r.l4t.as_ref().unwrap().jetpack.jetpack(), Some("7.2"));
    assert_eq!(r.target.map(|t| t.id), Some("jetson-agx-thor"));
}

#[test]
fn jetpack72_orin_files() {
    let r = probe::probe_with(&fake_opts(&fixture("jetpack72-agx-orin")));
    let l4t = r.l4t.as_ref().unwrap();
    assert_eq!(l4t.release.version, L4tVersion::new(39, 2, 0));
    assert_eq!(r.expected_tensorrt(), Some(TrtVersion::new(10, 16, 2)));
    let pm = r.power_mode.as_ref().unwrap();
    assert_eq!((pm.id, pm.name.as_deref()), (3, Some("MODE_50W")));
}

#[test]
fn driver_whose_init_fails_is_reported() {
    let tree = Tree::copy("x86-server");
    let dir = tree.0.join("usr/lib/x86_64-linux-gnu");
    if !fake_driver(&dir, &["FAKE_INIT_RESULT=100"]) {
        return;
    }
    let mut o = ProbeOptions::fake(&tree.0);
    o.arch = CpuArch::X86_64;
    let r = probe::probe_with(&o);
    if !driver_loaded(&r) {
        return;
    }
    assert!(r.cuda.devices.is_empty());
    // The driver version is still reported: it is read before cuInit.
    assert_eq!(r.cuda.driver_version.map(|v| v.0), Some(12060));
    let e = r.cuda.error.as_deref().unwrap();
    assert!(
        e.contains("cuInit") && e.contains("CUDA_ERROR_NO_DEVICE") && e.contains("100"),
        "{e}"
    );
    assert!(r.notes.iter().any(|n| n.contains("CUDA_ERROR_NO_DEVICE")));
    assert_eq!(r.device_facts(None).cuda_driver, None);
}

#[test]
fn explicit_library_that_is_not_elf() {
    let tree = Tree::copy("x86-server");
    let bogus = tree.0.join("libcuda.so.1");
    std::fs::write(&bogus, b"not a library").unwrap();
    let mut o = ProbeOptions::fake(&tree.0);
    o.libcuda = Some(bogus);
    let r = probe::probe_with(&o);
    // An explicit library is the only place tried, and its failure is
    // reported once, without the path repeated in the reason.
    assert_eq!(r.cuda.search.tried.len(), 1, "{:?}", r.cuda.search);
    let first = &r.cuda.search.tried[0];
    assert_eq!(first.kind, PlaceKind::Explicit);
    let Outcome::Failed { file, reason } = &first.outcome else {
        panic!("{:?}", first.outcome)
    };
    assert!(file.ends_with("libcuda.so.1"));
    assert!(!reason.contains(file.as_str()), "{reason}");
    assert!(r.cuda.library.is_none());
}

#[test]
fn bare_x86_server() {
    let mut o = ProbeOptions::fake(fixture("x86-server"));
    o.arch = CpuArch::X86_64;
    let r = probe::probe_with(&o);
    assert!(r.l4t.is_none() && r.power_mode.is_none() && r.model.is_none());
    assert!(r.target.is_none());
    assert_eq!(
        r.host.distro.as_deref(),
        Some("Debian GNU/Linux 12 (bookworm)")
    );
    assert!(
        r.cuda
            .search
            .tried
            .iter()
            .all(|a| !a.place.contains("aarch64") && !a.place.contains("tegra"))
    );
    let text = r.to_string();
    assert!(text.contains("not JetPack"), "{text}");
    assert!(text.contains("GPU           none"), "{text}");
}

#[test]
fn empty_root_does_not_fail() {
    let r = probe::probe_with(&ProbeOptions::fake("/nonexistent/tether-root"));
    assert!(r.l4t.is_none() && r.cuda.library.is_none());
    assert!(!r.notes.is_empty());
    let _ = r.to_string();
}

#[test]
fn this_machine() {
    // Whatever this machine is, the real probe returns a report.
    let r = probe::probe();
    let text = r.to_string();
    assert!(text.contains("host"), "{text}");
    if r.cuda.devices.is_empty() {
        assert!(r.notes.iter().any(|n| n.starts_with("no GPU")), "{text}");
        assert!(
            r.cuda
                .search
                .tried
                .iter()
                .any(|a| a.kind == PlaceKind::Loader)
        );
    }
    eprintln!("{text}");
}

#[cfg(feature = "serde")]
#[test]
fn report_serializes_to_json() {
    let r = probe::probe_with(&fake_opts(&fixture("jetpack6-agx-orin")));
    let v = serde_json::to_value(&r).unwrap();
    assert_eq!(v["l4t"]["release"]["version"], "R36.4.3");
    assert_eq!(v["l4t"]["jetpack"]["exact"]["tensorrt"], "10.3.0");
    assert_eq!(v["l4t"]["jetpack"]["exact"]["cuda"], "12.6");
    assert_eq!(v["l4t"]["jetpack"]["exact"]["jetpack"], "6.2");
    assert_eq!(v["power_mode"]["name"], "MAXN");
    let tried = v["cuda"]["search"]["tried"].as_array().unwrap();
    assert!(tried.len() > 3);
    assert_eq!(tried[0]["kind"], "l4t");
    assert_eq!(tried[0]["outcome"], "not_found");
    assert_eq!(v["host"]["arch"], "aarch64");
    let d = serde_json::to_value(tether_targets::descriptor::JETSON_AGX_ORIN).unwrap();
    assert_eq!(d["dla_cores"], 2);
    let refusal = select_engine(&[], &r.device_facts(None)).unwrap_err();
    let j = serde_json::to_value(refusal).unwrap();
    assert_eq!(j["offered"], 0);
}

/// cuDNN and cuBLAS are found in pip's folders and in the toolkit, and their
/// versions are read without a GPU.
#[test]
fn cudnn_and_cublas_versions_from_pip_and_toolkit_folders() {
    use tether_targets::libs::{self, Library, Outcome, SearchEnv};
    let tree = Tree::copy("x86-server");
    let sp = tree.0.join("usr/local/lib/python3.12/dist-packages");
    let cudnn_dir = sp.join("nvidia/cudnn/lib");
    let cublas_dir = tree.0.join("usr/local/cuda/targets/x86_64-linux/lib");
    if !fake_nvlib(&cudnn_dir, "libcudnn.so.9", &["FAKE_CUDNN=91900"])
        || !fake_nvlib(&cublas_dir, "libcublas.so.13", &["FAKE_CUBLAS_PATCH=2"])
    {
        return;
    }
    let env = SearchEnv::under(&tree.0, CpuArch::X86_64);
    let cudnn = libs::identify(&libs::search_list(Library::Cudnn, &env, None));
    if cudnn.path.is_none() {
        eprintln!(
            "skipping: the fake libcudnn did not load here (set TETHER_TEST_CC to a compiler for this target): {:?}",
            cudnn.search.tried
        );
        return;
    }
    assert!(
        cudnn
            .path
            .as_deref()
            .unwrap()
            .ends_with("dist-packages/nvidia/cudnn/lib/libcudnn.so.9"),
        "{cudnn:?}"
    );
    assert_eq!(cudnn.version.as_deref(), Some("9.19.0"));
    // Every system directory came first, and was not there.
    let last = cudnn.search.tried.last().unwrap();
    assert!(matches!(last.outcome, Outcome::Loaded { .. }));
    assert!(
        cudnn.search.tried[..cudnn.search.tried.len() - 1]
            .iter()
            .all(|t| t.outcome == Outcome::NotFound)
    );

    let cublas = libs::identify(&libs::search_list(Library::Cublas, &env, None));
    assert_eq!(cublas.version.as_deref(), Some("13.0.2"), "{cublas:?}");
    assert_eq!(
        cublas.search.tried.len(),
        1,
        "the toolkit directory comes first"
    );
}
