//! The per-run budget: deadlines and cancellation enforced by a raw Luau interrupt that is
//! installed only when a run must stop.
//!
//! Luau calls its `interrupt` callback at every loop back-edge, call and return whenever
//! `lua_callbacks(L)->interrupt` is non-null. Even a callback that returns at once costs CPU-bound
//! loops close to 20%; with the slot null, Luau pays one load and a branch. So the slot stays null
//! while nothing asks a run to stop, and is filled only by a *raise*: the watchdog seeing a run
//! pass its deadline ([`Signal::tick`]), a canceller ([`Signal::request_cancel`]), or a run that
//! begins with the flag already raised ([`Signal::begin_run`]).
//!
//! Each thread that runs Luau has one [`Signal`]: an atomic flag byte and the *hook* of the run in
//! progress (the callbacks slot of its VM, one per global state), kept as one word in an atomic.
//! A raiser sets the flag bit, then takes the word's `STORING` bit with a compare-and-swap and
//! installs the callback on the registered VM. `begin_run` registers its VM with one
//! compare-and-swap (and installs at once if the flag is already up); `end_run` swaps the outer
//! run's VM back in, removes the callback from the VM whose run ended, and installs on the outer
//! VM when the flag is still raised. Registration waits while `STORING` is held, so a raiser never
//! writes into a VM whose run has ended (it may be dropped right after). Between raises, a run
//! costs two uncontended compare-and-swaps and takes no lock.
//!
//! The callback then takes the slow path: it asks the thread's current [`RunGuard`] why, and
//! raises a Luau error naming the reason. It stays installed, and keeps raising at every later
//! interrupt of the same run, so a script that `pcall`s the error cannot keep running: the next
//! back-edge outside the `pcall` raises again. A raise whose reason does not hold (it was meant for
//! a run that has ended) clears itself and removes the callback again.
//!
//! This module owns the signal of each thread and the watchdog; it never touches a VM's tasks.
//!
//! # The cross-thread store
//! The watchdog and cancellers write the `interrupt` slot of a VM that another thread is running,
//! and Luau reads that slot with a plain load at every safepoint. In C++ terms this is a data race;
//! it is the same one Luau's own command-line REPL relies on when its SIGINT handler sets the slot.
//! Skein makes the store with `write_volatile` of an aligned function pointer, which x86-64 and
//! aarch64 perform as one single-copy-atomic store (Luau sees the old or the new pointer, never a
//! mix). Luau's interpreter loads the slot afresh through `L->global` at every safepoint; its read
//! is a plain one, so like the REPL we rely on the compiled dispatch loop not keeping the pointer
//! in a register across instructions, which it does not do today. The running loop then sees the
//! store within a few instructions.
//!
//! # Memory ordering
//! The flag is read with `Relaxed` on the fast path: it carries no data, only "look at the slow
//! path". The slow path reads the deadline and the cancel state with `Acquire`, paired with the
//! `Release` stores that set them, so a raised reason is always one that really holds.
//!
//! A raiser's flag update comes before its compare-and-swap on the `running` word, and
//! `begin_run`/`end_run` read the flag after theirs. Both are read-modify-writes of one atomic
//! (a raiser that finds no run still writes the empty word back), so they fall in one order: the
//! later one reads the earlier one's write with `Acquire` against its `Release`. Either the
//! raiser sees the new VM and installs on it, or the registering thread sees the raised bit and
//! installs itself: a raise while a run is registered always reaches that run's VM. With a plain
//! load on the raiser's side the two could miss each other (the store-buffering pattern). The
//! `STORING` bit is handed back with a `Release` store that the next compare-and-swap reads, so
//! stores into one VM's slot are ordered one after another, as a lock would order them.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::{Arc, Condvar, Mutex as StdMutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use std::marker::PhantomData;
use std::mem::ManuallyDrop;

use crate::sync::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

/// The flag that, once true, stops the runs of one job. Checked by the interrupt's slow path.
pub type CancelToken = AtomicBool;

/// What cancels one run: the token of the job it belongs to, and the token of the VM it runs on
/// (a pool worker's VM has its principal's: set when the domain's generation ends, it stops every
/// run of every job of that generation, whatever job it is). The run stops when either is set and
/// a raiser raised [`Signal::request_cancel`] after setting it, or it was set when the run began.
#[derive(Clone, Copy, Debug, Default)]
pub struct RunTokens<'a> {
    /// The job's own token (`None` for owners that can't be cancelled one by one).
    pub job: Option<&'a CancelToken>,
    /// The token of the VM the run executes on, shared by all its runs.
    pub vm: Option<&'a CancelToken>,
}

impl RunTokens<'_> {
    /// Whether either token is set. The loads are `Acquire`, paired with the `Release` stores
    /// (or the read-modify-writes after them) of whoever set them.
    #[inline]
    fn cancelled(&self) -> bool {
        let set = |t: Option<&CancelToken>| t.is_some_and(|t| t.load(Ordering::Acquire));
        set(self.job) || set(self.vm)
    }
}

