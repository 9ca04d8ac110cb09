//! Sessions keyed by input shape: one plan and one [`Session`](crate::Session) (or a
//! family's wrapper around one) per shape a family runs a network at, prepared on first use
//! on the engine chosen at open ([`Model::prepare`]), kept, and found again without
//! allocating.
//!
//! A family declares its bucket policy ([`ShapePolicy`]) and how a shape becomes the
//! network's input shapes; the cache does the rest: it rounds a shape to its bucket, adopts
//! the plan the model prepared at open when its shapes are the bucket's (instead of
//! preparing it twice), prepares the others once, builds the family's value around each
//! plan, and drops the least recently used one when a bounded cache is full. The three
//! policies in the tree: OCR's detector one session per input size, at most a few held
//! (`Exact`); OCR's recogniser one per width bucket and the embedder one per (batch,
//! sequence) bucket (`Buckets`).

use crate::backend::Plan;
use crate::error::Error;
use crate::model::Model;

/// How a requested shape maps to the shape a session is prepared for, and how many are kept.
/// `D` is the number of dimensions that vary (e.g. `[h, w]`, `[batch, sequence]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShapePolicy<const D: usize> {
    /// Every shape asked for gets its own session; at most `capacity` (at least 1) are
    /// kept, the least recently used one dropped, with a warning, for a new shape (a
    /// detector whose input follows the image size).
    Exact {
        /// Sessions kept.
        capacity: usize,
    },
    /// Each dimension rounded up to the smallest of its sizes that holds it, or to the
    /// largest when none does (the family then squeezes or truncates); one session per
    /// bucket, all kept. Sizes are sorted and deduplicated at construction; a dimension
    /// without sizes is taken as asked.
    Buckets([Vec<usize>; D]),
}

impl<const D: usize> ShapePolicy<D> {
    /// The shape a request of `shape` runs at. No allocation.
    pub fn fit(&self, shape: [usize; D]) -> [usize; D] {
        match self {
            ShapePolicy::Exact { .. } => shape,
            ShapePolicy::Buckets(sizes) => {
                let mut out = shape;
                for (o, sizes) in out.iter_mut().zip(sizes) {
                    if let Some(&b) = sizes.iter().find(|&&b| b >= *o).or(sizes.last()) {
                        *o = b;
                    }
                }
                out
            }
        }
    }

    /// Every bucket, first dimension slowest (nothing for [`ShapePolicy::Exact`]).
    pub fn buckets(&self) -> Vec<[usize; D]> {
        let ShapePolicy::Buckets(sizes) = self else {
            return Vec::new();
        };
        if sizes.iter().any(Vec::is_empty) {
            return Vec::new();
        }
        let mut out = vec![[0; D]];
        for (d, sizes) in sizes.iter().enumerate() {
            out = out
                .iter()
                .flat_map(|prefix| {
                    sizes.iter().map(move |&s| {
                        let mut k = *prefix;
                        k[d] = s;
                        k
                    })
                })
                .collect();
        }
        out
    }

    /// Sessions kept at most.
    fn capacity(&self) -> usize {
        match self {
            ShapePolicy::Exact { capacity } => (*capacity).max(1),
            ShapePolicy::Buckets(sizes) => sizes.iter().map(|s| s.len().max(1)).product(),
        }
    }
}

struct Entry<T, const D: usize> {
    key: [usize; D],
    value: T,
    used: u64,
}

/// The network's input shapes for a key (`[h, w]` -> `[[1, 3, h, w]]`).
type InputShapes<const D: usize> = Box<dyn Fn(&[usize; D]) -> Vec<Vec<usize>> + Send + Sync>;

/// One network's values of type `T` (its session and regions) keyed by input shape, under a
/// [`ShapePolicy`]. See the [module documentation](self).
pub struct ShapeSessions<T, const D: usize> {
    network: String,
    policy: ShapePolicy<D>,
    input_shapes: InputShapes<D>,
    entries: Vec<Entry<T, D>>,
    clock: u64,
    prepared: usize,
}

impl<T, const D: usize> std::fmt::Debug for ShapeSessions<T, D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShapeSessions")
            .field("network", &self.network)
            .field("policy", &self.policy)
            .field("held", &self.keys().collect::<Vec<_>>())
            .field("prepared", &self.prepared)
            .finish()
    }
}

