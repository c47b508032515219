//! Keeping idle CPUs quick to wake while the mount is busy.
//!
//! A request through the mount is a chain of wake-ups: the caller wakes a FUSE
//! thread, which wakes a server or the lock service, whose answer wakes it
//! again, and its reply wakes the caller. With few callers the CPUs are idle
//! between the links, and an idle CPU halts; on a virtual machine whose guest
//! does not poll before halting (`/sys/module/haltpoll/parameters/
//! guest_halt_poll_ns` 0, as on the machine docs/performance.md measures),
//! waking a halted CPU costs an exit to the hypervisor: a wake-up across CPUs
//! took about 20 us there against 4 on one CPU, and a mkdir crosses about
//! eight in series.
//!
//! So while requests come, the mount asks the kernel (PM QoS,
//! `/dev/cpu_dma_latency`) for a CPU wake-up latency of 0: where the idle
//! driver has a polling state (x86's haltpoll, intel_idle, acpi_idle), idle
//! CPUs then poll for work instead of halting, and a wake-up needs no
//! interrupt. The request is withdrawn after a window in which no request
//! came, so an idle mount lets the CPUs halt. The cost: CPU time that would have been halted is spent
//! polling while the mount is busy (the hypervisor sees those CPUs busy), on
//! every CPU of the machine, since the request is the machine's.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

/// How long the hold outlasts the last request: long enough that a steady
/// stream of requests keeps it (a bench's, a `tar x`'s), short enough that
/// CPUs poll for no more than a tenth of a second once the mount is idle.
pub const WINDOW: Duration = Duration::from_millis(50);

/// Where the hold is asked for: the kernel, or a test's record.
pub trait LatencyRequest: Send + 'static {
    /// Asks that idle CPUs wake at once.
    fn hold(&mut self) -> io::Result<()>;
    /// Withdraws the request.
    fn release(&mut self);
}

/// The kernel's CPU latency request: a target of 0 us for as long as the
/// file is open (closing it withdraws the request). Root only.
#[derive(Default)]
pub struct CpuLatency {
    open: Option<File>,
}

const CPU_LATENCY: &str = "/dev/cpu_dma_latency";

impl LatencyRequest for CpuLatency {
    fn hold(&mut self) -> io::Result<()> {
        if self.open.is_none() {
            let mut f = File::options().write(true).open(CPU_LATENCY)?;
            f.write_all(&0i32.to_ne_bytes())?;
            self.open = Some(f);
        }
        Ok(())
    }

    fn release(&mut self) {
        self.open = None;
    }
}

/// What the mount's FUSE threads and the holding thread share.
#[derive(Default)]
struct Shared {
    /// A request came since the holding thread last looked. Written by a
    /// request and read by the thread, against `watching` the other way round
    /// (each stores one and then loads the other): sequentially consistent,
    /// so that one of the two always sees the other's store and a burst never
    /// finds the thread asleep without waking it.
    busy: AtomicBool,
    /// A request came that no FUSE thread could run in place (with the
    /// default 8 threads: seven others were running), since the holding
    /// thread last looked.
    crowded: AtomicBool,
    /// The holding thread is awake, looking each window: requests need not
    /// wake it.
    watching: AtomicBool,
    stop: AtomicBool,
}

impl Shared {
    /// A request came; whether the holding thread sleeps and must be woken.
    fn touch(&self) -> bool {
        if self.busy.load(Ordering::Relaxed) {
            return false;
        }
        self.busy.store(true, Ordering::SeqCst);
        !self.watching.load(Ordering::SeqCst)
    }

    /// A request came that no FUSE thread could run in place.
    fn crowd(&self) {
        if !self.crowded.load(Ordering::Relaxed) {
            self.crowded.store(true, Ordering::Relaxed);
        }
    }
}

/// Holds a [`LatencyRequest`] while requests come, but not while a crowd of
/// them does: then the CPUs seldom idle anyway, and with 128 callers
/// creating through the mount a hold cost about a twentieth of the rate
/// (docs/performance.md). [`AwakeWhileBusy::touch`] at each request and
/// [`AwakeWhileBusy::crowded`] at each one handed off; a thread of its own
/// puts the hold on and takes it off.
pub struct AwakeWhileBusy {
    shared: Arc<Shared>,
    holder: Thread,
    thread: Option<JoinHandle<()>>,
}

