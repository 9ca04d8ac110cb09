//! Proof of the TensorRT ABI tether calls through.
//!
//! For every TensorRT header set it can obtain, this test compiles
//! `runtime/trt-probe/probe.cpp` with g++ (against the official headers and
//! the stub `cuda_runtime_api.h`), runs it, and asserts that every vtable
//! slot, destructor position, value layout and enumerator value tether uses
//! (`tether_runtime::tensorrt::abi`) equals what the compiler reports.
//!
//! Headers come from `runtime/trt-probe/fetch-headers.sh` (cached in the
//! ignored `.assets/trt-headers/`): TensorRT 10.16.0, 11.0.0, 11.1.0 and
//! 11.4.0 from crates.io, which CI reaches. Those four are **required**: if
//! one cannot be obtained, or g++ is missing, the test fails. Set
//! `TETHER_SKIP_TRT_ABI=1` to skip it knowingly. Any other header set found
//! in the cache (e.g. 10.1, 10.3, 10.10 exported from NVIDIA's git
//! repository with `TETHER_TRT_GIT_DIR`) is checked as well.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use tether_runtime::tensorrt::abi::{
    self, AbiTable, DIMS_MAX, Dims64, ENUM_VALUES, ERROR_DESC_MAX_LEN, InterfaceInfo,
    PUBLIC_DELETING_DESTRUCTOR, PUBLIC_IMPL_OFFSET, PUBLIC_OBJECT_SIZE, VROOT_DESTRUCTORS,
};
use tether_targets::TrtVersion;

/// Header sets CI must be able to check (crates.io `trtx-sys` pins in fetch-headers.sh).
const REQUIRED: [&str; 4] = ["10.16.0", "11.0.0", "11.1.0", "11.4.0"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("runtime/ has a parent")
        .to_path_buf()
}

fn fetch_headers(dest: &Path) {
    let script = repo_root().join("runtime/trt-probe/fetch-headers.sh");
    let status = Command::new("bash")
        .arg(&script)
        .arg(dest)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    assert!(
        status.success(),
        "{} failed ({status}): TensorRT headers could not be obtained; set TETHER_SKIP_TRT_ABI=1 to skip this test knowingly",
        script.display()
    );
}

/// Compiles and runs the probe against one header folder; returns its facts.
fn probe(headers: &Path, version: &str) -> BTreeMap<String, String> {
    let root = repo_root();
    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("trt-probe");
    std::fs::create_dir_all(&out_dir).expect("create probe dir");
    let exe = out_dir.join(format!("probe-{version}"));
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "g++".to_string());
    let out = Command::new(&cxx)
        .args(["-std=c++20", "-O0", "-w", "-I"])
        .arg(root.join("runtime/trt-probe/stub"))
        .arg("-I")
        .arg(headers)
        .arg(root.join("runtime/trt-probe/probe.cpp"))
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {cxx} (install g++ or set TETHER_SKIP_TRT_ABI=1): {e}")
        });
    assert!(
        out.status.success(),
        "probe does not compile against TensorRT {version} headers:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run = Command::new(&exe).output().expect("run probe");
    assert!(
        run.status.success(),
        "probe for {version} failed: {:?}",
        run.status
    );
    String::from_utf8(run.stdout)
        .expect("probe output is UTF-8")
        .lines()
        .filter_map(|l| {
            let mut it = l.splitn(3, ' ');
            let kind = it.next()?;
            let name = it.next()?;
            let value = it.next()?;
            Some((format!("{kind} {name}"), value.to_string()))
        })
        .collect()
}

struct Check<'a> {
    version: &'a str,
    facts: &'a BTreeMap<String, String>,
    failures: Vec<String>,
    compared: usize,
}

impl Check<'_> {
    fn expect(&mut self, key: &str, want: impl ToString) {
        let want = want.to_string();
        self.compared += 1;
        match self.facts.get(key) {
            Some(got) if *got == want => {}
            Some(got) => self.failures.push(format!(
                "TensorRT {}: {key}: headers say {got}, tether says {want}",
                self.version
            )),
            None => self.failures.push(format!(
                "TensorRT {}: {key}: the probe printed nothing",
                self.version
            )),
        }
    }
}

