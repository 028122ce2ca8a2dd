//! `gloved`: the operator's per-user control service.
//!
//! Exit status: 0 after a clean shutdown (SIGTERM or SIGINT); 1 when
//! startup refused the configuration or a path (the printed code says
//! which) or the shutdown could not remove its files; 2 for a malformed
//! command line. Once the socket is bound and the bootstrap secret written,
//! one line `gloved ready <socket path>` is printed on stdout; logs go to
//! stderr.

use clap::Parser;
use glove_bin::control::config::{GlovedArgs, LogFormat};
use glove_bin::control::service::Clock;
use glove_bin::control::{config, server};
use glove_types::Rejection;
use tokio::signal::unix::{signal, Signal, SignalKind};

fn clock() -> Clock {
    // Tests pin the time so fixed example plans stay valid; release builds
    // ignore the variable entirely.
    #[cfg(debug_assertions)]
    if let Some(t) = std::env::var("GLOVE_TEST_NOW_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        return Clock::Fixed(t);
    }
    Clock::System
}

fn init_logs(format: LogFormat) {
    let b = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .with_target(false);
    match format {
        LogFormat::Human => b.init(),
        LogFormat::Json => b.json().init(),
    }
}

fn refuse(e: &Rejection) -> i32 {
    tracing::error!(code = e.code().as_str(), "startup refused");
    eprintln!("error[{}]: {e}", e.code());
    1
}

fn main() {
    let args = GlovedArgs::parse();
    let format = args.log_format.unwrap_or_default();
    init_logs(format);
    let (settings, _) = match args.resolve(clock()) {
        Ok(s) => s,
        Err(e) => std::process::exit(refuse(&e)),
    };
    // Every live exposure, session and connection holds descriptors: the
    // soft limit (often 1024) is raised to the hard one.
    {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let lim = getrlimit(Resource::Nofile);
        if lim.current < lim.maximum {
            let raised = rustix::process::Rlimit {
                current: lim.maximum,
                maximum: lim.maximum,
            };
            if let Err(e) = setrlimit(Resource::Nofile, raised) {
                tracing::warn!(error = %e, "cannot raise the descriptor limit");
            }
        }
    }
    // In a delegated cgroup v2 subtree (the `glove daemon` unit's
    // `Delegate=`), move into a leaf and enable the controllers for the
    // sessions' cgroups, while this process still has one thread.
    match glove_sandbox::cgroup_leaf::enter_own_leaf() {
        Ok(glove_sandbox::cgroup_leaf::Delegation::Entered(dir)) => {
            tracing::info!(cgroup = ?dir, "delegated cgroup: sessions go beside the supervisor leaf")
        }
        Ok(glove_sandbox::cgroup_leaf::Delegation::Unchanged) => {}
        Err(e) => tracing::warn!(
            error = e.as_str(),
            "delegated cgroup not prepared; sessions use cgroup v1 or are not advertised"
        ),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("gloved")
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error[control_internal]: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let code = runtime.block_on(async move {
        // Install the handlers before anything is announced, so a SIGTERM
        // right after the ready line is a clean stop, not the default kill.
        let (term, int) = match (
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
        ) {
            (Ok(t), Ok(i)) => (t, i),
            _ => {
                return refuse(&Rejection::new(
                    glove_types::codes::control::CONTROL_INTERNAL,
                    "cannot install the SIGTERM and SIGINT handlers",
                ))
            }
        };
        let started = match config::start(&settings) {
            Ok(s) => s,
            Err(e) => return refuse(&e),
        };
        let runtime_dir = match rustix::io::dup(&started.runtime_dir) {
            Ok(fd) => fd,
            Err(e) => {
                return refuse(&Rejection::new(
                    glove_types::codes::control::CONTROL_DIR_IO,
                    format!("cannot duplicate the runtime directory descriptor: {e}"),
                ))
            }
        };
        let bound = match server::bind(&settings, runtime_dir) {
            Ok(b) => b,
            Err(e) => return refuse(&e),
        };
        tracing::info!(socket = ?bound.socket_path(), "listening");
        println!("gloved ready {}", bound.socket_path().display());
        match server::serve(started, bound, settings.limits, stop_signal(term, int)).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error[{}]: {e}", e.code());
                1
            }
        }
    });
    std::process::exit(code);
}

async fn stop_signal(mut term: Signal, mut int: Signal) {
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