use crate::sync::{hint, thread};
use mlua::ffi;

/// No reason to interrupt.
const CLEAR: u8 = 0;
/// The watchdog saw the run pass its deadline.
const DEADLINE: u8 = 1;
/// Somebody asked the running item to stop.
const CANCEL: u8 = 2;

/// How often the watchdog looks when no deadline is nearer.
const WATCHDOG_TICK: Duration = Duration::from_millis(5);

/// Where a raise installs the interrupt: the callbacks slot of the VM a run executes on.
///
/// A [`Signal`] keeps the hook of the registered run as one machine word in an atomic, so a run
/// registers and unregisters its VM with one compare-and-swap each and no lock. [`set`](Self::set)
/// is called only for a VM whose run is registered, and (but for the run's own thread removing
/// the interrupt from a VM it has just unregistered) only by the party holding the word's
/// `STORING` bit, so the VM outlives every call and no two stores race. The shipped hook is
/// [`VmHook`]; the loom models supply their own, which records the stores.
///
/// # Safety
/// [`into_word`](Self::into_word) must answer a word that is not 0 and has bit 0 clear (an
/// aligned address does), and [`from_word`](Self::from_word) of that word must give back the
/// same hook.
pub unsafe trait InterruptHook: Sized {
    /// Installs (`true`) or removes (`false`) Skein's interrupt callback on the VM. May be called
    /// from any thread.
    fn set(&self, installed: bool);

    /// The hook as one word, to keep in the signal's atomic while its run is registered.
    fn into_word(self) -> usize;

    /// The hook back from [`into_word`](Self::into_word).
    ///
    /// # Safety
    /// `word` came from `into_word`, and each word is turned back into an owned hook once (a
    /// borrow for a store goes through `ManuallyDrop`).
    unsafe fn from_word(word: usize) -> Self;
}

/// The type of Luau's `interrupt` slot.
type InterruptFn = unsafe extern "C-unwind" fn(*mut ffi::lua_State, c_int);

/// The interrupt slot of one Luau VM (its global state's `lua_Callbacks`).
#[derive(Debug)]
pub struct VmHook(*mut ffi::lua_Callbacks);

// SAFETY: a `VmHook` is only a place to store a function pointer; `Signal` dereferences it only
// while the VM's run is registered, which `RunGuard` keeps alive (it borrows the `Lua`), so
// sending the address to the watchdog or a canceller thread is sound.
unsafe impl Send for VmHook {}

impl VmHook {
    /// The hook of `lua`'s global state.
    fn of(lua: &mlua::Lua) -> VmHook {
        // SAFETY: `lua_callbacks` answers a field of the VM's global state, valid (and at a fixed
        // address) for as long as the VM lives; we only take its address here.
        VmHook(unsafe { ffi::lua_callbacks(lua.state()) })
    }
}

// SAFETY: the word is the address of the VM's `lua_Callbacks`, a struct of pointers, so it is
// not 0 and is at least pointer-aligned (bit 0 clear); `from_word` rebuilds the same address.
unsafe impl InterruptHook for VmHook {
    fn set(&self, installed: bool) {
        let callback: Option<InterruptFn> = if installed { Some(interrupt) } else { None };
        // SAFETY: the pointer is the callbacks struct of a live VM (see `InterruptHook`: called
        // only while the VM's run is registered, by the holder of the signal's `STORING` bit or
        // by the VM's own thread right after unregistering it, so no other writer races this
        // store and the VM cannot be dropped meanwhile). The VM's own thread may be reading the
        // slot at a safepoint right now: the store is a volatile write of an aligned function
        // pointer, a single-copy-atomic store on x86-64 and aarch64, so Luau sees either the old
        // or the new pointer, never a torn one. In C++ terms this is a data race; Luau's own REPL
        // makes the same store from a signal handler, and Luau re-reads the slot through
        // `L->global` at every safepoint, so the store is seen within a few instructions. mlua
        // leaves the slot alone unless its `set_interrupt` is used, which Skein never calls.
        unsafe {
            std::ptr::write_volatile(std::ptr::addr_of_mut!((*self.0).interrupt), callback);
        }
    }

    fn into_word(self) -> usize {
        self.0 as usize
    }

    unsafe fn from_word(word: usize) -> Self {
        VmHook(word as *mut ffi::lua_Callbacks)
    }
}

/// No run is registered: the signal's `running` word between runs.
const NO_RUN: usize = 0;
/// Bit 0 of the `running` word: somebody is storing into the registered VM's slot, and the word
/// must not change until they are done.
const STORING: usize = 1;

/// What [`Signal::begin_run`] answers and [`Signal::end_run`] restores: the outer run's deadline,
/// budget and VM, if a run was in progress.
#[derive(Debug)]
pub struct OuterRun<H> {
    deadline_ns: u64,
    budget_ns: u64,
    hook: Option<H>,
}

