//! What this machine is, found at run time without any NVIDIA tool: CUDA
//! driver and GPUs (by `dlopen` of `libcuda.so.1`), Jetson Linux release and
//! JetPack version, board model, power mode, CPU architecture and OS.
//!
//! Every file is read through a [`Root`], so tests (and `tether doctor
//! --root DIR`) can point the probe at a fake tree. Nothing here fails: a
//! machine with no GPU, no Jetson files and no driver gets a report that
//! says so, with the reasons in [`ProbeReport::notes`].
//!
//! ```no_run
//! let report = tether_targets::probe::probe();
//! println!("{report}");
//! let facts = report.device_facts(None);
//! # let _ = facts;
//! ```

pub mod cuda;
pub mod l4t;
pub mod nvpmodel;

use std::fmt;
use std::path::{Path, PathBuf};

use crate::descriptor::{self, TargetDescriptor};
use crate::jetpack::{JetPackMatch, jetpack_for};
use crate::libs::{self, Library, PythonEnv, SearchEnv};
use crate::select::DeviceFacts;
use crate::vocab::{CpuArch, GpuFacts, LibraryFlavor, TrtLibrary, TrtVersion};

pub use cuda::{CudaProbe, GpuDevice};
pub use l4t::{L4tParseError, L4tRelease, parse_nv_tegra_release};
pub use nvpmodel::{PowerMode, PowerModeSource};

/// Environment variable naming the `libcuda.so.1` to use (a file or a
/// folder); when set, only it is tried.
pub const LIBCUDA_ENV: &str = Library::CudaDriver.env_var();

/// The file-system root the probe reads under: `/` on a real system, a
/// directory holding `etc/`, `proc/`, `var/`, `usr/`... in tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Root(PathBuf);

impl Root {
    /// The real root, `/`.
    pub fn system() -> Self {
        Root(PathBuf::from("/"))
    }
    /// A fake root at `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Root(dir.into())
    }
    /// Whether this is `/`.
    pub fn is_system(&self) -> bool {
        self.0 == Path::new("/")
    }
    /// The root directory.
    pub fn as_path(&self) -> &Path {
        &self.0
    }
    /// `absolute` (e.g. `/etc/nv_tegra_release`) under this root.
    pub fn join(&self, absolute: &str) -> PathBuf {
        self.0.join(absolute.trim_start_matches('/'))
    }
    /// Reads `absolute` under this root as text; `None` if it cannot be
    /// read.
    pub fn read(&self, absolute: &str) -> Option<String> {
        std::fs::read(self.join(absolute))
            .ok()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }
}

/// How to probe.
#[derive(Clone, Debug)]
pub struct ProbeOptions {
    /// Where to read files.
    pub root: Root,
    /// The `libcuda.so.1` to use (a file or a folder, not joined with
    /// `root`); when set, only it is tried.
    pub libcuda: Option<PathBuf>,
    /// Also ask the dynamic loader for `libcuda.so.1` by name. Only
    /// meaningful for the real root (a fake root would find the host's
    /// driver).
    pub use_loader: bool,
    /// Read the environment: `TETHER_LIBCUDA` and the Python environments
    /// ([`PythonEnv::from_env`]). Only for the real root.
    pub read_env: bool,
    /// The CPU architecture to report and whose library directories are
    /// searched: the binary's own ([`CpuArch::host`]) for a real probe; a
    /// test of a fake Jetson tree on an x86_64 machine sets
    /// [`CpuArch::Aarch64`].
    pub arch: CpuArch,
}

impl ProbeOptions {
    /// The real system: root `/`, the environment, the loader's search, this
    /// binary's architecture. Searches exactly what [`SearchEnv::system`]
    /// (the runtime's CUDA layer) searches.
    pub fn system() -> Self {
        Self {
            root: Root::system(),
            libcuda: None,
            use_loader: true,
            read_env: true,
            arch: CpuArch::host(),
        }
    }
    /// A fake tree at `dir`: no loader search, no environment.
    pub fn fake(dir: impl Into<PathBuf>) -> Self {
        Self {
            root: Root::new(dir),
            libcuda: None,
            use_loader: false,
            read_env: false,
            arch: CpuArch::host(),
        }
    }