impl<T, const D: usize> ShapeSessions<T, D> {
    /// A cache for `network` of `model`: `input_shapes` gives the network's input shapes
    /// (inputs fixed by [`crate::ModelOptions::fixed_inputs`] left out, as
    /// [`Model::prepare`] wants them) for a key. Nothing is prepared yet; the plan the model
    /// prepared at open counts as prepared (see [`ShapeSessions::prepared_count`]).
    pub fn new(
        model: &Model,
        network: &str,
        policy: ShapePolicy<D>,
        input_shapes: impl Fn(&[usize; D]) -> Vec<Vec<usize>> + Send + Sync + 'static,
    ) -> Self {
        let policy = match policy {
            ShapePolicy::Buckets(mut sizes) => {
                for s in &mut sizes {
                    s.sort_unstable();
                    s.dedup();
                }
                ShapePolicy::Buckets(sizes)
            }
            exact => exact,
        };
        ShapeSessions {
            network: network.to_string(),
            entries: Vec::with_capacity(policy.capacity().min(64)),
            policy,
            input_shapes: Box::new(input_shapes),
            clock: 0,
            prepared: usize::from(model.network(network).is_ok()),
        }
    }

    /// The policy (for [`ShapePolicy::fit`] and [`ShapePolicy::buckets`]).
    pub fn policy(&self) -> &ShapePolicy<D> {
        &self.policy
    }

    /// The value for the bucket of `shape`, built on first use: `build` gets the plan for
    /// that bucket (the model's own plan when its input shapes are the bucket's, else one
    /// [`Model::prepare`]d on the engine chosen at open, or the preparation's error) and the
    /// bucket, and makes the value (its session) or the family's error. A bounded cache that
    /// is full drops its least recently used value first. A hit allocates nothing.
    ///
    /// # Errors
    /// What `build` returns.
    pub fn get<E>(
        &mut self,
        model: &Model,
        shape: [usize; D],
        build: impl FnOnce(Result<Plan, Error>, [usize; D]) -> Result<T, E>,
    ) -> Result<&mut T, E> {
        let key = self.policy.fit(shape);
        self.clock += 1;
        let i = match self.entries.iter().position(|e| e.key == key) {
            Some(i) => i,
            None => {
                self.make_room(key);
                let plan = self.plan(model, &key);
                let value = build(plan, key)?;
                self.entries.push(Entry {
                    key,
                    value,
                    used: 0,
                });
                self.entries.len() - 1
            }
        };
        let e = &mut self.entries[i];
        e.used = self.clock;
        Ok(&mut e.value)
    }

    /// The value held for exactly `key` (a bucket), if any. No allocation; the recency is
    /// not touched.
    pub fn held(&self, key: [usize; D]) -> Option<&T> {
        self.entries.iter().find(|e| e.key == key).map(|e| &e.value)
    }

