//! Against a real `@modelcontextprotocol/server-everything` (npm).

use crate::common::*;
use glove_mcp::Decision;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

const TOOLS: &str = r#","tools":[
  {"name":"echo","arguments":{"message":{"pattern":"[a-z ]*","length":{"max":20},"prefix":"he"}}},
  {"name":"get-sum","arguments":{"a":{"range":{"min":0,"max":10}},"b":{"one_of":[1,2,3]}}},
  {"name":"get-annotated-message","arguments":{"messageType":{"equals":"success"}}},
  {"name":"get-resource-links","arguments":{"count":{"required":true}},"schema":{"properties":{"count":{"maximum":3}}}},
  {"name":"trigger-long-running-operation"},
  {"name":"trigger-sampling-request"}
]"#;

async fn everything_harness(extra: &str, limits: &str) -> Option<Harness> {
    if !have_node() {
        return None;
    }
    let nm = servers()?;
    Some(start(&profile(&[everything(&nm, extra)], limits)).await)
}

/// Waits until the mediator's view shows `name` (server-everything lists
/// some tools only after its handshake, announced by list_changed).
async fn until_shown(h: &Harness, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !h.mediator.shown_tools().iter().any(|t| t == name) {
        assert!(Instant::now() < deadline, "{name} never shown");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// Also on a multi-thread runtime, as an embedder may run it (the
// audit's sync then runs in `block_in_place`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_initialize_filtered_list_and_an_allowed_echo_audited_before_release() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    // Before initialize (and without a per-request revision): refused.
    let early = h.agent.request("tools/list", Value::Null).await;
    assert_eq!(code(&early), "mcp_protocol_refused");
    let init = h.agent.initialize().await;
    assert_eq!(init["result"]["protocolVersion"], "2025-11-25");
    assert_eq!(init["result"]["serverInfo"]["name"], "glove-mcp");
    assert!(init["result"]["capabilities"]["tools"].is_object());
    let names = h.agent.tool_names().await;
    for t in [
        "echo",
        "get-sum",
        "get-annotated-message",
        "get-resource-links",
    ] {
        assert!(names.contains(&t.to_owned()), "{t} shown: {names:?}");
    }
    for t in ["get-env", "get-tiny-image", "toggle-simulated-logging"] {
        assert!(!names.contains(&t.to_owned()), "{t} not allowed, not shown");
    }
    // Only the pinned members are shown (no `execution`, no `_meta`).
    let list = h.agent.request("tools/list", Value::Null).await;
    let echo = list["result"]["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .find(|t| t["name"] == "echo")
        .expect("echo")
        .clone();
    assert!(echo.get("execution").is_none());
    assert_eq!(echo["inputSchema"]["required"], json!(["message"]));

    let r = h
        .agent
        .call("echo", json!({"message": "hello world"}))
        .await;
    assert_eq!(text(&r), "Echo: hello world");
    // Audit before release: the event is durable once the answer is seen.
    let on_disk = h.events_on_disk();
    let last = on_disk.last().expect("an event");
    assert_eq!(last.decision, Decision::Allowed);
    assert_eq!(last.method.as_deref(), Some("tools/call"));
    assert_eq!(last.server.as_deref(), Some("everything"));
    assert_eq!(last.tool.as_deref(), Some("echo"));
    assert_eq!(last.result_sha256, Some(result_digest(&r)));
    assert_eq!(
        last.arguments_sha256,
        Some(glove_mcp::json::digest(
            glove_mcp::audit::ARGUMENTS_DOMAIN,
            &json!({"message": "hello world"})
        ))
    );
    let ping = h.agent.request("ping", Value::Null).await;
    assert_eq!(ping["result"], json!({}));

    let (summary, events) = h.finish().await;
    assert!(!summary.audit_failed);
    // First sight of each allowed tool is pinned and audited.
    let pinned: Vec<_> = events
        .iter()
        .filter(|e| e.decision == Decision::Pinned)
        .filter_map(|e| e.tool.as_deref())
        .collect();
    assert!(
        pinned.contains(&"echo") && pinned.contains(&"get-sum"),
        "{pinned:?}"
    );
    let denied = of(&events, Decision::Denied, "tools/list");
    assert_eq!(denied.len(), 1);
    assert_eq!(ecode(denied[0]), "mcp_protocol_refused");
    assert_eq!(of(&events, Decision::Allowed, "initialize").len(), 1);
    assert_eq!(of(&events, Decision::Allowed, "tools/call").len(), 1);
    assert_eq!(of(&events, Decision::Allowed, "ping").len(), 1);
    assert_eq!(
        summary.allowed,
        events
            .iter()
            .filter(|e| e.decision == Decision::Allowed)
            .count() as u64
    );
}

#[tokio::test]
async fn stateless_revision_discover_and_per_request_meta() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    let meta = json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}}});
    let d = h.agent.request("server/discover", meta.clone()).await;
    assert_eq!(d["result"]["supportedVersions"], json!(["2026-07-28"]));
    assert_eq!(d["result"]["resultType"], "complete");
    // No initialize: each request names its revision.
    let l = h.agent.request("tools/list", meta.clone()).await;
    assert_eq!(l["result"]["resultType"], "complete");
    assert!(l["result"]["tools"]
        .as_array()
        .is_some_and(|t| !t.is_empty()));
    let mut call = meta.clone();
    call["name"] = json!("echo");
    call["arguments"] = json!({"message": "hey"});
    let r = h.agent.request("tools/call", call).await;
    assert_eq!(text(&r), "Echo: hey");
    assert_eq!(r["result"]["resultType"], "complete");
    // A revision the mediator does not speak.
    let other = h
        .agent
        .request(
            "tools/list",
            json!({"_meta":{"io.modelcontextprotocol/protocolVersion":"2099-01-01"}}),
        )
        .await;
    assert_eq!(other["error"]["code"], -32022);
    assert_eq!(code(&other), "mcp_protocol_refused");
    assert_eq!(other["error"]["data"]["supported"], json!(["2026-07-28"]));
    // initialize is not part of 2026-07-28.
    let init = h
        .agent
        .request(
            "initialize",
            json!({"protocolVersion":"2026-07-28","capabilities":{},"clientInfo":{"name":"t","version":"0"},
                   "_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}),
        )
        .await;
    assert_eq!(code(&init), "mcp_protocol_refused");
    let (_, events) = h.finish().await;
    assert_eq!(of(&events, Decision::Allowed, "server/discover").len(), 1);
    assert_eq!(of(&events, Decision::Allowed, "tools/call").len(), 1);
    assert_eq!(of(&events, Decision::Denied, "tools/list").len(), 1);
}

#[tokio::test]
async fn every_argument_rule_and_the_schemas_refuse_before_forwarding() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    h.agent.initialize().await;
    let cases: &[(&str, Value, &str)] = &[
        (
            "echo",
            json!({"message": "hello World"}),
            "mcp_argument_refused",
        ), // pattern
        (
            "echo",
            json!({"message": "hello hello hello hello"}),
            "mcp_argument_refused",
        ), // length
        ("echo", json!({"message": "xyz"}), "mcp_argument_refused"), // prefix
        ("echo", json!({"message": 5}), "mcp_argument_refused"),     // a string rule on a number
        ("get-sum", json!({"a": 11, "b": 1}), "mcp_argument_refused"), // range
        (
            "get-sum",
            json!({"a": -0.5, "b": 1}),
            "mcp_argument_refused",
        ), // range, a fraction
        ("get-sum", json!({"a": 1, "b": 4}), "mcp_argument_refused"), // one_of
        (
            "get-annotated-message",
            json!({"messageType": "error"}),
            "mcp_argument_refused",
        ), // equals
        ("get-resource-links", json!({}), "mcp_argument_refused"),   // required
        (
            "get-resource-links",
            json!({"count": 5}),
            "mcp_schema_refused",
        ), // the profile's schema
        ("get-sum", json!({"a": 1}), "mcp_schema_refused"),          // the tool's required
        (
            "get-annotated-message",
            json!({"messageType": "success", "includeImage": "yes"}),
            "mcp_schema_refused",
        ), // the tool's type
        (
            "echo",
            json!({"message": "hello", "extra": 1}),
            "mcp_schema_refused",
        ), // undeclared argument
    ];
    for (tool, args, want) in cases {
        let r = h.agent.call(tool, args.clone()).await;
        assert_eq!(code(&r), *want, "{tool} {args}: {r}");
        assert_eq!(r["error"]["code"], -32602);
        assert!(r.get("result").is_none());
    }
    // The same tools with good arguments go through.
    let ok = h.agent.call("get-sum", json!({"a": 2.5, "b": 3})).await;
    assert!(text(&ok).contains("5.5"), "{ok}");
    let ok = h
        .agent
        .call("get-resource-links", json!({"count": 2}))
        .await;
    assert!(ok.get("result").is_some(), "{ok}");
    // `arguments` that is not an object.
    let bad = h
        .agent
        .request("tools/call", json!({"name": "echo", "arguments": [1]}))
        .await;
    assert_eq!(code(&bad), "mcp_params_invalid");
    let (summary, events) = h.finish().await;
    let refused = of(&events, Decision::Denied, "tools/call");
    assert_eq!(refused.len(), cases.len() + 1);
    for (e, (tool, _, want)) in refused.iter().zip(cases.iter()) {
        assert_eq!(e.tool.as_deref(), Some(*tool));
        assert_eq!(ecode(e), *want);
        assert!(e.arguments_sha256.is_some() && e.result_sha256.is_none());
    }
    assert_eq!(of(&events, Decision::Allowed, "tools/call").len(), 2);
    assert!(summary.denied >= cases.len() as u64);
}

