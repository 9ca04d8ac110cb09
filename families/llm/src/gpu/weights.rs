//! A model's weights on the device: which matrices and vectors the decode step reads, their
//! upload (with the RoPE table), and the checks a second decoder passes to read another's
//! upload ([`GpuDecoder::new_sharing`](super::GpuDecoder::new_sharing)).

use std::sync::Arc;

use tether_runtime::cuda::{ArenaPlan, Context, DeviceArena, DevicePtr, RegionId, Stream};

use super::decoder::GpuError;
use super::lower::Step;
use crate::forward::{MatId, Model, VecId};

/// A model's weights on one device, uploaded once: every matrix and vector the decode step
/// reads (as stored) and the RoPE table. Decoders made by
/// [`GpuDecoder::new_sharing`](super::GpuDecoder::new_sharing) hold the same upload (an
/// `Arc`); it is freed with the last of them.
pub struct DeviceWeights {
    arena: DeviceArena,
    mats: Vec<(MatId, RegionId)>,
    vecs: Vec<(VecId, RegionId)>,
    angles: RegionId,
    /// Positions the RoPE table covers.
    positions: usize,
    /// CRC-32 (crc32fast) of the uploaded matrices and vectors, in upload order.
    crc: u32,
    ordinal: usize,
}

/// The weight regions a list of decode steps reads: every matrix and vector the steps name,
/// once, in the order of first use (the upload's layout and the CRC's order).
pub(super) struct WeightRegions {
    plan: ArenaPlan,
    mats: Vec<(MatId, RegionId)>,
    vecs: Vec<(VecId, RegionId)>,
}

impl WeightRegions {
    /// The regions of `steps`' weights.
    ///
    /// # Errors
    /// [`GpuError::MatrixType`] for a matrix type the kernels do not read; the arena's
    /// layout errors.
    pub(super) fn of_steps(model: &Model<'_>, steps: &[Step]) -> Result<Self, GpuError> {
        let mut w = WeightRegions {
            plan: ArenaPlan::new(),
            mats: Vec::new(),
            vecs: Vec::new(),
        };
        for s in steps {
            match *s {
                Step::Embed { table } => w.add_mat(model, table)?,
                Step::Prep { norm: Some(v), .. } => w.add_vec(model, v)?,
                Step::MatVec { projs, .. } => {
                    for p in projs.iter().flatten() {
                        w.add_mat(model, p.weight)?;
                        if let Some(b) = p.bias {
                            w.add_vec(model, b)?;
                        }
                    }
                }
                Step::PrepMatVec { prologue, projs }
                | Step::QkvRope {
                    prologue, projs, ..
                } => {
                    if let Some(v) = prologue.norm {
                        w.add_vec(model, v)?;
                    }
                    for p in projs.iter().flatten() {
                        w.add_mat(model, p.weight)?;
                        if let Some(b) = p.bias {
                            w.add_vec(model, b)?;
                        }
                    }
                }
                Step::HeadNorm { weight, .. } => w.add_vec(model, weight)?,
                // A paired tail's `next` names the next layer's norm and Q/K/V, which that
                // layer's own tail step (with every matrix of its layer) adds.
                Step::Layer {
                    attn_norm,
                    ffn_norm,
                    mats,
                    ..
                } => {
                    w.add_vec(model, attn_norm)?;
                    w.add_vec(model, ffn_norm)?;
                    for m in mats {
                        w.add_mat(model, m)?;
                    }
                }
                _ => {}
            }
        }
        Ok(w)
    }

    fn add_mat(&mut self, model: &Model<'_>, id: MatId) -> Result<(), GpuError> {
        if self.mats.iter().any(|(m, _)| *m == id) {
            return Ok(());
        }
        let m = model.matrix(id);
        if !crate::forward::MATRIX_TYPES.contains(&m.ty) {
            return Err(GpuError::MatrixType { id: id.0, ty: m.ty });
        }
        let r = self.plan.add(format!("mat{}", id.0), m.data.len())?;
        self.mats.push((id, r));
        Ok(())
    }

    fn add_vec(&mut self, model: &Model<'_>, id: VecId) -> Result<(), GpuError> {
        if !self.vecs.iter().any(|(v, _)| *v == id) {
            let r = self
                .plan
                .add(format!("vec{}", id.0), model.vector(id).len() * 4)?;
            self.vecs.push((id, r));
        }
        Ok(())
    }
}

impl DeviceWeights {
    /// Bytes on the device.
    pub fn bytes(&self) -> usize {
        self.arena.plan().total_bytes()
    }

    /// The device (CUDA ordinal) they are on.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// Uploads `regions`' matrices and vectors of `model` and the RoPE table of `positions`
    /// positions to the device of `ctx` (CUDA ordinal `ordinal`) on `stream`, and records
    /// their CRC-32.
    ///
    /// # Errors
    /// CUDA (out of memory, copies).
    pub(super) fn upload(
        ctx: &Context,
        stream: &Stream,
        model: &Model<'_>,
        regions: WeightRegions,
        positions: usize,
        ordinal: usize,
    ) -> Result<Arc<Self>, GpuError> {
        let WeightRegions {
            mut plan,
            mats,
            vecs,
        } = regions;
        // The RoPE table: the CPU engine's angles of every position.
        let angles = rope_table(model, positions);
        let angles_r = plan.add("rope angles", angles.len() * 4)?;
        let arena = DeviceArena::new(ctx, plan)?;
        for (id, r) in &mats {
            let m = model.matrix(*id);
            // SAFETY: the region holds exactly m.data.len() bytes; the source outlives the
            // copy (synchronised below).
            unsafe { stream.memcpy_htod(arena.ptr(*r), m.data.as_ptr(), m.data.len()) }?;
        }
        for (id, r) in &vecs {
            let v = model.vector(*id);
            // SAFETY: as above.
            unsafe { stream.memcpy_htod(arena.ptr(*r), v.as_ptr() as *const u8, v.len() * 4) }?;
        }
        // SAFETY: as above.
        unsafe {
            stream.memcpy_htod(
                arena.ptr(angles_r),
                angles.as_ptr() as *const u8,
                angles.len() * 4,
            )
        }?;
        stream.synchronize()?;
        let crc = weights_crc(model, &mats, &vecs);
        Ok(Arc::new(DeviceWeights {
            arena,
            mats,
            vecs,
            angles: angles_r,
            positions,
            crc,
            ordinal,
        }))
    }

