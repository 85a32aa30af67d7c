//! Parallel regions: [`Parallel`], run by rayon or by [`SpinPool`], whose
//! workers wait for the next region by yielding instead of sleeping.
//!
//! A forward pass opens five or more regions a layer (the products, attention),
//! a few microseconds to a millisecond each, with short serial steps between
//! them. Rayon's idle workers sleep on a futex after about 32 rounds of
//! yielding, and the next region waits for their wake-up: `perf stat` counted
//! 63 context switches a SmolLM2 step. A [`SpinPool`] worker keeps yielding
//! for [`SPIN`] after a region before it sleeps, so a pass's regions find it
//! awake. It yields rather than spinning on `pause`: a yield hands the core to
//! any other runnable thread, so a machine with more threads than cores loses
//! little, and 256 `pause`s before each yield made SmolLM2's step 10-15 %
//! slower than rayon's under KVM, in two alternations (a hypervisor may
//! deschedule a virtual CPU that loops on `pause`). (Session
//! 41 kept rayon's own workers yielding through `rayon::yield_now` inside a
//! broadcast job: one test run hung in rayon's sleep protocol, so this pool
//! has its own.)

use std::any::Any;
use std::cell::{Cell, RefCell, UnsafeCell};
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::{JoinHandle, LocalKey};
use std::time::{Duration, Instant};

/// Work split into numbered tasks run on several threads.
pub trait Parallel: Sync {
    /// The threads a region runs on (the caller's included).
    fn threads(&self) -> usize;

    /// Calls `f(i)` once for each `i` in `0..n`, on this pool's threads, and
    /// returns when every call has returned (a task's panic is raised here).
    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync));
}

impl Parallel for rayon::ThreadPool {
    fn threads(&self) -> usize {
        self.current_num_threads()
    }

    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        use rayon::prelude::*;
        self.install(|| (0..n).into_par_iter().for_each(f));
    }
}

/// The calling thread alone.
pub struct Serial;

impl Parallel for Serial {
    fn threads(&self) -> usize {
        1
    }

    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        (0..n).for_each(f);
    }
}

/// Calls `f(i, chunk)` for each `chunk`-long piece `i` of `data` (the last
/// may be shorter), on `pool`'s threads.
pub fn for_each_chunk_mut<T: Send>(
    pool: &dyn Parallel,
    data: &mut [T],
    chunk: usize,
    f: impl Fn(usize, &mut [T]) + Sync,
) {
    assert!(chunk > 0, "chunks of at least one element");
    let (len, base) = (data.len(), SharedMut(data.as_mut_ptr()));
    pool.for_each(len.div_ceil(chunk), &|i| {
        let start = i * chunk;
        // SAFETY: piece i is data[start..start + n], inside `data` and disjoint
        // from every other piece; `for_each` calls each i once, while `data`
        // stays borrowed.
        let piece =
            unsafe { std::slice::from_raw_parts_mut(base.at(start), chunk.min(len - start)) };
        f(i, piece);
    });
}

/// Calls `f(i, a_i, b_i)` for the `i`-th `a_chunk`-long piece of `a` and the
/// `i`-th `b_chunk`-long piece of `b`, on `pool`'s threads: two slices cut into
/// the same number of whole pieces (a recurrent layer's per-head states and
/// outputs).
pub fn for_each_chunk_pair_mut<A: Send, B: Send>(
    pool: &dyn Parallel,
    (a, a_chunk): (&mut [A], usize),
    (b, b_chunk): (&mut [B], usize),
    f: impl Fn(usize, &mut [A], &mut [B]) + Sync,
) {
    assert!(
        a_chunk > 0 && b_chunk > 0 && a.len() % a_chunk == 0 && b.len() % b_chunk == 0,
        "whole pieces of at least one element"
    );
    let n = a.len() / a_chunk;
    assert_eq!(n, b.len() / b_chunk, "as many pieces of each slice");
    let (pa, pb) = (SharedMut(a.as_mut_ptr()), SharedMut(b.as_mut_ptr()));
    pool.for_each(n, &|i| {
        // SAFETY: piece i of each slice lies inside it and is disjoint from
        // every other piece; `for_each` calls each i once, while both slices
        // stay borrowed.
        let (x, y) = unsafe {
            (
                std::slice::from_raw_parts_mut(pa.at(i * a_chunk), a_chunk),
                std::slice::from_raw_parts_mut(pb.at(i * b_chunk), b_chunk),
            )
        };
        f(i, x, y);
    });
}

