//! Signalling a recorded process at recovery without a check-then-signal
//! race.
//!
//! Recovery may only signal the process it recorded (boot id, pid, start
//! time, cgroup). Checking `/proc/<pid>` and then calling `kill(pid)` leaves
//! a window in which the process exits and its pid goes to another
//! process, which then gets the signal. Here the order is fixed by
//! [`kill_if_same`]: open a handle on the pid first (a pidfd), read the
//! identity through that handle (refused once the held process has exited),
//! compare, and signal through the same handle. A process that ends after
//! the check makes the signal fail; no other process can receive it.
//!
//! The steps go through the [`ProcessControl`] port, so the order is unit
//! tested with a recording fake; [`PidFds`] is the real implementation
//! over `glove_sandbox::identity::PidHandle`.

use glove_sandbox::identity::{PidHandle, ProcessIdentity};
use std::time::Duration;

/// How recovery reaches processes.
pub trait ProcessControl {
    /// A handle on one process (a pidfd).
    type Handle;
    /// Opens a handle on the process holding `pid` now.
    fn open(&self, pid: i32) -> Option<Self::Handle>;
    /// The identity of the held process, read through the handle; `None`
    /// when it cannot be read or the held process has exited.
    fn identity(&self, h: &Self::Handle) -> Option<ProcessIdentity>;
    /// SIGKILLs the held process through the handle; true when sent.
    fn kill(&self, h: &Self::Handle) -> bool;
    /// Waits up to `timeout` for the held process to exit.
    fn wait_gone(&self, h: &Self::Handle, timeout: Duration) -> bool;
}

/// What [`kill_if_same`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Killed {
    /// No process holds the pid (or no handle could be opened on it).
    NotFound,
    /// A process holds the pid but it is not the recorded one: nothing was
    /// signalled.
    Mismatch,
    /// The recorded process was signalled through its handle; `gone` says
    /// whether it exited within the wait.
    Signalled {
        /// It exited within the wait.
        gone: bool,
    },
    /// It was the recorded process but the signal failed (it ended after
    /// the check).
    SignalFailed,
}

impl Killed {
    /// Whether the recorded process was found (and so signalled or gone).
    pub fn matched(self) -> bool {
        matches!(self, Killed::Signalled { .. } | Killed::SignalFailed)
    }
}

/// Signals `pid` with SIGKILL only if the process holding it is the
/// recorded one (`same`): handle first, identity through it, signal through
/// it, then a bounded wait for it to exit.
pub fn kill_if_same<P: ProcessControl>(
    p: &P,
    pid: i32,
    same: impl FnOnce(&ProcessIdentity) -> bool,
    wait: Duration,
) -> Killed {
    if pid <= 0 {
        return Killed::NotFound;
    }
    let Some(h) = p.open(pid) else {
        return Killed::NotFound;
    };
    let Some(now) = p.identity(&h) else {
        return Killed::NotFound;
    };
    if !same(&now) {
        return Killed::Mismatch;
    }
    if !p.kill(&h) {
        return Killed::SignalFailed;
    }
    Killed::Signalled {
        gone: p.wait_gone(&h, wait),
    }
}

/// The real [`ProcessControl`]: pidfds.
#[derive(Clone, Copy, Debug, Default)]
pub struct PidFds;

impl ProcessControl for PidFds {
    type Handle = PidHandle;

    fn open(&self, pid: i32) -> Option<PidHandle> {
        PidHandle::open(pid).ok()
    }

    fn identity(&self, h: &PidHandle) -> Option<ProcessIdentity> {
        h.identity().ok()
    }

    fn kill(&self, h: &PidHandle) -> bool {
        h.kill().is_ok()
    }

