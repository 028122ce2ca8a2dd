//! The setting of the apply tests: a source tree, a retained session of
//! it, keys and a root-owned trust policy, each command run with the
//! test's own stage and apply directories.

use super::{glove_with_env, is_root, need, safe_tempdir, sandbox_ok, As};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

pub(crate) fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub(crate) fn ready() -> bool {
    sandbox_ok(As::Caller)
        && need(
            is_root(),
            "apply needs retained workspaces, which need root",
        )
        && need(
            Path::new("/usr/sbin/mkfs.ext4").exists() || Path::new("/sbin/mkfs.ext4").exists(),
            "mkfs.ext4 (e2fsprogs) is missing",
        )
}

/// A source tree, the stage, key and trust directories of one test.
pub(crate) struct Env {
    pub(crate) dir: tempfile::TempDir,
}

impl Env {
    pub(crate) fn new() -> Env {
        let dir = safe_tempdir();
        let e = Env { dir };
        std::fs::create_dir(e.src()).expect("src");
        std::fs::create_dir(e.p("trust")).expect("trust dir");
        std::fs::set_permissions(e.p("trust"), std::fs::Permissions::from_mode(0o755))
            .expect("chmod");
        e
    }
    pub(crate) fn p(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub(crate) fn src(&self) -> PathBuf {
        self.p("src")
    }
    pub(crate) fn run(&self, args: &[&str]) -> Output {
        let (stages, apply, trust) = (
            self.p("stages"),
            self.p("apply"),
            self.p("trust/policy.json"),
        );
        glove_with_env(
            As::Caller,
            args,
            None,
            &[
                ("GLOVE_STAGE_DIR", stages.as_os_str()),
                ("GLOVE_APPLY_DIR", apply.as_os_str()),
                ("GLOVE_APPLY_TRUST", trust.as_os_str()),
            ],
        )
    }
    pub(crate) fn write(&self, rel: &str, body: &str) {
        let p = self.src().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, body).expect("write");
    }
    /// A key `name` with its own id, never in the trust policy.
    pub(crate) fn key_with_id(&self, name: &str, id: &str) -> String {
        let key = self.p(name);
        let path = key.to_str().expect("utf8");
        let out = self.run(&["apply", "keygen", "--key", path, "--id", id, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        key.display().to_string()
    }

    /// A key `name` (in the trust policy when `trusted`).
    pub(crate) fn key(&self, name: &str, trusted: bool) -> String {
        let key = self.p(name);
        let out = self.run(&[
            "apply",
            "keygen",
            "--key",
            key.to_str().expect("utf8"),
            "--json",
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("keygen json");
        if trusted {
            let policy = serde_json::json!({
                "schema": "glove.apply-trust-v1",
                "keys": [v["trust_entry"].clone()],
            });
            let file = self.p("trust/policy.json");
            std::fs::write(&file, serde_json::to_vec(&policy).expect("json")).expect("write");
            std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        }
        key.display().to_string()
    }
    /// Runs `script` in a retained workspace of the source; the session id.
    pub(crate) fn session(&self, script: &str) -> String {
        let src = self.src().display().to_string();
        let out = self.run(&[
            "exec",
            "--json",
            "--disk",
            "64M",
            "--workspace",
            &src,
            "--",
            "/bin/sh",
            "-c",
            script,
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        let s = text(&out.stdout);
        let v: serde_json::Value =
            serde_json::from_str(s.lines().last().unwrap_or_default()).expect("outcome");
        v["workspace"]["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("no workspace in {v}"))
            .to_owned()
    }
    pub(crate) fn apply(&self, session: &str, key: &str, extra: &[&str]) -> Output {
        let mut args = vec!["apply", session, "--yes", "--json", "--key", key];
        args.extend_from_slice(extra);
        self.run(&args)
    }
    pub(crate) fn digests(&self, session: &str) -> (String, String) {
        let out = self.run(&["diff", session, "--json"]);
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("diff json");
        (
            v["baseline_digest"].as_str().expect("baseline").to_owned(),
            v["final_digest"].as_str().expect("final").to_owned(),
        )
    }
    pub(crate) fn sign(&self, session: &str, key: &str, grant: &str, ttl: &str) -> PathBuf {
        let (b, f) = self.digests(session);
        let out_file = self.p(&format!("{grant}.auth"));
        let out = self.run(&[
            "apply",
            "sign",
            "--key",
            key,
            "--session",
            session,
            "--target",
            "workspace",
            "--baseline",
            &b,
            "--manifest",
            &f,
            "--grant",
            grant,
            "--ttl-secs",
            ttl,
            "--out",
            out_file.to_str().expect("utf8"),
        ]);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        out_file
    }
}

pub(crate) fn json_of(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} / {}", text(&out.stdout), text(&out.stderr)))
}

/// Path, mode and content of every entry below `dir`.
pub(crate) fn snapshot(dir: &Path) -> Vec<(String, u32, String)> {
    fn walk(base: &Path, d: &Path, v: &mut Vec<(String, u32, String)>) {
        let mut names: Vec<_> = std::fs::read_dir(d).expect("read_dir").flatten().collect();
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let p = e.path();
            let rel = p.strip_prefix(base).expect("rel").display().to_string();
            let m = std::fs::symlink_metadata(&p).expect("meta");
            let mode = m.permissions().mode() & 0o7777;
            if m.is_dir() {
                v.push((rel, mode, "<dir>".into()));
                walk(base, &p, v);
            } else {
                v.push((rel, mode, text(&std::fs::read(&p).expect("read"))));
            }
        }
    }
    let mut v = Vec::new();
    walk(dir, dir, &mut v);
    v
}

pub(crate) fn leftovers(parent: &Path) -> Vec<String> {
    std::fs::read_dir(parent)
        .expect("read parent")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".glove-apply-"))
        .collect()
}

pub(crate) const EDITS: &str = "printf 'one\\n2\\n' > edit.txt && rm gone.txt && mkdir -p new/dir \
                     && echo fresh > new/dir/added.txt && chmod 755 run.sh";

pub(crate) fn seed(env: &Env) {
    env.write("edit.txt", "one\ntwo\n");
    env.write("gone.txt", "bye\n");
    env.write("run.sh", "#!/bin/sh\n");
    env.write("keep/k.txt", "k\n");
    std::fs::set_permissions(env.src(), std::fs::Permissions::from_mode(0o750)).expect("chmod");
}

pub(crate) fn expected_after() -> Vec<(String, u32, String)> {
    vec![
        ("edit.txt".into(), 0o644, "one\n2\n".into()),
        ("keep".into(), 0o755, "<dir>".into()),
        ("keep/k.txt".into(), 0o644, "k\n".into()),
        ("new".into(), 0o755, "<dir>".into()),
        ("new/dir".into(), 0o755, "<dir>".into()),
        ("new/dir/added.txt".into(), 0o644, "fresh\n".into()),
        ("run.sh".into(), 0o755, "#!/bin/sh\n".into()),
    ]
}