    /// What the library searches of this probe look at.
    pub fn search_env(&self) -> SearchEnv {
        let mut env = SearchEnv::under(self.root.as_path(), self.arch);
        env.use_loader = self.use_loader;
        env.read_env_overrides = self.read_env;
        if self.read_env {
            env.python = PythonEnv::from_env();
        }
        env
    }
}

/// The host: CPU architecture and operating system.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct HostInfo {
    /// CPU architecture ([`ProbeOptions::arch`]: this binary's own on a real
    /// probe).
    pub arch: CpuArch,
    /// `std::env::consts::OS` (`linux`).
    pub os: &'static str,
    /// `/proc/sys/kernel/osrelease` (`5.15.148-tegra`).
    pub kernel: Option<String>,
    /// `PRETTY_NAME` of `/etc/os-release` (`Ubuntu 22.04.5 LTS`).
    pub distro: Option<String>,
}

/// Jetson Linux facts.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct L4tInfo {
    /// The parsed release file.
    pub release: L4tRelease,
    /// Its JetPack.
    pub jetpack: JetPackMatch,
}

/// Everything the probe found, and why things are missing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[cfg_attr(feature = "serde", derive(serde::Serialize))]
pub struct ProbeReport {
    /// The root that was read (`/` normally).
    pub root: String,
    /// CPU and OS.
    pub host: HostInfo,
    /// `/proc/device-tree/model` (`NVIDIA Jetson AGX Orin Developer Kit`).
    pub model: Option<String>,
    /// `/etc/nv_tegra_release` and its JetPack, on JetPack systems.
    pub l4t: Option<L4tInfo>,
    /// The nvpmodel power mode, where readable.
    pub power_mode: Option<PowerMode>,
    /// The CUDA driver and its devices.
    pub cuda: CudaProbe,
    /// The descriptor this device matches.
    pub target: Option<&'static TargetDescriptor>,
    /// Reasons and warnings, one sentence each ("no GPU: ...").
    pub notes: Vec<String>,
}

/// The host CPU's name: `model name` of /proc/cpuinfo (x86), else its first `Model`,
/// `Hardware` or `CPU part` line (Arm), else the architecture (`std::env::consts::ARCH`).
/// For benchmark and `doctor` headers; read from the real /proc, not through a [`Root`].
pub fn cpu_model() -> String {
    let text = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    for key in ["model name", "Model", "Hardware", "CPU part"] {
        if let Some(v) = text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        }) {
            return v;
        }
    }
    std::env::consts::ARCH.to_string()
}

/// Probes the real system ([`ProbeOptions::system`]).
pub fn probe() -> ProbeReport {
    probe_with(&ProbeOptions::system())
}

