//! Tests for the MCP profile.

use super::*;

const GOOD: &str = r#"{"schema_version":1,"servers":[{"server_id":"files",
      "command":{"path":"/usr/bin/node","arguments":["x.js","/srv"],"environment":["PATH=/usr/bin"],"working_directory":"/"},
      "declare_capabilities":["sampling"],
      "tools":[{"name":"read_text_file","arguments":{"path":{"required":true,"path":{"roots":["/srv"],"no_symlinks":true}}}},
               {"name":"echo","arguments":{"message":{"pattern":"[a-z ]*","length":{"max":10}}},"schema":{"type":"object"}}],
      "resources":["file:///srv/a"],"pins":{"tools":{"echo":"0000000000000000000000000000000000000000000000000000000000000000"}}}],
      "limits":{"request_timeout_ms":500}}"#;

fn code_at(s: &str) -> String {
    match Profile::decode(s.as_bytes()) {
        Ok(_) => panic!("accepted"),
        Err(r) => {
            assert_eq!(r.code().as_str(), "mcp_profile_invalid");
            r.location().to_owned()
        }
    }
}

#[test]
fn decodes_a_good_profile() {
    let p = Profile::decode(GOOD.as_bytes()).expect("valid");
    let s = &p.servers()[0];
    assert_eq!(s.id(), "files");
    assert!(s.declares_sampling() && !s.declares_elicitation());
    assert_eq!(s.tools().len(), 2);
    assert_eq!(s.path_roots(), vec!["/srv".to_owned()]);
    assert_eq!(p.limits().request_timeout, Duration::from_millis(500));
    assert!(!s.tools()["echo"].lenient_input_schema());
    let lenient = GOOD.replacen(
        r#"{"name":"echo","#,
        r#"{"name":"echo","lenient_input_schema":true,"#,
        1,
    );
    let p = Profile::decode(lenient.as_bytes()).expect("valid");
    assert!(p.servers()[0].tools()["echo"].lenient_input_schema());
    assert!(!p.servers()[0].tools()["echo"].allow_hidden_characters());
    assert!(!p.servers()[0].tools()["echo"].raw_results());
    let open = GOOD.replacen(
        r#"{"name":"echo","#,
        r#"{"name":"echo","allow_hidden_characters":true,"raw_results":true,"#,
        1,
    );
    let p = Profile::decode(open.as_bytes()).expect("valid");
    assert!(p.servers()[0].tools()["echo"].allow_hidden_characters());
    assert!(p.servers()[0].tools()["echo"].raw_results());
}

#[test]
fn refusals_are_located() {
    let sub = |a: &str, b: &str| code_at(&GOOD.replacen(a, b, 1));
    assert_eq!(sub(r#""files""#, r#""a__b""#), "servers[0].server_id");
    assert_eq!(sub(r#""files""#, r#""a_""#), "servers[0].server_id");
    assert_eq!(sub("/usr/bin/node", "node"), "servers[0].command.path");
    assert_eq!(
        sub("PATH=/usr/bin", "1X=y"),
        "servers[0].command.environment[0]"
    );
    assert_eq!(
        sub(r#""sampling""#, r#""roots""#),
        "servers[0].declare_capabilities"
    );
    assert_eq!(
        sub("[a-z ]*", "("),
        "servers[0].tools[1].arguments.message.pattern"
    );
    assert_eq!(
        sub(r#"{"type":"object"}"#, r#"{"format":"uri"}"#),
        "servers[0].tools[1].schema"
    );
    assert_eq!(sub("500", "0"), "limits.request_timeout_ms");
    assert_eq!(
        sub(r#""roots":["/srv"]"#, r#""roots":["/srv/../etc"]"#),
        "servers[0].tools[0].arguments.path.path.roots[0]"
    );
    // Duplicate keys are refused by the strict decoder.
    sub(
        r#""schema_version":1"#,
        r#""schema_version":1,"schema_version":1"#,
    );
    sub(r#""no_symlinks":true"#, r#""no_symlinks":true,"x":1"#);
}