    fn wait_gone(&self, h: &PidHandle, timeout: Duration) -> bool {
        h.wait_exit(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[derive(Debug, Clone, PartialEq, Eq)]
    enum Step {
        Open(i32),
        Identity(u32),
        Kill(u32),
        Wait(u32),
    }

    /// A fake whose pid table can change between steps: `reuse_after_open`
    /// hands the pid to another process right after the handle is opened.
    struct Recording {
        steps: RefCell<Vec<Step>>,
        /// Whether a process holds the pid at open.
        present: bool,
        /// The identity the pid shows through the handle.
        shows: ProcessIdentity,
        /// The held process exits before its identity is read (its pid
        /// then names another process, which a raw-pid check would see).
        exits_before_read: bool,
        kill_ok: bool,
        next_handle: RefCell<u32>,
    }

    impl Recording {
        fn new(shows: ProcessIdentity) -> Recording {
            Recording {
                steps: RefCell::new(vec![]),
                present: true,
                shows,
                exits_before_read: false,
                kill_ok: true,
                next_handle: RefCell::new(0),
            }
        }
        fn steps(&self) -> Vec<Step> {
            self.steps.borrow().clone()
        }
    }

    impl ProcessControl for Recording {
        type Handle = u32;
        fn open(&self, pid: i32) -> Option<u32> {
            self.steps.borrow_mut().push(Step::Open(pid));
            if !self.present {
                return None;
            }
            let mut n = self.next_handle.borrow_mut();
            *n += 1;
            Some(*n)
        }
        fn identity(&self, h: &u32) -> Option<ProcessIdentity> {
            self.steps.borrow_mut().push(Step::Identity(*h));
            (!self.exits_before_read).then(|| self.shows.clone())
        }
        fn kill(&self, h: &u32) -> bool {
            self.steps.borrow_mut().push(Step::Kill(*h));
            self.kill_ok
        }
        fn wait_gone(&self, h: &u32, _: Duration) -> bool {
            self.steps.borrow_mut().push(Step::Wait(*h));
            true
        }
    }

    fn ident(start: u64) -> ProcessIdentity {
        ProcessIdentity {
            boot_id: "boot".into(),
            pid: 42,
            start_time_ticks: start,
            cgroup: "0::/glove/s".into(),
        }
    }

    const W: Duration = Duration::from_millis(1);

    #[test]
    fn the_handle_is_opened_and_checked_before_the_signal_goes_through_it() {
        let p = Recording::new(ident(7));
        let k = kill_if_same(&p, 42, |now| now == &ident(7), W);
        assert_eq!(k, Killed::Signalled { gone: true });
        assert!(k.matched());
        assert_eq!(
            p.steps(),
            vec![
                Step::Open(42),
                Step::Identity(1),
                Step::Kill(1),
                Step::Wait(1)
            ]
        );
    }

    #[test]
    fn a_different_process_on_the_pid_is_not_signalled() {
        let p = Recording::new(ident(8));
        let k = kill_if_same(&p, 42, |now| now == &ident(7), W);
        assert_eq!(k, Killed::Mismatch);
        assert!(!k.matched());
        assert_eq!(p.steps(), vec![Step::Open(42), Step::Identity(1)]);
    }

    #[test]
    fn a_process_that_exits_before_the_check_is_not_signalled() {
        // The recorded process held the pid at open and exited; the pid now
        // names another process with (say) a matching identity reading. The
        // check reads through the handle, so it sees the exit, not the
        // newcomer, and nothing is signalled.
        let mut p = Recording::new(ident(7));
        p.exits_before_read = true;
        let k = kill_if_same(&p, 42, |_| true, W);
        assert_eq!(k, Killed::NotFound);
        assert!(!p.steps().iter().any(|s| matches!(s, Step::Kill(_))));
    }

    #[test]
    fn nothing_on_the_pid_means_nothing_is_checked_or_signalled() {
        let mut p = Recording::new(ident(7));
        p.present = false;
        assert_eq!(kill_if_same(&p, 42, |_| true, W), Killed::NotFound);
        assert_eq!(p.steps(), vec![Step::Open(42)]);
        let p = Recording::new(ident(7));
        assert_eq!(kill_if_same(&p, 0, |_| true, W), Killed::NotFound);
        assert_eq!(kill_if_same(&p, -1, |_| true, W), Killed::NotFound);
        assert!(p.steps().is_empty(), "pid 0 or negative is never opened");
    }

    #[test]
    fn a_signal_that_fails_after_the_check_is_reported() {
        let mut p = Recording::new(ident(7));
        p.kill_ok = false;
        let k = kill_if_same(&p, 42, |_| true, W);
        assert_eq!(k, Killed::SignalFailed);
        assert_eq!(
            p.steps(),
            vec![Step::Open(42), Step::Identity(1), Step::Kill(1)]
        );
    }

    #[test]
    fn the_real_port_kills_a_real_process_through_its_pidfd() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .expect("spawn sleep");
        let pid = child.id() as i32;
        let recorded = ProcessIdentity::of(pid).expect("identity");
        let mut other = recorded.clone();
        other.start_time_ticks += 1;
        assert_eq!(
            kill_if_same(&PidFds, pid, |now| now == &other, W),
            Killed::Mismatch
        );
        assert!(recorded.still_matches(), "a mismatch signals nothing");
        let k = kill_if_same(
            &PidFds,
            pid,
            |now| now == &recorded,
            Duration::from_secs(10),
        );
        assert_eq!(k, Killed::Signalled { gone: true });
        child.wait().expect("reap");
        // Gone and reaped: the same call finds nothing and signals nothing.
        // (Should the pid be reused meanwhile, the newcomer does not match.)
        let k = kill_if_same(&PidFds, pid, |now| now == &recorded, W);
        assert!(matches!(k, Killed::NotFound | Killed::Mismatch), "{k:?}");
    }
}
