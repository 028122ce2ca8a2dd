//! `docs/quickstart.md` runs: every `glove run --agent` command in an `sh`
//! block under a harness's heading is extracted and run as written (by
//! `sh`, with `$MODEL` naming the scripted model endpoint, the stand-in
//! for a vendor endpoint the page describes, `~` a fresh home holding the
//! key files and `~/project`), with one addition: `--harness-path` naming
//! the pinned npm install (`GLOVE_HARNESSES`), since CI does not run
//! `glove setup`. Each must exit 0, reach the stub with the real key, and
//! leave a retained workspace whose diff holds the turn's file.

mod common;

use common::apply_env::{json_of, ready, text};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The page's `glove run --agent` commands under each `## ` heading (a
/// line ending in `\` continues on the next).
fn commands(doc: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut heading = String::new();
    let mut in_sh = false;
    let mut pending = String::new();
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            heading = h.trim().to_owned();
            continue;
        }
        let t = line.trim();
        if t.starts_with("```") {
            in_sh = !in_sh && t == "```sh";
            continue;
        }
        if !in_sh {
            continue;
        }
        match t.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head);
                pending.push(' ');
            }
            None => {
                pending.push_str(t);
                let cmd = std::mem::take(&mut pending);
                if cmd.starts_with("glove run --agent") {
                    out.push((heading.clone(), cmd));
                }
            }
        }
    }
    out
}

#[test]
fn the_extractor_joins_continued_lines_and_keeps_only_sh_blocks() {
    let doc = "## a\n```text\nglove run --agent x\n```\n```sh\nglove run --agent a \\\n  -- y\nls\n```\n## b\n```sh\nglove run --agent b\n```\n";
    assert_eq!(
        commands(doc),
        vec![
            ("a".to_owned(), "glove run --agent a  -- y".to_owned()),
            ("b".to_owned(), "glove run --agent b".to_owned()),
        ]
    );
}

#[test]
fn the_quickstart_commands_run_against_the_scripted_endpoint() {
    let doc_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/quickstart.md");
    let doc = std::fs::read_to_string(&doc_path).expect("docs/quickstart.md");
    let found = commands(&doc);
    let headings: Vec<&str> = found.iter().map(|(h, _)| h.as_str()).collect();
    let ids: Vec<&str> = glove_types::harness::all().map(|h| h.id).collect();
    assert_eq!(headings, ids, "one command per harness, in registry order");
    let Some(nm) = common::harnesses() else {
        return;
    };
    if !ready() || !common::python_ok() {
        return;
    }
    let env = common::apply_env::Env::new();
    let home = env.p("home");
    let keys = home.join(".config/glove");
    std::fs::create_dir_all(&keys).expect("keys");
    for k in ["openai", "anthropic"] {
        let f = keys.join(format!("{k}.key"));
        std::fs::write(&f, format!("sk-quickstart-{k}")).expect("key");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    std::fs::create_dir_all(home.join("project")).expect("project");
    std::fs::write(home.join("project/README.md"), "hello\n").expect("readme");
    let st = common::model_stub::start(env.dir.path(), &[]);
    let glove_dir = common::kit().glove.parent().expect("kit").to_owned();
    for (heading, cmd) in &found {
        let before = std::fs::read_to_string(&st.log)
            .unwrap_or_default()
            .lines()
            .count();
        let run = cmd.replacen(
            "glove run ",
            "glove run --harness-path \"$GLOVE_HARNESSES\" ",
            1,
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &run])
            .env_clear()
            .env("PATH", format!("{}:/usr/bin:/bin", glove_dir.display()))
            .env("HOME", &home)
            .env("MODEL", format!("http://127.0.0.1:{}", st.port))
            .env("GLOVE_HARNESSES", &nm)
            .env("XDG_STATE_HOME", env.p("state"))
            .env("GLOVE_STAGE_DIR", env.p("stages"))
            .current_dir(&home)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("sh");
        let err = text(&out.stderr);
        let what = format!(
            "{heading}: {run}\nexit {:?}\nstdout:\n{}\nstderr:\n{err}",
            out.status.code(),
            text(&out.stdout)
        );
        assert_eq!(out.status.code(), Some(0), "{what}");
        let log = std::fs::read_to_string(&st.log).unwrap_or_default();
        let new: Vec<&str> = log.lines().skip(before).collect();
        assert!(
            new.iter().any(|l| l.contains("sk-quickstart-")),
            "the stub never saw the key\n{what}"
        );
        assert!(
            !new.iter().any(|l| l.contains("glove-placeholder-")),
            "{what}"
        );
        let session = err
            .lines()
            .find_map(|l| l.strip_prefix("glove: take the changes with `glove apply "))
            .and_then(|s| s.strip_suffix('`'))
            .unwrap_or_else(|| panic!("no apply command printed\n{what}"))
            .to_owned();
        let diff = common::glove_with_env(
            common::As::Caller,
            &["diff", &session, "--json"],
            None,
            &[("GLOVE_STAGE_DIR", env.p("stages").as_os_str())],
        );
        let d = json_of(&diff);
        assert!(
            d["changes"]
                .as_array()
                .expect("changes")
                .iter()
                .any(|c| c["path"] == "turn.txt" && c["change"] == "added"),
            "{d}\n{what}"
        );
        eprintln!("quickstart: {heading} ran");
    }
}