/// The interrupt state of one thread that runs Luau.
///
/// The methods are the whole protocol between the thread's runs, the watchdog and cancellers;
/// `loom-tests/tests/budget.rs` model-checks them.
#[derive(Debug)]
pub struct Signal<H: InterruptHook = VmHook> {
    flag: AtomicU8,
    /// Deadline of the current run, in nanoseconds since [`epoch`]; 0 while no run is timed.
    deadline_ns: AtomicU64,
    /// The deadline the current run was given, for the error message (nanoseconds).
    budget_ns: AtomicU64,
    /// The hook of the run in progress on this signal's thread as a word
    /// ([`InterruptHook::into_word`]), [`NO_RUN`] between runs; [`STORING`] is set while a party
    /// stores into that VM's slot. The signal owns the registered hook.
    running: AtomicUsize,
    /// The signal owns the registered hook and hands it to other threads' stores: it is `Send`
    /// and `Sync` when `H` is `Send`, as a mutex of `H` would be.
    _hook: PhantomData<StdMutex<H>>,
}

impl<H: InterruptHook> Signal<H> {
    /// A signal with no run in progress.
    pub fn new() -> Self {
        Signal {
            flag: AtomicU8::new(CLEAR),
            deadline_ns: AtomicU64::new(0),
            budget_ns: AtomicU64::new(0),
            running: AtomicUsize::new(NO_RUN),
            _hook: PhantomData,
        }
    }