/// Calls `f` with this thread's value of `key`, a task's scratch kept across
/// tasks and regions, or with a fresh one from `fresh` where that value is in
/// use on this thread already (a region opened inside another's task runs on
/// the task's thread).
pub fn with_scratch<T: 'static, R>(
    key: &'static LocalKey<RefCell<T>>,
    fresh: impl FnOnce() -> T,
    f: impl FnOnce(&mut T) -> R,
) -> R {
    key.with(|cell| match cell.try_borrow_mut() {
        Ok(mut value) => f(&mut value),
        Err(_) => f(&mut fresh()),
    })
}

/// A pointer to a slice whose disjoint elements a region's tasks write, each
/// its own (the products' outputs, [`for_each_chunk_mut`]'s pieces).
pub(crate) struct SharedMut<T>(pub(crate) *mut T);

impl<T> SharedMut<T> {
    /// The pointer to element `i` (a method, so that a closure captures the
    /// whole `Sync` value rather than its raw pointer).
    pub(crate) fn at(&self, i: usize) -> *mut T {
        self.0.wrapping_add(i)
    }
}

impl<T> Clone for SharedMut<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for SharedMut<T> {}

// SAFETY: every user hands each element to one task only.
unsafe impl<T: Send> Send for SharedMut<T> {}
// SAFETY: as for `Send`: no two tasks touch the same element.
unsafe impl<T: Send> Sync for SharedMut<T> {}

/// How long an idle worker keeps yielding before it sleeps until the next
/// region: longer than the serial steps between a pass's regions, short
/// enough that an idle server's workers sleep.
pub const SPIN: Duration = Duration::from_millis(2);

/// A region's task, its lifetime erased (see [`SpinPool::for_each`]).
type Task = &'static (dyn Fn(usize) + Sync);

/// What the workers share with the pool.
struct Shared {
    /// The current region's task and task count: written by the caller
    /// before it publishes a new `epoch`, read by workers after they see it,
    /// and not written again until `running` has fallen to zero.
    region: UnsafeCell<(Option<Task>, usize)>,
    /// Regions published so far.
    epoch: AtomicUsize,
    /// The next task to claim in the current region.
    next: AtomicUsize,
    /// Workers not yet done with the current region.
    running: AtomicUsize,
    /// A panic of a worker's task in the current region.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
    /// Workers asleep (or going to sleep) on `wake`.
    sleepers: AtomicUsize,
    sleep: Mutex<()>,
    wake: Condvar,
    stop: AtomicBool,
}

// SAFETY: `region`, the one field that is not `Sync`, is written only by the
// caller holding `SpinPool::owner` while no worker reads it (its doc).
unsafe impl Sync for Shared {}

/// `threads - 1` workers and the calling thread, which runs tasks too.
pub struct SpinPool {
    shared: Arc<Shared>,
    /// Held by the caller of the region in progress (one at a time).
    owner: Mutex<()>,
    workers: Vec<JoinHandle<()>>,
}