fn check_version(version: &str, facts: &BTreeMap<String, String>) -> (usize, Vec<String>) {
    let mut c = Check {
        version,
        facts,
        failures: Vec::new(),
        compared: 0,
    };
    let full = facts
        .get("version TensorRT")
        .expect("probe prints its version");
    assert!(
        full.starts_with(&format!("{version}.")),
        "folder {version} holds TensorRT {full}"
    );
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap());
    let v = TrtVersion::new(
        parts.next().unwrap(),
        parts.next().unwrap(),
        parts.next().unwrap(),
    );
    c.expect("const NV_TENSORRT_VERSION", v.0);

    // Value layouts.
    c.expect("size Dims64", std::mem::size_of::<Dims64>());
    c.expect("size Dims64", 72);
    c.expect(
        "offset Dims64.nbDims",
        std::mem::offset_of!(Dims64, nb_dims),
    );
    c.expect("offset Dims64.d", std::mem::offset_of!(Dims64, d));
    c.expect("const Dims64.MAX_DIMS", DIMS_MAX);
    c.expect("size InterfaceInfo", std::mem::size_of::<InterfaceInfo>());
    c.expect(
        "offset InterfaceInfo.kind",
        std::mem::offset_of!(InterfaceInfo, kind),
    );
    c.expect(
        "offset InterfaceInfo.major",
        std::mem::offset_of!(InterfaceInfo, major),
    );
    c.expect(
        "offset InterfaceInfo.minor",
        std::mem::offset_of!(InterfaceInfo, minor),
    );
    c.expect("const IErrorRecorder.kMAX_DESC_LENGTH", ERROR_DESC_MAX_LEN);

    // Public classes: two words [vptr][mImpl], vtable = two destructors,
    // methods are non-virtual forwarders.
    for class in ["IRuntime", "ICudaEngine", "IExecutionContext"] {
        c.expect(&format!("size {class}"), PUBLIC_OBJECT_SIZE);
        c.expect(&format!("offset {class}.mImpl"), PUBLIC_IMPL_OFFSET);
        c.expect(&format!("dtor {class}.complete"), 0);
        c.expect(
            &format!("dtor {class}.deleting"),
            PUBLIC_DELETING_DESTRUCTOR,
        );
    }
    c.expect("slot IRuntime.getNbDLACores", "nonvirtual");
    c.expect("slot ICudaEngine.getNbIOTensors", "nonvirtual");
    c.expect("slot IExecutionContext.enqueueV3", "nonvirtual");
    c.expect("dtor VRoot.complete", VROOT_DESTRUCTORS.0);
    c.expect("dtor VRoot.deleting", VROOT_DESTRUCTORS.1);

    // apiv tables.
    let table: &AbiTable = abi::table_for_major(v.major())
        .unwrap_or_else(|| panic!("tether has no interface table for TensorRT {version}"));
    for s in table.named_slots() {
        let key = format!("slot {}.{}", s.class, s.method);
        if v.minor() >= s.slot.since_minor {
            c.expect(&key, s.slot.index);
        } else {
            // The minor gate must be right too: absent before `since_minor`.
            c.expect(&key, "absent");
        }
    }

    // ILogger (tether's own object).
    let l = table.logger;
    c.expect("slot ILogger.log", l.log);
    c.expect(
        "slot ILogger.getAPILanguage",
        l.get_api_language
            .map_or("absent".to_string(), |i| i.to_string()),
    );
    c.expect(
        "slot ILogger.getInterfaceInfo",
        l.get_interface_info
            .map_or("absent".to_string(), |i| i.to_string()),
    );
    c.expect("dtor ILogger.complete", l.destructor);
    c.expect("dtor ILogger.deleting", l.deleting_destructor);
    let present =
        3 - usize::from(l.get_api_language.is_none()) - usize::from(l.get_interface_info.is_none());
    assert_eq!(l.len, present + 2, "logger table length");

    // IErrorRecorder (tether's own object).
    for (method, index) in table.error_recorder_slots() {
        c.expect(&format!("slot IErrorRecorder.{method}"), index);
    }
    c.expect(
        "dtor IErrorRecorder.complete",
        table.error_recorder.destructor,
    );
    c.expect(
        "dtor IErrorRecorder.deleting",
        table.error_recorder.deleting_destructor,
    );

    // Enumerators.
    for e in ENUM_VALUES {
        let key = format!("enum {}", e.name);
        if (v.major(), v.minor()) >= e.since {
            c.expect(&key, e.value);
        } else {
            c.expect(&key, "absent");
        }
    }
    (c.compared, c.failures)
}

#[test]
fn rust_abi_constants_match_official_headers() {
    if std::env::var("TETHER_SKIP_TRT_ABI").as_deref() == Ok("1") {
        eprintln!("TETHER_SKIP_TRT_ABI=1: TensorRT ABI check skipped");
        return;
    }
    let cache = repo_root().join(".assets/trt-headers");
    fetch_headers(&cache);

    let mut versions: Vec<(TrtVersion, String)> = std::fs::read_dir(&cache)
        .expect("header cache exists")
        .filter_map(|e| {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            if !e.path().join("NvInferImpl.h").is_file() {
                return None;
            }
            let mut p = name.split('.').map(|x| x.parse::<u32>().ok());
            let v = TrtVersion::new(p.next()??, p.next()??, p.next()??);
            Some((v, name))
        })
        .collect();
    versions.sort();
    for r in REQUIRED {
        assert!(
            versions.iter().any(|(_, n)| n == r),
            "TensorRT {r} headers missing from {} after fetch-headers.sh",
            cache.display()
        );
    }

    let mut failures = Vec::new();
    for (_, name) in &versions {
        let facts = probe(&cache.join(name), name);
        let (compared, f) = check_version(name, &facts);
        let source = std::fs::read_to_string(cache.join(name).join("SOURCE")).unwrap_or_default();
        eprintln!(
            "TensorRT {name}: {compared} facts compared, {} mismatches ({})",
            f.len(),
            source.trim()
        );
        failures.extend(f);
    }
    assert!(
        failures.is_empty(),
        "ABI mismatches:\n{}",
        failures.join("\n")
    );
}
