//! The engine's compute threads. Its kernels split their work with [`execute_chunked`], which
//! runs it on candle's pool (sized once per process from `CANDLE_NUM_THREADS`, and shared with
//! candle's own operations) unless the calling thread asked for more threads than that
//! ([`with_threads`]): then on a pool of this module's, sized once for the most threads the
//! process may use ([`configure`]), whose threads a call leaves out are not woken — parked,
//! they take no CPU time from whoever needs it. So one process can serve a load run that leaves
//! a core to its load generator and run a quality run on that core too.
//!
//! Work is split into items that threads take from a shared cursor, a few at a time; every
//! kernel computes an item the same way whichever thread takes it and however many there are,
//! so results do not depend on the number of threads (the `batch_invariance` tests run one and
//! two).

use std::any::Any;
use std::cell::{Cell, UnsafeCell};
use std::hint::spin_loop;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::Thread;

/// Polls of its slot a woken thread makes before it parks, waiting for the next call: long
/// enough to catch the next call of a forward pass (microseconds away), short enough that a
/// thread left out of calls soon stops spinning (the same limit as candle's pool).
const SPIN_LIMIT: u32 = 25_000;

/// A worker's signals, each on its own cache line.
#[repr(C, align(64))]
struct Slot {
    /// The call the worker is to join (stored by the caller).
    go: AtomicUsize,
    /// The last call the worker finished (stored by the worker).
    done: AtomicUsize,
}

/// The closure of the current call, type-erased.
struct Work {
    call: unsafe fn(*const (), usize),
    data: *const (),
}

struct Shared {
    slots: Box<[Slot]>,
    work: UnsafeCell<Work>,
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `work` is written only by the caller holding `Pool::calls`, before it signals the
// workers of that call (Release on `go`), and read by those workers after they see the signal
// (Acquire) and before they signal `done`, which the caller waits for before returning.
unsafe impl Sync for Shared {}

/// Worker threads plus the calling thread.
struct Pool {
    shared: &'static Shared,
    threads: Vec<Thread>,
    /// Serializes calls from different threads; holds the number of the last call.
    calls: Mutex<usize>,
}

thread_local! {
    /// Set on pool workers, and on a caller while its call runs: work started there runs inline.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
    /// Threads this thread's work uses ([`with_threads`]); `None`: the process's default.
    static ACTIVE: Cell<Option<usize>> = const { Cell::new(None) };
}

unsafe fn call_erased<F: Fn(usize) + Sync>(data: *const (), tid: usize) {
    // SAFETY: `data` points at the caller's `F`, alive until every worker of the call is done.
    unsafe { (*(data as *const F))(tid) }
}

impl Pool {
    fn new(workers: usize) -> Pool {
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            slots: (0..workers)
                .map(|_| Slot {
                    go: AtomicUsize::new(0),
                    done: AtomicUsize::new(0),
                })
                .collect(),
            work: UnsafeCell::new(Work {
                call: |_, _| {},
                data: std::ptr::null(),
            }),
            panic: Mutex::new(None),
        }));
        let threads = (0..workers)
            .map(|tid| {
                std::thread::Builder::new()
                    .name(format!("shortlist-compute-{tid}"))
                    .spawn(move || worker(shared, tid))
                    .expect("starting a compute thread")
                    .thread()
                    .clone()
            })
            .collect();
        Pool {
            shared,
            threads,
            calls: Mutex::new(0),
        }
    }

    /// Runs `f(i)` on the calling thread (`i` = 0) and on `k − 1` workers (`i` = 1..k), and
    /// returns when all are done; a panic in any is raised here.
    fn execute<F: Fn(usize) + Sync>(&self, k: usize, f: F) {
        let helpers = k.saturating_sub(1).min(self.threads.len());
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        let call = calls.wrapping_add(1);
        *calls = call;
        // A panic left by a helper of a call whose caller panicked first is not this call's.
        *self.shared.panic.lock().unwrap_or_else(|e| e.into_inner()) = None;
        // SAFETY: see `Shared`; no worker reads `work` until signalled below.
        unsafe {
            *self.shared.work.get() = Work {
                call: call_erased::<F>,
                data: &f as *const F as *const (),
            };
        }
        for (slot, thread) in self.shared.slots.iter().zip(&self.threads).take(helpers) {
            slot.go.store(call, Ordering::Release);
            thread.unpark();
        }
        /// Waits for the helpers even while unwinding from the caller's own share, since they
        /// hold a pointer to `f`.
        struct Wait<'a> {
            slots: &'a [Slot],
            call: usize,
        }
        impl Drop for Wait<'_> {
            fn drop(&mut self) {
                for slot in self.slots {
                    while slot.done.load(Ordering::Acquire) != self.call {
                        spin_loop();
                    }
                }
                IN_CALL.set(false);
            }
        }
        IN_CALL.set(true);
        {
            let _wait = Wait {
                slots: &self.shared.slots[..helpers],
                call,
            };
            f(0);
        }
        let panic = self
            .shared
            .panic
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        drop(calls);
        if let Some(payload) = panic {
            std::panic::resume_unwind(payload);
        }
    }
}

fn worker(shared: &'static Shared, tid: usize) {
    IN_CALL.set(true);
    let slot = &shared.slots[tid];
    let mut seen = 0usize;
    loop {
        let mut spins = 0u32;
        let call = loop {
            let g = slot.go.load(Ordering::Acquire);
            if g != seen {
                break g;
            }
            spins += 1;
            if spins < SPIN_LIMIT {
                spin_loop();
            } else {
                // An unpark before the park makes it return at once: no signal is lost.
                std::thread::park();
                spins = 0;
            }
        };
        seen = call;
        // SAFETY: see `Shared`.
        let work = unsafe { &*shared.work.get() };
        let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe {
            (work.call)(work.data, tid + 1)
        }));
        if let Err(payload) = ran {
            let mut first = shared.panic.lock().unwrap_or_else(|e| e.into_inner());
            if first.is_none() {
                *first = Some(payload);
            }
        }
        slot.done.store(call, Ordering::Release);
    }
}

