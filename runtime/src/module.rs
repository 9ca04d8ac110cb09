//! The module API: one network of a bundle as named tensors.
//!
//! A [`Module`] owns an opened [`Bundle`] (its memory mapping) and one prepared
//! [`Engine`]. Family pipelines (detection, ...) are built on it; applications
//! that bring their own pre/post-processing use it directly:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use tether_runtime::module::{Module, ModuleOptions};
//! let mut m = Module::open("model.bundle", &ModuleOptions::default())?;
//! m.input_f32_mut("images")?.fill(0.5);
//! m.run()?;
//! let out = m.output_f32("output0")?;
//! println!("{} values", out.len());
//! # Ok(()) }
//! ```

use std::path::Path;
use std::sync::Arc;

use tether_bundle::{Bundle, BundleError, DType, EngineKind, IoMode, SectionKind, Verify};

use tether_targets::{CpuArch as TargetArch, DeviceFacts, Offer, select_engine};

use crate::engine::{Engine, RunError, StreamHandle, TensorSpec};

/// A bundle target record as an offer for [`select_engine`]; `None` for
/// engine kinds this version does not know (they cannot be chosen).
fn offer(t: &tether_bundle::Target<'_>) -> Option<Offer> {
    t.offer()
}

/// How [`Module::open`] prepares the network.
#[derive(Clone, Debug, Default)]
pub struct ModuleOptions {
    /// Concrete shapes for the network's inputs, in order. `None` uses the
    /// shapes recorded in the manifest, which must then be fully static.
    pub input_shapes: Option<Vec<Vec<usize>>>,
    /// Check every section's CRC32 at open ([`Verify::Eager`]) instead of on
    /// first use ([`Verify::Lazy`], the default).
    pub verify_eagerly: bool,
}