    /// Values held now, in the order they were made.
    pub fn values(&self) -> impl Iterator<Item = &T> + '_ {
        self.entries.iter().map(|e| &e.value)
    }

    /// Keys with a value now, in the order they were made.
    pub fn keys(&self) -> impl Iterator<Item = [usize; D]> + '_ {
        self.entries.iter().map(|e| e.key)
    }

    /// Plans prepared so far, the one the model prepared at open included (a hit, or
    /// adopting the model's plan, prepares nothing).
    pub fn prepared_count(&self) -> usize {
        self.prepared
    }

    /// Drop the least recently used value when the cache is full.
    fn make_room(&mut self, key: [usize; D]) {
        if self.entries.len() < self.policy.capacity() {
            return;
        }
        let lru = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, e)| e.used)
            .map_or(0, |(i, _)| i);
        let old = self.entries.swap_remove(lru);
        log::warn!(
            "{}: dropping the session for shape {:?} to prepare {key:?} ({} held; raise the capacity when input sizes alternate)",
            self.network,
            old.key,
            self.policy.capacity()
        );
    }

    /// The plan for `key`: the model's own when its input shapes are `key`'s, else prepared.
    fn plan(&mut self, model: &Model, key: &[usize; D]) -> Result<Plan, Error> {
        let shapes = (self.input_shapes)(key);
        let net = model.network(&self.network)?;
        if net.io().inputs.iter().map(|t| &t.shape).eq(shapes.iter()) {
            return Ok(net.plan().clone());
        }
        let plan = model.prepare(&self.network, &shapes)?;
        self.prepared += 1;
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::ShapePolicy;

    #[test]
    fn buckets_round_up_per_dimension_and_cap_at_the_largest() {
        let p = ShapePolicy::Buckets([vec![1, 8], vec![16, 32, 64, 256]]);
        assert_eq!(p.fit([1, 5]), [1, 16]);
        assert_eq!(p.fit([3, 16]), [8, 16]);
        assert_eq!(p.fit([8, 17]), [8, 32]);
        assert_eq!(p.fit([8, 300]), [8, 256], "past the largest: the largest");
        assert_eq!(p.buckets().len(), 8);
        assert_eq!(p.buckets()[0], [1, 16]);
        assert_eq!(p.buckets()[7], [8, 256]);
        assert_eq!(p.capacity(), 8);
        let e = ShapePolicy::Exact { capacity: 0 };
        assert_eq!(e.fit([480, 640]), [480, 640]);
        assert_eq!(e.capacity(), 1);
        assert!(e.buckets().is_empty());
        let free = ShapePolicy::Buckets([vec![], vec![48]]);
        assert_eq!(
            free.fit([37, 100]),
            [37, 48],
            "a dimension without sizes is as asked"
        );
    }
}

/// The cache over a real model (the tract CPU engine): `y = x + x` on f32 `[h, w]` with
/// both dimensions dynamic.
#[cfg(all(test, feature = "tract-cpu"))]
mod model_tests {
    use std::sync::Arc;

    use tether_bundle::{Bundle, BundleWriter, IdentityDesc, SectionKind, Verify};
    use tract_onnx::pb;

    use super::{ShapePolicy, ShapeSessions};
    use crate::session::{Check, PipelineSpec, RegionId, RegionKind, Session};
    use crate::{Device, Model, ModelOptions};