thread_local! {
    /// Whether this thread is running a [`SpinPool`] task: a region opened
    /// inside one runs on this thread alone.
    static IN_TASK: Cell<bool> = const { Cell::new(false) };
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl SpinPool {
    /// A pool of `threads` threads (the caller's included), its workers named
    /// `name-1`, `name-2`, ...
    ///
    /// # Errors
    /// The OS refused a thread.
    pub fn new(threads: usize, name: &str) -> std::io::Result<SpinPool> {
        let shared = Arc::new(Shared {
            region: UnsafeCell::new((None, 0)),
            epoch: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            panic: Mutex::new(None),
            sleepers: AtomicUsize::new(0),
            sleep: Mutex::new(()),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        });
        let mut pool = SpinPool {
            shared,
            owner: Mutex::new(()),
            workers: Vec::new(),
        };
        for i in 1..threads.max(1) {
            let shared = Arc::clone(&pool.shared);
            let worker = std::thread::Builder::new()
                .name(format!("{name}-{i}"))
                .spawn(move || work(&shared))?;
            pool.workers.push(worker);
        }
        Ok(pool)
    }
}

impl Parallel for SpinPool {
    fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    fn for_each(&self, n: usize, f: &(dyn Fn(usize) + Sync)) {
        if n <= 1 || self.workers.is_empty() || IN_TASK.get() {
            (0..n).for_each(f);
            return;
        }
        let _owner = lock(&self.owner);
        let shared = &*self.shared;
        // SAFETY: the workers read `f` only between seeing the epoch published
        // below and their decrement of `running`, and `Wait` (dropped before
        // this function returns or unwinds) waits for every decrement: `f`
        // outlives every use. No worker reads `region` now (the previous
        // region's `Wait` saw `running` at zero).
        unsafe {
            let task: Task = std::mem::transmute::<&(dyn Fn(usize) + Sync), Task>(f);
            *shared.region.get() = (Some(task), n);
        }
        shared.next.store(0, Ordering::Relaxed);
        shared.running.store(self.workers.len(), Ordering::Relaxed);
        // Publishes the region (SeqCst: ordered against a sleeper's count).
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        if shared.sleepers.load(Ordering::SeqCst) > 0 {
            let _sleep = lock(&shared.sleep);
            shared.wake.notify_all();
        }
        let wait = Wait(shared);
        IN_TASK.set(true);
        let own = catch_unwind(AssertUnwindSafe(|| claim(shared, n, f)));
        IN_TASK.set(false);
        drop(wait);
        let theirs = lock(&shared.panic).take();
        if let Some(p) = own.err().or(theirs) {
            resume_unwind(p);
        }
    }
}

impl Drop for SpinPool {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        {
            let _sleep = lock(&self.shared.sleep);
            self.shared.wake.notify_all();
        }
        for w in self.workers.drain(..) {
            // A worker's task panics are caught: it returns.
            let _ = w.join();
        }
    }
}

/// Waits, when dropped, until every worker is done with the region, then
/// forgets its task.
struct Wait<'a>(&'a Shared);

impl Drop for Wait<'_> {
    fn drop(&mut self) {
        while self.0.running.load(Ordering::Acquire) != 0 {
            std::thread::yield_now();
        }
        // SAFETY: no worker reads `region` once `running` is zero.
        unsafe { *self.0.region.get() = (None, 0) };
    }
}

/// Runs the region's unclaimed tasks until none is left.
fn claim(shared: &Shared, n: usize, f: &(dyn Fn(usize) + Sync)) {
    loop {
        let i = shared.next.fetch_add(1, Ordering::Relaxed);
        if i >= n {
            return;
        }
        f(i);
    }
}

/// A worker: runs each region's tasks, until the pool is dropped.
fn work(shared: &Shared) {
    IN_TASK.set(true);
    let mut seen = 0;
    while let Some(epoch) = next_region(shared, seen) {
        seen = epoch;
        // SAFETY: the caller wrote `region` before publishing `epoch` (read
        // with Acquire) and keeps it until `running`, decremented below, is 0.
        let (task, n) = unsafe { *shared.region.get() };
        let f = task.expect("a published region has a task");
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| claim(shared, n, f))) {
            *lock(&shared.panic) = Some(p);
        }
        shared.running.fetch_sub(1, Ordering::Release);
    }
}

