//! The hardening battery: the findings of the sandbox review, each tried
//! from inside (or against `glove exec` itself) as an attacker would. Runs
//! as the caller and, when the caller is root, again as an unprivileged
//! user.

mod common;

use common::{glove, kit, outcome, python_ok, sandbox_ok, As};

fn probe(who: As, extra: &[&str], args: &[&str]) -> (serde_json::Value, String, String) {
    let k = kit();
    let bind = format!("{}:/probe/escape.py", k.probe.display());
    let mut a: Vec<&str> = vec!["exec", "--json", "--ro-bind", &bind];
    a.extend_from_slice(extra);
    a.extend_from_slice(&["--", "/usr/bin/python3", "/probe/escape.py"]);
    a.extend_from_slice(args);
    let out = glove(who, &a, None);
    let (v, text) = outcome(&out);
    (v, text, String::from_utf8_lossy(&out.stderr).into_owned())
}

fn contained(who: As, extra: &[&str], args: &[&str]) {
    let (v, text, err) = probe(who, extra, args);
    assert!(
        text.contains(&format!("CONTAINED {}", args[0])),
        "{who:?} {}: {text} / {err}",
        args[0]
    );
    assert_eq!(v["exit"]["code"], 0, "{who:?} {}: {v}", args[0]);
}

/// Finding 2: inotify instances, queued signals, native AIO and terminals
/// are bounded per sandbox; finding 8: no further seccomp filter.
fn budgets(who: As) {
    contained(who, &["--pty"], &["budgets", "32", "1024", "64"]);
}

/// Finding 6: the caller's command line is not visible inside, the init
/// is hidden, and procfs shows only processes.
fn cmdline(who: As) {
    let secret = "SECRET=cmdline-secret-4711";
    let reversed: String = secret.chars().rev().collect();
    contained(who, &["--env", secret], &["cmdline", &reversed]);
}

/// Finding 7: a read-only bind below a writable directory is refused.
fn shadowed_binds(who: As) {
    for target in [
        "/tmp/x",
        "/workspace",
        "/workspace/sub",
        "/home/agent/.config",
    ] {
        let bind = format!("/usr/share:{target}");
        let out = glove(
            who,
            &["exec", "--json", "--ro-bind", &bind, "--", "/bin/true"],
            None,
        );
        assert_eq!(out.status.code(), Some(125), "{target}: {out:?}");
        let (v, _) = outcome(&out);
        assert_eq!(v["code"], "sandbox_bind_shadowed", "{target}: {v}");
    }
}

fn battery(who: As) {
    if !sandbox_ok(who) || !python_ok() {
        return;
    }
    budgets(who);
    cmdline(who);
    shadowed_binds(who);
}

#[test]
fn hardening_battery_as_caller() {
    battery(As::Caller);
}

#[test]
fn hardening_battery_unprivileged() {
    battery(As::Nobody);
}
