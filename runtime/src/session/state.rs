//! The request state of a session: what a stream of runs carries from one run to the next,
//! sized at load, never reallocated, and reset when a new request (an utterance, a prompt)
//! begins.
//!
//! Two kinds, one interface (as TensorRT Model Connect's `IInferenceState` covers both a KV
//! cache and a recurrent state):
//!
//! - a **recurrent** state ([`PipelineSpec::recurrent_state`]): a fixed-size value a network
//!   reads and replaces every run (Silero VAD's LSTM state, a streaming speech model's
//!   cache of fixed size). It is held in two regions that exchange places after every run,
//!   so nothing is copied: [`RecurrentState::current`] is what the next run reads,
//!   [`RecurrentState::next`] what it writes. On the host the two buffers are swapped; on a
//!   device the session holds one executor per parity for the networks bound to them (each
//!   bound once) and captures one set of CUDA graphs per parity, so the state never leaves
//!   the device and a run is still one launch.
//! - an **appendable** state ([`PipelineSpec::append_state`]): `capacity` rows of
//!   `row_bytes` per slot (a decoder's KV cache, as Edge-LLM's static linear cache: allocated
//!   once, at load), with a [`Cursor`] per slot. Each run appends rows at the cursor's
//!   position and advances it; [`PipelineSpec::append_rows`] declares the step that does it
//!   (host code on the host, a kernel on a device); a network's own in-place operator can
//!   write there too (it binds [`AppendState::rows`] and [`AppendState::cursor`] like any
//!   region).
//!
//! # Where the position lives, who advances it, how reset works
//!
//! The session's host side owns the truth: per slot, the rows valid so far and the rows the
//! next run appends (the state's `rows_per_run`, or what [`super::Session::set_next_rows`]
//! set for that one run). Before every run the session writes each slot's [`Cursor`]
//! (`position` = rows valid before the run, `length` = rows valid after it) into the state's
//! cursor region, checks it against the capacity first (a run that would pass the capacity
//! is refused with [`StateError::Full`] before anything runs: never a silent wrap or
//! truncation), and after the run commits `length` as the new position. The host thus
//! advances the position *between* launches, through a word it writes into page-locked
//! memory:
//!
//! - on a **host** session the cursor region is host memory; stages read it there;
//! - on a **device** session the cursor region is an input region: its page-locked staging
//!   is written by the host, and the graph's first node (the upload) copies it into device
//!   memory, where every kernel of the run reads it (on an integrated GPU the staging is
//!   mapped and kernels read it in place). The graph captures the cursor's *address*, never
//!   its value, so one captured graph serves every position up to the capacity.
//!
//! Resetting an appendable state (a new request) sets the host's positions to 0: the next
//! run uploads the new cursor with its own first node, so nothing inside a captured graph
//! changes and nothing on the device is touched (rows past `length` are never read).
//! Resetting a recurrent state zeroes its two regions (on a device: a memset on the
//! session's stream between launches, then a wait).
//!
//! Why the host and not a kernel advances it: the host must know every position anyway, to
//! refuse a run before it overflows (a kernel cannot return a typed error), and a host-written
//! cursor makes reset a host store instead of a device operation. The price is the cursor's
//! upload, one small copy node per state (8 bytes a slot) at the head of the graph, none with
//! mapped staging.
//!
//! # Slots
//!
//! An appendable state holds `slots` independent sequences (a batch of requests): rows
//! `[slot * capacity, (slot + 1) * capacity)` and cursor `slot` are that sequence's; each is
//! reset and advanced on its own.
//!
//! [`PipelineSpec::recurrent_state`]: super::PipelineSpec::recurrent_state
//! [`PipelineSpec::append_state`]: super::PipelineSpec::append_state
//! [`PipelineSpec::append_rows`]: super::PipelineSpec::append_rows

use std::fmt;

use super::spec::RegionId;

/// Handle to a request state of a [`super::PipelineSpec`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct StateId(pub(crate) u16);

