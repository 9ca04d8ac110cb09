//! A fixed pool of worker threads created once, for the forward pass: one job per forward
//! call (every thread runs the same closure with its index), spin barriers between the
//! operations inside it. Nothing is allocated per job.
//!
//! This is the shape of ggml's CPU thread pool (`ggml_graph_compute`: every thread walks
//! the graph, a barrier after each node): a token costs one wake-up, not one per operation,
//! and no work queue. Workers spin briefly between jobs (the gap between two generated
//! tokens is the sampler and detokeniser, tens of microseconds), then sleep on a condition
//! variable, so an idle generator uses no CPU. Every wait spins for a bounded time and then
//! yields the core, which keeps a loaded machine (more runnable threads than cores) making
//! progress.

use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long a worker spins for the next job before sleeping.
const IDLE_SPIN: Duration = Duration::from_millis(2);
/// Spins of a barrier or join before each `yield_now`.
const SPINS_BEFORE_YIELD: u32 = 2_000;

/// What a job sees: its thread index, the thread count, and the barrier all threads of the
/// job share.
pub struct Ctx<'a> {
    /// This thread's index, `0..n_threads` (0 is the caller of [`ThreadPool::run`]).
    pub thread: usize,
    /// Threads running the job.
    pub n_threads: usize,
    shared: &'a Shared,
}

impl Ctx<'_> {
    /// Waits until every thread of the job has reached this barrier (and sees every write
    /// made before it by any thread).
    ///
    /// # Panics
    /// When another thread of the job panicked.
    pub fn barrier(&self) {
        if self.n_threads > 1 {
            self.shared.barrier_wait();
        }
    }

    /// This thread's share of `n` items split into contiguous ranges of whole `align`-item
    /// groups (the last range takes the remainder).
    pub fn split(&self, n: usize, align: usize) -> std::ops::Range<usize> {
        split_range(n, align, self.thread, self.n_threads)
    }
}

/// Range `thread` of `n` items split into `n_threads` contiguous ranges of whole
/// `align`-item groups.
pub fn split_range(
    n: usize,
    align: usize,
    thread: usize,
    n_threads: usize,
) -> std::ops::Range<usize> {
    let align = align.max(1);
    let groups = n.div_ceil(align);
    let per = groups / n_threads;
    let extra = groups % n_threads;
    let start = thread * per + thread.min(extra);
    let len = per + usize::from(thread < extra);
    (start * align).min(n)..((start + len) * align).min(n)
}