    /// Takes the [`STORING`] bit on the registered run's word and answers the word (without
    /// the bit), or answers [`NO_RUN`] when no run is registered. A caller given a run must hand
    /// the bit back with [`stored`](Self::stored).
    ///
    /// Always a read-modify-write, even with no run registered (it then writes [`NO_RUN`]
    /// again): a `begin_run` whose registration comes later in the word's order reads from it,
    /// and so sees the raise made before it. A plain load here would let the two miss each
    /// other (the store-buffering race), and the raise would reach no VM.
    fn take_registered(&self) -> usize {
        let mut spins = 0u32;
        loop {
            let word = self.running.load(Ordering::Relaxed);
            if word & STORING == 0 {
                let taken = if word == NO_RUN {
                    NO_RUN
                } else {
                    word | STORING
                };
                if self
                    .running
                    .compare_exchange_weak(word, taken, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
                {
                    return word;
                }
            }
            back_off(&mut spins);
        }
    }

    /// Hands back the [`STORING`] bit [`take_registered`](Self::take_registered) took on `word`.
    fn stored(&self, word: usize) {
        self.running.store(word, Ordering::Release);
    }

    /// Replaces the registered word with `next`, once nobody is storing into the VM; answers the
    /// word it replaced. Only the signal's own thread registers and unregisters.
    fn register(&self, next: usize) -> usize {
        let mut spins = 0u32;
        loop {
            let word = self.running.load(Ordering::Relaxed);
            if word & STORING == 0
                && self
                    .running
                    .compare_exchange_weak(word, next, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
            {
                return word;
            }
            back_off(&mut spins);
        }
    }

    /// Stores `installed` into the registered run's VM, if a run is registered, holding the
    /// [`STORING`] bit. With `only_if_clear`, the store is made only if the flag is still clear
    /// once the bit is held (the removal of a stale raise).
    fn set_registered(&self, installed: bool, only_if_clear: bool) {
        let word = self.take_registered();
        if word == NO_RUN {
            return;
        }
        if !only_if_clear || self.flag.load(Ordering::Acquire) == CLEAR {
            // SAFETY: `word` is the registered hook's (`into_word`), and the `STORING` bit we
            // hold keeps it registered, so its VM is alive; `ManuallyDrop` leaves the signal's
            // ownership of the hook alone.
            let hook = ManuallyDrop::new(unsafe { H::from_word(word) });
            hook.set(installed);
        }
        self.stored(word);
    }

    /// Raises `bit`, then installs the interrupt on the registered run's VM. The flag update
    /// comes first: a `begin_run` that registers after our look at the word reads the flag
    /// after us.
    fn raise(&self, bit: u8) {
        self.flag.fetch_or(bit, Ordering::Release);
        self.set_registered(true, false);
    }

    /// Asks the run in progress on this signal's thread to stop at its next interrupt. The
    /// caller stores `true` in the run's [`CancelToken`] first.
    pub fn request_cancel(&self) {
        self.raise(CANCEL);
    }

    /// The interrupt's fast path: whether anything asks it to look closer.
    #[inline]
    pub fn raised(&self) -> bool {
        self.flag.load(Ordering::Relaxed) != CLEAR
    }

    /// Starts a run on the VM behind `hook` that must end by `deadline_ns` (on the signal's
    /// clock) and was given `budget_ns`, for the job whose cancel token is `token`. A nested run
    /// keeps the outer deadline when that one is sooner. Answers the outer run's state for
    /// [`end_run`](Self::end_run).
    ///
    /// A job cancelled before its run begins has its bit raised here: a cancel whose bit another
    /// job's run cleared (its own token was not set) is never lost. When the flag is up, the
    /// interrupt is installed on the new run's VM.
    pub fn begin_run(
        &self,
        hook: H,
        deadline_ns: u64,
        budget_ns: u64,
        tokens: RunTokens<'_>,
    ) -> OuterRun<H> {
        let (outer_deadline, outer_budget) = (
            self.deadline_ns.load(Ordering::Relaxed),
            self.budget_ns.load(Ordering::Relaxed),
        );
        if outer_deadline == 0 || deadline_ns < outer_deadline {
            self.budget_ns.store(budget_ns, Ordering::Release);
            self.deadline_ns.store(deadline_ns, Ordering::Release);
        }
        if tokens.cancelled() {
            self.flag.fetch_or(CANCEL, Ordering::Release);
        }
        let word = hook.into_word();
        debug_assert!(
            word != NO_RUN && word & STORING == 0,
            "a hook word must be aligned"
        );
        // Read after registering: a raiser whose look at the word came before our registration
        // raised its bit before that look, and our compare-and-swap read from it, so we see the
        // bit here.
        let outer_word = self.register(word);
        // The mutant skips this re-check (loom-tests/README.md).
        #[cfg(not(loom_mutant = "budget_begin_run_no_recheck"))]
        if self.flag.load(Ordering::Acquire) != CLEAR {
            self.set_registered(true, false);
        }
        OuterRun {
            deadline_ns: outer_deadline,
            budget_ns: outer_budget,
            // SAFETY: the outer run registered this word with `into_word`; taking it out of the
            // word hands its ownership to `OuterRun` until `end_run` registers it again.
            hook: (outer_word != NO_RUN).then(|| unsafe { H::from_word(outer_word) }),
        }
    }

    /// Ends a run, restoring the outer run's deadline and VM; `outer_token` is the cancel token
    /// of the outer run, if it has one. The interrupt is removed from the VM whose run ends, and
    /// installed on the outer run's VM if the flag is still up. Ending the outermost run clears
    /// the flag, so nothing raised for this run reaches the next.
    ///
    /// A nested run of another job finds a cancel of the outer job stale and clears its bit, so
    /// ending a nested run raises the bit again when the outer job's token is set: the outer run
    /// stops at its next interrupt, as it would have without the nested run.
    pub fn end_run(&self, outer: OuterRun<H>, outer_tokens: RunTokens<'_>) {
        self.budget_ns.store(outer.budget_ns, Ordering::Release);
        self.deadline_ns.store(outer.deadline_ns, Ordering::Release);
        if outer.deadline_ns == 0 {
            // A read-modify-write, not a store: if it erases a cancel raised meanwhile, it
            // synchronises with that canceller, so the next run's token check sees the token.
            // (A plain store here loses the cancel; loom found it, and the mutant keeps it found:
            // loom-tests/README.md.)
            #[cfg(not(loom_mutant = "budget_end_run_store"))]
            self.flag.swap(CLEAR, Ordering::AcqRel);
            #[cfg(loom_mutant = "budget_end_run_store")]
            self.flag.store(CLEAR, Ordering::Release);
        }
        // A nested check that erased the outer job's cancel bit did so with a read-modify-write
        // that read the canceller's raise, so the token is visible here.
        if outer_tokens.cancelled() {
            self.flag.fetch_or(CANCEL, Ordering::Release);
        }
        let outer_word = outer.hook.map_or(NO_RUN, H::into_word);
        let ended = self.register(outer_word);
        if ended != NO_RUN {
            // SAFETY: the word was this run's registration, and `register` took it out.
            let hook = unsafe { H::from_word(ended) };
            // A nested run on the outer run's own VM (`task.spawn`) hands back a word raisers
            // can reach again at once: the VM keeps the interrupt, which the outer run clears
            // at its own end. Any other VM is out of every raiser's reach now, and one that
            // held `STORING` on it finished before our compare-and-swap read its release, so
            // this store comes after theirs.
            if ended != outer_word {
                hook.set(false);
            }
        }
        if self.flag.load(Ordering::Acquire) != CLEAR {
            self.set_registered(true, false);
        }
    }

    /// The watchdog's look at this signal at `now_ns`: raises the flag when the run's deadline
    /// passed, and answers the deadline still ahead, if any.
    pub fn tick(&self, now_ns: u64) -> Option<u64> {
        let deadline = self.deadline_ns.load(Ordering::Acquire);
        if deadline == 0 {
            None
        } else if deadline <= now_ns {
            self.raise(DEADLINE);
            None
        } else {
            Some(deadline)
        }
    }

    /// The interrupt's slow path at `now_ns`, for the run whose cancel token is `token`: why
    /// the run must stop, if it must. A raised bit whose reason does not hold (it was meant for a
    /// run that has ended) is cleared; the watchdog and cancellers raise theirs again. When that
    /// leaves the flag clear, the interrupt is removed from the running VM again.
    pub fn check(&self, now_ns: u64, tokens: RunTokens<'_>) -> Option<Interruption> {
        let flag = self.flag.load(Ordering::Acquire);
        if flag & CANCEL != 0 && tokens.cancelled() {
            return Some(Interruption::Cancelled);
        }
        if flag & DEADLINE != 0 {
            let deadline = self.deadline_ns.load(Ordering::Acquire);
            if deadline != 0 && now_ns >= deadline {
                let budget = Duration::from_nanos(self.budget_ns.load(Ordering::Acquire));
                return Some(Interruption::Deadline(budget));
            }
        }
        self.flag
            .fetch_and(!(flag & (CANCEL | DEADLINE)), Ordering::AcqRel);
        // The clear may have erased a cancel of this very run raised since the token was read;
        // it then read that raise, so the token is visible now. The VM's token counts as much
        // as the job's: a generation's end raises every worker's signal once, and a stale
        // clear here must not lose it (the mutant reads only the job's token here).
        #[cfg(not(loom_mutant = "budget_check_job_token_only"))]
        let cancelled = tokens.cancelled();
        #[cfg(loom_mutant = "budget_check_job_token_only")]
        let cancelled = tokens.job.is_some_and(|t| t.load(Ordering::Acquire));
        if flag & CANCEL != 0 && cancelled {
            self.flag.fetch_or(CANCEL, Ordering::Release);
            return Some(Interruption::Cancelled);
        }
        // The flag is read again while `STORING` is held, so a raiser whose bit lands after that
        // read installs after our removal.
        if self.flag.load(Ordering::Acquire) == CLEAR {
            self.set_registered(false, true);
        }
        None
    }
}

impl<H: InterruptHook> Default for Signal<H> {
    fn default() -> Self {
        Signal::new()
    }
}

impl<H: InterruptHook> Drop for Signal<H> {
    fn drop(&mut self) {
        let word = self.running.load(Ordering::Acquire);
        if word != NO_RUN {
            // SAFETY: a run left registered (its guard was leaked): the signal owns the word,
            // and nobody can store through it once the signal is being dropped.
            drop(unsafe { H::from_word(word & !STORING) });
        }
    }
}

/// Waits a moment for the holder of a `STORING` bit, which keeps it for one store.
#[cold]
fn back_off(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        hint::spin_loop();
    } else {
        thread::yield_now();
    }
}

/// Why a run was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Interruption {
    /// The run took longer than its deadline.
    Deadline(Duration),
    /// The item was cancelled.
    Cancelled,
}