    /// Checks that a decoder of `model` on device `ordinal` with a cache of `context`
    /// positions, reading `regions`, can read this upload instead of its own.
    ///
    /// # Errors
    /// [`GpuError::SharedWeights`], naming the values seen: another device, a longer context
    /// than the uploaded RoPE table, other matrices or vectors, another CRC-32, other RoPE
    /// angles (the uploaded table is read back on `stream` and compared bit for bit); CUDA.
    pub(super) fn check_shareable(
        &self,
        model: &Model<'_>,
        regions: &WeightRegions,
        context: usize,
        ordinal: usize,
        stream: &Stream,
    ) -> Result<(), GpuError> {
        let refuse = |reason: String| Err(GpuError::SharedWeights { reason });
        if self.ordinal != ordinal {
            return refuse(format!(
                "they are on device {}, this decoder on device {ordinal}",
                self.ordinal
            ));
        }
        if context > self.positions {
            return refuse(format!(
                "a context of {context} positions is longer than the {} of their RoPE table",
                self.positions
            ));
        }
        let (mats, vecs) = (&regions.mats, &regions.vecs);
        let same_ids = mats.len() == self.mats.len()
            && vecs.len() == self.vecs.len()
            && mats
                .iter()
                .all(|(m, _)| self.mats.iter().any(|(o, _)| o == m))
            && vecs
                .iter()
                .all(|(v, _)| self.vecs.iter().any(|(o, _)| o == v));
        if !same_ids {
            return refuse(format!(
                "this step reads {} matrices and {} vectors, the upload holds {} and {} (another model)",
                mats.len(),
                vecs.len(),
                self.mats.len(),
                self.vecs.len()
            ));
        }
        let crc = weights_crc(model, &self.mats, &self.vecs);
        if crc != self.crc {
            return refuse(format!(
                "this model's weights have CRC-32 {crc:08x}, the uploaded ones {:08x} (another model)",
                self.crc
            ));
        }
        // The RoPE table this decoder needs, against the uploaded one read back (the same
        // weights under another RoPE configuration are another model).
        let angles = rope_table(model, context);
        let mut uploaded = vec![0f32; angles.len()];
        // SAFETY: the region holds `self.positions * head_dim` >= angles.len() f32 (the
        // context was checked above); `uploaded` outlives the copy (synchronised below).
        unsafe {
            stream.memcpy_dtoh(
                uploaded.as_mut_ptr() as *mut u8,
                self.arena.ptr(self.angles),
                angles.len() * 4,
            )
        }?;
        stream.synchronize()?;
        if angles
            .iter()
            .zip(&uploaded)
            .any(|(a, b)| a.to_bits() != b.to_bits())
        {
            return refuse(
                "the same weights with another RoPE configuration (the angles differ)".into(),
            );
        }
        Ok(())
    }

    /// Device address of uploaded matrix `id`.
    ///
    /// # Panics
    /// `id` was not uploaded (every matrix the steps name is: [`WeightRegions::of_steps`]).
    pub(super) fn mat_ptr(&self, id: MatId) -> DevicePtr {
        let r = self
            .mats
            .iter()
            .find(|(m, _)| *m == id)
            .expect("uploaded")
            .1;
        self.arena.ptr(r)
    }

    /// Device address of uploaded vector `id`.
    ///
    /// # Panics
    /// `id` was not uploaded (every vector the steps name is).
    pub(super) fn vec_ptr(&self, id: VecId) -> DevicePtr {
        let r = self
            .vecs
            .iter()
            .find(|(v, _)| *v == id)
            .expect("uploaded")
            .1;
        self.arena.ptr(r)
    }

    /// Device address of the RoPE table, f32 `[positions, head_dim]`.
    pub(super) fn angles_ptr(&self) -> DevicePtr {
        self.arena.ptr(self.angles)
    }
}

/// The CPU engine's RoPE angles of positions `0 .. positions` (`Model::rope_angles`),
/// `positions * head_dim` f32: the table the decoder uploads.
fn rope_table(model: &Model<'_>, positions: usize) -> Vec<f32> {
    let head_dim = model.hparams().head_dim;
    let mut angles = vec![0f32; positions * head_dim];
    for (pos, row) in angles.chunks_exact_mut(head_dim).enumerate() {
        model.rope_angles(pos, row);
    }
    angles
}

/// CRC-32 of the matrices and vectors named, in that order (what a sharing decoder compares).
fn weights_crc(model: &Model<'_>, mats: &[(MatId, RegionId)], vecs: &[(VecId, RegionId)]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    for (id, _) in mats {
        h.update(model.matrix(*id).data);
    }
    for (id, _) in vecs {
        for v in model.vector(*id) {
            h.update(&v.to_le_bytes());
        }
    }
    h.finalize()
}
