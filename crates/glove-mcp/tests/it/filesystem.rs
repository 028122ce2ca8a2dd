//! Against a real `@modelcontextprotocol/server-filesystem` (npm) on a
//! temporary root: the path rule and its bypasses.

use crate::common::*;
use glove_mcp::Decision;
use serde_json::json;

struct Tree {
    _root: tempfile::TempDir,
    _outside: tempfile::TempDir,
    root: String,
    outside: String,
}

fn tree() -> Tree {
    let root = tempfile::tempdir().expect("tempdir");
    let outside = tempfile::tempdir().expect("tempdir");
    let r = root.path();
    std::fs::write(r.join("a.txt"), "alpha").expect("write");
    std::fs::create_dir(r.join("d")).expect("mkdir");
    std::fs::write(r.join("d/b.txt"), "beta").expect("write");
    std::fs::write(outside.path().join("secret.txt"), "secret").expect("write");
    std::os::unix::fs::symlink(outside.path().join("secret.txt"), r.join("link")).expect("link");
    std::os::unix::fs::symlink(outside.path(), r.join("dlink")).expect("link");
    let s = |p: &std::path::Path| p.to_str().expect("utf-8").to_owned();
    Tree {
        root: s(r),
        outside: s(outside.path()),
        _root: root,
        _outside: outside,
    }
}

#[tokio::test]
async fn the_path_rule_holds_against_dots_absolute_paths_prefixes_and_links() {
    if !have_node() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let t = tree();
    let root = &t.root;
    let rule = format!(r#"{{"required":true,"path":{{"roots":["{root}"],"no_symlinks":true}}}}"#);
    let tools = format!(
        r#","tools":[{{"name":"read_text_file","arguments":{{"path":{rule}}}}},
          {{"name":"read_multiple_files","arguments":{{"paths":{{"required":true,"length":{{"max":4}},"items":{rule}}}}}}},
          {{"name":"list_directory","arguments":{{"path":{{"required":true,"path":{{"roots":["{root}"]}}}}}}}},
          {{"name":"list_allowed_directories"}}]"#
    );
    let mut h = start(&profile(&[filesystem(&nm, root, &tools)], "")).await;
    h.agent.initialize().await;
    let names = h.agent.tool_names().await;
    assert_eq!(
        names,
        [
            "list_allowed_directories",
            "list_directory",
            "read_multiple_files",
            "read_text_file"
        ]
    );
    let ok = h
        .agent
        .call("read_text_file", json!({"path": format!("{root}/a.txt")}))
        .await;
    assert_eq!(text(&ok), "alpha");
    let ok = h
        .agent
        .call("read_text_file", json!({"path": format!("{root}/d/b.txt")}))
        .await;
    assert_eq!(text(&ok), "beta");
    let outside = &t.outside;
    let refused = [
        format!("{root}/d/../a.txt"),
        format!(
            "{root}/../{}/secret.txt",
            outside.rsplit('/').next().unwrap_or("")
        ),
        format!("{root}/./a.txt"),
        format!("{root}//a.txt"),
        format!("{root}/a.txt/"),
        format!("{root}x/a.txt"),
        "/etc/passwd".to_owned(),
        format!("{outside}/secret.txt"),
        format!("{root}/link"),
        format!("{root}/dlink/secret.txt"),
        "a.txt".to_owned(),
        "~/a.txt".to_owned(),
        format!("file://{root}/a.txt"),
    ];
    for p in &refused {
        let r = h.agent.call("read_text_file", json!({"path": p})).await;
        assert_eq!(code(&r), "mcp_argument_refused", "{p}: {r}");
        // The refusal names the rule, not the host path.
        let msg = r["error"]["message"].as_str().unwrap_or("");
        assert!(
            !msg.contains(outside.as_str()) && !msg.contains("/etc"),
            "{msg}"
        );
    }
    let r = h.agent.call("read_text_file", json!({"path": 1})).await;
    assert_eq!(code(&r), "mcp_argument_refused");
    let r = h.agent.call("read_text_file", json!({})).await;
    assert_eq!(code(&r), "mcp_argument_refused");
    // Every element of a list of paths.
    let ok = h
        .agent
        .call(
            "read_multiple_files",
            json!({"paths": [format!("{root}/a.txt"), format!("{root}/d/b.txt")]}),
        )
        .await;
    assert!(
        text(&ok).contains("alpha") && text(&ok).contains("beta"),
        "{ok}"
    );
    let r = h
        .agent
        .call(
            "read_multiple_files",
            json!({"paths": [format!("{root}/a.txt"), "/etc/hostname"]}),
        )
        .await;
    assert_eq!(code(&r), "mcp_argument_refused");
    let r = h
        .agent
        .call(
            "read_multiple_files",
            json!({"paths": vec![format!("{root}/a.txt"); 5]}),
        )
        .await;
    assert_eq!(code(&r), "mcp_argument_refused");
    // list_directory's rule has no no_symlinks: the root lists, links included.
    let l = h.agent.call("list_directory", json!({"path": root})).await;
    assert!(
        text(&l).contains("a.txt") && text(&l).contains("link"),
        "{l}"
    );
    // The server kept its command-line root: the mediator declared no roots.
    let a = h.agent.call("list_allowed_directories", json!({})).await;
    assert!(text(&a).contains(root.as_str()), "{a}");
    assert_eq!(
        text(&a).matches('/').count(),
        root.matches('/').count(),
        "{a}"
    );
    // A server error about a path under the root keeps it; nothing else leaks.
    let m = h
        .agent
        .call(
            "read_text_file",
            json!({"path": format!("{root}/missing.txt")}),
        )
        .await;
    let shown = serde_json::to_string(&m).expect("json");
    assert!(!shown.contains(outside.as_str()), "{shown}");
    let (_, events) = h.finish().await;
    let denied = of(&events, Decision::Denied, "tools/call");
    assert_eq!(denied.len(), refused.len() + 4);
    assert!(denied
        .iter()
        .all(|e| ecode(e) == "mcp_argument_refused" && e.server.as_deref() == Some("files")));
    assert!(of(&events, Decision::Allowed, "tools/call").len() >= 5);
}