thread_local! {
    static SIGNAL: Arc<Signal> = {
        let signal = Arc::new(Signal::new());
        watchdog().register(&signal);
        signal
    };
    /// Raw pointer to this thread's signal, for the interrupt callback's fast path.
    static SIGNAL_PTR: Cell<*const Signal> = const { Cell::new(std::ptr::null()) };
    /// Set while a run on this thread may be cancelled: the cancel token of the running item.
    static CANCEL_TOKEN: Cell<*const CancelToken> = const { Cell::new(std::ptr::null()) };
    /// Set while a run on this thread executes on a VM with a token of its own (a pool
    /// worker's VM: its principal's, set when the generation ends).
    static VM_TOKEN: Cell<*const CancelToken> = const { Cell::new(std::ptr::null()) };
    /// What the run in progress on this thread was stopped for. Each run starts with `None`
    /// and its guard gives the outer run's value back when it ends, so a nested run's stop never
    /// labels the outer run's own failure.
    static STOPPED: Cell<Option<Interruption>> = const { Cell::new(None) };
}

/// This thread's signal.
pub(crate) fn current_signal() -> Arc<Signal> {
    SIGNAL.with(Arc::clone)
}

/// What is left of the run in progress on this thread, and the budget it was given: `None`
/// outside a timed run. Code that parks a wait on behalf of the running code caps the wait
/// with it, so the wait never outlasts the limit the code itself runs under.
pub(crate) fn run_left() -> Option<(Duration, Duration)> {
    SIGNAL.with(|signal| {
        let deadline = signal.deadline_ns.load(Ordering::Acquire);
        if deadline == 0 {
            return None;
        }
        let budget = Duration::from_nanos(signal.budget_ns.load(Ordering::Acquire));
        Some((
            Duration::from_nanos(deadline.saturating_sub(now_ns())),
            budget,
        ))
    })
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn now_ns() -> u64 {
    epoch().elapsed().as_nanos() as u64
}

/// Readies this thread for the interrupt of a VM built on it. Call once, on the VM's own thread,
/// at build time. The callback itself is not installed: a raise installs it on the running VM.
pub(crate) fn prepare() {
    SIGNAL.with(|signal| SIGNAL_PTR.with(|ptr| ptr.set(Arc::as_ptr(signal))));
}

/// The raw interrupt. The fast path is one thread-local load and one relaxed atomic load.
unsafe extern "C-unwind" fn interrupt(state: *mut ffi::lua_State, gc: c_int) {
    if gc >= 0 {
        // GC-step interrupts can't raise errors safely.
        return;
    }
    let signal = SIGNAL_PTR.with(Cell::get);
    if signal.is_null() {
        return;
    }
    // SAFETY: the pointer comes from this thread's `SIGNAL`, an `Arc` the thread-local keeps alive
    // for the thread's life, and VMs only run on the thread that installed the callback.
    if !unsafe { (*signal).raised() } {
        return;
    }
    // SAFETY: as above; `state` is the running Luau thread handed to us by the VM.
    unsafe { interrupt_slow(state, &*signal) }
}

#[cold]
unsafe fn interrupt_slow(state: *mut ffi::lua_State, signal: &Signal) {
    let reason = match stop_reason(signal) {
        Some(reason) => reason,
        None => return,
    };
    STOPPED.with(|s| s.set(Some(reason)));
    let message = match reason {
        Interruption::Deadline(d) => format!("{}", DeadlineMessage(d)),
        Interruption::Cancelled => "cancelled".to_owned(),
    };
    // SAFETY: we are inside a Luau interrupt with a valid `state`; we make room for one value,
    // push the message and raise it. `message` is dropped before the raise so no Rust value with a
    // destructor is live across the non-local exit.
    unsafe {
        ffi::lua_checkstack(state, 2);
        ffi::lua_pushlstring(state, message.as_ptr().cast(), message.len());
        drop(message);
        ffi::lua_error(state);
    }
}

/// Decides whether the run must stop; clears a stale flag otherwise.
fn stop_reason(signal: &Signal) -> Option<Interruption> {
    let (job, vm) = (CANCEL_TOKEN.with(Cell::get), VM_TOKEN.with(Cell::get));
    // SAFETY: the token pointers are set by a live `RunGuard`, which borrows the tokens for its
    // whole life, and are restored when the guard drops.
    let tokens = unsafe {
        RunTokens {
            job: job.as_ref(),
            vm: vm.as_ref(),
        }
    };
    signal.check(now_ns(), tokens)
}

/// Formats a deadline as the rejection text names it.
pub(crate) struct DeadlineMessage(pub(crate) Duration);

impl std::fmt::Display for DeadlineMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "deadline exceeded: one run took longer than {} s",
            format_seconds(self.0)
        )
    }
}

