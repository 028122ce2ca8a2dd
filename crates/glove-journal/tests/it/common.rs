//! Shared helpers.

use glove_journal::format::JournalKind;
use glove_journal::receipt::{ReceiptHead, ReceiptKey};
use glove_journal::JournalSpec;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard};

/// A child process (the crash test spawns them) inherits every open
/// descriptor of this test binary between fork and exec, and with them the
/// journal locks other tests hold at that moment: a journal dropped and
/// reopened at once could find its own lock still held (`journal_locked`).
/// Spawning takes this lock for writing; a test that drops a journal and
/// reopens it holds [`no_spawn`] in between.
pub(crate) static SPAWN: RwLock<()> = RwLock::new(());

/// Keeps child processes from being spawned while the guard lives.
pub(crate) fn no_spawn() -> RwLockReadGuard<'static, ()> {
    SPAWN.read().unwrap_or_else(|e| e.into_inner())
}

/// A temporary directory with mode 0700 (on the same disk as the repo).
pub(crate) fn tempdir() -> tempfile::TempDir {
    let d = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

/// A temporary directory with mode 0700 in memory (`/dev/shm`, where
/// `fsync` costs nothing) when there is one, else [`tempdir`]. Only for
/// tests about bounds and contents, not durability;
/// `GLOVE_JOURNAL_TEST_ON_DISK=1` forces the disk.
pub(crate) fn memdir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if std::env::var_os("GLOVE_JOURNAL_TEST_ON_DISK").is_some() || !shm.is_dir() {
        return tempdir();
    }
    let Ok(d) = tempfile::tempdir_in(shm) else {
        return tempdir();
    };
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o700)).expect("chmod");
    d
}

/// Writes `bytes` as a journal-looking file with mode 0600.
pub(crate) fn write_file(path: &Path, bytes: &[u8]) {
    let _ = std::fs::remove_file(path);
    std::fs::write(path, bytes).expect("write");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A small generic spec used by tests.
pub(crate) const SPEC: JournalSpec = JournalSpec {
    kind: JournalKind::GENERIC,
    max_bytes: 1 << 20,
    max_records: 1000,
    max_payload: 4096,
    record_kinds: &[1, 2, 3],
};

pub(crate) fn key() -> ReceiptKey {
    ReceiptKey::from_bytes([0x5a; 32])
}

pub(crate) fn anchor() -> ReceiptHead {
    ReceiptHead {
        seq: 100,
        chain: [0x11; 32],
    }
}

/// A canonical resource_v1 receipt body.
pub(crate) fn body(n: u64) -> Vec<u8> {
    format!(r#"{{"cpu_ms":{n},"receipt_kind":"resource_v1","session":"s{n}"}}"#).into_bytes()
}

/// A small deterministic PRNG (xorshift64*), so failures reproduce.
pub(crate) struct Rng(pub(crate) u64);

impl Rng {
    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub(crate) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Runs the test `test` (its path inside this binary) again in a child
/// process with `driver_env` set and one test thread, and asserts that it
/// succeeded: the crash tests' drivers SIGKILL their own children, which
/// must not take this process with them. The spawn holds [`SPAWN`]: a spawn
/// copies every open descriptor until exec, and in this multi-threaded
/// binary that includes the journal locks of tests running beside it.
pub(crate) fn run_driver(test: &str, driver_env: &str) {
    let exe = std::env::current_exe().expect("test binary");
    let spawning = SPAWN.write().unwrap_or_else(|e| e.into_inner());
    let mut driver = std::process::Command::new(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(driver_env, "1")
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("spawn the driver");
    drop(spawning);
    let status = driver.wait().expect("wait for the driver");
    assert!(
        status.success(),
        "{test}: the crash driver failed: {status}"
    );
}

/// Returns once two descriptors of this process name `path` (the holder's
/// and a waiter's), so the waiter has opened the file before the holder
/// acts; then gives it a moment to reach the lock.
pub(crate) fn until_opened_twice(path: &std::path::Path) {
    let canon = std::fs::canonicalize(path).expect("canonical");
    for _ in 0..2000 {
        let n = std::fs::read_dir("/proc/self/fd")
            .expect("fds")
            .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|t| *t == canon)
            .count();
        if n >= 2 {
            std::thread::sleep(std::time::Duration::from_millis(20));
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    panic!("the waiter never opened {}", path.display());
}