/// Review finding: with the server's own directory wider than the rule's
/// root, a link spelled in NFD (the host entry is NFC) passed the
/// mediator's walk, and server-filesystem matched it to the NFC entry
/// and followed it out of the rule's root.
#[tokio::test]
async fn a_link_spelled_in_nfd_does_not_pass_no_symlinks() {
    if !have_node() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let top = tempfile::tempdir().expect("tempdir");
    let t = top.path();
    std::fs::create_dir(t.join("inner")).expect("mkdir");
    std::fs::create_dir(t.join("outside")).expect("mkdir");
    std::fs::write(t.join("outside/secret.txt"), "secret").expect("write");
    std::fs::write(t.join("inner/a.txt"), "alpha").expect("write");
    std::os::unix::fs::symlink(t.join("outside"), t.join("inner/\u{e9}")).expect("link");
    let top_s = t.to_str().expect("utf-8");
    let inner = format!("{top_s}/inner");
    let rule = format!(r#"{{"required":true,"path":{{"roots":["{inner}"],"no_symlinks":true}}}}"#);
    let tools = format!(r#","tools":[{{"name":"read_text_file","arguments":{{"path":{rule}}}}}]"#);
    // The server's own root is the wider `top`.
    let mut h = start(&profile(&[filesystem(&nm, top_s, &tools)], "")).await;
    h.agent.initialize().await;
    let ok = h
        .agent
        .call("read_text_file", json!({"path": format!("{inner}/a.txt")}))
        .await;
    assert_eq!(text(&ok), "alpha");
    for p in [
        format!("{inner}/\u{e9}/secret.txt"),
        format!("{inner}/e\u{301}/secret.txt"),
    ] {
        let r = h.agent.call("read_text_file", json!({"path": p})).await;
        assert!(
            !serde_json::to_string(&r)
                .expect("json")
                .contains("secret\""),
            "{r}"
        );
        assert_eq!(code(&r), "mcp_argument_refused", "{r}");
    }
    let (_, events) = h.finish().await;
    assert_eq!(of(&events, Decision::Denied, "tools/call").len(), 2);
}
