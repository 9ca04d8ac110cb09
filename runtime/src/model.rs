//! The model API: a bundle's networks, each prepared on the engine chosen for the real
//! device, and the named-tensor API ([`NetworkSession`]) on top.
//!
//! [`Model::open`] maps the bundle, resolves the [`Device`] (a CUDA context when a GPU is
//! asked for or found), and for every network picks an engine with
//! [`tether_targets::select_engine`] over the network's offers and the device's facts:
//! exact TensorRT plan, then compatible plans, then the native GPU engine, tract-cuda, the
//! CPU — restricted to the backends compiled into this build ([`COMPILED_BACKENDS`]). An
//! engine that fails to prepare the network (an operator the native engine does not lower,
//! say) is passed over for the next, with one log line saying why. One `info` line states
//! each choice.
//!
//! Families build their sessions from the model's plans ([`Model::session`]);
//! applications that bring their own pre/post-processing use a [`NetworkSession`]:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tether_runtime::{ModelOptions, NetworkSession};
//! let mut m = NetworkSession::open("model.bundle", &ModelOptions::default())?;
//! m.input_mut::<f32>("images")?.fill(0.5);
//! m.run()?;
//! let out = m.output::<f32>("output0")?;
//! println!("{} values on {}", out.len(), m.engine());
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, SectionKind, Verify};
use tether_targets::{Choice, CpuArch, DeviceFacts, EngineKind, Offer, select_engine};

use crate::backend::{
    Backend, FixedInput, IoSpec, NetworkSource, Plan, Precision, PrepareOptions, SourceFormat,
};
use crate::device::{COMPILED_BACKENDS, Device, compiled_list};
use crate::error::Error;
use crate::session::{Check, DeviceBuffer, IoMemory, PipelineSpec, RegionId, RegionKind, Session};
use crate::tensor::{Element, IoMode, TensorSpec, view, view_mut};

/// The most CPU threads tether's interfaces accept (`tether run --threads`, the C API's
/// `threads` fields): beyond the cores of any board it targets, and low enough that a
/// mistyped count cannot start thousands of threads.
pub const MAX_CPU_THREADS: usize = 1024;

/// The cores this process may run on, when `threads` asks for more than them (`None` when
/// it does not, or when the count of cores is unknown). Threads beyond the cores take turns
/// on them, and each step's barrier waits for the ones not running (measured on 2 cores in
/// session 40: text generation at 3 threads ran at 71 tok/s against 336 at 2, and at 0.1
/// tok/s at 1,000), so callers use the cores instead and say so.
pub fn threads_beyond_cores(threads: usize) -> Option<usize> {
    let cores = std::thread::available_parallelism().map_or(0, |c| c.get());
    (cores > 0 && threads > cores).then_some(cores)
}

/// How [`Model::open`] prepares a bundle.
#[derive(Clone, Debug, Default)]
pub struct ModelOptions {
    /// Where to run.
    pub device: Device,
    /// Check every section's CRC32 at open instead of on first use.
    pub verify_eagerly: bool,
    /// Concrete input shapes per network (`(network, shapes in input order)`); networks not
    /// listed use the static shapes recorded in the manifest.
    pub input_shapes: Vec<(String, Vec<Vec<usize>>)>,
    /// Arithmetic precision for backends that have a choice.
    pub precision: Precision,
    /// Engines not to use even where they would be chosen (e.g. to compare engines).
    pub exclude: Vec<EngineKind>,
    /// Threads of the CPU engine (tract): 0 or 1 runs every network on the calling thread
    /// (the default: nothing else is scheduled, as a real-time loop pinned to one core
    /// wants); N > 1 runs tract's multithreaded executor on a pool of N threads, shared by
    /// every plan of the process asking for N. Ignored by the GPU engines.
    pub cpu_threads: usize,
    /// How device sessions of this model wait and stage (ignored on the CPU).
    #[cfg(feature = "cuda")]
    pub session: crate::session::SessionOptions,
    /// Inputs replaced by constants per network (`(network, inputs)`), for every plan of
    /// that network ([`PrepareOptions::fixed_inputs`]): they are not inputs of its plans, and
    /// its `input_shapes` leave them out.
    pub fixed_inputs: Vec<(String, Vec<FixedInput>)>,
    /// The largest tensor any network may hold at its prepared shapes, in bytes (`None`:
    /// [`crate::backend::DEFAULT_MAX_TENSOR_BYTES`], 4 GiB): a bundle whose network asks for
    /// more is refused at open ([`PrepareOptions::max_tensor_bytes`]).
    pub max_tensor_bytes: Option<u64>,
    /// Options of the native CUDA engine ([`crate::native::NativeOptions`]): `None` (the
    /// default) takes [`crate::native::NativeOptions::from_env`] (the `TETHER_*` environment
    /// variables over the defaults) with `session.allow_nvrtc`; `Some` is used as given.
    #[cfg(feature = "cuda-native")]
    pub native: Option<crate::native::NativeOptions>,
    /// The networks to prepare, by name (empty, the default: every network of the bundle):
    /// a caller that runs one network alone ([`Model::network_session`]) need not prepare
    /// the others, nor give shapes for their dynamic inputs. A name the bundle does not
    /// have is [`Error::NoSuchNetwork`] at open.
    pub networks: Vec<String>,
}

