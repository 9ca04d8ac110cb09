//! The semantic API: image in, detections out.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_bundle::{Bundle, Verify};
use tether_runtime::{Module, ModuleOptions};

use crate::config::{CONFIG_SECTION, LABELS_SECTION};
use crate::decode::{Detections, PostStats, Postprocessor};
use crate::letterbox::{ImageView, Letterbox, Preprocessor};
use crate::{DetectConfig, DetectError, FAMILY};

/// Where a [`Detector`] runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Device {
    /// The first CUDA GPU when this build has a GPU engine (feature
    /// `tract-cuda`) and a device answers; otherwise the CPU, with a log line
    /// saying why.
    #[default]
    Auto,
    /// The tract CPU engine.
    Cpu,
    /// CUDA device `ordinal`; an error when it cannot be used.
    Cuda(usize),
}

/// Options of [`Detector::open`].
#[derive(Clone, Debug, Default)]
pub struct DetectorOptions {
    /// Where to run.
    pub device: Device,
    /// GPU session options (staging, wait policy, graphs) for the GPU path.
    #[cfg(feature = "cuda")]
    pub gpu: crate::gpu::GpuOptions,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
    /// Override the bundle's score threshold (strictly greater is kept).
    pub score_threshold: Option<f32>,
    /// Override the bundle's NMS IoU threshold.
    pub iou_threshold: Option<f32>,
}

/// Wall time of each stage of the last [`Detector::detect`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Letterbox and normalisation.
    pub preprocess: Duration,
    /// The network.
    pub inference: Duration,
    /// Decode and NMS.
    pub postprocess: Duration,
}

/// A YOLOv8 detector loaded from a `detect` bundle.
///
/// Everything is prepared in [`Detector::open`]; [`Detector::detect`] reuses
/// the engine state, the tap tables, the candidate buffer and the
/// fixed-capacity result, so pre- and post-processing allocate nothing per
/// frame (the tract CPU engine itself allocates its intermediates).
///
/// On the GPU path (feature `tract-cuda`, [`Device::Auto`] with a GPU, or
/// [`Device::Cuda`]) a [`crate::gpu::GpuDetector`] session runs letterbox,
/// network and NMS on the device. A session is prepared for one frame
/// geometry (its CUDA graph bakes it in): it is built at the first frame and
/// rebuilt, off the steady state, when the geometry changes.
pub struct Detector {
    bundle: Arc<Bundle>,
    module: Option<Module>,
    #[cfg(feature = "tract-cuda")]
    gpu: Option<GpuPath>,
    config: DetectConfig,
    labels: Vec<String>,
    input: usize,
    output: usize,
    pre: Preprocessor,
    post: Postprocessor,
    detections: Detections,
    letterbox: Option<Letterbox>,
    stats: PostStats,
    times: StageTimes,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("module", &self.module)
            .field("config", &self.config)
            .field("labels", &self.labels.len())
            .finish_non_exhaustive()
    }
}

impl Detector {
    /// Open a `detect` bundle with default options.
    ///
    /// # Errors
    /// See [`Detector::open`].
    pub fn load(path: impl AsRef<Path>) -> Result<Self, DetectError> {
        Self::open(path, &DetectorOptions::default())
    }

    /// Open a `detect` bundle (memory-mapped) and prepare the network.
    ///
    /// # Errors
    /// [`DetectError::Bundle`] (unreadable or corrupt bundle),
    /// [`DetectError::WrongFamily`], [`DetectError::Config`],
    /// [`DetectError::Labels`], [`DetectError::Module`] (no usable engine),
    /// [`DetectError::Network`] (I/O that does not match the configuration).
    pub fn open(path: impl AsRef<Path>, options: &DetectorOptions) -> Result<Self, DetectError> {
        let verify = if options.verify_eagerly {
            Verify::Eager
        } else {
            Verify::Lazy
        };
        let bundle = Arc::new(Bundle::open(path, verify)?);
        Self::from_bundle(bundle, options)
    }