/// The epoch of the first region published after `seen`, waiting for it
/// (yielding for [`SPIN`], then asleep); `None` once the pool is dropped.
fn next_region(shared: &Shared, seen: usize) -> Option<usize> {
    let mut idle_since = Instant::now();
    let mut rounds = 0u32;
    loop {
        let epoch = shared.epoch.load(Ordering::Acquire);
        if epoch != seen {
            return Some(epoch);
        }
        if shared.stop.load(Ordering::Relaxed) {
            return None;
        }
        std::thread::yield_now();
        rounds += 1;
        if !rounds.is_multiple_of(64) || idle_since.elapsed() < SPIN {
            continue;
        }
        // The count is raised before the epoch is read again (both SeqCst,
        // as the caller's publish and read of it): either the caller sees a
        // sleeper and wakes it, or this reads the new epoch.
        shared.sleepers.fetch_add(1, Ordering::SeqCst);
        let mut asleep = lock(&shared.sleep);
        while shared.epoch.load(Ordering::SeqCst) == seen && !shared.stop.load(Ordering::SeqCst) {
            asleep = shared
                .wake
                .wait(asleep)
                .unwrap_or_else(PoisonError::into_inner);
        }
        drop(asleep);
        shared.sleepers.fetch_sub(1, Ordering::SeqCst);
        (idle_since, rounds) = (Instant::now(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(pool: &dyn Parallel, n: usize) -> Vec<usize> {
        let hits: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
        pool.for_each(n, &|i| {
            hits[i].fetch_add(1, Ordering::Relaxed);
        });
        hits.into_iter().map(AtomicUsize::into_inner).collect()
    }

    #[test]
    fn every_task_runs_once_in_each_of_many_regions() {
        let pool = SpinPool::new(3, "test").unwrap();
        let rounds = if cfg!(miri) { 20 } else { 2000 };
        for r in 0..rounds {
            let n = r % 37;
            assert_eq!(counts(&pool, n), vec![1; n], "region {r} of {n} tasks");
        }
    }

    #[test]
    fn workers_asleep_wake_for_the_next_region() {
        let pool = SpinPool::new(2, "test").unwrap();
        for _ in 0..3 {
            std::thread::sleep(SPIN * 3);
            assert_eq!(counts(&pool, 64), vec![1; 64]);
        }
    }

    #[test]
    fn a_task_panic_reaches_the_caller_and_the_pool_goes_on() {
        let pool = SpinPool::new(2, "test").unwrap();
        for bad in [0, 63] {
            let caught = catch_unwind(AssertUnwindSafe(|| {
                pool.for_each(64, &|i| assert!(i != bad, "task {i}"));
            }));
            assert!(caught.is_err(), "task {bad}'s panic");
            assert_eq!(counts(&pool, 64), vec![1; 64]);
        }
    }

    #[test]
    fn a_region_inside_a_task_runs_on_its_thread() {
        let pool = SpinPool::new(2, "test").unwrap();
        let inner = AtomicUsize::new(0);
        pool.for_each(8, &|_| {
            pool.for_each(4, &|_| {
                inner.fetch_add(1, Ordering::Relaxed);
            })
        });
        assert_eq!(inner.into_inner(), 32);
    }

    #[test]
    fn callers_on_several_threads_take_turns() {
        let pool = SpinPool::new(2, "test").unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for n in 0..200 {
                        assert_eq!(counts(&pool, n), vec![1; n]);
                    }
                });
            }
        });
    }

    #[test]
    fn chunks_cover_the_slice_once_with_their_indices() {
        let pool = SpinPool::new(2, "test").unwrap();
        let mut v = vec![0usize; 1001];
        for_each_chunk_mut(&pool, &mut v, 64, |i, c| {
            assert!(c.len() == 64 || (i == 15 && c.len() == 41));
            c.iter_mut().for_each(|x| *x += i + 1);
        });
        assert!(v.iter().enumerate().all(|(k, &x)| x == k / 64 + 1));
    }

    #[test]
    fn paired_chunks_match_by_index() {
        let pool = SpinPool::new(2, "test").unwrap();
        let (mut a, mut b) = (vec![0usize; 30], vec![0u32; 20]);
        for_each_chunk_pair_mut(&pool, (&mut a, 3), (&mut b, 2), |i, x, y| {
            assert_eq!((x.len(), y.len()), (3, 2));
            x.iter_mut().for_each(|v| *v += i + 1);
            y.iter_mut().for_each(|v| *v += i as u32 + 1);
        });
        assert!(a.iter().enumerate().all(|(k, &v)| v == k / 3 + 1));
        assert!(b.iter().enumerate().all(|(k, &v)| v as usize == k / 2 + 1));
    }

    #[test]
    #[should_panic(expected = "as many pieces")]
    fn paired_chunks_refuse_unequal_counts() {
        let (mut a, mut b) = (vec![0u8; 6], vec![0u8; 6]);
        for_each_chunk_pair_mut(&Serial, (&mut a, 2), (&mut b, 3), |_, _, _| {});
    }

    #[test]
    fn a_nested_scratch_is_a_fresh_one() {
        thread_local! {
            static KEPT: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        with_scratch(&KEPT, Vec::new, |outer| {
            outer.push(1);
            with_scratch(&KEPT, Vec::new, |inner| inner.push(2));
            assert_eq!(outer, &[1]);
        });
        assert_eq!(KEPT.with_borrow(|v| v.clone()), [1]);
    }

    #[test]
    fn rayon_and_one_thread_run_every_task_once() {
        let rayon = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        assert_eq!(counts(&rayon, 100), vec![1; 100]);
        let one = SpinPool::new(1, "test").unwrap();
        assert_eq!((one.threads(), counts(&one, 5)), (1, vec![1; 5]));
    }
}