#[tokio::test]
async fn unknown_and_unlisted_tools_are_refused_by_glove_not_the_server() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    h.agent.initialize().await;
    // server-everything would answer an isError *result*; Glove refuses.
    let r = h.agent.call("no-such-tool", json!({})).await;
    assert_eq!(code(&r), "mcp_tool_unknown");
    let r = h.agent.call("get-env", json!({})).await;
    assert_eq!(code(&r), "mcp_tool_denied");
    let r = h.agent.call("everything__get-env", json!({})).await;
    assert_eq!(code(&r), "mcp_tool_denied");
    let r = h
        .agent
        .call("nobody__echo", json!({"message":"hello"}))
        .await;
    assert_eq!(code(&r), "mcp_tool_unknown");
    let r = h
        .agent
        .request("tools/call", json!({"arguments": {}}))
        .await;
    assert_eq!(code(&r), "mcp_params_invalid");
    let (_, events) = h.finish().await;
    let d = of(&events, Decision::Denied, "tools/call");
    let codes: Vec<_> = d.iter().map(|e| ecode(e)).collect();
    assert_eq!(
        codes,
        [
            "mcp_tool_unknown",
            "mcp_tool_denied",
            "mcp_tool_denied",
            "mcp_tool_unknown",
            "mcp_params_invalid"
        ]
    );
    assert_eq!(d[0].tool.as_deref(), Some("no-such-tool"));
    assert_eq!(d[1].tool.as_deref(), Some("get-env"));
    assert_eq!(d[1].server.as_deref(), Some("everything"));
}