/// One network of a model: its name, its plan and why that engine was chosen.
#[derive(Clone)]
pub struct Network {
    name: String,
    plan: Plan,
    choice: Choice,
    section: u32,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network")
            .field("name", &self.name)
            .field("engine", &self.plan.kind())
            .field("io", self.plan.io())
            .finish()
    }
}

impl Network {
    /// The network's name in the bundle.
    pub fn name(&self) -> &str {
        &self.name
    }
    /// Its prepared plan (shareable: clone it into as many sessions as needed).
    pub fn plan(&self) -> &Plan {
        &self.plan
    }
    /// Its I/O tensors.
    pub fn io(&self) -> &IoSpec {
        self.plan.io()
    }
    /// The engine running it.
    pub fn engine(&self) -> EngineKind {
        self.plan.kind()
    }
    /// Why that engine (the selection record).
    pub fn choice(&self) -> &Choice {
        &self.choice
    }
    /// Index of the bundle section the plan came from.
    pub fn section_index(&self) -> u32 {
        self.section
    }
}

/// A bundle opened for one device with every network prepared.
pub struct Model {
    bundle: Arc<Bundle>,
    device: Device,
    facts: DeviceFacts,
    networks: Vec<Network>,
    precision: Precision,
    cpu_threads: usize,
    #[cfg(feature = "cuda")]
    context: Option<crate::cuda::Context>,
    #[cfg(feature = "cuda")]
    session: crate::session::SessionOptions,
    fixed_inputs: Vec<(String, Vec<FixedInput>)>,
    max_tensor_bytes: Option<u64>,
    #[cfg(feature = "cuda-native")]
    native: Option<crate::native::NativeOptions>,
}

impl std::fmt::Debug for Model {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Model")
            .field("bundle", &self.bundle.identity().name)
            .field("device", &self.device)
            .field("networks", &self.networks)
            .finish()
    }
}

/// A network's engine sections and their offers, grouped from the bundle.
struct NetworkSections {
    name: String,
    /// (section index, offer) in bundle order.
    offers: Vec<(u32, Offer)>,
}