    /// Prepare a detector from an opened bundle.
    ///
    /// # Errors
    /// As [`Detector::open`].
    pub fn from_bundle(
        bundle: Arc<Bundle>,
        options: &DetectorOptions,
    ) -> Result<Self, DetectError> {
        let id = bundle.identity();
        if id.family != FAMILY {
            return Err(DetectError::WrongFamily {
                bundle: id.name.to_string(),
                family: id.family.to_string(),
            });
        }
        let mut config =
            DetectConfig::from_section(bundle.section_bytes(&bundle.section(CONFIG_SECTION)?)?)?;
        if let Some(s) = options.score_threshold {
            config.score_threshold = s;
        }
        if let Some(s) = options.iou_threshold {
            config.iou_threshold = s;
        }
        config.validate()?;
        let labels =
            crate::labels::decode_labels(bundle.section_bytes(&bundle.section(LABELS_SECTION)?)?)?;
        if labels.len() != config.num_classes as usize {
            return Err(DetectError::Labels(format!(
                "{} names for {} classes",
                labels.len(),
                config.num_classes
            )));
        }
        let (w, h) = (config.input_width as usize, config.input_height as usize);
        #[cfg(feature = "tract-cuda")]
        if let Some(ordinal) = gpu_ordinal(options.device)? {
            log::info!(
                "detector `{}`: {} classes, input {w}x{h}, {} anchors, score > {}, IoU > {}, on CUDA device {ordinal} (tract-cuda engine, GPU pre/post-processing)",
                id.name,
                config.num_classes,
                config.num_anchors,
                config.score_threshold,
                config.iou_threshold
            );
            let mut gpu_options = options.gpu;
            gpu_options.ordinal = ordinal;
            return Ok(Self::with_backend(
                Arc::clone(&bundle),
                None,
                Some(GpuPath {
                    options: gpu_options,
                    session: None,
                }),
                config,
                labels,
            ));
        }
        #[cfg(not(feature = "tract-cuda"))]
        match options.device {
            Device::Cuda(n) => {
                return Err(DetectError::Device(format!(
                    "CUDA device {n} was requested, but this build has no GPU engine (feature `tract-cuda`)"
                )));
            }
            Device::Auto => log::info!(
                "this build has no GPU engine (feature `tract-cuda`); using the CPU engine"
            ),
            Device::Cpu => {}
        }
        let module = Module::from_bundle(
            Arc::clone(&bundle),
            &ModuleOptions {
                input_shapes: Some(vec![vec![1, 3, h, w]]),
                verify_eagerly: options.verify_eagerly,
            },
        )?;
        if module.inputs().len() != 1 || module.outputs().is_empty() {
            return Err(DetectError::Network(format!(
                "expected one input and at least one output, found {} and {}",
                module.inputs().len(),
                module.outputs().len()
            )));
        }
        let out = &module.outputs()[0];
        let want = [
            1,
            4 + config.num_classes as usize,
            config.num_anchors as usize,
        ];
        if out.shape != want {
            return Err(DetectError::Network(format!(
                "output `{}` has shape {:?}, the configuration says {:?}",
                out.name, out.shape, want
            )));
        }
        log::info!(
            "detector `{}`: {} classes, input {}x{}, {} anchors, score > {}, IoU > {}, engine {:?}",
            id.name,
            config.num_classes,
            w,
            h,
            config.num_anchors,
            config.score_threshold,
            config.iou_threshold,
            module.engine_kind()
        );
        Ok(Self::with_backend(
            bundle,
            Some(module),
            #[cfg(feature = "tract-cuda")]
            None,
            config,
            labels,
        ))
    }

    fn with_backend(
        bundle: Arc<Bundle>,
        module: Option<Module>,
        #[cfg(feature = "tract-cuda")] gpu: Option<GpuPath>,
        config: DetectConfig,
        labels: Vec<String>,
    ) -> Self {
        Self {
            bundle,
            module,
            #[cfg(feature = "tract-cuda")]
            gpu,
            pre: Preprocessor::new(config.input_width, config.input_height),
            post: Postprocessor::new(config.num_classes as usize, config.num_anchors as usize),
            config,
            labels,
            input: 0,
            output: 0,
            detections: Detections::new(),
            letterbox: None,
            stats: PostStats::default(),
            times: StageTimes::default(),
        }
    }

    /// Detect objects in one image. Boxes are in the image's pixel coordinates,
    /// best score first, at most `max_detections` (the bundle's, <= 300).
    ///
    /// # Errors
    /// [`DetectError::Run`] when the engine fails; [`DetectError::OutputShape`]
    /// / [`DetectError::InputBuffer`] when the engine's buffers disagree with
    /// the configuration (a bundle/engine bug).
    pub fn detect(&mut self, image: &ImageView<'_>) -> Result<&Detections, DetectError> {
        #[cfg(feature = "tract-cuda")]
        if self.gpu.is_some() {
            return self.detect_gpu(image);
        }
        let t0 = Instant::now();
        let c = self.config;
        let Some(module) = self.module.as_mut() else {
            return Err(DetectError::Network("no engine prepared".into()));
        };
        let engine = module.engine();
        let input = tether_runtime::host::f32_mut(engine.input_host_mut(self.input)?)?;
        let lb = self.pre.run(image, c.mean, c.std, c.pad_value, input)?;
        let t1 = Instant::now();
        engine.run(tether_runtime::StreamHandle::HOST)?;
        let t2 = Instant::now();
        let output = tether_runtime::host::f32_ref(engine.output_host(self.output)?)?;
        self.stats = self.post.run(
            output,
            &lb,
            c.score_threshold,
            c.iou_threshold,
            c.max_detections as usize,
            &mut self.detections,
        )?;
        let t3 = Instant::now();
        self.letterbox = Some(lb);
        self.times = StageTimes {
            preprocess: t1 - t0,
            inference: t2 - t1,
            postprocess: t3 - t2,
        };
        Ok(&self.detections)
    }