#[tokio::test]
async fn malformed_oversized_batched_and_duplicate_key_frames() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    h.agent.initialize().await;
    // No usable id: each audited and answered with `id: null` (the
    // response at the end is not answered).
    h.agent.send_raw(b"{not json").await;
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":70,"method":"tools/call","params":{"name":"echo","name":"get-env","arguments":{}}}"#)
        .await;
    h.agent
        .send_raw(br#"[{"jsonrpc":"2.0","id":71,"method":"ping"}]"#)
        .await;
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":7.5,"method":"ping"}"#)
        .await;
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#)
        .await;
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#)
        .await;
    let mut big = br#"{"jsonrpc":"2.0","id":72,"method":"tools/call","params":{"name":"echo","arguments":{"message":""#.to_vec();
    big.extend(std::iter::repeat_n(b'a', 5 << 20));
    big.extend_from_slice(br#""}}}"#);
    h.agent.send_raw(&big).await;
    // One invalid UTF-8 byte drops that frame only (the Python SDK client
    // drops its whole session).
    h.agent
        .send_raw(b"{\"jsonrpc\":\"2.0\",\"id\":74,\"method\":\"ping\",\"x\":\"\xff\"}")
        .await;
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":73,"result":{}}"#)
        .await;
    // Answered (a usable id): wrong jsonrpc, positional params, a stray member.
    h.agent
        .send_raw(br#"{"jsonrpc":"1.0","id":80,"method":"ping"}"#)
        .await;
    let a = h.agent.answer(&json!(80)).await;
    assert_eq!(code(&a), "mcp_frame_invalid");
    assert_eq!(a["error"]["code"], -32600);
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":"s81","method":"tools/call","params":["echo"]}"#)
        .await;
    assert_eq!(
        code(&h.agent.answer(&json!("s81")).await),
        "mcp_frame_invalid"
    );
    // The connection still works.
    let p = h.agent.request("ping", Value::Null).await;
    assert_eq!(p["result"], json!({}));
    let nulls: Vec<i64> = h
        .agent
        .other
        .iter()
        .map(|f| {
            assert_eq!(f["id"], Value::Null, "{f}");
            f["error"]["code"].as_i64().expect("a code")
        })
        .collect();
    assert_eq!(
        nulls,
        [-32700, -32700, -32600, -32600, -32600, -32600, -32600, -32700]
    );
    let (summary, events) = h.finish().await;
    let dropped: Vec<_> = events
        .iter()
        .filter(|e| e.decision == Decision::Dropped)
        .map(|e| ecode(e))
        .collect();
    assert_eq!(
        dropped,
        [
            "mcp_frame_invalid",
            "mcp_frame_invalid",
            "mcp_batch_refused",
            "mcp_frame_invalid",
            "mcp_frame_invalid",
            "mcp_frame_invalid",
            "mcp_frame_too_large",
            "mcp_frame_invalid",
            "mcp_frame_invalid"
        ]
    );
    assert_eq!(summary.dropped, 9);
    // No tools/call reached a decision other than refusal.
    assert!(of(&events, Decision::Allowed, "tools/call").is_empty());
}

#[tokio::test]
async fn a_sampling_request_from_the_server_is_denied_audited_and_never_forwarded() {
    let extra = format!(r#","declare_capabilities":["sampling"]{TOOLS}"#);
    let Some(mut h) = everything_harness(&extra, "").await else {
        return;
    };
    until_shown(&h, "trigger-sampling-request").await;
    h.agent.initialize().await;
    let r = h
        .agent
        .call(
            "trigger-sampling-request",
            json!({"prompt": "hi", "maxTokens": 5}),
        )
        .await;
    // The server's tool fails on the denial (as an error or isError).
    let failed = r.get("error").is_some() || r["result"]["isError"] == json!(true);
    assert!(failed, "{r}");
    let shown = serde_json::to_string(&r).expect("json");
    assert!(
        shown.contains("mcp_request_denied") || shown.contains("denied"),
        "{shown}"
    );
    // Nothing but answers reached the agent: no request was forwarded.
    assert!(
        h.agent.other.iter().all(|f| f.get("id").is_none()),
        "{:?}",
        h.agent.other
    );
    let (_, events) = h.finish().await;
    let asked = of(&events, Decision::Denied, "sampling/createMessage");
    assert_eq!(asked.len(), 1, "{events:?}");
    assert_eq!(ecode(asked[0]), "mcp_request_denied");
    assert_eq!(asked[0].server.as_deref(), Some("everything"));
}

#[tokio::test]
async fn an_upstream_killed_mid_call_fails_that_call_and_every_later_one() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    h.agent.initialize().await;
    let pid = h.mediator.upstream_pid("everything").expect("pid");
    h.agent
        .send_raw(br#"{"jsonrpc":"2.0","id":"long","method":"tools/call","params":{"name":"trigger-long-running-operation","arguments":{"duration":30,"steps":3}}}"#)
        .await;
    // Give the call time to reach the server (if it has not, the call
    // fails the same way), then kill the server's process group.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).expect("pid")).expect("pid");
    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).expect("kill");
    let a = h.agent.answer(&json!("long")).await;
    assert_eq!(code(&a), "mcp_upstream_failed");
    let b = h.agent.call("echo", json!({"message": "hello"})).await;
    assert_eq!(code(&b), "mcp_upstream_failed");
    let (summary, events) = h.finish().await;
    let failed = of(&events, Decision::UpstreamError, "tools/call");
    assert_eq!(failed.len(), 2);
    assert!(failed.iter().all(|e| ecode(e) == "mcp_upstream_failed"));
    assert_eq!(
        failed[0].tool.as_deref(),
        Some("trigger-long-running-operation")
    );
    assert_eq!(summary.upstream_errors, 2);
}

#[tokio::test]
async fn tasks_and_unknown_methods_are_refused() {
    let Some(mut h) = everything_harness(TOOLS, "").await else {
        return;
    };
    h.agent.initialize().await;
    let r = h
        .agent
        .request(
            "tools/call",
            json!({"name":"echo","arguments":{"message":"hello"},"task":{"ttl":1000}}),
        )
        .await;
    assert_eq!(code(&r), "mcp_task_refused");
    let r = h.agent.request("tasks/list", json!({})).await;
    assert_eq!(code(&r), "mcp_task_refused");
    let r = h.agent.request("tasks/result", json!({"taskId":"x"})).await;
    assert_eq!(code(&r), "mcp_task_refused");
    let r = h
        .agent
        .request("logging/setLevel", json!({"level":"debug"}))
        .await;
    assert_eq!(code(&r), "mcp_method_unknown");
    assert_eq!(r["error"]["code"], -32601);
    let r = h
        .agent
        .request(
            "resources/read",
            json!({"uri":"demo://resource/static/document/architecture.md"}),
        )
        .await;
    assert_eq!(code(&r), "mcp_resource_denied");
    let r = h
        .agent
        .request("prompts/get", json!({"name":"simple-prompt"}))
        .await;
    assert_eq!(code(&r), "mcp_resource_denied");
    let (_, events) = h.finish().await;
    assert_eq!(of(&events, Decision::Denied, "tasks/list").len(), 1);
    assert_eq!(
        ecode(of(&events, Decision::Denied, "logging/setLevel")[0]),
        "mcp_method_unknown"
    );
}

#[tokio::test]
async fn listed_resources_and_prompts_only() {
    let extra = r#","tools":[{"name":"echo"}],"resources":["demo://resource/static/document/architecture.md"],"prompts":["simple-prompt"]"#;
    let Some(mut h) = everything_harness(extra, "").await else {
        return;
    };
    let init = h.agent.initialize().await;
    assert!(init["result"]["capabilities"]["resources"].is_object());
    let l = h.agent.request("resources/list", json!({})).await;
    let uris: Vec<_> = l["result"]["resources"]
        .as_array()
        .expect("resources")
        .iter()
        .map(|r| r["uri"].as_str().unwrap_or("").to_owned())
        .collect();
    assert!(
        uris.iter()
            .all(|u| u == "demo://resource/static/document/architecture.md"),
        "{uris:?}"
    );
    let r = h
        .agent
        .request(
            "resources/read",
            json!({"uri":"demo://resource/static/document/architecture.md"}),
        )
        .await;
    assert!(r.get("result").is_some(), "{r}");
    let r = h
        .agent
        .request(
            "resources/read",
            json!({"uri":"demo://resource/static/document/other.md"}),
        )
        .await;
    assert_eq!(code(&r), "mcp_resource_denied");
    let p = h.agent.request("prompts/list", json!({})).await;
    let names: Vec<_> = p["result"]["prompts"]
        .as_array()
        .expect("prompts")
        .iter()
        .map(|p| p["name"].clone())
        .collect();
    assert_eq!(names, [json!("simple-prompt")]);
    let g = h
        .agent
        .request("prompts/get", json!({"name":"simple-prompt"}))
        .await;
    assert!(g.get("result").is_some(), "{g}");
    let g = h
        .agent
        .request("prompts/get", json!({"name":"complex-prompt"}))
        .await;
    assert_eq!(code(&g), "mcp_resource_denied");
    let (_, events) = h.finish().await;
    assert_eq!(of(&events, Decision::Allowed, "resources/read").len(), 1);
    assert_eq!(of(&events, Decision::Denied, "prompts/get").len(), 1);
}

#[tokio::test]
async fn the_upstream_environment_is_exactly_the_profiles() {
    if !have_node() {
        return;
    }
    let Some(nm) = servers() else {
        return;
    };
    let entry = everything(&nm, r#","tools":[{"name":"get-env"}]"#).replace(
        r#""PATH=/usr/bin:/bin""#,
        r#""PATH=/usr/bin:/bin","GLOVE_TEST_MARK=1""#,
    );
    let mut h = start(&profile(&[entry], "")).await;
    h.agent.initialize().await;
    let r = h.agent.call("get-env", json!({})).await;
    let env: serde_json::Map<String, Value> = serde_json::from_str(text(&r)).expect("json env");
    let keys: Vec<_> = env.keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        ["GLOVE_TEST_MARK", "PATH"],
        "nothing inherited: {keys:?}"
    );
    h.finish().await;
}