/// The offers an engine section makes: a TensorRT plan offers itself; an ONNX model offers
/// every compiled-in backend that reads ONNX, best first.
fn section_offers(bundle: &Bundle, s: &tether_bundle::Section<'_>) -> Vec<Offer> {
    let target = s.target.and_then(|t| bundle.targets().nth(t as usize));
    match s.kind {
        SectionKind::TensorRtPlan => {
            let Some(offer) = target.and_then(|t| t.offer()) else {
                return Vec::new();
            };
            if offer.engine != EngineKind::TensorRt
                || !COMPILED_BACKENDS.contains(&EngineKind::TensorRt)
            {
                return Vec::new();
            }
            vec![offer]
        }
        SectionKind::Onnx => {
            let index = target.map_or(u32::MAX, |t| t.index);
            COMPILED_BACKENDS
                .iter()
                .filter(|k| **k != EngineKind::TensorRt)
                .map(|&engine| Offer {
                    index,
                    engine,
                    arch: CpuArch::Any,
                    sm: None,
                    tensorrt_version: 0,
                    hardware_compat: 0,
                    flags: 0,
                })
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Networks' names for [`Error::NoSuchNetwork`]'s `available`: comma-separated, `none`
/// for none.
fn name_list<'a>(names: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<&str> = names.collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

fn group_networks(bundle: &Bundle) -> Vec<NetworkSections> {
    let mut out: Vec<NetworkSections> = Vec::new();
    for s in bundle.sections() {
        if !matches!(s.kind, SectionKind::Onnx | SectionKind::TensorRtPlan) {
            continue;
        }
        let name = tether_bundle::network_of(s.name);
        let offers = section_offers(bundle, &s);
        let entry = match out.iter_mut().find(|n| n.name == name) {
            Some(e) => e,
            None => {
                out.push(NetworkSections {
                    name: name.to_string(),
                    offers: Vec::new(),
                });
                out.last_mut().expect("just pushed")
            }
        };
        entry
            .offers
            .extend(offers.into_iter().map(|o| (s.index, o)));
    }
    out
}

impl Model {
    /// Map a bundle file and prepare its networks (see [`Model::from_bundle`]).
    ///
    /// # Errors
    /// As [`Model::from_bundle`], and [`Error::Bundle`] when the file cannot be opened.
    pub fn open(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Self, Error> {
        let verify = if options.verify_eagerly {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        let bundle = Arc::new(Bundle::open(path, verify)?);
        Self::from_bundle(bundle, options)
    }

    /// Prepare every network of `bundle` (or those [`ModelOptions::networks`] names) on the
    /// best engine for the device.
    ///
    /// # Errors
    /// [`Error::DeviceUnavailable`] / [`Error::NotCompiledIn`] for a device that cannot be
    /// used; [`Error::NoSuchNetwork`] for a name in [`ModelOptions::networks`] the bundle
    /// lacks; [`Error::Refused`] when no offer of a network can run here;
    /// [`Error::NoEnginePrepared`] when every admissible engine failed to prepare it;
    /// [`Error::DynamicInput`] for dynamic inputs without a given shape; bundle errors.
    pub fn from_bundle(bundle: Arc<Bundle>, options: &ModelOptions) -> Result<Self, Error> {
        #[cfg(feature = "cuda")]
        let resolved = resolve_device(options.device, options.session.sync)?;
        #[cfg(not(feature = "cuda"))]
        let resolved = resolve_device(options.device)?;
        let mut model = Model {
            bundle: Arc::clone(&bundle),
            device: resolved.device,
            facts: resolved.facts,
            networks: Vec::new(),
            precision: options.precision,
            cpu_threads: options.cpu_threads,
            #[cfg(feature = "cuda")]
            context: resolved.context,
            #[cfg(feature = "cuda")]
            session: options.session.clone(),
            fixed_inputs: options.fixed_inputs.clone(),
            max_tensor_bytes: options.max_tensor_bytes,
            #[cfg(feature = "cuda-native")]
            native: options.native.clone(),
        };
        let groups = group_networks(&bundle);
        if let Some(missing) = options
            .networks
            .iter()
            .find(|n| !groups.iter().any(|g| g.name == **n))
        {
            return Err(Error::NoSuchNetwork {
                bundle: bundle.identity().name.to_string(),
                network: missing.clone(),
                available: name_list(groups.iter().map(|g| g.name.as_str())),
            });
        }
        for net in groups {
            if !options.networks.is_empty() && !options.networks.contains(&net.name) {
                continue;
            }
            let shapes = match options.input_shapes.iter().find(|(n, _)| *n == net.name) {
                Some((_, s)) => s.clone(),
                None => model.manifest_shapes(&net)?,
            };
            let network = model.prepare_network(&net, &shapes, &options.exclude)?;
            model.networks.push(network);
        }
        // The engines read their payloads from the mapping while preparing: a bundle rewritten
        // in place meanwhile is an error here, not a plan from mixed bytes.
        bundle.ensure_unchanged()?;
        Ok(model)
    }

    /// The static input shapes the manifest records for a network's first engine section.
    fn manifest_shapes(&self, net: &NetworkSections) -> Result<Vec<Vec<usize>>, Error> {
        let Some((section, _)) = net.offers.first() else {
            return Ok(Vec::new());
        };
        let mut shapes = Vec::new();
        let fixed = self.fixed_for(&net.name);
        for t in self
            .bundle
            .tensors(*section)
            .filter(|t| t.mode == IoMode::Input && !fixed.iter().any(|f| f.name == t.name))
        {
            let dims: Vec<i64> = t.dims.iter().collect();
            match dims
                .iter()
                .map(|&d| usize::try_from(d).ok())
                .collect::<Option<Vec<usize>>>()
            {
                Some(c) => shapes.push(c),
                None => {
                    return Err(Error::DynamicInput {
                        network: net.name.clone(),
                        input: t.name.to_string(),
                        dims,
                    });
                }
            }
        }
        Ok(shapes)
    }

    fn prepare_network(
        &self,
        net: &NetworkSections,
        shapes: &[Vec<usize>],
        exclude: &[EngineKind],
    ) -> Result<Network, Error> {
        let bundle_name = self.bundle.identity().name.to_string();
        let mut remaining: Vec<(u32, Offer)> = net
            .offers
            .iter()
            .copied()
            .filter(|(_, o)| !exclude.contains(&o.engine))
            .collect();
        if remaining.is_empty() {
            return Err(Error::NotCompiledIn {
                what: format!("network `{}` of bundle `{bundle_name}`", net.name),
                compiled: compiled_list(),
            });
        }
        let mut tried = Vec::new();
        let mut damaged = None;
        loop {
            let offers: Vec<Offer> = remaining.iter().map(|(_, o)| *o).collect();
            let choice = match select_engine(&offers, &self.facts) {
                Ok(c) => c,
                Err(refusal) if tried.is_empty() => {
                    return Err(Error::Refused {
                        bundle: bundle_name,
                        network: net.name.clone(),
                        refusal: Box::new(refusal),
                    });
                }
                Err(_) => {
                    return Err(Error::NoEnginePrepared {
                        bundle: bundle_name,
                        network: net.name.clone(),
                        tried: tried.join("; "),
                        damaged,
                    });
                }
            };
            let pos = remaining
                .iter()
                .position(|(_, o)| *o == choice.offer)
                .unwrap_or(0);
            let (section_index, _) = remaining.remove(pos);
            match self.prepare_with(section_index, &net.name, &choice, shapes) {
                Ok(plan) => {
                    log::info!("bundle `{bundle_name}`, network `{}`: {choice}", net.name);
                    return Ok(Network {
                        name: net.name.clone(),
                        plan,
                        choice,
                        section: section_index,
                    });
                }
                Err(e) => {
                    log::info!(
                        "bundle `{bundle_name}`, network `{}`: {} passed over: {e}",
                        net.name,
                        choice.engine
                    );
                    tried.push(format!("{}: {e}", choice.engine));
                    if let (None, Error::Bundle(b)) = (&damaged, e) {
                        damaged = Some(Box::new(b));
                    }
                }
            }
        }
    }

    /// Prepare `section` with the engine of `choice` at `shapes`.
    fn prepare_with(
        &self,
        section_index: u32,
        network: &str,
        choice: &Choice,
        shapes: &[Vec<usize>],
    ) -> Result<Plan, Error> {
        let section = self
            .bundle
            .sections()
            .nth(section_index as usize)
            .ok_or_else(|| Error::NoSuchNetwork {
                bundle: self.bundle.identity().name.to_string(),
                network: network.to_string(),
                available: self.network_names(),
            })?;
        let bytes = self.bundle.section_bytes(&section)?;
        let source = NetworkSource {
            network,
            format: if section.kind == SectionKind::TensorRtPlan {
                SourceFormat::TensorRtPlan
            } else {
                SourceFormat::Onnx
            },
            bytes,
            target: Some(choice.offer),
        };
        let options = PrepareOptions {
            input_shapes: shapes.to_vec(),
            precision: self.precision,
            fixed_inputs: self.fixed_for(network).to_vec(),
            max_tensor_bytes: self.max_tensor_bytes,
        };
        let backend = self.backend(choice)?;
        Ok(backend.prepare(&source, &options)?)
    }

    /// An instance of the backend `choice` names, on this model's device.
    fn backend(&self, choice: &Choice) -> Result<Box<dyn Backend>, Error> {
        let missing = || Error::NotCompiledIn {
            what: choice.engine.to_string(),
            compiled: compiled_list(),
        };
        match choice.engine {
            #[cfg(feature = "tract-cpu")]
            EngineKind::TractCpu if self.cpu_threads > 1 => Ok(Box::new(
                crate::backends::tract_cpu::TractCpuPool::new(self.cpu_threads),
            )),
            #[cfg(feature = "tract-cpu")]
            EngineKind::TractCpu => Ok(Box::new(crate::backends::tract_cpu::TractCpu)),
            #[cfg(feature = "tract-cuda")]
            EngineKind::TractCuda => {
                let ctx = self.context.clone().ok_or_else(missing)?;
                Ok(Box::new(crate::backends::tract_cuda::TractCuda::new(ctx)))
            }
            #[cfg(feature = "cuda-native")]
            EngineKind::CudaNative => {
                let ctx = self.context.clone().ok_or_else(missing)?;
                Ok(Box::new(crate::native::NativeBackend::new(
                    ctx,
                    self.native
                        .clone()
                        .unwrap_or_else(|| crate::native::NativeOptions {
                            allow_nvrtc: self.session.allow_nvrtc,
                            ..crate::native::NativeOptions::from_env()
                        }),
                )))
            }
            #[cfg(feature = "tensorrt")]
            EngineKind::TensorRt => {
                let ctx = self.context.clone().ok_or_else(missing)?;
                Ok(Box::new(crate::backends::tensorrt::TensorRtBackend::new(
                    ctx,
                    choice.host_code_required,
                )?))
            }
            // Reachable in builds without every backend.
            #[allow(unreachable_patterns)]
            _ => Err(missing()),
        }
    }

    /// Prepare network `name` again at other input shapes, on the engine chosen at open
    /// (e.g. one plan per recognition width bucket). The returned plan is independent of
    /// the model's own. `shapes` leaves out the inputs fixed by
    /// [`ModelOptions::fixed_inputs`] (they stay fixed).
    ///
    /// # Errors
    /// [`Error::NoSuchNetwork`], and the engine's preparation errors.
    pub fn prepare(&self, name: &str, shapes: &[Vec<usize>]) -> Result<Plan, Error> {
        let n = self.network(name)?;
        self.prepare_with(n.section, name, &n.choice, shapes)
    }

    /// The inputs of `network` fixed by [`ModelOptions::fixed_inputs`].
    fn fixed_for(&self, network: &str) -> &[FixedInput] {
        self.fixed_inputs
            .iter()
            .find(|(n, _)| n == network)
            .map_or(&[], |(_, v)| v.as_slice())
    }

    fn network_names(&self) -> String {
        name_list(self.networks.iter().map(|n| n.name.as_str()))
    }

    /// The opened bundle.
    pub fn bundle(&self) -> &Arc<Bundle> {
        &self.bundle
    }

    /// The device the model runs on (never [`Device::Auto`]).
    pub fn device(&self) -> Device {
        self.device
    }

    /// Threads of the CPU engine's plans ([`ModelOptions::cpu_threads`], at least 1).
    pub fn cpu_threads(&self) -> usize {
        self.cpu_threads.max(1)
    }

    /// The facts selection used.
    pub fn facts(&self) -> &DeviceFacts {
        &self.facts
    }

    /// The networks, in bundle order.
    pub fn networks(&self) -> &[Network] {
        &self.networks
    }

    /// The network called `name`.
    ///
    /// # Errors
    /// [`Error::NoSuchNetwork`] listing the networks the bundle has.
    pub fn network(&self, name: &str) -> Result<&Network, Error> {
        self.networks
            .iter()
            .find(|n| n.name == name)
            .ok_or_else(|| Error::NoSuchNetwork {
                bundle: self.bundle.identity().name.to_string(),
                network: name.to_string(),
                available: self.network_names(),
            })
    }

    /// The only network of a single-network bundle.
    ///
    /// # Errors
    /// [`Error::NoSuchNetwork`] when the bundle has none or several.
    pub fn single_network(&self) -> Result<&Network, Error> {
        match self.networks.as_slice() {
            [n] => Ok(n),
            _ => Err(Error::NoSuchNetwork {
                bundle: self.bundle.identity().name.to_string(),
                network: "(the only one)".into(),
                available: self.network_names(),
            }),
        }
    }

    /// The CUDA context of the model's device (`None` on the CPU).
    #[cfg(feature = "cuda")]
    pub fn context(&self) -> Option<&crate::cuda::Context> {
        self.context.as_ref()
    }

    /// The options device sessions of this model are built with.
    #[cfg(feature = "cuda")]
    pub fn session_options(&self) -> crate::session::SessionOptions {
        let mut o = self.session.clone();
        o.context = self.context.clone();
        o
    }

    /// Build a session from `spec` on this model's device.
    ///
    /// # Errors
    /// As [`Session::new`].
    pub fn session(&self, spec: PipelineSpec) -> Result<Session, Error> {
        Session::new(
            spec,
            #[cfg(feature = "cuda")]
            &self.session_options(),
        )
    }

    /// A session of network `name` alone: its inputs and outputs as host buffers, run on
    /// the network's engine (on the GPU through one captured CUDA graph per run).
    ///
    /// # Errors
    /// [`Error::NoSuchNetwork`], session errors.
    pub fn network_session(&self, name: &str) -> Result<NetworkSession, Error> {
        let n = self.network(name)?.clone();
        NetworkSession::new(self, n)
    }
}

struct Resolved {
    device: Device,
    facts: DeviceFacts,
    #[cfg(feature = "cuda")]
    context: Option<crate::cuda::Context>,
}

fn cpu(facts_note: Option<&str>) -> Resolved {
    if let Some(why) = facts_note {
        log::info!("using the CPU: {why}");
    }
    Resolved {
        device: Device::Cpu,
        facts: DeviceFacts::cpu_only(CpuArch::host()),
        #[cfg(feature = "cuda")]
        context: None,
    }
}

/// Resolve `device`; a CUDA context gets the scheduling policy `sync` (how the host waits
/// for the GPU: `CU_CTX_SCHED_*`).
fn resolve_device(
    device: Device,
    #[cfg(feature = "cuda")] sync: crate::cuda::SyncPolicy,
) -> Result<Resolved, Error> {
    match device {
        Device::Cpu => Ok(cpu(None)),
        Device::Auto if !crate::device::has_device_backend() => {
            Ok(cpu(Some("this build has no GPU backend")))
        }
        Device::Cuda(n) if !crate::device::has_device_backend() => Err(Error::NotCompiledIn {
            what: format!("CUDA device {n}"),
            compiled: compiled_list(),
        }),
        #[cfg(feature = "cuda")]
        Device::Auto => match crate::cuda::device_count() {
            Ok(n) if n > 0 => open_cuda(0, sync),
            Ok(_) => Ok(cpu(Some("the CUDA driver reports no device"))),
            Err(e) => {
                log::debug!("CUDA: {e}");
                Ok(cpu(Some(&e.summary())))
            }
        },
        #[cfg(feature = "cuda")]
        Device::Cuda(n) => open_cuda(n, sync),
        #[cfg(not(feature = "cuda"))]
        Device::Auto | Device::Cuda(_) => Ok(cpu(Some("this build has no GPU backend"))),
    }
}

#[cfg(feature = "cuda")]
fn open_cuda(ordinal: usize, sync: crate::cuda::SyncPolicy) -> Result<Resolved, Error> {
    use tether_targets::GpuFacts;
    let unavailable = |e: crate::cuda::CudaError| {
        log::debug!("CUDA device {ordinal}: {e}");
        Error::DeviceUnavailable {
            ordinal,
            reason: e.summary(),
        }
    };
    let ctx = crate::cuda::Context::new(ordinal, sync).map_err(unavailable)?;
    let p = ctx.properties();
    let facts = DeviceFacts {
        arch: CpuArch::host(),
        gpu: Some(GpuFacts {
            sm: tether_targets::Sm::new(p.compute_capability.0 as u8, p.compute_capability.1 as u8),
            integrated: p.integrated,
        }),
        tensorrt: tensorrt_version(),
        cuda_driver: Some(p.driver_version as u32),
    };
    Ok(Resolved {
        device: Device::Cuda(ordinal),
        facts,
        context: Some(ctx),
    })
}

#[cfg(all(feature = "cuda", feature = "tensorrt"))]
fn tensorrt_version() -> Option<tether_targets::TrtLibrary> {
    crate::backends::tensorrt::library()
        .ok()
        .map(|l| l.loaded())
}

#[cfg(all(feature = "cuda", not(feature = "tensorrt")))]
fn tensorrt_version() -> Option<tether_targets::TrtLibrary> {
    None
}

/// A session of one network, its inputs and outputs as named host buffers (the named-tensor
/// API, for applications that bring their own pre- and post-processing).
///
/// On the CPU the buffers are the session's host buffers; on a GPU they are page-locked
/// staging buffers and [`NetworkSession::run`] is one graph launch (upload, network,
/// download) and one wait.
///
/// On a GPU the inputs and outputs are also device memory the caller may use directly
/// ([`NetworkSession::device_buffer`]), with a run ordered on the caller's CUDA stream
/// ([`NetworkSession::run_on_stream`]) that reads and writes either the host staging or
/// those device buffers ([`IoMemory`]). Both run the graphs captured at load: the whole
/// frame, and the network alone without the staging copies (captured too for a network
/// session, [`crate::session::SessionOptions::device_io`]).
pub struct NetworkSession {
    session: Session,
    device: Device,
    network: String,
    engine: EngineKind,
    io: IoSpec,
    inputs: Vec<RegionId>,
    outputs: Vec<RegionId>,
    bundle: Arc<Bundle>,
}

impl std::fmt::Debug for NetworkSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetworkSession")
            .field("bundle", &self.bundle.identity().name)
            .field("network", &self.network)
            .field("engine", &self.engine)
            .field("io", &self.io)
            .finish()
    }
}

impl NetworkSession {
    /// Open a single-network bundle and a session of its network.
    ///
    /// # Errors
    /// As [`Model::open`]; [`Error::NoSuchNetwork`] for a bundle with several networks (use
    /// [`Model::network_session`]).
    pub fn open(path: impl AsRef<Path>, options: &ModelOptions) -> Result<Self, Error> {
        let model = Model::open(path, options)?;
        let n = model.single_network()?.clone();
        NetworkSession::new(&model, n)
    }

    fn new(model: &Model, n: Network) -> Result<Self, Error> {
        let mut spec = PipelineSpec::new();
        let (inputs, outputs) = spec.network_with_regions(
            &n.name,
            n.plan.clone(),
            RegionKind::Input,
            RegionKind::Output,
            Check::Exact,
        )?;
        // The device-I/O graph too: a network session offers its device buffers.
        #[cfg(feature = "cuda")]
        let session = Session::new(
            spec,
            &crate::session::SessionOptions {
                device_io: true,
                ..model.session_options()
            },
        )?;
        #[cfg(not(feature = "cuda"))]
        let session = model.session(spec)?;
        Ok(NetworkSession {
            session,
            device: model.device,
            engine: n.plan.kind(),
            io: n.plan.io().clone(),
            network: n.name,
            inputs,
            outputs,
            bundle: Arc::clone(&model.bundle),
        })
    }

    fn find(&self, mode: IoMode, name: &str) -> Result<(usize, &TensorSpec), Error> {
        let list = if mode == IoMode::Input {
            &self.io.inputs
        } else {
            &self.io.outputs
        };
        list.iter()
            .enumerate()
            .find(|(_, t)| t.name == name)
            .ok_or_else(|| Error::NoSuchTensor {
                network: self.network.clone(),
                mode,
                name: name.to_string(),
                available: list
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Input `name` as a mutable `[T]` (row-major, the shape in [`NetworkSession::inputs`]).
    ///
    /// # Errors
    /// [`Error::NoSuchTensor`], [`Error::View`] (wrong element type).
    pub fn input_mut<T: Element>(&mut self, name: &str) -> Result<&mut [T], Error> {
        let (i, spec) = self.find(IoMode::Input, name)?;
        let dtype = spec.dtype;
        let bytes = self.session.input_mut(self.inputs[i])?;
        Ok(view_mut::<T>(dtype, bytes)?)
    }

    /// Output `name` as `[T]`, valid after [`NetworkSession::run`].
    ///
    /// # Errors
    /// [`Error::NoSuchTensor`], [`Error::View`].
    pub fn output<T: Element>(&self, name: &str) -> Result<&[T], Error> {
        let (i, spec) = self.find(IoMode::Output, name)?;
        let bytes = self.session.output(self.outputs[i])?;
        Ok(view::<T>(spec.dtype, bytes)?)
    }

    /// Run the network once on the current inputs.
    ///
    /// # Errors
    /// A `Copy` [`crate::RunError`].
    pub fn run(&mut self) -> Result<(), crate::RunError> {
        self.session.run()
    }

    /// The refusal of a device-memory operation on a session that is not on a GPU.
    fn not_on_device(&self, what: &'static str) -> crate::RunError {
        crate::RunError::NotOnDevice {
            what,
            device: self.device,
            engine: self.engine,
        }
    }

    /// The device memory of input or output `name` (`mode`) on a GPU: the buffer the
    /// captured graph reads the input from or writes the output to (row-major, the dtype
    /// and shape of [`NetworkSession::inputs`] / [`NetworkSession::outputs`]). Owned by the
    /// session, at the same address for its life. Write an input there with your own copy
    /// or kernel, then [`NetworkSession::run_on_stream`] with [`IoMemory::Device`]; a run
    /// with the host staging ([`NetworkSession::run`], [`IoMemory::Host`]) overwrites the
    /// inputs with the staging's content. No allocation.
    ///
    /// # Errors
    /// [`Error::NoSuchTensor`]; [`Error::Run`] with [`crate::RunError::NotOnDevice`]
    /// (naming the device and engine) when the session runs on the CPU.
    pub fn device_buffer(&self, mode: IoMode, name: &str) -> Result<DeviceBuffer, Error> {
        let (i, _) = self.find(mode, name)?;
        let region = if mode == IoMode::Input {
            self.inputs[i]
        } else {
            self.outputs[i]
        };
        #[cfg(feature = "cuda")]
        if let Some(d) = self.session.device() {
            let r = d.io_region(region)?;
            return Ok(DeviceBuffer {
                address: r.ptr.0,
                bytes: r.bytes,
            });
        }
        let _ = region;
        Err(self.not_on_device("a device buffer").into())
    }

    /// Run once ordered on the caller's CUDA stream, with no host wait: the run starts
    /// after the work the caller enqueued on `stream` before this call, and the caller's
    /// work enqueued on `stream` after it sees the outputs (events recorded at load; see
    /// `DeviceSession::run_on_stream`). `memory` says where the inputs are read and the
    /// outputs written: [`IoMemory::Device`], the [`NetworkSession::device_buffer`]s (no
    /// staging copy: the graph captured without them), or [`IoMemory::Host`], the host
    /// buffers of [`NetworkSession::input_mut`] and [`NetworkSession::output`], read and
    /// written when `stream` reaches the run (touch them only after synchronising with
    /// it). No allocation.
    ///
    /// # Safety
    /// `stream` is null (the legacy default stream) or a live `CUstream` /
    /// `cudaStream_t` of the session's device's primary context (the one the CUDA runtime
    /// uses for that device), not being captured.
    ///
    /// # Errors
    /// [`crate::RunError::NotOnDevice`] on the CPU (nothing runs); a driver error.
    pub unsafe fn run_on_stream(
        &mut self,
        stream: *mut std::ffi::c_void,
        memory: IoMemory,
    ) -> Result<(), crate::RunError> {
        #[cfg(feature = "cuda")]
        if let Some(d) = self.session.device_mut() {
            // SAFETY: the caller's contract, forwarded.
            return unsafe { d.run_on_stream(stream, memory) };
        }
        let _ = (stream, memory);
        Err(self.not_on_device("a run on a CUDA stream"))
    }

    /// Input tensors.
    pub fn inputs(&self) -> &[TensorSpec] {
        &self.io.inputs
    }

    /// Output tensors.
    pub fn outputs(&self) -> &[TensorSpec] {
        &self.io.outputs
    }

    /// The engine running the network.
    pub fn engine(&self) -> EngineKind {
        self.engine
    }

    /// The network's name.
    pub fn network(&self) -> &str {
        &self.network
    }

    /// The session underneath (placement, device details, step times).
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// The opened bundle.
    pub fn bundle(&self) -> &Arc<Bundle> {
        &self.bundle
    }
}