impl StateId {
    /// The state's index in the spec (declaration order).
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

/// Where an appendable state's runs read and write, per slot: two `i32` words, native
/// endianness, `[slots, 2]` in the cursor region ([`AppendState::cursor`], 8 bytes a slot).
///
/// During a run both are fixed: the run writes its rows at `[position, length)` and reads
/// the valid rows `[0, length)` (a decoder's new token is at `position`; attention covers
/// `length` rows).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cursor {
    /// Rows valid before the run: where its rows go (row index within the slot).
    pub position: i32,
    /// Rows valid after the run: `position` plus the rows it appends.
    pub length: i32,
}

/// Bytes of one slot's [`Cursor`] in the cursor region.
pub const CURSOR_BYTES: usize = std::mem::size_of::<Cursor>();

impl Cursor {
    /// Read slot `slot`'s cursor from the bytes of a cursor region (`None` past its end).
    pub fn read(region: &[u8], slot: usize) -> Option<Cursor> {
        let b = region.get(slot * CURSOR_BYTES..(slot + 1) * CURSOR_BYTES)?;
        let word = |i: usize| i32::from_ne_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Some(Cursor {
            position: word(0),
            length: word(4),
        })
    }

    /// Write this cursor as slot `slot` of a cursor region (nothing past its end).
    pub fn write(self, region: &mut [u8], slot: usize) {
        if let Some(b) = region.get_mut(slot * CURSOR_BYTES..(slot + 1) * CURSOR_BYTES) {
            b[..4].copy_from_slice(&self.position.to_ne_bytes());
            b[4..].copy_from_slice(&self.length.to_ne_bytes());
        }
    }

    /// Rows the run appends (`length - position`).
    pub fn rows(self) -> usize {
        usize::try_from(self.length - self.position).unwrap_or(0)
    }
}

/// A recurrent state's regions (from [`super::PipelineSpec::recurrent_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecurrentState {
    /// The state.
    pub id: StateId,
    /// The state the next run reads (bind it as the network's state input). After each run
    /// this id names the state just produced.
    pub current: RegionId,
    /// Where the run writes the next state (bind it as the network's state output).
    pub next: RegionId,
}

/// An appendable state's regions (from [`super::PipelineSpec::append_state`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendState {
    /// The state.
    pub id: StateId,
    /// The rows: `[slots, capacity, row_bytes]` bytes, row `r` of slot `s` at byte
    /// `(s * capacity + r) * row_bytes`.
    pub rows: RegionId,
    /// The cursors: `i32 [slots, 2]` ([`Cursor`]), written by the session before every run.
    pub cursor: RegionId,
}

/// Declaration of an appendable state ([`super::PipelineSpec::append_state`]).
#[derive(Clone, Debug)]
pub struct AppendDecl {
    /// Name for logs and errors, e.g. "kv cache".
    pub name: String,
    /// Bytes of one row (one position: e.g. a layer's keys and values for one token).
    pub row_bytes: usize,
    /// Rows each slot holds (the context length), at most `i32::MAX`.
    pub capacity: usize,
    /// Independent sequences (1 unless batching requests).
    pub slots: usize,
    /// Most rows one run appends to a slot (a prefill chunk); at least `rows_per_run`.
    pub max_rows: usize,
    /// Rows a run appends unless [`super::Session::set_next_rows`] says otherwise for that
    /// run (1 for a decode step).
    pub rows_per_run: usize,
    /// How the load-time replay check compares the rows region (from a reset state).
    pub check: super::Check,
}

/// What a state is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StateKind {
    Recurrent {
        current: RegionId,
        next: RegionId,
    },
    Append {
        rows: RegionId,
        cursor: RegionId,
        row_bytes: usize,
        capacity: usize,
        slots: usize,
        max_rows: usize,
        rows_per_run: usize,
    },
}

/// One declared state.
#[derive(Clone, Debug)]
pub(crate) struct StateDecl {
    pub(crate) name: String,
    pub(crate) kind: StateKind,
}