impl AwakeWhileBusy {
    /// Holds the kernel's CPU latency request while requests come; None, said
    /// once on stderr, when the kernel cannot be asked (not root, no device).
    pub fn start() -> Option<AwakeWhileBusy> {
        let mut req = CpuLatency::default();
        if let Err(e) = req.hold() {
            eprintln!("canopy-fuse: cannot ask the kernel to keep idle CPUs polling ({CPU_LATENCY}: {e}); wake-ups between requests may be slower");
            return None;
        }
        req.release();
        AwakeWhileBusy::with(req, WINDOW).ok()
    }

    /// Holds `req` while requests come, until `window` passes without one or
    /// with a crowd.
    pub fn with(req: impl LatencyRequest, window: Duration) -> io::Result<AwakeWhileBusy> {
        let shared = Arc::new(Shared::default());
        let theirs = shared.clone();
        let thread = std::thread::Builder::new().name("canopy-awake".into()).spawn(move || hold_while_busy(&theirs, req, window))?;
        Ok(AwakeWhileBusy { shared, holder: thread.thread().clone(), thread: Some(thread) })
    }

    /// A request came. Costs one load once a window has seen a request.
    pub fn touch(&self) {
        if self.shared.touch() {
            self.holder.unpark();
        }
    }

    /// A request came that no FUSE thread could run in place.
    pub fn crowded(&self) {
        self.shared.crowd();
    }
}

impl Drop for AwakeWhileBusy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Release);
        self.holder.unpark();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The holding thread: asleep until a request, then, window by window while
/// requests come, holding `req` unless the last window saw a crowd.
fn hold_while_busy(s: &Shared, req: impl LatencyRequest, window: Duration) {
    let mut watch = Watch::new(req);
    loop {
        while !s.busy.load(Ordering::SeqCst) {
            if s.stop.load(Ordering::Acquire) {
                return;
            }
            std::thread::park();
        }
        watch.begin(s);
        while sleep_unless_stopped(s, window) && watch.window_ended(s) {}
        // A touch between the last look and `watching` going false finds it
        // still true and does not wake this thread: the loop's first look
        // sees it (see `Shared::busy`).
        watch.end(s);
        if s.stop.load(Ordering::Acquire) {
            return;
        }
    }
}

/// What the holding thread decides at each step of a burst of requests,
/// apart from its sleeping and waking (so tests step it window by window).
struct Watch<R> {
    hold: Hold<R>,
}

impl<R: LatencyRequest> Watch<R> {
    /// Nothing held yet.
    fn new(req: R) -> Watch<R> {
        Watch { hold: Hold { req, on: false, said: false } }
    }

    /// A burst's first request: hold, and look again at each window's end.
    fn begin(&mut self, s: &Shared) {
        s.watching.store(true, Ordering::SeqCst);
        self.hold.set(true);
    }

    /// A window ended: whether a request came in it. If one did, the hold is
    /// kept, or let go if a crowd came.
    fn window_ended(&mut self, s: &Shared) -> bool {
        if !s.busy.swap(false, Ordering::SeqCst) {
            return false;
        }
        self.hold.set(!s.crowded.swap(false, Ordering::AcqRel));
        true
    }

    /// The burst ended (a window without a request, or the mount stops).
    fn end(&mut self, s: &Shared) {
        s.watching.store(false, Ordering::SeqCst);
        self.hold.set(false);
    }
}

/// The request and whether it is held.
struct Hold<R> {
    req: R,
    on: bool,
    /// A failure to hold was said once on stderr.
    said: bool,
}

impl<R: LatencyRequest> Hold<R> {
    fn set(&mut self, on: bool) {
        match (self.on, on) {
            (false, true) => match self.req.hold() {
                Ok(()) => self.on = true,
                Err(e) if !std::mem::replace(&mut self.said, true) => eprintln!("canopy-fuse: cannot ask the kernel to keep idle CPUs polling: {e}"),
                Err(_) => {}
            },
            (true, false) => {
                self.req.release();
                self.on = false;
            }
            _ => {}
        }
    }
}