/// Error while opening a module.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// The bundle could not be opened or read.
    #[error(transparent)]
    Bundle(#[from] BundleError),
    /// The bundle has no engine this build of the runtime can execute.
    #[error("bundle `{bundle}` offers no engine this runtime can execute; it offers: {offers}")]
    NoUsableEngine {
        /// Bundle name.
        bundle: String,
        /// The bundle's targets, one `name (engine, arch, sm)` each.
        offers: String,
    },
    /// No engine of the bundle can run on this device (names both sides).
    #[error("bundle `{bundle}`: {refusal}")]
    Refused {
        /// Bundle name.
        bundle: String,
        /// What the bundle offers, what the device is, and why each offer cannot run.
        refusal: Box<tether_targets::Refusal>,
    },
    /// A manifest input shape has a dynamic dimension and no shape was given.
    #[error("input `{name}` has dynamic dimensions {dims:?}; give a concrete shape")]
    DynamicInput {
        /// Input name.
        name: String,
        /// Declared dimensions (-1 = dynamic).
        dims: Vec<i64>,
    },
    /// The CPU engine failed to prepare the network.
    #[cfg(feature = "cpu")]
    #[error(transparent)]
    Cpu(#[from] crate::cpu::CpuError),
    /// A tensor name that the network does not have.
    #[error("the network has no {mode:?} tensor `{name}`; it has: {available}")]
    NoSuchTensor {
        /// Input or output.
        mode: IoMode,
        /// The name asked for.
        name: String,
        /// The names it has, comma-separated.
        available: String,
    },
    /// A tensor was accessed with the wrong element type.
    #[error("tensor `{name}` is {actual}, not {requested}")]
    DType {
        /// Tensor name.
        name: String,
        /// Its element type.
        actual: DType,
        /// The type asked for.
        requested: DType,
    },
    /// An engine call failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// One network of a bundle, prepared, with named I/O tensors.
pub struct Module {
    bundle: Arc<Bundle>,
    engine: Box<dyn Engine>,
    section: u32,
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("bundle", &self.bundle.identity().name)
            .field("section", &self.section)
            .field("engine", &self.engine.kind())
            .field("inputs", &self.engine.inputs())
            .field("outputs", &self.engine.outputs())
            .finish()
    }
}

fn describe_offers(bundle: &Bundle) -> String {
    let v: Vec<String> = bundle
        .targets()
        .map(|t| format!("{} ({:?}, {:?}, sm {:?})", t.name, t.engine, t.arch, t.sm))
        .collect();
    if v.is_empty() {
        "nothing".into()
    } else {
        v.join("; ")
    }
}

impl Module {
    /// Open a bundle file and prepare its network (see [`Module::from_bundle`]).
    ///
    /// # Errors
    /// Every [`ModuleError`] variant but `NoSuchTensor`/`DType`/`Run`.
    pub fn open(path: impl AsRef<Path>, options: &ModuleOptions) -> Result<Self, ModuleError> {
        let verify = if options.verify_eagerly {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        let bundle = Arc::new(Bundle::open(path, verify)?);
        Self::from_bundle(bundle, options)
    }

    /// Prepare the bundle's network on the best engine for this device.
    ///
    /// The choice is [`tether_targets::select_engine`] over the bundle's
    /// target records and [`Module::device_facts`]: exact TensorRT plan, then
    /// hardware- and version-compatible plans, then the portable engines. One
    /// `info` log line states the choice and why.
    ///
    /// # Errors
    /// [`ModuleError::Refused`] when no offer can run here;
    /// [`ModuleError::NoUsableEngine`] when the chosen target has no section
    /// this build can execute; [`ModuleError::DynamicInput`]; CPU engine and
    /// bundle errors.
    pub fn from_bundle(bundle: Arc<Bundle>, options: &ModuleOptions) -> Result<Self, ModuleError> {
        let offers: Vec<Offer> = bundle.targets().filter_map(|t| offer(&t)).collect();
        let facts = Self::device_facts();
        let choice = select_engine(&offers, &facts).map_err(|refusal| ModuleError::Refused {
            bundle: bundle.identity().name.to_string(),
            refusal: Box::new(refusal),
        })?;
        log::info!("bundle `{}`: {choice}", bundle.identity().name);
        let onnx = bundle
            .sections()
            .find(|s| s.kind == SectionKind::Onnx && s.target == Some(choice.index));
        let Some(section) = onnx else {
            return Err(ModuleError::NoUsableEngine {
                bundle: bundle.identity().name.to_string(),
                offers: describe_offers(&bundle),
            });
        };
        let section_index = section.index;
        let shapes = match &options.input_shapes {
            Some(s) => s.clone(),
            None => {
                let mut shapes = Vec::new();
                for t in bundle
                    .tensors(section_index)
                    .filter(|t| t.mode == IoMode::Input)
                {
                    let dims: Vec<i64> = t.dims.iter().collect();
                    let concrete: Option<Vec<usize>> =
                        dims.iter().map(|&d| usize::try_from(d).ok()).collect();
                    match concrete {
                        Some(c) => shapes.push(c),
                        None => {
                            return Err(ModuleError::DynamicInput {
                                name: t.name.to_string(),
                                dims,
                            });
                        }
                    }
                }
                shapes
            }
        };
        let engine = Self::prepare_cpu(&bundle, &section, &shapes)?;
        log::debug!(
            "bundle `{}`: section `{}` on the {:?} engine",
            bundle.identity().name,
            section.name,
            engine.kind()
        );
        Ok(Self {
            bundle: Arc::clone(&bundle),
            engine,
            section: section_index,
        })
    }

    /// What this build of the runtime can execute on this machine, for engine
    /// selection. The engines that exist today run on the CPU, so the facts
    /// are the host architecture with no GPU; GPU engines add their device
    /// here as they are wired into the module API (see `docs/status.md`).
    pub fn device_facts() -> DeviceFacts {
        DeviceFacts::cpu_only(TargetArch::host())
    }

    #[cfg(feature = "cpu")]
    fn prepare_cpu(
        bundle: &Bundle,
        section: &tether_bundle::Section<'_>,
        shapes: &[Vec<usize>],
    ) -> Result<Box<dyn Engine>, ModuleError> {
        let bytes = bundle.section_bytes(section)?;
        Ok(Box::new(crate::cpu::TractCpuEngine::load(bytes, shapes)?))
    }

    #[cfg(not(feature = "cpu"))]
    fn prepare_cpu(
        bundle: &Bundle,
        _section: &tether_bundle::Section<'_>,
        _shapes: &[Vec<usize>],
    ) -> Result<Box<dyn Engine>, ModuleError> {
        Err(ModuleError::NoUsableEngine {
            bundle: bundle.identity().name.to_string(),
            offers: format!(
                "{} (this runtime was built without the `cpu` feature)",
                describe_offers(bundle)
            ),
        })
    }

    /// The opened bundle.
    pub fn bundle(&self) -> &Arc<Bundle> {
        &self.bundle
    }

    /// Index of the bundle section this module executes.
    pub fn section_index(&self) -> u32 {
        self.section
    }

    /// The engine (for direct access to buffers and capture safety).
    pub fn engine(&mut self) -> &mut dyn Engine {
        self.engine.as_mut()
    }

    /// Which backend runs the network.
    pub fn engine_kind(&self) -> EngineKind {
        self.engine.kind()
    }

    /// Input tensors.
    pub fn inputs(&self) -> &[TensorSpec] {
        self.engine.inputs()
    }

    /// Output tensors.
    pub fn outputs(&self) -> &[TensorSpec] {
        self.engine.outputs()
    }

    fn find(&self, mode: IoMode, name: &str) -> Result<(usize, &TensorSpec), ModuleError> {
        let list = match mode {
            IoMode::Output => self.engine.outputs(),
            _ => self.engine.inputs(),
        };
        list.iter()
            .enumerate()
            .find(|(_, t)| t.name == name)
            .ok_or_else(|| ModuleError::NoSuchTensor {
                mode,
                name: name.to_string(),
                available: list
                    .iter()
                    .map(|t| t.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    fn check_f32(spec: &TensorSpec) -> Result<(), ModuleError> {
        if spec.dtype == DType::F32 {
            Ok(())
        } else {
            Err(ModuleError::DType {
                name: spec.name.clone(),
                actual: spec.dtype,
                requested: DType::F32,
            })
        }
    }

    /// Writable host view of the f32 input called `name` (row-major, the
    /// shape in [`Module::inputs`]).
    ///
    /// # Errors
    /// [`ModuleError::NoSuchTensor`], [`ModuleError::DType`], [`ModuleError::Run`].
    pub fn input_f32_mut(&mut self, name: &str) -> Result<&mut [f32], ModuleError> {
        let (ix, spec) = self.find(IoMode::Input, name)?;
        Self::check_f32(spec)?;
        let bytes = self.engine.input_host_mut(ix)?;
        Ok(crate::host::f32_mut(bytes)?)
    }

    /// Host view of the f32 output called `name`, valid after [`Module::run`].
    ///
    /// # Errors
    /// [`ModuleError::NoSuchTensor`], [`ModuleError::DType`], [`ModuleError::Run`].
    pub fn output_f32(&self, name: &str) -> Result<&[f32], ModuleError> {
        let (ix, spec) = self.find(IoMode::Output, name)?;
        Self::check_f32(spec)?;
        Ok(crate::host::f32_ref(self.engine.output_host(ix)?)?)
    }

    /// Execute the network once with the current inputs.
    ///
    /// # Errors
    /// [`RunError`] from the engine.
    pub fn run(&mut self) -> Result<(), RunError> {
        self.engine.run(StreamHandle::HOST)
    }
}