    fn value_info(name: &str) -> pb::ValueInfoProto {
        use pb::tensor_shape_proto::{Dimension, dimension};
        let dim = |p: &str| Dimension {
            value: Some(dimension::Value::DimParam(p.into())),
            ..Dimension::default()
        };
        pb::ValueInfoProto {
            name: name.into(),
            r#type: Some(pb::TypeProto {
                value: Some(pb::type_proto::Value::TensorType(pb::type_proto::Tensor {
                    elem_type: 1,
                    shape: Some(pb::TensorShapeProto {
                        dim: vec![dim("h"), dim("w")],
                    }),
                })),
                ..pb::TypeProto::default()
            }),
            ..pb::ValueInfoProto::default()
        }
    }

    fn model() -> Model {
        use prost::Message;
        let graph = pb::GraphProto {
            input: vec![value_info("x")],
            output: vec![value_info("y")],
            node: vec![pb::NodeProto {
                input: vec!["x".into(), "x".into()],
                output: vec!["y".into()],
                op_type: "Add".into(),
                ..pb::NodeProto::default()
            }],
            ..pb::GraphProto::default()
        };
        let onnx = pb::ModelProto {
            ir_version: 8,
            opset_import: vec![pb::OperatorSetIdProto {
                domain: String::new(),
                version: 17,
            }],
            graph: Some(graph),
            ..pb::ModelProto::default()
        }
        .encode_to_vec();
        let mut w = BundleWriter::new(IdentityDesc {
            name: "double".into(),
            family: "test".into(),
            ..IdentityDesc::default()
        });
        w.add_section(SectionKind::Onnx, "test/net/model.onnx", None, onnx)
            .unwrap();
        let bundle = Arc::new(Bundle::from_vec(w.to_bytes().unwrap(), Verify::Eager).unwrap());
        let options = ModelOptions {
            device: Device::Cpu,
            input_shapes: vec![("net".into(), vec![vec![2, 3]])],
            ..ModelOptions::default()
        };
        Model::from_bundle(bundle, &options).unwrap()
    }

    /// A session of the network at one shape, and its regions.
    struct Doubler {
        session: Session,
        x: RegionId,
        y: RegionId,
    }

    fn doubler(model: &Model, plan: Result<crate::Plan, crate::Error>) -> Result<Doubler, String> {
        let plan = plan.map_err(|e| e.to_string())?;
        let mut spec = PipelineSpec::new();
        let (ins, outs) = spec
            .network_with_regions(
                "net",
                plan,
                RegionKind::Input,
                RegionKind::Output,
                Check::Exact,
            )
            .map_err(|e| e.to_string())?;
        let session = model.session(spec).map_err(|e| e.to_string())?;
        Ok(Doubler {
            session,
            x: ins[0],
            y: outs[0],
        })
    }

    /// Runs `d` on `h * w` values and checks `y = 2 x` at that size.
    fn check(d: &mut Doubler, h: usize, w: usize) {
        let x: Vec<u8> = (0..h * w).flat_map(|i| (i as f32).to_ne_bytes()).collect();
        d.session.copy_to_input(d.x, &x).unwrap();
        d.session.run().unwrap();
        let y = d.session.output(d.y).unwrap();
        assert_eq!(y.len(), h * w * 4, "{h}x{w}");
        for (i, c) in y.chunks_exact(4).enumerate() {
            assert_eq!(f32::from_ne_bytes([c[0], c[1], c[2], c[3]]), 2.0 * i as f32);
        }
    }

    /// Exact shapes, two held: the model's own plan adopted for its shape (prepared once,
    /// at open), every other shape prepared once while held, the least recently used one
    /// dropped for a third.
    #[test]
    fn exact_shapes_are_prepared_once_and_the_oldest_dropped() {
        let model = model();
        let mut cache: ShapeSessions<Doubler, 2> = ShapeSessions::new(
            &model,
            "net",
            ShapePolicy::Exact { capacity: 2 },
            |&[h, w]| vec![vec![h, w]],
        );
        assert_eq!(cache.prepared_count(), 1, "the plan from open");
        let get = |cache: &mut ShapeSessions<Doubler, 2>, h, w| {
            check(
                cache
                    .get(&model, [h, w], |plan, _| doubler(&model, plan))
                    .unwrap(),
                h,
                w,
            );
        };
        get(&mut cache, 2, 3);
        assert_eq!(cache.prepared_count(), 1, "adopted, not prepared again");
        get(&mut cache, 4, 5);
        get(&mut cache, 2, 3);
        assert_eq!(cache.prepared_count(), 2);
        get(&mut cache, 6, 1); // drops 4x5, the least recently used
        assert_eq!(cache.keys().collect::<Vec<_>>(), [[2, 3], [6, 1]]);
        assert_eq!(cache.prepared_count(), 3);
        get(&mut cache, 4, 5);
        assert_eq!(cache.prepared_count(), 4, "4x5 was dropped: prepared again");
        assert!(cache.held([2, 3]).is_none(), "2x3 was the oldest then");
        // A preparation error reaches the family's `build`.
        let e = cache
            .get(&model, [0, 5], |plan, key| match plan {
                Ok(_) => Err(format!("{key:?} prepared")),
                Err(e) => Err(format!("{key:?}: {e}")),
            })
            .err();
        assert!(e.is_some_and(|e| e.starts_with("[0, 5]")));
    }

    /// Buckets: every shape runs at its bucket's session, one per bucket.
    #[test]
    fn buckets_hold_one_session_each() {
        let model = model();
        let mut cache: ShapeSessions<Doubler, 2> = ShapeSessions::new(
            &model,
            "net",
            ShapePolicy::Buckets([vec![2], vec![8, 3, 16]]),
            |&[h, w]| vec![vec![h, w]],
        );
        for w in [1, 3, 2, 7, 8, 9, 16, 40, 5] {
            let key = cache.policy().fit([2, w]);
            let d = cache
                .get(&model, [2, w], |plan, _| doubler(&model, plan))
                .unwrap();
            check(d, key[0], key[1]);
        }
        assert_eq!(cache.keys().collect::<Vec<_>>(), [[2, 3], [2, 8], [2, 16]]);
        assert_eq!(
            cache.prepared_count(),
            3,
            "the open one ([2, 3]) and two more"
        );
        assert_eq!(cache.policy().buckets(), [[2, 3], [2, 8], [2, 16]]);
    }
}