/// Sleeps `window`; false if told to stop meanwhile.
fn sleep_unless_stopped(s: &Shared, window: Duration) -> bool {
    let until = Instant::now() + window;
    loop {
        if s.stop.load(Ordering::Acquire) {
            return false;
        }
        let now = Instant::now();
        if now >= until {
            return true;
        }
        std::thread::park_timeout(until - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use parking_lot::Mutex;

    /// Records holds and releases.
    #[derive(Clone, Default)]
    struct Record(Arc<Mutex<Vec<&'static str>>>);

    impl LatencyRequest for Record {
        fn hold(&mut self) -> io::Result<()> {
            self.0.lock().push("hold");
            Ok(())
        }
        fn release(&mut self) {
            self.0.lock().push("release");
        }
    }

    impl Record {
        fn now(&self) -> Vec<&'static str> {
            self.0.lock().clone()
        }

        /// Polls until the record is `want`; false only after 60,000 polls
        /// (a hung thread's test ends; no claim about how fast it gets there).
        fn reaches(&self, want: &[&str]) -> bool {
            (0..60_000).any(|_| {
                let done = self.now() == want;
                if !done {
                    std::thread::sleep(Duration::from_millis(1));
                }
                done
            })
        }
    }

    #[test]
    fn holds_from_a_request_until_a_window_passes_without_one() {
        let rec = Record::default();
        let awake = AwakeWhileBusy::with(rec.clone(), Duration::from_millis(20)).unwrap();
        std::thread::sleep(Duration::from_millis(60));
        assert!(rec.now().is_empty(), "held before any request: {:?}", rec.now());
        awake.touch();
        assert!(rec.reaches(&["hold", "release"]), "{:?}", rec.now());
        awake.touch();
        assert!(rec.reaches(&["hold", "release", "hold", "release"]), "{:?}", rec.now());
    }

    /// A holding thread's state and decisions, stepped by the test.
    fn stepped<R: LatencyRequest>(req: R) -> (Shared, Watch<R>) {
        (Shared::default(), Watch::new(req))
    }

    #[test]
    fn requests_within_each_window_keep_one_hold() {
        let rec = Record::default();
        let (s, mut watch) = stepped(rec.clone());
        assert!(s.touch(), "a sleeping holder is woken");
        watch.begin(&s);
        for _ in 0..6 {
            assert!(!s.touch(), "a watching holder is not woken");
            assert!(watch.window_ended(&s));
        }
        assert_eq!(rec.now(), ["hold"]);
        assert!(!watch.window_ended(&s));
        watch.end(&s);
        assert_eq!(rec.now(), ["hold", "release"]);
    }

    /// Whether the latest event is a hold (false: a release, or nothing yet).
    fn holding(rec: &Record) -> bool {
        rec.now().last() == Some(&"hold")
    }

    #[test]
    fn a_crowd_lets_the_hold_go_until_requests_come_few_again() {
        let rec = Record::default();
        let (s, mut watch) = stepped(rec.clone());
        let window = |watch: &mut Watch<Record>, crowded: bool| {
            s.touch();
            if crowded {
                s.crowd();
            }
            assert!(watch.window_ended(&s));
        };
        s.touch();
        watch.begin(&s);
        assert!(holding(&rec));
        window(&mut watch, true);
        assert!(!holding(&rec), "{:?}", rec.now());
        window(&mut watch, true);
        assert!(!holding(&rec), "{:?}", rec.now());
        window(&mut watch, false);
        assert!(holding(&rec), "{:?}", rec.now());
        window(&mut watch, true);
        assert_eq!(rec.now(), ["hold", "release", "hold", "release"]);
    }

    /// A kernel that refuses the request, recorded.
    #[derive(Clone, Default)]
    struct Refused(Record);

    impl LatencyRequest for Refused {
        fn hold(&mut self) -> io::Result<()> {
            self.0 .0.lock().push("refused");
            Err(io::Error::from(io::ErrorKind::PermissionDenied))
        }
        fn release(&mut self) {
            self.0 .0.lock().push("release");
        }
    }

    #[test]
    fn a_refused_request_is_not_released_and_is_asked_again_at_the_next_burst() {
        let refused = Refused::default();
        let rec = refused.0.clone();
        let (s, mut watch) = stepped(refused);
        s.touch();
        watch.begin(&s);
        // Each window with a request asks again; nothing was held, so
        // nothing is let go when the burst ends.
        s.touch();
        assert!(watch.window_ended(&s));
        assert!(!watch.window_ended(&s));
        watch.end(&s);
        assert_eq!(rec.now(), ["refused", "refused"]);
        s.touch();
        watch.begin(&s);
        assert_eq!(rec.now(), ["refused", "refused", "refused"]);
    }

    #[test]
    fn dropping_it_releases_a_hold() {
        let rec = Record::default();
        let awake = AwakeWhileBusy::with(rec.clone(), Duration::from_secs(60)).unwrap();
        awake.touch();
        assert!(rec.reaches(&["hold"]), "{:?}", rec.now());
        drop(awake);
        assert_eq!(rec.now(), ["hold", "release"]);
    }
}