/// Probes with explicit options (a fake root in tests).
pub fn probe_with(opts: &ProbeOptions) -> ProbeReport {
    let root = &opts.root;
    let mut notes = Vec::new();

    let host = HostInfo {
        arch: opts.arch,
        os: std::env::consts::OS,
        kernel: root
            .read("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty()),
        distro: root.read("/etc/os-release").and_then(|s| pretty_name(&s)),
    };

    let model = root
        .read("/proc/device-tree/model")
        .or_else(|| root.read("/sys/firmware/devicetree/base/model"))
        .map(|s| {
            s.trim_matches(|c: char| c == '\0' || c.is_whitespace())
                .to_string()
        })
        .filter(|s| !s.is_empty());

    let l4t = match root.read("/etc/nv_tegra_release") {
        None => None,
        Some(text) => match parse_nv_tegra_release(&text) {
            Ok(release) => {
                let jetpack = jetpack_for(release.version);
                match jetpack {
                    JetPackMatch::Exact(_) => {}
                    JetPackMatch::Series(s) => notes.push(format!(
                        "L4T {} is not in tether's JetPack table; it belongs to JetPack {s}",
                        release.version
                    )),
                    JetPackMatch::Unknown => notes.push(format!(
                        "L4T {} is not a JetPack release tether knows",
                        release.version
                    )),
                }
                Some(L4tInfo { release, jetpack })
            }
            Err(e) => {
                notes.push(e.to_string());
                None
            }
        },
    };

    let power_mode = nvpmodel::power_mode(
        root.read("/etc/nvpmodel.conf").as_deref(),
        root.read("/var/lib/nvpmodel/status").as_deref(),
    );

    let list = libs::search_list(
        Library::CudaDriver,
        &opts.search_env(),
        opts.libcuda.as_deref(),
    );
    let cuda = cuda::probe_cuda(&list);
    if cuda.library.is_none() {
        notes.push(format!(
            "no GPU: {} was not found or could not be loaded (searched {} places)",
            cuda::LIBCUDA,
            cuda.search.places
        ));
    } else if let Some(e) = &cuda.error {
        notes.push(format!("no GPU: {e}"));
    } else if cuda.devices.is_empty() {
        notes.push("no GPU: the CUDA driver loaded but reports 0 devices".to_string());
    }

    let gpu = cuda.devices.first();
    let target = descriptor::identify(
        gpu.map(|g| g.sm),
        host.arch,
        l4t.is_some(),
        model.as_deref(),
    );
    if let (Some(g), None) = (gpu, target) {
        notes.push(format!(
            "GPU {} (sm_{}) on {} is not one of tether's described targets; TensorRT plans built for sm_{} still run, the portable engines too",
            g.name,
            g.sm.number(),
            host.arch,
            g.sm.number()
        ));
    }
    if let (Some(t), Some(g)) = (target, gpu)
        && g.integrated != (t.memory == descriptor::MemoryModel::Integrated)
    {
        notes.push(format!(
            "the driver reports the GPU as {}, the {} descriptor says {:?}",
            if g.integrated {
                "integrated"
            } else {
                "discrete"
            },
            t.id,
            t.memory
        ));
    }
    if cuda.devices.len() > 1 {
        notes.push(format!(
            "{} GPUs found; engine selection uses device 0",
            cuda.devices.len()
        ));
    }

    ProbeReport {
        root: root.as_path().display().to_string(),
        host,
        model,
        l4t,
        power_mode,
        cuda,
        target,
        notes,
    }
}

fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        l.strip_prefix("PRETTY_NAME=")
            .map(|v| v.trim().trim_matches('"').to_string())
    })
}

impl ProbeReport {
    /// The facts [`select_engine`](crate::select_engine) needs. `tensorrt`
    /// is the TensorRT library the runtime loaded (`None`: none).
    pub fn device_facts(&self, tensorrt: Option<TrtLibrary>) -> DeviceFacts {
        DeviceFacts {
            arch: self.host.arch,
            gpu: self.cuda.devices.first().map(|g| GpuFacts {
                sm: g.sm,
                integrated: g.integrated,
            }),
            tensorrt,
            cuda_driver: self
                .cuda
                .driver_version
                .filter(|_| !self.cuda.devices.is_empty())
                .map(|v| v.0),
        }
    }

    /// The TensorRT version the detected JetPack ships, when known.
    pub fn expected_tensorrt(&self) -> Option<TrtVersion> {
        match self.l4t.as_ref()?.jetpack {
            JetPackMatch::Exact(r) => r.tensorrt,
            _ => None,
        }
    }

    /// The TensorRT library the detected JetPack ships (its full library),
    /// when known: what [`device_facts`](Self::device_facts) should be given
    /// to ask "would this bundle run here once TensorRT loads?".
    pub fn expected_tensorrt_library(&self) -> Option<TrtLibrary> {
        self.expected_tensorrt().map(|version| TrtLibrary {
            version,
            flavor: LibraryFlavor::Full,
        })
    }
}

fn gib(bytes: u64) -> f64 {
    bytes as f64 / (1u64 << 30) as f64
}

