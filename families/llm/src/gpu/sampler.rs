//! The device sampler alone: `sample_advance` of `kernels/llm.cu` on logits uploaded from the
//! host, for tests that compare it with `src/sample.rs` on identical logits and for timing it.
//! The decoder runs the same kernel as the last node of its graph.

use tether_runtime::cuda::{
    ArenaPlan, Context, DeviceArena, DevicePtr, Function, KernelModule, PinnedBuffer, Stream,
    SyncPolicy,
};

use super::decoder::GpuError;
use super::kernels::{self, SampleParams};
use super::lower::{CONFIG_BYTES, STATE_BYTES, SampleConfig};
use crate::sample::SamplerParams;

/// `sample_advance` on one GPU with its own buffers: logits (`n_vocab` f32), the token
/// sequence (`max_sequence + 1` ids), the request state and the sampler configuration.
pub struct DeviceSampler {
    // Declared before the arena and the module it launches from: dropped first.
    stream: Stream,
    arena: DeviceArena,
    _module: KernelModule,
    f: Function,
    logits: DevicePtr,
    seq: DevicePtr,
    state: DevicePtr,
    config: DevicePtr,
    pinned: PinnedBuffer,
    seq_host: Vec<u32>,
    n_vocab: usize,
    max_sequence: usize,
    _ctx: Context,
}

impl std::fmt::Debug for DeviceSampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceSampler")
            .field("n_vocab", &self.n_vocab)
            .field("max_sequence", &self.max_sequence)
            .finish()
    }
}

impl DeviceSampler {
    /// A sampler for `n_vocab` tokens and sequences (history plus draw index) of up to
    /// `max_sequence` tokens, on device `ordinal`.
    ///
    /// # Errors
    /// [`GpuError::Cuda`] (no driver or device, out of memory).
    pub fn new(
        ordinal: usize,
        n_vocab: usize,
        max_sequence: usize,
    ) -> Result<DeviceSampler, GpuError> {
        let ctx = Context::new(ordinal, SyncPolicy::Spin)?;
        let stream = Stream::new(&ctx, SyncPolicy::Spin)?;
        let module = KernelModule::load(&ctx, kernels::module_source())?;
        let f = module.function("sample_advance")?;
        let mut plan = ArenaPlan::new();
        let logits_r = plan.add("logits", n_vocab * 4)?;
        let seq_r = plan.add("sequence", (max_sequence + 1) * 4)?;
        let state_r = plan.add("state", STATE_BYTES)?;
        let config_r = plan.add("sampler configuration", CONFIG_BYTES)?;
        let arena = DeviceArena::new(&ctx, plan)?;
        let pinned = PinnedBuffer::new(&ctx, STATE_BYTES + CONFIG_BYTES + 16, false)?;
        Ok(DeviceSampler {
            logits: arena.ptr(logits_r),
            seq: arena.ptr(seq_r),
            state: arena.ptr(state_r),
            config: arena.ptr(config_r),
            stream,
            arena,
            _module: module,
            f,
            pinned,
            seq_host: Vec::with_capacity(max_sequence),
            n_vocab,
            max_sequence,
            _ctx: ctx,
        })
    }

    /// The token the device chooses from `logits` (`n_vocab` f32) for draw `step` of a
    /// request whose sequence so far is `history` (prompt and generated tokens, oldest
    /// first: the penalty window's source), as `params` ask: what
    /// [`Sampler::sample`](crate::sample::Sampler::sample) returns after `accept`ing
    /// `history`. The device's logits after the penalty are left in `penalised` when given.
    ///
    /// # Errors
    /// [`GpuError::Sampling`] for parameters the device refuses; [`GpuError::Cuda`] for
    /// `logits` not `n_vocab` long or a sequence (`max(history, step, 1)`) beyond
    /// `max_sequence`, and for driver errors.
    pub fn sample(
        &mut self,
        logits: &[f32],
        history: &[u32],
        params: &SamplerParams,
        step: u64,
        penalised: Option<&mut [f32]>,
    ) -> Result<u32, GpuError> {
        let config = SampleConfig::new(params, self.n_vocab)
            .map_err(|e| GpuError::Sampling { what: e.what })?;
        let invalid = |m: String| GpuError::Cuda(tether_runtime::cuda::CudaError::Invalid(m));
        if logits.len() != self.n_vocab {
            return Err(invalid(format!(
                "{} logits for a vocabulary of {}",
                logits.len(),
                self.n_vocab
            )));
        }
        // The kernel draws with step = pos + 1 - prompt_len and reads the window from
        // seq[pos + 1 - w ..= pos]: the history is placed to end at pos, after ids beyond
        // the vocabulary (which the penalty skips) when the step is longer.
        let len = history.len().max(step as usize).max(1);
        if len > self.max_sequence || step > u64::from(u32::MAX) {
            return Err(invalid(format!(
                "a sequence of {len} tokens (step {step}) beyond the sampler's {}",
                self.max_sequence
            )));
        }
        self.seq_host.clear();
        self.seq_host.resize(len - history.len(), u32::MAX);
        self.seq_host.extend_from_slice(history);
        let state = [
            len as u32 - 1,
            len as u32 - 1,
            (len as u64 - step) as u32,
            0,
        ];
        let buf = self.pinned.as_mut_slice();
        for (i, w) in state.iter().enumerate() {
            buf[4 * i..4 * i + 4].copy_from_slice(&w.to_le_bytes());
        }
        buf[STATE_BYTES..STATE_BYTES + CONFIG_BYTES].copy_from_slice(&config.to_bytes());
        let p = SampleParams {
            logits: self.logits,
            seq: self.seq,
            state: self.state,
            config: self.config,
            n: self.n_vocab as i32,
            seq_cap: (self.max_sequence + 1) as i32,
        };
        // SAFETY: every copy stays inside its region (sizes checked above); the sources live
        // until the synchronisation below; the params struct mirrors the kernel's.
        unsafe {
            self.stream
                .memcpy_htod(self.logits, logits.as_ptr() as *const u8, logits.len() * 4)?;
            self.stream.memcpy_htod(
                self.seq,
                self.seq_host.as_ptr() as *const u8,
                self.seq_host.len() * 4,
            )?;
            self.stream
                .memcpy_htod(self.state, self.pinned.as_ptr(), STATE_BYTES)?;
            self.stream.memcpy_htod(
                self.config,
                self.pinned.as_ptr().wrapping_add(STATE_BYTES),
                CONFIG_BYTES,
            )?;
            self.stream
                .launch_params(self.f, (1, 1, 1), (kernels::SAMPLE_THREADS, 1, 1), 0, &p)?;
            self.stream.memcpy_dtoh(
                self.pinned
                    .as_mut_ptr()
                    .wrapping_add(STATE_BYTES + CONFIG_BYTES),
                self.state,
                8,
            )?;
            if let Some(out) = penalised {
                let n = out.len().min(self.n_vocab);
                self.stream
                    .memcpy_dtoh(out.as_mut_ptr() as *mut u8, self.logits, n * 4)?;
            }
        }
        self.stream.synchronize()?;
        let b = &self.pinned.as_slice()[STATE_BYTES + CONFIG_BYTES..];
        let token = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        let pos = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
        if pos as usize != len {
            return Err(invalid(format!(
                "the sampler left position {pos}, expected {len}"
            )));
        }
        Ok(token)
    }

    /// The arena's base (tests poison it).
    #[doc(hidden)]
    pub fn arena_base(&self) -> DevicePtr {
        self.arena.base()
    }
}
