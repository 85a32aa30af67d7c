//! A forward pass's threads stay awake from its first parallel region to its
//! last.
//!
//! A rayon worker that finds no work spins briefly, then sleeps on a futex; the
//! next parallel region wakes it, which costs the waker a system call and the
//! sleeper its scheduling latency (a halted virtual CPU's wake-up, on the machines
//! ferrox is measured on). A decode step holds a few parallel regions a layer with
//! short serial stretches between them (norms, RoPE, the residual adds), long
//! enough for the other workers to fall asleep: a step on two threads switched
//! context about 70 times. [`install_awake`] keeps every other worker of the pool
//! looking for work, without sleeping, until the pass returns, as llama.cpp's
//! thread pool spins through a graph. The spinning workers run the pass's jobs
//! as rayon schedules them, so no result depends on it.

use std::sync::atomic::{AtomicBool, Ordering};

use rayon::{ThreadPool, Yield};

/// Idle rounds between two `sched_yield`s of a spinning worker: it gives the
/// core up now and then (the server's own threads share it), rarely enough that
/// a round of the pass never waits for a wake-up.
const ROUNDS_PER_YIELD: u32 = 256;

/// Runs `pass` on one of `pool`'s threads, as [`ThreadPool::install`] does, with
/// every other thread of the pool spinning for work until it returns.
pub fn install_awake<R: Send>(pool: &ThreadPool, pass: impl FnOnce() -> R + Send) -> R {
    if pool.current_num_threads() < 2 {
        return pool.install(pass);
    }
    pool.install(|| {
        let done = AtomicBool::new(false);
        let owner = rayon::current_thread_index();
        rayon::in_place_scope(|scope| {
            scope.spawn_broadcast(|_, _| {
                // The pass's own thread meets its copy only while waiting for
                // work it handed out, or once the pass is over.
                if rayon::current_thread_index() != owner {
                    spin_for_work(&done);
                }
            });
            let result = pass();
            done.store(true, Ordering::Release);
            result
        })
    })
}

/// Runs the pool's pending jobs as they come until `done` is set.
fn spin_for_work(done: &AtomicBool) {
    let mut idle = 0u32;
    while !done.load(Ordering::Acquire) {
        match rayon::yield_now() {
            Some(Yield::Executed) => idle = 0,
            _ => {
                idle = idle.wrapping_add(1);
                if idle.is_multiple_of(ROUNDS_PER_YIELD) {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    fn pool(n: usize) -> ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    }

    #[test]
    fn a_pass_gives_what_install_gives_on_any_thread_count() {
        for n in [1, 2, 3] {
            let p = pool(n);
            let sum = |p: &ThreadPool| {
                install_awake(p, || {
                    (0..50)
                        .map(|i| (0..1000u64).into_par_iter().map(|x| x * i).sum::<u64>())
                        .sum::<u64>()
                })
            };
            let plain: u64 = p.install(|| {
                (0..50)
                    .map(|i| (0..1000u64).into_par_iter().map(|x| x * i).sum::<u64>())
                    .sum()
            });
            assert_eq!(sum(&p), plain, "{n} threads");
            // The spinners of one pass leave before the next one starts.
            assert_eq!(sum(&p), plain, "{n} threads, again");
        }
    }

    #[test]
    fn the_other_threads_run_the_pass_regions() {
        let p = pool(2);
        let threads = install_awake(&p, || {
            let mut seen = std::collections::BTreeSet::new();
            for _ in 0..20 {
                let ids: Vec<Option<usize>> = (0..64)
                    .into_par_iter()
                    .with_max_len(1)
                    .map(|_| {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                        rayon::current_thread_index()
                    })
                    .collect();
                seen.extend(ids);
            }
            seen
        });
        assert_eq!(threads.len(), 2, "{threads:?}");
    }

    #[test]
    fn nested_passes_return() {
        let p = pool(2);
        let got = install_awake(&p, || install_awake(&p, || 7));
        assert_eq!(got, 7);
    }
}
