//! In-process launch cost: a running (single-threaded) supervisor launches
//! `/bin/true` in the default profile again and again, against a bare
//! fork+exec of `/bin/true` from the same process.
//!
//! Run as root (cgroups) or as a user: `cargo bench -p glove-sandbox --bench inprocess`
//! (`GLOVE_BENCH_RUNS` sets the count, default 300).

use glove_sandbox::profile::{exec_spec, ExecRequest, DEFAULT_LIMITS};
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
    for _ in 0..runs {
        let t = Instant::now();
        let st = std::process::Command::new("/bin/true")
            .status()
            .expect("spawn /bin/true");
        assert!(st.success());
        bare.push(t.elapsed());

        let req = ExecRequest {
            command: vec!["/bin/true".into()],
            env: vec![],
            ro_binds: vec![],
            rw_copy: None,
            limits: DEFAULT_LIMITS,
            pty: None,
            strict_limits: false,
            term: None,
        };
        let t = Instant::now();
        let spec = exec_spec(req).expect("spec");
        let running = glove_sandbox::launch(spec).expect("launch");
        let l = t.elapsed();
        let outcome = running
            .supervise(&mut Discard, Settings::default())
            .expect("supervise");
        assert_eq!(
            outcome.exit,
            glove_sandbox::outcome::ExitStatus::Exited { code: 0 }
        );
        glove.push(t.elapsed());
        launch_only.push(l);
    }
    let (b, g, l) = (median(bare), median(glove), median(launch_only));
    println!("runs {runs}");
    println!(
        "bare fork+exec /bin/true      median {:8.3} ms",
        b.as_secs_f64() * 1e3
    );
    println!(
        "glove launch (until exec'd)   median {:8.3} ms",
        l.as_secs_f64() * 1e3
    );
    println!(
        "glove launch + run + teardown median {:8.3} ms",
        g.as_secs_f64() * 1e3
    );
    println!(
        "ratio glove/bare = {:.2}",
        g.as_secs_f64() / b.as_secs_f64()
    );
}