/// Seconds without trailing zeros: `2`, `0.5`, `0.001`.
pub(crate) fn format_seconds(d: Duration) -> String {
    let s = format!("{:.6}", d.as_secs_f64());
    let s = s.trim_end_matches('0').trim_end_matches('.');
    s.to_owned()
}

/// Times one run (a resume up to the next yield) on this thread.
///
/// Dropping the guard ends the run: the deadline is withdrawn and a flag raised for this run is
/// cleared so it cannot hit the next one.
pub(crate) struct RunGuard<'a> {
    signal: Arc<Signal>,
    outer_token: *const CancelToken,
    outer_vm_token: *const CancelToken,
    /// What the outer run (if any) was stopped for when this one began.
    outer_stopped: Option<Interruption>,
    /// Taken by `drop`; `Some` for the guard's whole life.
    outer: Option<OuterRun<VmHook>>,
    /// The tokens are read by the interrupt through raw pointers while the guard lives, and the
    /// signal may store into the VM's interrupt slot until the guard drops.
    _borrows: std::marker::PhantomData<(&'a CancelToken, &'a mlua::Lua)>,
}

impl<'a> RunGuard<'a> {
    /// Starts a run on `lua` with `deadline`; once either of `tokens` is true the run stops.
    /// The VM must have been built on this thread (see [`prepare`]).
    pub(crate) fn start(
        lua: &'a mlua::Lua,
        deadline: Duration,
        tokens: RunTokens<'a>,
    ) -> RunGuard<'a> {
        let signal = current_signal();
        let budget = deadline.as_nanos() as u64;
        // The tokens go in first: once `begin_run` registers the VM, a raise may install the
        // interrupt, whose slow path reads them.
        let ptr = |t: Option<&CancelToken>| t.map_or(std::ptr::null(), |t| t as *const _);
        let outer_token = CANCEL_TOKEN.with(|t| t.replace(ptr(tokens.job)));
        let outer_vm_token = VM_TOKEN.with(|t| t.replace(ptr(tokens.vm)));
        let outer = signal.begin_run(
            VmHook::of(lua),
            now_ns().saturating_add(budget),
            budget,
            tokens,
        );
        let outer_stopped = STOPPED.with(|s| s.replace(None));
        RunGuard {
            signal,
            outer_token,
            outer_vm_token,
            outer_stopped,
            outer: Some(outer),
            _borrows: std::marker::PhantomData,
        }
    }

    /// Why the run was stopped, if the interrupt stopped it.
    pub(crate) fn stopped(&self) -> Option<Interruption> {
        STOPPED.with(Cell::get)
    }
}