impl fmt::Display for ProbeReport {
    /// A readable, multi-line report (what `tether doctor` prints).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.host;
        write!(f, "host          {} {}", h.arch, h.os)?;
        if let Some(k) = &h.kernel {
            write!(f, ", kernel {k}")?;
        }
        if let Some(d) = &h.distro {
            write!(f, ", {d}")?;
        }
        writeln!(f)?;
        if self.root != "/" {
            writeln!(f, "root          {}", self.root)?;
        }
        writeln!(
            f,
            "model         {}",
            self.model.as_deref().unwrap_or("(no device-tree model)")
        )?;
        match &self.l4t {
            Some(l) => {
                write!(f, "L4T           {}", l.release.version)?;
                if let Some(g) = &l.release.gcid {
                    write!(f, " (GCID {g})")?;
                }
                match l.jetpack {
                    JetPackMatch::Exact(r) => {
                        write!(f, " = JetPack {}", r.jetpack)?;
                        if let Some(c) = r.cuda {
                            write!(f, ", CUDA {c}")?;
                        }
                        if let Some(t) = r.tensorrt {
                            write!(f, ", TensorRT {t}")?;
                        }
                    }
                    JetPackMatch::Series(s) => write!(f, " = JetPack {s}")?,
                    JetPackMatch::Unknown => f.write_str(" = unknown JetPack")?,
                }
                writeln!(f)?;
            }
            None => writeln!(f, "L4T           (no /etc/nv_tegra_release: not JetPack)")?,
        }
        match &self.power_mode {
            Some(p) => {
                write!(
                    f,
                    "power mode    {} (id {}",
                    p.name.as_deref().unwrap_or("?"),
                    p.id
                )?;
                if p.source == PowerModeSource::ConfigDefault {
                    f.write_str(", boot default: no saved status")?;
                } else if let Some(d) = p.default_id {
                    write!(f, ", default {d}")?;
                }
                writeln!(f, ")")?;
            }
            None => writeln!(f, "power mode    (no nvpmodel files)")?,
        }
        match (&self.cuda.library, self.cuda.driver_version) {
            (Some(lib), Some(v)) => writeln!(f, "CUDA driver   {v} ({lib})")?,
            (Some(lib), None) => writeln!(f, "CUDA driver   ? ({lib})")?,
            (None, _) => writeln!(
                f,
                "CUDA driver   not found (searched {} places)",
                self.cuda.search.places
            )?,
        }
        if self.cuda.devices.is_empty() {
            writeln!(f, "GPU           none")?;
        }
        for g in &self.cuda.devices {
            writeln!(
                f,
                "GPU {:<10}{}, sm_{} ({}), {}, {:.1} GiB",
                g.ordinal,
                g.name,
                g.sm.number(),
                g.sm,
                if g.integrated {
                    "integrated"
                } else {
                    "discrete"
                },
                gib(g.total_memory_bytes)
            )?;
        }
        match self.target {
            Some(t) => {
                writeln!(f, "target        {} ({})", t.id, t.name)?;
                writeln!(
                    f,
                    "              {:?} memory, {} DLA core(s), hardware-compatible plans: {}",
                    t.memory,
                    t.dla_cores,
                    if t.hardware_compatible_plans {
                        "yes"
                    } else {
                        "no"
                    }
                )?;
                writeln!(f, "              runs: {}", t.plan_summary())?;
            }
            None => writeln!(f, "target        (none of tether's described targets)")?,
        }
        if !self.notes.is_empty() {
            writeln!(f, "notes:")?;
            for n in &self.notes {
                writeln!(f, "  - {n}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_join() {
        let r = Root::new("/tmp/x");
        assert_eq!(
            r.join("/etc/nv_tegra_release"),
            PathBuf::from("/tmp/x/etc/nv_tegra_release")
        );
        assert!(Root::system().is_system());
        assert!(!r.is_system());
    }

    #[test]
    fn system_probe_searches_what_the_runtime_searches() {
        let list = |env: &SearchEnv| libs::search_list(Library::CudaDriver, env, None);
        assert_eq!(
            list(&ProbeOptions::system().search_env()),
            list(&SearchEnv::system())
        );
    }

    #[test]
    fn fake_probe_searches_the_tree_for_its_arch() {
        let mut o = ProbeOptions::fake("/fake");
        o.arch = CpuArch::Aarch64;
        let l = libs::search_list(Library::CudaDriver, &o.search_env(), None);
        let dirs: Vec<String> = l.places.iter().map(|p| p.describe()).collect();
        assert_eq!(dirs[0], "/fake/usr/lib/aarch64-linux-gnu/nvidia");
        assert!(dirs.iter().any(|p| p.contains("l4t-gpu-libs/openrm")));
        assert!(dirs.iter().all(|p| p.starts_with("/fake/")));
        assert!(!dirs.iter().any(|p| p.contains("x86_64")));
    }

    #[test]
    fn pretty_name_parses() {
        assert_eq!(
            pretty_name("NAME=\"Ubuntu\"\nPRETTY_NAME=\"Ubuntu 22.04.5 LTS\"\n").as_deref(),
            Some("Ubuntu 22.04.5 LTS")
        );
    }
}