/// A request state operation that cannot be done. Small and `Copy` (it is returned on the
/// run path); the state's name is [`super::Session::state_name`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The run would write past the state's capacity; nothing ran and nothing changed.
    #[error(
        "request state {state}, slot {slot}: {rows} more rows at position {position} exceed its capacity of {capacity} rows (reset it for a new request)"
    )]
    Full {
        /// The state's index.
        state: usize,
        /// The slot.
        slot: usize,
        /// Rows valid now.
        position: usize,
        /// Rows the run would append.
        rows: usize,
        /// Rows the slot holds.
        capacity: usize,
    },
    /// More rows in one run than the state's appending steps take.
    #[error("request state {state}: {rows} rows in one run; at most {max}")]
    TooManyRows {
        /// The state's index.
        state: usize,
        /// Rows asked for.
        rows: usize,
        /// The state's `max_rows`.
        max: usize,
    },
    /// A state id from another spec.
    #[error("request state {state} does not exist (the session has {count})")]
    NoSuchState {
        /// The index given.
        state: usize,
        /// States in the session.
        count: usize,
    },
    /// A slot past the state's slots.
    #[error("request state {state} has {slots} slots; slot {slot} asked for")]
    NoSuchSlot {
        /// The state's index.
        state: usize,
        /// The slot given.
        slot: usize,
        /// Slots the state has.
        slots: usize,
    },
    /// An operation of appendable states asked of a recurrent one.
    #[error("request state {state} is recurrent: it has no rows or cursor")]
    NotAppendable {
        /// The state's index.
        state: usize,
    },
}

/// Per slot of an appendable state: rows valid and rows the next run appends.
#[derive(Clone, Copy, Debug, Default)]
struct SlotBook {
    valid: usize,
    next: usize,
}

/// The host's bookkeeping of a session's states: the one truth about positions, shared by
/// the host and the device session. Allocates only at construction.
pub(crate) struct StateBook {
    decls: Vec<StateDecl>,
    /// `slots[i]`: state `i`'s slots (empty for a recurrent state).
    slots: Vec<Vec<SlotBook>>,
}

impl fmt::Debug for StateBook {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.decls.iter().map(|d| &d.name))
            .finish()
    }
}

