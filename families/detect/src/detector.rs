//! The semantic API: image in, detections out.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tether_bundle::{Bundle, Verify};
use tether_family::selftest::{Report, SelfTest};
use tether_runtime::{Model, ModelOptions, Session};

pub use tether_runtime::Device;

use crate::config::{CONFIG_SECTION, LABELS_SECTION};
use crate::decode::Detections;
use crate::letterbox::{FrameSpec, ImageView, Letterbox};
use crate::output::{self, PostStats};
use crate::stages::{DetectRegions, pipeline};
use crate::{DetectConfig, DetectError, FAMILY, FrameError};

/// Options of [`Detector::open`].
#[derive(Clone, Debug, Default)]
pub struct DetectorOptions {
    /// Where to run (default: the first CUDA GPU when one answers, else the CPU).
    pub device: Device,
    /// Check every section CRC at open instead of on first use.
    pub verify_eagerly: bool,
    /// Override the bundle's score threshold (strictly greater is kept).
    pub score_threshold: Option<f32>,
    /// Override the bundle's NMS IoU threshold.
    pub iou_threshold: Option<f32>,
    /// Prepare the session for frames of this geometry at open (else at the first frame).
    pub frame: Option<FrameSpec>,
    /// Model options beyond the device (engines to exclude, precision, session options).
    pub model: ModelOptions,
}

/// Wall time of the last [`Detector::detect`], split where the host can see it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StageTimes {
    /// Copying the frame into the session's input staging.
    pub stage_in: Duration,
    /// The session run: pre-processing, network and post-processing (on a GPU one graph
    /// launch and the wait; per-step GPU times are in [`Detector::step_times`]).
    pub run: Duration,
    /// Reading the result record.
    pub collect: Duration,
}

struct Prepared {
    spec: FrameSpec,
    session: Session,
    regions: DetectRegions,
    letterbox: Letterbox,
}

/// A YOLOv8 detector loaded from a `detect` bundle.
///
/// [`Detector::open`] maps the bundle, picks the engine for the real device (a TensorRT plan
/// for this GPU, the native GPU engine, tract-cuda, or the CPU: see
/// [`tether_runtime::Model`]) and prepares the network once. A *session* (letterbox, network,
/// decode + NMS; one CUDA graph on a GPU) is prepared for one frame geometry, at open when
/// [`DetectorOptions::frame`] is given, else at the first frame; a frame of another geometry
/// builds a new session from the same prepared network (never re-preparing it).
///
/// The path is the same whatever the engine: copy the frame into the session's input
/// staging (or let the producer write it there in place: [`Detector::staging_mut`] and
/// [`Detector::detect_staged`]), run the session, read the result record. Nothing on that
/// path allocates on a GPU; on the CPU only tract's own intermediates do. Class names and
/// the configuration are copied out of the bundle at open: nothing after open reads the
/// mapping.
pub struct Detector {
    model: Model,
    config: DetectConfig,
    labels: Vec<String>,
    bundle_name: String,
    prepared: Option<Prepared>,
    detections: Detections,
    stats: PostStats,
    times: StageTimes,
}