impl Drop for RunGuard<'_> {
    fn drop(&mut self) {
        if let Some(outer) = self.outer.take() {
            // SAFETY: the outer tokens were set by the outer run's guard, which borrows them and
            // outlives this one (guards nest on the thread's stack).
            let outer_tokens = unsafe {
                RunTokens {
                    job: self.outer_token.as_ref(),
                    vm: self.outer_vm_token.as_ref(),
                }
            };
            self.signal.end_run(outer, outer_tokens);
        }
        CANCEL_TOKEN.with(|t| t.set(self.outer_token));
        VM_TOKEN.with(|t| t.set(self.outer_vm_token));
        STOPPED.with(|s| s.set(self.outer_stopped));
    }
}

/// The one thread that turns passed deadlines into interrupt flags.
struct Watchdog {
    signals: StdMutex<Vec<Weak<Signal>>>,
    started: Condvar,
}

fn watchdog() -> &'static Watchdog {
    static WATCHDOG: OnceLock<&'static Watchdog> = OnceLock::new();
    WATCHDOG.get_or_init(|| {
        let dog: &'static Watchdog = Box::leak(Box::new(Watchdog {
            signals: StdMutex::new(Vec::new()),
            started: Condvar::new(),
        }));
        std::thread::Builder::new()
            .name("skein-watchdog".into())
            .spawn(move || dog.run())
            .expect("failed to start the skein watchdog thread");
        dog
    })
}

impl Watchdog {
    fn register(&self, signal: &Arc<Signal>) {
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        signals.retain(|s| s.strong_count() > 0);
        signals.push(Arc::downgrade(signal));
        self.started.notify_one();
    }

    fn run(&self) {
        let mut signals = self.signals.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let now = now_ns();
            let mut next = now + WATCHDOG_TICK.as_nanos() as u64;
            for signal in signals.iter().filter_map(Weak::upgrade) {
                if let Some(deadline) = signal.tick(now) {
                    next = next.min(deadline);
                }
            }
            let wait = Duration::from_nanos(next.saturating_sub(now_ns()).max(200_000));
            signals = self
                .started
                .wait_timeout(signals, wait)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether Skein's callback sits in the VM's interrupt slot.
    fn installed(lua: &mlua::Lua) -> bool {
        // SAFETY: the callbacks of a live VM on this thread; a plain read of one field.
        unsafe { (*ffi::lua_callbacks(lua.state())).interrupt.is_some() }
    }

    fn vm() -> mlua::Lua {
        let lua = mlua::Lua::new();
        prepare();
        lua
    }

    #[test]
    fn a_loop_past_its_deadline_is_stopped_with_the_deadline_named() {
        let lua = vm();
        let f: mlua::Function = lua.load("while true do end").into_function().unwrap();
        let guard = RunGuard::start(&lua, Duration::from_millis(30), RunTokens::default());
        let started = Instant::now();
        let err = f.call::<()>(()).unwrap_err().to_string();
        assert!(
            err.contains("deadline exceeded: one run took longer than 0.03 s"),
            "{err}"
        );
        assert_eq!(
            guard.stopped(),
            Some(Interruption::Deadline(Duration::from_millis(30)))
        );
        assert!(started.elapsed() >= Duration::from_millis(30));
        drop(guard);
        // The next run on the thread is not hit by the old flag.
        let g2 = RunGuard::start(&lua, Duration::from_secs(5), RunTokens::default());
        let n: i64 = lua
            .load("local n = 0 for i = 1, 100000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 100000);
        assert_eq!(g2.stopped(), None);
    }

    #[test]
    fn pcall_cannot_swallow_the_deadline() {
        let lua = vm();
        let f: mlua::Function = lua
            .load("while true do pcall(function() while true do end end) end")
            .into_function()
            .unwrap();
        let _guard = RunGuard::start(&lua, Duration::from_millis(20), RunTokens::default());
        let err = f.call::<()>(()).unwrap_err().to_string();
        assert!(err.contains("deadline exceeded"), "{err}");
    }

    #[test]
    fn a_cancel_token_stops_the_run() {
        let lua = vm();
        let token = Arc::new(AtomicBool::new(false));
        let signal = current_signal();
        let t2 = token.clone();
        let stopper = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            t2.store(true, Ordering::Release);
            signal.request_cancel();
        });
        let f: mlua::Function = lua.load("while true do end").into_function().unwrap();
        let guard = RunGuard::start(
            &lua,
            Duration::from_secs(10),
            RunTokens {
                job: Some(&token),
                vm: None,
            },
        );
        let err = f.call::<()>(()).unwrap_err().to_string();
        stopper.join().unwrap();
        assert!(err.contains("cancelled"), "{err}");
        assert_eq!(guard.stopped(), Some(Interruption::Cancelled));
    }