impl StateBook {
    pub(crate) fn new(decls: Vec<StateDecl>) -> Self {
        let slots = decls
            .iter()
            .map(|d| match d.kind {
                StateKind::Recurrent { .. } => Vec::new(),
                StateKind::Append {
                    slots,
                    rows_per_run,
                    ..
                } => vec![
                    SlotBook {
                        valid: 0,
                        next: rows_per_run,
                    };
                    slots
                ],
            })
            .collect();
        StateBook { decls, slots }
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn decls(&self) -> &[StateDecl] {
        &self.decls
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn is_empty(&self) -> bool {
        self.decls.is_empty()
    }

    /// The recurrent states' region pairs `(current, next)`.
    pub(crate) fn recurrent_pairs(&self) -> impl Iterator<Item = (RegionId, RegionId)> + '_ {
        self.decls.iter().filter_map(|d| match d.kind {
            StateKind::Recurrent { current, next } => Some((current, next)),
            StateKind::Append { .. } => None,
        })
    }

    pub(crate) fn decl(&self, id: StateId) -> Result<&StateDecl, StateError> {
        self.decls.get(id.index()).ok_or(StateError::NoSuchState {
            state: id.index(),
            count: self.decls.len(),
        })
    }

    /// The state's name.
    pub(crate) fn name(&self, id: StateId) -> Result<&str, StateError> {
        Ok(&self.decl(id)?.name)
    }

    fn append_kind(&self, id: StateId) -> Result<(usize, usize, usize), StateError> {
        match self.decl(id)?.kind {
            StateKind::Append {
                capacity,
                slots,
                max_rows,
                ..
            } => Ok((capacity, slots, max_rows)),
            StateKind::Recurrent { .. } => Err(StateError::NotAppendable { state: id.index() }),
        }
    }

    fn slot(&self, id: StateId, slot: usize) -> Result<SlotBook, StateError> {
        let (_, slots, _) = self.append_kind(id)?;
        self.slots[id.index()]
            .get(slot)
            .copied()
            .ok_or(StateError::NoSuchSlot {
                state: id.index(),
                slot,
                slots,
            })
    }

    /// The cursor the next run sees in `slot`.
    pub(crate) fn cursor(&self, id: StateId, slot: usize) -> Result<Cursor, StateError> {
        let s = self.slot(id, slot)?;
        Ok(cursor_of(s))
    }

    /// Rows the next run appends to `slot` (this run only; then `rows_per_run` again).
    pub(crate) fn set_next_rows(
        &mut self,
        id: StateId,
        slot: usize,
        rows: usize,
    ) -> Result<(), StateError> {
        let (capacity, _, max_rows) = self.append_kind(id)?;
        let s = self.slot(id, slot)?;
        if rows > max_rows {
            return Err(StateError::TooManyRows {
                state: id.index(),
                rows,
                max: max_rows,
            });
        }
        if s.valid + rows > capacity {
            return Err(StateError::Full {
                state: id.index(),
                slot,
                position: s.valid,
                rows,
                capacity,
            });
        }
        self.slots[id.index()][slot].next = rows;
        Ok(())
    }

    /// Reset `slot` of an appendable state (a new request in that slot): no rows valid.
    pub(crate) fn reset_slot(&mut self, id: StateId, slot: usize) -> Result<(), StateError> {
        self.slot(id, slot)?;
        let StateKind::Append { rows_per_run, .. } = self.decl(id)?.kind else {
            return Err(StateError::NotAppendable { state: id.index() });
        };
        self.slots[id.index()][slot] = SlotBook {
            valid: 0,
            next: rows_per_run,
        };
        Ok(())
    }

    /// Reset every slot of every appendable state (recurrent states are the session's to
    /// zero: their bytes live in its memory).
    pub(crate) fn reset_appends(&mut self) {
        for (decl, slots) in self.decls.iter().zip(&mut self.slots) {
            if let StateKind::Append { rows_per_run, .. } = decl.kind {
                slots.fill(SlotBook {
                    valid: 0,
                    next: rows_per_run,
                });
            }
        }
    }

    /// Before a run: check every slot's next rows against the capacity (nothing written
    /// when one does not fit), then write every cursor with `write(cursor region, bytes)`.
    /// No allocation.
    pub(crate) fn begin(
        &self,
        mut write: impl FnMut(RegionId, &mut dyn FnMut(&mut [u8])) -> Result<(), super::RunError>,
    ) -> Result<(), super::RunError> {
        for (i, (decl, slots)) in self.decls.iter().zip(&self.slots).enumerate() {
            let StateKind::Append { capacity, .. } = decl.kind else {
                continue;
            };
            for (slot, s) in slots.iter().enumerate() {
                if s.valid + s.next > capacity {
                    return Err(StateError::Full {
                        state: i,
                        slot,
                        position: s.valid,
                        rows: s.next,
                        capacity,
                    }
                    .into());
                }
            }
        }
        for (decl, slots) in self.decls.iter().zip(&self.slots) {
            let StateKind::Append { cursor, .. } = decl.kind else {
                continue;
            };
            write(cursor, &mut |bytes: &mut [u8]| {
                for (slot, s) in slots.iter().enumerate() {
                    cursor_of(*s).write(bytes, slot);
                }
            })?;
        }
        Ok(())
    }

    /// After a successful run: the rows it appended are valid; the next run appends
    /// `rows_per_run` again.
    pub(crate) fn commit(&mut self) {
        for (decl, slots) in self.decls.iter().zip(&mut self.slots) {
            if let StateKind::Append { rows_per_run, .. } = decl.kind {
                for s in slots.iter_mut() {
                    s.valid += s.next;
                    s.next = rows_per_run;
                }
            }
        }
    }
}

fn cursor_of(s: SlotBook) -> Cursor {
    // Capacities are at most i32::MAX (checked at declaration) and valid + next never
    // passes the capacity (checked when set and before every run).
    Cursor {
        position: i32::try_from(s.valid).unwrap_or(i32::MAX),
        length: i32::try_from(s.valid + s.next).unwrap_or(i32::MAX),
    }
}

/// The appending step ([`super::PipelineSpec::append_rows`]): slot `s`'s first
/// `cursor.rows()` rows of `src` (`[slots, max_rows, row_bytes]`) copied to rows
/// `[position, length)` of slot `s` of the state.
#[derive(Clone, Copy, Debug)]
pub(crate) struct AppendStep {
    pub(crate) src: RegionId,
    pub(crate) rows: RegionId,
    pub(crate) cursor: RegionId,
    pub(crate) row_bytes: usize,
    pub(crate) capacity: usize,
    pub(crate) slots: usize,
    pub(crate) max_rows: usize,
}

impl AppendStep {
    /// The host flavour: the copy the device kernel does, reading the same cursor bytes.
    /// A cursor out of range (never written by the session: it checks first) copies nothing.
    pub(crate) fn run_host(&self, src: &[u8], cursor: &[u8], rows: &mut [u8]) {
        for slot in 0..self.slots {
            let Some(c) = Cursor::read(cursor, slot) else {
                continue;
            };
            let n = c.rows();
            let Ok(pos) = usize::try_from(c.position) else {
                continue;
            };
            if c.length < c.position || n > self.max_rows || pos + n > self.capacity {
                continue;
            }
            let from = slot * self.max_rows * self.row_bytes;
            let to = (slot * self.capacity + pos) * self.row_bytes;
            let len = n * self.row_bytes;
            if let (Some(s), Some(d)) = (src.get(from..from + len), rows.get_mut(to..to + len)) {
                d.copy_from_slice(s);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backend::{
        EngineKind, HostExecutor, HostPlan, IoSpec, Plan, PrepareError, RunError,
    };
    #[cfg(feature = "cuda")]
    use crate::session::SessionOptions;
    use crate::session::{Check, HostIo, PipelineSpec, RegionKind, Session, SpecError, Stage};
    use crate::tensor::{DType, IoMode, TensorSpec};

    /// Bytes of a row: two f32.
    const ROW: usize = 8;

    fn session(spec: PipelineSpec) -> Result<Session, crate::Error> {
        Session::new(
            spec,
            #[cfg(feature = "cuda")]
            &SessionOptions::default(),
        )
    }

    fn row(a: f32, b: f32) -> [u8; ROW] {
        let mut r = [0u8; ROW];
        r[..4].copy_from_slice(&a.to_ne_bytes());
        r[4..].copy_from_slice(&b.to_ne_bytes());
        r
    }

    fn rows_of(bytes: &[u8]) -> Vec<(f32, f32)> {
        bytes
            .chunks_exact(ROW)
            .map(|c| {
                let f = |i: usize| f32::from_ne_bytes([c[i], c[i + 1], c[i + 2], c[i + 3]]);
                (f(0), f(4))
            })
            .collect()
    }

    fn decl(capacity: usize, slots: usize, max_rows: usize) -> AppendDecl {
        AppendDecl {
            name: "cache".into(),
            row_bytes: ROW,
            capacity,
            slots,
            max_rows,
            rows_per_run: 1,
            check: Check::Exact,
        }
    }

    /// A session appending the rows of input `new` (`[slots, max_rows, 2] f32`).
    fn appending(
        capacity: usize,
        slots: usize,
        max_rows: usize,
    ) -> (Session, AppendState, crate::session::RegionId) {
        let mut s = PipelineSpec::new();
        let new = s
            .region(
                "new",
                slots * max_rows * ROW,
                RegionKind::Input,
                Check::Exact,
            )
            .unwrap();
        let cache = s.append_state(decl(capacity, slots, max_rows)).unwrap();
        s.append_rows(cache.id, new).unwrap();
        (session(s).unwrap(), cache, new)
    }

    fn put(session: &mut Session, new: crate::session::RegionId, at: usize, r: [u8; ROW]) {
        session.input_mut(new).unwrap()[at * ROW..(at + 1) * ROW].copy_from_slice(&r);
    }

    /// Every row of the rows region (`rows` of them: slots x capacity).
    fn cache_rows(session: &mut Session, cache: AppendState, rows: usize) -> Vec<(f32, f32)> {
        let mut b = vec![0u8; rows * ROW];
        session.read_region(cache.rows, &mut b).unwrap();
        rows_of(&b)
    }

    /// Rows go in at the position, one per run by default or as many as asked for one
    /// run; the run that would pass the capacity is refused before it runs, with nothing
    /// changed; a reset starts a new request at row 0.
    #[test]
    fn rows_are_appended_at_the_position_until_the_capacity() {
        let (mut s, cache, new) = appending(5, 1, 3);
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 0,
                length: 1
            }
        );
        put(&mut s, new, 0, row(1.0, 1.5));
        s.run().unwrap();
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 1,
                length: 2
            }
        );
        // A prompt of two rows in one run, then back to one a run.
        s.set_next_rows(cache.id, 0, 2).unwrap();
        put(&mut s, new, 0, row(2.0, 2.5));
        put(&mut s, new, 1, row(3.0, 3.5));
        put(&mut s, new, 2, row(-9.0, -9.0)); // past this run's rows: not appended
        s.run().unwrap();
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 3,
                length: 4
            }
        );
        put(&mut s, new, 0, row(4.0, 4.5));
        s.run().unwrap();
        put(&mut s, new, 0, row(5.0, 5.5));
        s.run().unwrap();
        let full = [(1.0, 1.5), (2.0, 2.5), (3.0, 3.5), (4.0, 4.5), (5.0, 5.5)];
        assert_eq!(cache_rows(&mut s, cache, 5), full);
        // Full: the next run is refused, and so is asking for rows now.
        let e = s.run().unwrap_err();
        assert_eq!(
            e,
            RunError::State(StateError::Full {
                state: 0,
                slot: 0,
                position: 5,
                rows: 1,
                capacity: 5
            })
        );
        assert!(
            e.to_string().contains("exceed its capacity of 5 rows"),
            "{e}"
        );
        assert_eq!(cache_rows(&mut s, cache, 5), full, "nothing written");
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 5,
                length: 6
            }
        );
        assert!(matches!(
            s.set_next_rows(cache.id, 0, 1),
            Err(StateError::Full { position: 5, .. })
        ));
        // Zero rows is a run that appends nothing.
        s.set_next_rows(cache.id, 0, 0).unwrap();
        s.run().unwrap();
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 5,
                length: 6
            }
        );
        // A new request.
        s.reset_states().unwrap();
        assert_eq!(
            s.cursor(cache.id, 0).unwrap(),
            Cursor {
                position: 0,
                length: 1
            }
        );
        put(&mut s, new, 0, row(7.0, 7.5));
        s.run().unwrap();
        assert_eq!(cache_rows(&mut s, cache, 5)[0], (7.0, 7.5));
        // More rows than one run takes, whatever the room left.
        assert_eq!(
            s.set_next_rows(cache.id, 0, 4),
            Err(StateError::TooManyRows {
                state: 0,
                rows: 4,
                max: 3
            })
        );
    }

    /// Each slot has its own position, rows and reset.
    #[test]
    fn slots_advance_and_reset_on_their_own() {
        let (mut s, cache, new) = appending(4, 2, 2);
        // Slot 0 one row, slot 1 two rows (its block starts at row max_rows = 2 of `new`).
        s.set_next_rows(cache.id, 1, 2).unwrap();
        put(&mut s, new, 0, row(10.0, 0.0));
        put(&mut s, new, 2, row(20.0, 0.0));
        put(&mut s, new, 3, row(21.0, 0.0));
        s.run().unwrap();
        assert_eq!(s.cursor(cache.id, 0).unwrap().position, 1);
        assert_eq!(s.cursor(cache.id, 1).unwrap().position, 2);
        put(&mut s, new, 0, row(11.0, 0.0));
        put(&mut s, new, 2, row(22.0, 0.0));
        s.run().unwrap();
        let all = cache_rows(&mut s, cache, 8);
        assert_eq!(all[..2], [(10.0, 0.0), (11.0, 0.0)]);
        assert_eq!(all[4..7], [(20.0, 0.0), (21.0, 0.0), (22.0, 0.0)]);
        s.reset_slot(cache.id, 1).unwrap();
        assert_eq!(
            s.cursor(cache.id, 0).unwrap().position,
            2,
            "slot 0 keeps its rows"
        );
        assert_eq!(s.cursor(cache.id, 1).unwrap().position, 0);
        assert_eq!(
            s.cursor(cache.id, 2),
            Err(StateError::NoSuchSlot {
                state: 0,
                slot: 2,
                slots: 2
            })
        );
        assert_eq!(
            s.reset_slot(StateId(3), 0),
            Err(StateError::NoSuchState { state: 3, count: 1 })
        );
    }

    /// Sums the valid rows of the cache (`[capacity, 2] f32`) as a decoder's attention reads
    /// its cache: up to `length` from the cursor (`i32 [1, 2]`).
    struct SumValid(IoSpec);

    impl HostPlan for SumValid {
        fn kind(&self) -> EngineKind {
            EngineKind::TractCpu
        }
        fn io(&self) -> &IoSpec {
            &self.0
        }
        fn executor(&self) -> Result<Box<dyn HostExecutor>, PrepareError> {
            Ok(Box::new(SumValidRun))
        }
    }

    struct SumValidRun;

    impl HostExecutor for SumValidRun {
        fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RunError> {
            let (rows, cursor) = (inputs[0], inputs[1]);
            let c = Cursor::read(cursor, 0).unwrap_or_default();
            let valid = usize::try_from(c.length).unwrap_or(0);
            let (a, b) = rows_of(rows)
                .iter()
                .take(valid)
                .fold((0.0, 0.0), |(x, y), r| (x + r.0, y + r.1));
            outputs[0].copy_from_slice(&row(a, b));
            Ok(())
        }
    }

    /// Copies the cursor into an output region (a stage reading the position).
    struct Position([crate::session::RegionId; 1], [crate::session::RegionId; 1]);

    impl Stage for Position {
        fn name(&self) -> &str {
            "position"
        }
        fn reads(&self) -> &[crate::session::RegionId] {
            &self.0
        }
        fn writes(&self) -> &[crate::session::RegionId] {
            &self.1
        }
        fn run_host(&mut self, io: &mut HostIo<'_>) -> Result<(), RunError> {
            let ([cursor], [out]) = io.split(self.0, self.1)?;
            out.copy_from_slice(cursor);
            Ok(())
        }
    }

    fn tensor(name: &str, mode: IoMode, dtype: DType, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            mode,
            dtype,
            shape: shape.to_vec(),
        }
    }

    /// A network binds the rows and the cursor like any region and reads `length` rows
    /// (the row this run appends included); a stage reads the same cursor.
    #[test]
    fn networks_and_stages_read_the_cursor_of_the_run() {
        let mut s = PipelineSpec::new();
        let new = s
            .region("new", ROW, RegionKind::Input, Check::Exact)
            .unwrap();
        let cache = s.append_state(decl(3, 1, 1)).unwrap();
        let sum = s
            .region("sum", ROW, RegionKind::Output, Check::Exact)
            .unwrap();
        let seen = s
            .region("seen", CURSOR_BYTES, RegionKind::Output, Check::Exact)
            .unwrap();
        s.append_rows(cache.id, new).unwrap();
        let plan = Plan::Host(Arc::new(SumValid(IoSpec {
            inputs: vec![
                tensor("cache", IoMode::Input, DType::F32, &[3, 2]),
                tensor("cursor", IoMode::Input, DType::I32, &[1, 2]),
            ],
            outputs: vec![tensor("sum", IoMode::Output, DType::F32, &[2])],
        })));
        s.network("attend", plan, &[cache.rows, cache.cursor], &[sum])
            .unwrap();
        s.stage(Box::new(Position([cache.cursor], [seen])));
        let mut s = session(s).unwrap();
        let mut want = (0.0, 0.0);
        for k in 0..3 {
            let v = k as f32 + 1.0;
            want = (want.0 + v, want.1 - v);
            s.copy_to_input(new, &row(v, -v)).unwrap();
            s.run().unwrap();
            assert_eq!(rows_of(s.output(sum).unwrap()), [want], "run {k}");
            assert_eq!(
                Cursor::read(s.output(seen).unwrap(), 0),
                Some(Cursor {
                    position: k,
                    length: k + 1
                })
            );
        }
    }

    #[test]
    fn declarations_that_cannot_work_are_refused() {
        let msg = |e: SpecError| e.to_string();
        let mut s = PipelineSpec::new();
        let zero = AppendDecl {
            capacity: 0,
            ..decl(4, 1, 1)
        };
        assert!(msg(s.append_state(zero).unwrap_err()).contains("none may be 0"));
        let eager = AppendDecl {
            rows_per_run: 3,
            ..decl(4, 1, 2)
        };
        assert!(msg(s.append_state(eager).unwrap_err()).contains("each must be at most"));
        assert!(msg(s.append_state(decl(4, 1, 5)).unwrap_err()).contains("capacity 4"));
        let huge = decl(1 << 31, 1, 1);
        assert!(msg(s.append_state(huge).unwrap_err()).contains("positions are i32"));
        let overflow = AppendDecl {
            row_bytes: usize::MAX / 2,
            ..decl(4, 1, 1)
        };
        assert!(msg(s.append_state(overflow).unwrap_err()).contains("overflow"));

        let cache = s.append_state(decl(4, 1, 2)).unwrap();
        let short = s
            .region("short", ROW, RegionKind::Input, Check::Exact)
            .unwrap();
        assert!(
            msg(s.append_rows(cache.id, short).unwrap_err()).contains("= 16"),
            "the source holds slots x max_rows rows"
        );
        assert!(
            msg(s.append_rows(cache.id, cache.rows).unwrap_err()).contains("a state's"),
            "a state's own region is no source"
        );
        let h = s.recurrent_state("h", 16, Check::Exact).unwrap();
        let src = s
            .region("src", 16, RegionKind::Input, Check::Exact)
            .unwrap();
        assert!(msg(s.append_rows(h.id, src).unwrap_err()).contains("this one is recurrent"));
        assert!(matches!(
            s.append_rows(StateId(9), src),
            Err(SpecError::NoSuchState { index: 9, count: 2 })
        ));
        // Nothing but the session writes a cursor.
        let plan = Plan::Host(Arc::new(SumValid(IoSpec {
            inputs: vec![tensor("x", IoMode::Input, DType::F32, &[4])],
            outputs: vec![tensor("c", IoMode::Output, DType::I32, &[1, 2])],
        })));
        assert!(
            msg(s.network("w", plan, &[src], &[cache.cursor]).unwrap_err())
                .contains("writes a cursor region")
        );
        let out = s
            .region("out", CURSOR_BYTES, RegionKind::Output, Check::Exact)
            .unwrap();
        s.stage(Box::new(Position([out], [cache.cursor])));
        let e = session(s).unwrap_err();
        assert!(
            e.to_string().contains("stage `position` writes its cursor"),
            "{e}"
        );

        // Nor may the caller stage it as an input.
        let (mut s, cache, _) = appending(4, 1, 1);
        assert!(matches!(
            s.input_mut(cache.cursor),
            Err(RunError::NoSuchRegion { .. })
        ));
    }
}