impl std::fmt::Debug for Detector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Detector")
            .field("bundle", &self.bundle_name)
            .field("model", &self.model)
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
    /// [`DetectError::Bundle`] (unreadable or corrupt bundle), [`DetectError::WrongFamily`],
    /// [`DetectError::Config`], [`DetectError::Labels`], [`DetectError::Runtime`] (no usable
    /// engine, device unavailable), [`DetectError::Network`] (I/O that does not match the
    /// configuration).
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
        let bundle_name = id.name.to_string();
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
        let mut model_options = options.model.clone();
        model_options.device = options.device;
        model_options.verify_eagerly = options.verify_eagerly;
        if !model_options.input_shapes.iter().any(|(n, _)| n == "model") {
            model_options
                .input_shapes
                .push(("model".into(), vec![vec![1, 3, h, w]]));
        }
        let model = Model::from_bundle(Arc::clone(&bundle), &model_options)?;
        let net = model.single_network()?;
        // The configuration and the network agree at open, not at the first frame.
        crate::stages::check_io(&config, net.plan())?;
        log::info!(
            "detector `{bundle_name}`: {} classes, input {w}x{h}, {} anchors, score > {}, IoU > {}, {} engine on {}",
            config.num_classes,
            config.num_anchors,
            config.score_threshold,
            config.iou_threshold,
            net.engine(),
            model.device()
        );
        let mut det = Detector {
            model,
            config,
            labels,
            bundle_name,
            prepared: None,
            detections: Detections::new(),
            stats: PostStats::default(),
            times: StageTimes::default(),
        };
        if let Some(spec) = options.frame {
            det.prepare(spec)?;
        }
        Ok(det)
    }

    /// Prepare the session for frames of `spec` (pre-processing, network binding, graph
    /// capture and its check): done once per geometry; the network is not re-prepared.
    ///
    /// # Errors
    /// [`DetectError::Runtime`] when the session cannot be built; [`DetectError::Network`].
    pub fn prepare(&mut self, spec: FrameSpec) -> Result<(), DetectError> {
        if self.prepared.as_ref().is_some_and(|p| p.spec == spec) {
            return Ok(());
        }
        self.prepared = None;
        let plan = self.model.single_network()?.plan().clone();
        let (pipeline, regions) = pipeline(&self.config, &plan, spec)?;
        log::info!(
            "preparing the {} session for {}x{} {:?} frames",
            match plan.placement() {
                tether_runtime::Placement::Host => "CPU",
                _ => "GPU",
            },
            spec.width,
            spec.height,
            spec.format
        );
        let session = self.model.session(pipeline)?;
        let c = &self.config;
        self.prepared = Some(Prepared {
            spec,
            session,
            regions,
            letterbox: Letterbox::new(spec.width, spec.height, c.input_width, c.input_height),
        });
        Ok(())
    }

    /// Detect objects in one image. Boxes are in the image's pixel coordinates, best score
    /// first, at most `max_detections` (the bundle's, <= 300). A frame of a geometry other
    /// than the prepared one prepares a new session first (off the steady state).
    ///
    /// # Errors
    /// [`DetectError::Frame`] (a `Copy` error) when the run fails; preparation errors for a
    /// new geometry.
    pub fn detect(&mut self, image: &ImageView<'_>) -> Result<&Detections, DetectError> {
        self.prepare(image.spec())?;
        Ok(self.detect_prepared(image)?)
    }

    /// Detect in a frame of the prepared geometry. Never prepares, never allocates on a GPU;
    /// errors are `Copy`.
    ///
    /// # Errors
    /// [`FrameError::Geometry`] for another geometry (or nothing prepared),
    /// [`FrameError::Run`], [`FrameError::Result`].
    pub fn detect_prepared(&mut self, image: &ImageView<'_>) -> Result<&Detections, FrameError> {
        let t0 = Instant::now();
        let Some(p) = self.prepared.as_mut() else {
            return Err(FrameError::Geometry {
                expected: None,
                got: image.spec(),
            });
        };
        if p.spec != image.spec() {
            return Err(FrameError::Geometry {
                expected: Some(p.spec),
                got: image.spec(),
            });
        }
        p.session.copy_to_input(p.regions.frame, image.used())?;
        let stage_in = t0.elapsed();
        self.run_staged(stage_in)
    }

    /// The prepared session's frame staging, to write the next frame into in place:
    /// `spec.bytes()` bytes (`stride * height`) of the prepared [`FrameSpec`], rows `stride`
    /// bytes apart, pixels in its format (bytes past a row's pixels are ignored). On a GPU it
    /// is the session's pinned host buffer the captured graph uploads from (on an iGPU such
    /// as Jetson, mapped memory the GPU reads in place); on the CPU the session's input
    /// region. A producer that writes frames here (a camera's colour conversion, a decoder)
    /// and calls [`Detector::detect_staged`] skips the copy [`Detector::detect`] makes: zero
    /// host copies of the frame on the hot path. On a discrete GPU, a producer writing with
    /// ordinary CPU stores leaves the lines in its caches and the graph's upload then reads
    /// them from there, slower than from memory (0.043 against 0.020 ms for 768 KiB on the
    /// H200 host); streaming stores, or a DMA engine writing the buffer, avoid that. After
    /// [`Detector::prepare`] for a new geometry the staging holds the warm-up frame, not an
    /// earlier one. No allocation.
    ///
    /// # Errors
    /// [`FrameError::NotPrepared`] before [`Detector::prepare`] (or a first frame);
    /// [`FrameError::Run`] if the session has no frame region (never for a session this
    /// detector prepared).
    pub fn staging_mut(&mut self) -> Result<&mut [u8], FrameError> {
        let p = self.prepared.as_mut().ok_or(FrameError::NotPrepared)?;
        let n = p.spec.bytes();
        let buf = p.session.input_mut(p.regions.frame)?;
        let len = buf.len();
        buf.get_mut(..n)
            .ok_or(FrameError::Run(tether_runtime::RunError::BufferSize {
                what: "frame staging",
                index: 0,
                expected: n,
                actual: len,
            }))
    }

    /// Detect in the frame already in the staging ([`Detector::staging_mut`]): the same run
    /// as [`Detector::detect_prepared`] without its copy (`stage_in` is zero). The staging
    /// keeps its content between runs: running again detects in the same frame. Never
    /// prepares, never allocates on a GPU; errors are `Copy`.
    ///
    /// # Errors
    /// [`FrameError::NotPrepared`], [`FrameError::Run`], [`FrameError::Result`].
    pub fn detect_staged(&mut self) -> Result<&Detections, FrameError> {
        self.run_staged(Duration::ZERO)
    }

    /// Run the prepared session on its staging and read the result record.
    fn run_staged(&mut self, stage_in: Duration) -> Result<&Detections, FrameError> {
        let p = self.prepared.as_mut().ok_or(FrameError::NotPrepared)?;
        let t1 = Instant::now();
        p.session.run()?;
        let t2 = Instant::now();
        self.stats = output::parse(p.session.output(p.regions.result)?, &mut self.detections)?;
        if self.stats.nonfinite > 0 {
            log::warn!(
                "{} anchors of the network output were NaN or infinite and were dropped",
                self.stats.nonfinite
            );
        }
        self.times = StageTimes {
            stage_in,
            run: t2 - t1,
            collect: t2.elapsed(),
        };
        Ok(&self.detections)
    }

    /// The detections of the last run.
    pub fn detections(&self) -> &Detections {
        &self.detections
    }

    /// Host-side times of the last run.
    pub fn stage_times(&self) -> StageTimes {
        self.times
    }

    /// Per step of the last run, in milliseconds: host wall time on the CPU; GPU time from
    /// events on a GPU session built with step timing (see
    /// [`tether_runtime::session::SessionOptions::step_timing`]), zeros otherwise.
    pub fn step_times(&self) -> &[(String, f64)] {
        self.prepared
            .as_ref()
            .map_or(&[][..], |p| p.session.step_times())
    }

    /// Candidate, non-finite and kept counts of the last run.
    pub fn post_stats(&self) -> PostStats {
        self.stats
    }

    /// The letterbox geometry of the prepared frame size.
    pub fn letterbox(&self) -> Option<Letterbox> {
        self.prepared.as_ref().map(|p| p.letterbox)
    }

    /// Class names, indexed by `class_id` (copied out of the bundle at open).
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

    /// The model underneath (networks, engine choice, device).
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The engine running the network.
    pub fn engine(&self) -> tether_runtime::EngineKind {
        self.model
            .networks()
            .first()
            .map_or(tether_runtime::EngineKind::TractCpu, |n| n.engine())
    }

    /// The bundle's name.
    pub fn bundle_name(&self) -> &str {
        &self.bundle_name
    }

    /// The self-test the bundle carries, if any (read from the bundle when asked: a bundle
    /// whose self-test this build cannot read still opens and runs).
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] for an unreadable section.
    pub fn bundled_self_test(&self) -> Result<Option<SelfTest>, DetectError> {
        Ok(SelfTest::of_bundle(self.model.bundle(), FAMILY)?)
    }

    /// Detect in the test's image and compare with the expected detections
    /// ([`crate::selftest::compare`]). The session is prepared for the test image's
    /// geometry.
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] for a test without the family's entries; as
    /// [`Detector::detect`].
    pub fn run_self_test(&mut self, test: &SelfTest) -> Result<Report, DetectError> {
        let image = crate::selftest::input(test)?;
        let got = match crate::selftest::score_threshold(test)? {
            Some(t) => self.detect_at_threshold(&image, t)?,
            None => self.detect(&image)?.to_vec(),
        };
        crate::selftest::compare(test, &got, &self.engine().to_string())
    }

    /// [`Detector::detect`] with the score threshold `t` instead of the configured one (a
    /// self-test recorded at its own threshold, [`crate::selftest::SCORE_THRESHOLD`]): a
    /// session is prepared for `t` and, afterwards, for the configured threshold again (off
    /// the steady state, as a new geometry is).
    ///
    /// # Errors
    /// [`DetectError::Config`] for `t` outside `[0, 1]`; as [`Detector::detect`].
    pub(crate) fn detect_at_threshold(
        &mut self,
        image: &ImageView<'_>,
        t: f32,
    ) -> Result<Vec<crate::Detection>, DetectError> {
        let own = self.config.score_threshold;
        if t == own {
            return Ok(self.detect(image)?.to_vec());
        }
        self.config.score_threshold = t;
        let got = self.config.validate().and_then(|()| {
            self.prepared = None;
            Ok(self.detect(image)?.to_vec())
        });
        self.config.score_threshold = own;
        self.prepared = None;
        got
    }

    /// Run the bundle's own self-test (what `tether verify --self-test` runs on the
    /// device).
    ///
    /// # Errors
    /// [`DetectError::SelfTest`] when the bundle has none or it is unreadable; as
    /// [`Detector::run_self_test`].
    pub fn self_test(&mut self) -> Result<Report, DetectError> {
        let test = SelfTest::required(self.model.bundle(), FAMILY)?;
        self.run_self_test(&test)
    }

    /// The session of the prepared geometry (placement, device session details).
    pub fn session(&self) -> Option<&Session> {
        self.prepared.as_ref().map(|p| &p.session)
    }

    /// The session, mutable (tests and tools: region reads).
    pub fn session_mut(&mut self) -> Option<&mut Session> {
        self.prepared.as_mut().map(|p| &mut p.session)
    }

    /// The regions of the prepared session.
    pub fn regions(&self) -> Option<DetectRegions> {
        self.prepared.as_ref().map(|p| p.regions)
    }
}