type Job = dyn Fn(&Ctx<'_>) + Sync;

struct Shared {
    n_threads: usize,
    /// The current job; written by the caller before `epoch` is bumped, read by workers after
    /// they see the new epoch.
    job: UnsafeCell<Option<*const Job>>,
    epoch: AtomicU64,
    finished: AtomicUsize,
    panicked: AtomicBool,
    shutdown: AtomicBool,
    // Barrier.
    arrived: AtomicUsize,
    generation: AtomicU64,
    // Sleeping.
    sleepers: Mutex<usize>,
    wake: Condvar,
}

// SAFETY: `job` is written only by the thread inside `run` while no worker reads it (all
// workers finished the previous job), and read by workers only between the epoch bump and
// their `finished` increment, while `run` keeps the closure alive.
unsafe impl Sync for Shared {}
// SAFETY: as above; the raw pointer is only dereferenced under that protocol.
unsafe impl Send for Shared {}

impl Shared {
    fn barrier_wait(&self) {
        let generation = self.generation.load(Ordering::Acquire);
        if self.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.n_threads {
            self.arrived.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == generation {
            if self.panicked.load(Ordering::Relaxed) {
                panic!("a thread of the forward pass panicked");
            }
            spin(&mut spins);
        }
    }
}

#[inline]
fn spin(spins: &mut u32) {
    *spins += 1;
    if (*spins).is_multiple_of(SPINS_BEFORE_YIELD) {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}

/// The pool: `n_threads - 1` workers plus the thread that calls [`run`](Self::run).
pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("n_threads", &self.shared.n_threads)
            .finish()
    }
}

impl ThreadPool {
    /// Starts `n_threads - 1` workers (`n_threads` at least 1).
    ///
    /// # Errors
    /// The OS error when a thread cannot be spawned.
    pub fn new(n_threads: usize) -> std::io::Result<ThreadPool> {
        let n_threads = n_threads.max(1);
        let shared = Arc::new(Shared {
            n_threads,
            job: UnsafeCell::new(None),
            epoch: AtomicU64::new(0),
            finished: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            arrived: AtomicUsize::new(0),
            generation: AtomicU64::new(0),
            sleepers: Mutex::new(0),
            wake: Condvar::new(),
        });
        let mut workers = Vec::with_capacity(n_threads - 1);
        for thread in 1..n_threads {
            let s = Arc::clone(&shared);
            let spawned = std::thread::Builder::new()
                .name(format!("tether-llm-{thread}"))
                .spawn(move || worker(&s, thread));
            match spawned {
                Ok(h) => workers.push(h),
                Err(e) => {
                    // Stop the ones already started.
                    drop(ThreadPool { shared, workers });
                    return Err(e);
                }
            }
        }
        Ok(ThreadPool { shared, workers })
    }

    /// Threads a job runs on (the caller included).
    pub fn n_threads(&self) -> usize {
        self.shared.n_threads
    }

    /// Runs `job` on every thread (the caller is thread 0) and returns when all have
    /// finished. Allocates nothing.
    ///
    /// # Panics
    /// When `job` panicked on any thread (after every thread stopped).
    pub fn run(&self, job: &(dyn Fn(&Ctx<'_>) + Sync)) {
        let s = &*self.shared;
        if s.n_threads == 1 {
            job(&Ctx {
                thread: 0,
                n_threads: 1,
                shared: s,
            });
            return;
        }
        // SAFETY: the lifetime is erased only for the duration of this call: the pointer is
        // cleared below after every worker has reported `finished`, and workers dereference
        // it only between seeing the new epoch and incrementing `finished`.
        let ptr: *const Job =
            unsafe { std::mem::transmute::<&(dyn Fn(&Ctx<'_>) + Sync), &'static Job>(job) };
        // SAFETY: no worker is reading `job` (the previous run waited for all of them).
        unsafe { *s.job.get() = Some(ptr) };
        s.finished.store(0, Ordering::Relaxed);
        {
            let sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
            s.epoch.fetch_add(1, Ordering::Release);
            if *sleepers > 0 {
                s.wake.notify_all();
            }
        }
        let mine = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            job(&Ctx {
                thread: 0,
                n_threads: s.n_threads,
                shared: s,
            })
        }));
        if mine.is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        let mut spins = 0u32;
        while s.finished.load(Ordering::Acquire) != s.n_threads - 1 {
            spin(&mut spins);
        }
        // SAFETY: every worker has finished with the pointer.
        unsafe { *s.job.get() = None };
        if let Err(p) = mine {
            std::panic::resume_unwind(p);
        }
        if s.panicked.load(Ordering::Relaxed) {
            panic!("a worker thread of the forward pass panicked");
        }
    }
}

fn worker(s: &Shared, thread: usize) {
    let mut seen = 0u64;
    loop {
        // Wait for the next epoch: spin, then sleep.
        let idle_since = Instant::now();
        let mut spins = 0u32;
        loop {
            if s.shutdown.load(Ordering::Acquire) {
                return;
            }
            if s.epoch.load(Ordering::Acquire) != seen {
                break;
            }
            spins += 1;
            if spins.is_multiple_of(256) && idle_since.elapsed() > IDLE_SPIN {
                let mut sleepers = s.sleepers.lock().unwrap_or_else(|e| e.into_inner());
                while s.epoch.load(Ordering::Acquire) == seen && !s.shutdown.load(Ordering::Acquire)
                {
                    *sleepers += 1;
                    sleepers = s.wake.wait(sleepers).unwrap_or_else(|e| e.into_inner());
                    *sleepers -= 1;
                }
                break;
            }
            std::hint::spin_loop();
            if spins.is_multiple_of(SPINS_BEFORE_YIELD) {
                std::thread::yield_now();
            }
        }
        if s.shutdown.load(Ordering::Acquire) {
            return;
        }
        seen = s.epoch.load(Ordering::Acquire);
        // SAFETY: the epoch changed, so `run` stored a live job before bumping it and keeps
        // it alive until this thread increments `finished`.
        let job = unsafe { (*s.job.get()).expect("a job is set while an epoch runs") };
        let ctx = Ctx {
            thread,
            n_threads: s.n_threads,
            shared: s,
        };
        // SAFETY: see above.
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { (*job)(&ctx) }));
        if r.is_err() {
            s.panicked.store(true, Ordering::Relaxed);
        }
        s.finished.fetch_add(1, Ordering::Release);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        {
            let _sleepers = self
                .shared
                .sleepers
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            self.shared.shutdown.store(true, Ordering::Release);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_covers_every_item_once() {
        for n in [0, 1, 7, 64, 575, 576, 1000] {
            for threads in 1..5 {
                for align in [1, 4, 16] {
                    let mut next = 0;
                    for t in 0..threads {
                        let r = split_range(n, align, t, threads);
                        assert_eq!(r.start, next, "n {n} threads {threads} align {align}");
                        assert!(r.start.is_multiple_of(align) || r.start == n);
                        next = r.end;
                    }
                    assert_eq!(next, n);
                }
            }
        }
    }

    #[test]
    fn every_thread_runs_each_job_and_barriers_order_writes() {
        let pool = ThreadPool::new(3).expect("threads");
        let data: Vec<AtomicUsize> = (0..3).map(|_| AtomicUsize::new(0)).collect();
        for round in 1..200usize {
            pool.run(&|ctx: &Ctx<'_>| {
                data[ctx.thread].store(round, Ordering::Relaxed);
                ctx.barrier();
                // After the barrier every thread sees every other thread's write.
                for d in &data {
                    assert_eq!(d.load(Ordering::Relaxed), round);
                }
                ctx.barrier();
            });
        }
        // Sleeping workers wake for a later job.
        std::thread::sleep(IDLE_SPIN * 3);
        let count = AtomicUsize::new(0);
        pool.run(&|_ctx: &Ctx<'_>| {
            count.fetch_add(1, Ordering::Relaxed);
        });
        assert_eq!(count.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_panicking_job_panics_the_caller_and_the_pool_stops() {
        let pool = ThreadPool::new(2).expect("threads");
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            pool.run(&|ctx: &Ctx<'_>| {
                if ctx.thread == 1 {
                    panic!("boom");
                }
            })
        }));
        assert!(r.is_err());
        drop(pool);
    }
}