    #[test]
    fn a_stale_cancel_flag_without_a_token_is_ignored() {
        let lua = vm();
        current_signal().request_cancel();
        let _guard = RunGuard::start(&lua, Duration::from_secs(10), RunTokens::default());
        // The run began with the flag up, so the interrupt went in at once ...
        assert!(installed(&lua));
        let n: i64 = lua
            .load("local n = 0 for i = 1, 1000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 1000);
        // ... and the stale raise took it out again at the first interrupt.
        assert!(!installed(&lua));
    }

    #[test]
    fn the_interrupt_is_installed_only_from_a_raise_to_the_end_of_the_run() {
        let lua = vm();
        assert!(!installed(&lua), "a new VM has no interrupt");
        let guard = RunGuard::start(&lua, Duration::from_millis(20), RunTokens::default());
        assert!(
            !installed(&lua),
            "a run that nothing asked to stop has no interrupt"
        );
        let err = lua
            .load("while true do end")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("deadline exceeded"), "{err}");
        assert!(
            installed(&lua),
            "a raising interrupt stays for the rest of the run"
        );
        drop(guard);
        assert!(!installed(&lua), "the ended run's VM kept the interrupt");
    }

    #[test]
    fn a_nested_run_on_another_vm_is_stopped_and_the_outer_run_goes_on() {
        let outer_vm = vm();
        let inner_vm = vm();
        let outer = RunGuard::start(&outer_vm, Duration::from_secs(10), RunTokens::default());
        let inner = RunGuard::start(&inner_vm, Duration::from_millis(20), RunTokens::default());
        let err = inner_vm
            .load("while true do end")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("0.02 s"), "{err}");
        drop(inner);
        assert!(!installed(&inner_vm), "the nested VM kept the interrupt");
        // The inner deadline's raise may be handed to the outer VM; there it is stale.
        let n: i64 = outer_vm
            .load("local n = 0 for i = 1, 100000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 100000);
        assert!(
            !installed(&outer_vm),
            "a stale raise left the interrupt on the outer VM"
        );
        drop(outer);
    }

    #[test]
    fn an_outer_run_failing_for_its_own_reason_is_not_labelled_with_a_nested_stop() {
        let outer_vm = vm();
        let inner_vm = vm();
        let outer = RunGuard::start(&outer_vm, Duration::from_secs(10), RunTokens::default());
        let inner = RunGuard::start(&inner_vm, Duration::from_millis(20), RunTokens::default());
        let err = inner_vm.load("while true do end").exec().unwrap_err();
        assert!(err.to_string().contains("0.02 s"), "{err}");
        assert_eq!(
            inner.stopped(),
            Some(Interruption::Deadline(Duration::from_millis(20)))
        );
        drop(inner);
        let err = outer_vm
            .load("error('the outer run failed on its own')")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("the outer run failed on its own"), "{err}");
        assert_eq!(
            outer.stopped(),
            None,
            "the nested stop was reported as the outer's"
        );
    }

    #[test]
    fn a_cancel_of_the_outer_job_survives_a_nested_run_of_another_job() {
        let outer_vm = vm();
        let inner_vm = vm();
        let outer_token = CancelToken::new(false);
        let inner_token = CancelToken::new(false);
        let outer = RunGuard::start(
            &outer_vm,
            Duration::from_secs(3),
            RunTokens {
                job: Some(&outer_token),
                vm: None,
            },
        );
        // The outer job is cancelled while the nested run is active (here from the same
        // thread, as a canceller racing the nested run would).
        let inner = RunGuard::start(
            &inner_vm,
            Duration::from_secs(3),
            RunTokens {
                job: Some(&inner_token),
                vm: None,
            },
        );
        outer_token.store(true, Ordering::Release);
        current_signal().request_cancel();
        assert!(installed(&inner_vm));
        // The nested job is not the cancelled one: it runs to its end ...
        let n: i64 = inner_vm
            .load("local n = 0 for i = 1, 1000 do n += 1 end return n")
            .eval()
            .unwrap();
        assert_eq!(n, 1000);
        assert_eq!(inner.stopped(), None);
        drop(inner);
        // ... and the outer run is stopped at its next interrupt, not at its deadline.
        assert!(installed(&outer_vm), "the outer job's cancel was lost");
        let started = Instant::now();
        let err = outer_vm
            .load("while true do end")
            .exec()
            .unwrap_err()
            .to_string();
        assert!(err.contains("cancelled"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(outer.stopped(), Some(Interruption::Cancelled));
    }

    #[test]
    fn seconds_format_without_trailing_zeros() {
        assert_eq!(format_seconds(Duration::from_secs(60)), "60");
        assert_eq!(format_seconds(Duration::from_millis(500)), "0.5");
        assert_eq!(format_seconds(Duration::from_millis(1)), "0.001");
    }
}