/// The process's threads: (default per calling thread, most any thread may use).
static SIZE: OnceLock<(usize, usize)> = OnceLock::new();
static POOL: OnceLock<Pool> = OnceLock::new();

/// Sizes the pool: work uses `default` threads unless its thread says otherwise
/// ([`with_threads`]), and never more than `most`. Call it once, before any work; without it
/// both are candle's thread count (`CANDLE_NUM_THREADS`, else the cores). Returns false, and
/// changes nothing, when the sizes were already fixed.
pub fn configure(default: usize, most: usize) -> bool {
    let default = default.max(1);
    SIZE.set((default, most.max(default))).is_ok()
}

fn size() -> (usize, usize) {
    *SIZE.get_or_init(|| {
        let n = candle_core::utils::get_num_threads().max(1);
        (n, n)
    })
}

fn pool() -> &'static Pool {
    POOL.get_or_init(|| Pool::new(size().1 - 1))
}

/// The threads work started on this thread uses: what [`with_threads`] asked for, never fewer
/// than the process's default nor more than [`max_threads`].
pub fn threads() -> usize {
    let (default, most) = size();
    ACTIVE.get().unwrap_or(default).clamp(default, most)
}

/// The most threads any work of this process may use.
pub fn max_threads() -> usize {
    size().1
}

/// Runs `f` with the work it starts on this thread using `n` threads (at least the process's
/// default, at most [`max_threads`]).
pub fn with_threads<R>(n: usize, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            ACTIVE.set(self.0);
        }
    }
    let _restore = Restore(ACTIVE.replace(Some(n.max(1))));
    f()
}

/// Runs `f` over `0..n_items` in ranges taken by this thread's [`threads`] from a shared cursor,
/// about eight ranges a thread, so that a fast thread takes over a slow one's share. Called
/// from inside such work, it runs `f(0..n_items)` inline.
///
/// Work that needs no more threads than candle's pool has runs on candle's pool, as all work
/// did before this pool: candle's own operations (its quantized matmuls of K-quant tensors,
/// norms, copies) run there too, and the threads of two pools, each spinning briefly after its
/// calls, contend for the cores — measured, Gemma 3's decode at batch 1 ran at a third of its
/// speed with both pools at two threads. So this pool only adds threads beyond candle's, and
/// `Config::quality_threads` asks for that only where candle's pool has no thread of its own
/// (two cores: one compute thread by default, so nothing of candle's spins beside it).
pub fn execute_chunked<F: Fn(Range<usize>) + Sync>(n_items: usize, f: F) {
    if n_items == 0 {
        return;
    }
    let candle = candle_core::utils::barrier_pool();
    let k = threads();
    if IN_CALL.get() {
        f(0..n_items);
    } else if k <= candle.n_workers() + 1 {
        candle.execute_chunked(n_items, f);
    } else {
        run_chunked(k, n_items, f);
    }
}

/// [`execute_chunked`] on this pool with `k` threads.
fn run_chunked<F: Fn(Range<usize>) + Sync>(k: usize, n_items: usize, f: F) {
    let k = k.min(n_items);
    if k <= 1 {
        f(0..n_items);
        return;
    }
    let chunk = n_items.div_ceil(k * 8).max(1);
    let cursor = AtomicUsize::new(0);
    pool().execute(k, |_| {
        loop {
            let start = cursor.fetch_add(chunk, Ordering::Relaxed);
            if start >= n_items {
                break;
            }
            f(start..n_items.min(start + chunk));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every item is run exactly once, on this pool and through `execute_chunked`, whatever
        /// the threads and items.
        #[test]
        fn every_item_once(n in 0usize..2000, k in 1usize..5) {
            let seen: Vec<AtomicUsize> = (0..n).map(|_| AtomicUsize::new(0)).collect();
            let count = |r: Range<usize>| {
                for i in r {
                    seen[i].fetch_add(1, Ordering::Relaxed);
                }
            };
            run_chunked(k, n, count);
            with_threads(k, || execute_chunked(n, count));
            prop_assert!(seen.iter().all(|s| s.load(Ordering::Relaxed) == 2));
        }
    }

    #[test]
    fn threads_follow_the_calling_thread_and_come_back() {
        let default = threads();
        with_threads(max_threads() + 5, || {
            assert_eq!(threads(), max_threads());
            with_threads(1, || {
                assert_eq!(threads(), default, "never below the default")
            });
            assert_eq!(threads(), max_threads());
        });
        assert_eq!(threads(), default);
    }

    #[test]
    fn work_started_inside_work_runs_inline() {
        let total = AtomicUsize::new(0);
        run_chunked(4, 64, |r| {
            for _ in r {
                execute_chunked(4, |inner| {
                    total.fetch_add(inner.len(), Ordering::Relaxed);
                });
            }
        });
        assert_eq!(total.load(Ordering::Relaxed), 256);
    }

    #[test]
    fn a_panic_in_the_work_reaches_the_caller_and_the_pool_stays_usable() {
        let caught = std::panic::catch_unwind(|| {
            run_chunked(4, 100, |r| {
                if r.contains(&99) {
                    panic!("item 99");
                }
            });
        });
        assert!(caught.is_err());
        let sum = AtomicUsize::new(0);
        run_chunked(4, 100, |r| {
            sum.fetch_add(r.sum::<usize>(), Ordering::Relaxed);
        });
        assert_eq!(sum.load(Ordering::Relaxed), 4950);
    }
}