    /// The detections of the last [`Detector::detect`].
    pub fn detections(&self) -> &Detections {
        &self.detections
    }

    /// Stage timings of the last [`Detector::detect`].
    pub fn stage_times(&self) -> StageTimes {
        self.times
    }

    /// Candidate and kept counts of the last [`Detector::detect`].
    pub fn post_stats(&self) -> PostStats {
        self.stats
    }

    /// The letterbox geometry of the last [`Detector::detect`].
    pub fn letterbox(&self) -> Option<Letterbox> {
        self.letterbox
    }

    /// Class names, indexed by `class_id`.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Name of class `class_id`, if it exists.
    pub fn class_name(&self, class_id: u16) -> Option<&str> {
        self.labels.get(usize::from(class_id)).map(String::as_str)
    }

    /// The effective configuration (bundle values plus overrides).
    pub fn config(&self) -> &DetectConfig {
        &self.config
    }

    /// The module API underneath (named tensors and the engine) on the CPU
    /// path; `None` on the GPU path, whose tensors live on the device.
    pub fn module(&mut self) -> Option<&mut Module> {
        self.module.as_mut()
    }

    /// The engine running the network.
    pub fn engine_kind(&self) -> tether_bundle::EngineKind {
        match &self.module {
            Some(m) => m.engine_kind(),
            None => tether_bundle::EngineKind::TractCuda,
        }
    }

    /// The opened bundle.
    pub fn bundle(&self) -> &Arc<Bundle> {
        &self.bundle
    }

    #[cfg(feature = "tract-cuda")]
    fn detect_gpu(&mut self, image: &ImageView<'_>) -> Result<&Detections, DetectError> {
        use crate::gpu::{FrameSpec, GpuDetector};
        let t0 = Instant::now();
        let spec = FrameSpec {
            width: image.width(),
            height: image.height(),
            format: image.format(),
            stride: image.stride(),
        };
        let Some(gpu) = self.gpu.as_mut() else {
            return Err(DetectError::Network("no GPU session".into()));
        };
        if gpu.session.as_ref().is_none_or(|s| s.frame_spec() != spec) {
            log::info!(
                "preparing the GPU session for {}x{} {:?} frames (engine, arena, CUDA graph)",
                spec.width,
                spec.height,
                spec.format
            );
            gpu.session = None;
            let (w, h) = (
                self.config.input_width as usize,
                self.config.input_height as usize,
            );
            let onnx = self.bundle.section_data(crate::config::ONNX_SECTION)?;
            let engine = tether_runtime::cuda::TractCudaEngine::load_onnx_bytes(onnx, h, w)
                .map_err(|e| {
                    DetectError::Network(format!("tract-cuda could not prepare the network: {e:#}"))
                })?;
            gpu.session = Some(GpuDetector::new(
                &self.config,
                Box::new(engine),
                spec,
                &gpu.options,
            )?);
        }
        let Some(session) = gpu.session.as_mut() else {
            return Err(DetectError::Network("no GPU session".into()));
        };
        // The bytes the view covers: full rows, the last one up to its pixels.
        let used =
            spec.stride * (spec.height as usize - 1) + spec.width as usize * spec.format.channels();
        let data = image.data().get(..used).ok_or(DetectError::InputBuffer {
            expected: used,
            actual: image.data().len(),
        })?;
        let dets = session.detect(data)?;
        self.detections.clone_from(dets);
        self.letterbox = Some(session.letterbox());
        self.stats = PostStats {
            candidates: session.candidates() as usize,
            kept: self.detections.len(),
        };
        self.times = StageTimes {
            preprocess: Duration::ZERO,
            inference: t0.elapsed(),
            postprocess: Duration::ZERO,
        };
        Ok(&self.detections)
    }
}

#[cfg(feature = "tract-cuda")]
struct GpuPath {
    options: crate::gpu::GpuOptions,
    session: Option<crate::gpu::GpuDetector>,
}

/// The CUDA ordinal to use for `device`, or `None` for the CPU.
#[cfg(feature = "tract-cuda")]
fn gpu_ordinal(device: Device) -> Result<Option<usize>, DetectError> {
    match device {
        Device::Cpu => Ok(None),
        Device::Auto => match tether_runtime::cuda::skip_reason() {
            None => Ok(Some(0)),
            Some(reason) => {
                let first = reason
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_end_matches(':');
                log::warn!("no CUDA device ({first}); using the CPU engine");
                log::debug!("CUDA: {reason}");
                Ok(None)
            }
        },
        Device::Cuda(n) => match tether_runtime::cuda::skip_reason() {
            None => Ok(Some(n)),
            Some(reason) => Err(DetectError::Device(format!(
                "CUDA device {n} unusable: {reason}"
            ))),
        },
    }
}
