//! `glove policy stage`: the command-line edge of
//! [`glove_control::stage`]: the confirmation flags, a progress bar on a
//! terminal, and the text or JSON report.

use crate::cli::{fail, StageArgs};
use crate::report::{print_json, EXIT_OK};
use glove_control::stage::{self, NoProgress, Progress, Report};
use glove_types::codes::cli::CLI_INVALID_ARGUMENT;
use glove_types::Rejection;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// A bar on stderr.
pub(crate) struct Bar(ProgressBar);

impl Progress for Bar {
    fn phase(&self, name: &'static str, total_bytes: u64) {
        self.0.set_length(total_bytes);
        self.0.set_position(0);
        self.0.set_message(name);
    }
    fn advance(&self, bytes: u64) {
        self.0.inc(bytes);
    }
}

impl Drop for Bar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

pub(crate) fn bar() -> Bar {
    let b = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if let Ok(style) =
        ProgressStyle::with_template("{msg:>9} [{bar:30}] {bytes}/{total_bytes} {eta}")
    {
        b.set_style(style.progress_chars("=> "));
    }
    Bar(b)
}

fn text(r: &Report) {
    let verb = match (r.dry_run, r.already_stored) {
        (true, _) => "would stage",
        (false, true) => "already staged (verified)",
        (false, false) => "staged",
    };
    println!("{} {} {verb}", r.runtime, r.version);
    println!("  source       {}", r.source);
    println!("  digest       {}", r.digest);
    if r.package_cache_pending {
        println!(
            "               (without copilot's package cache: it is extracted, contained, only \
             with --yes, and the digest, store and paths then change)"
        );
    }
    println!("  files        {} ({} bytes)", r.files, r.bytes);
    println!("  store        {}", r.store);
    println!(
        "  entry point  {}{}",
        r.entry_point,
        if r.entry_point_existed {
            " (already there)"
        } else {
            ""
        }
    );
    println!("  executable   {}", r.executable);
    for p in &r.read_only_paths {
        println!("  --ro {p}");
    }
    for e in &r.environment {
        println!("  --env {e}");
    }
}

/// Runs `glove policy stage`.
pub fn run(a: &StageArgs) -> i32 {
    if !a.dry_run && !a.yes {
        let e = Rejection::new(
            CLI_INVALID_ARGUMENT,
            "say --dry-run to see what would be copied, or --yes to stage",
        );
        return fail(&e, a.json, None);
    }
    let progress: Box<dyn Progress> = if !a.json && std::io::stderr().is_terminal() {
        Box::new(bar())
    } else {
        Box::new(NoProgress)
    };
    let req = stage::Request {
        runtime: a.runtime.clone(),
        source: a.source.clone(),
        directory: a.directory.clone(),
        home: std::env::var_os("HOME").map(Into::into),
        // copilot's extraction runs contained in `glove exec` of this very
        // binary.
        glove: std::env::current_exe().ok(),
    };
    let result = stage::plan(&req, progress.as_ref()).and_then(|p| {
        if a.yes {
            p.execute(progress.as_ref())
        } else {
            Ok(p.report().clone())
        }
    });
    drop(progress);
    match result {
        Ok(r) => {
            if a.json {
                match serde_json::to_value(&r) {
                    Ok(v) => print_json(&v),
                    Err(e) => {
                        eprintln!("{e}");
                        return crate::report::EXIT_REJECTED;
                    }
                }
            } else {
                text(&r);
            }
            EXIT_OK
        }
        Err(e) => fail(&e, a.json, None),
    }
}
