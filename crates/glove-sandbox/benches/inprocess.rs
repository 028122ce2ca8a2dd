//! In-process launch cost: a running (single-threaded) supervisor launches
//! `/bin/true` in the default profile again and again, against a bare
//! fork+exec of `/bin/true` from the same process.
//!
//! Two ways: *cold* (`launch`: the sandbox is built when asked for) and
//! *warm* (a sandbox was prepared ahead, off the clock, as a service keeps
//! one ready; the launch is `Prepared::release_command` with the command).
//!
//! Run as root (cgroups) or as a user: `cargo bench -p glove-sandbox --bench inprocess`
//! (`GLOVE_BENCH_RUNS` sets the count, default 300).

use glove_sandbox::profile::{exec_spec, ExecRequest};
use glove_sandbox::spec::AgentCommand;
use glove_sandbox::supervise::{Settings, Stream, StreamIo};
use std::os::fd::BorrowedFd;
use std::time::{Duration, Instant};

struct Discard;

impl StreamIo for Discard {
    fn input(&self) -> Option<BorrowedFd<'_>> {
        None
    }
    fn output(&mut self, _: Stream, _: &[u8]) {}
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let runs: usize = std::env::var("GLOVE_BENCH_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(300);
    let mut bare = Vec::with_capacity(runs);
    let mut glove = Vec::with_capacity(runs);
    let mut launch_only = Vec::with_capacity(runs);
    let mut warm = Vec::with_capacity(runs);
    let mut warm_launch = Vec::with_capacity(runs);
    let mut prepare = Vec::with_capacity(runs);
    // The profile as `glove exec` uses it: `/etc` from a snapshot.
    let req = || ExecRequest {
        etc_snapshots: glove_sandbox::etc_snapshot::default_dir(),
        // No network namespace pool: a long-lived supervisor has nothing
        // refilling it (only `glove exec`'s exit does).
        network_pool: None,
        ..ExecRequest::new(vec!["/bin/true".into()])
    };
    let command = AgentCommand {
        executable: "/bin/true".into(),
        arguments: vec![],
        environment: vec!["PATH=/usr/bin:/bin".into()],
    };
    let finish = |running: glove_sandbox::launch::Running| {
        let outcome = running
            .supervise(&mut Discard, Settings::default())
            .expect("supervise");
        assert_eq!(
            outcome.exit,
            glove_sandbox::outcome::ExitStatus::Exited { code: 0 }
        );
    };
    for _ in 0..runs {
        let t = Instant::now();
        let st = std::process::Command::new("/bin/true")
            .status()
            .expect("spawn /bin/true");
        assert!(st.success());
        bare.push(t.elapsed());

        let t = Instant::now();
        let spec = exec_spec(req()).expect("spec");
        let running = glove_sandbox::launch(spec).expect("launch");
        let l = t.elapsed();
        finish(running);
        glove.push(t.elapsed());
        launch_only.push(l);

        // Warm: built ahead (timed separately), then released with the
        // command.
        let t = Instant::now();
        let prepared = glove_sandbox::prepare(exec_spec(req()).expect("spec")).expect("prepare");
        prepare.push(t.elapsed());
        std::thread::sleep(Duration::from_millis(20));
        let t = Instant::now();
        let running = prepared.release_command(&command).expect("release");
        let l = t.elapsed();
        finish(running);
        warm.push(t.elapsed());
        warm_launch.push(l);
    }
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let (b, g, l) = (median(bare), median(glove), median(launch_only));
    let (w, p) = (median(warm), median(prepare));
    let wl = median(warm_launch.clone());
    println!("runs {runs}");
    println!(
        "bare fork+exec /bin/true              median {:8.3} ms",
        ms(b)
    );
    println!(
        "cold: launch (until exec'd)           median {:8.3} ms",
        ms(l)
    );
    println!(
        "cold: launch + run + teardown         median {:8.3} ms",
        ms(g)
    );
    println!(
        "warm: prepare ahead (off the clock)   median {:8.3} ms",
        ms(p)
    );
    let mut sorted = warm_launch.clone();
    sorted.sort();
    let q = |f: f64| ms(sorted[((sorted.len() - 1) as f64 * f) as usize]);
    println!(
        "warm: release (until exec'd)          median {:8.3} ms   (p10 {:.3}, p90 {:.3})",
        ms(wl),
        q(0.1),
        q(0.9)
    );
    println!(
        "warm: release + run + teardown        median {:8.3} ms",
        ms(w)
    );
    println!(
        "ratio to bare: cold {:.2}, warm {:.2}",
        ms(g) / ms(b),
        ms(w) / ms(b)
    );
}
