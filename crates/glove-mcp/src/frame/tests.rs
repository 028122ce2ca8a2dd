//! Tests for MCP framing.

use super::*;

fn code(b: &[u8]) -> (String, Option<Id>) {
    match decode(b) {
        Ok(m) => panic!("accepted {m:?}"),
        Err(r) => (r.code().as_str().to_owned(), r.reply_to().cloned()),
    }
}

#[test]
fn requests_notifications_and_responses() {
    assert_eq!(
        decode(br#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
        Ok(Message::Request {
            id: Id::Int(1),
            method: "ping".into(),
            params: None
        })
    );
    assert!(matches!(
        decode(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        Ok(Message::Notification { .. })
    ));
    assert!(matches!(
        decode(br#"{"jsonrpc":"2.0","id":"a","result":{}}"#),
        Ok(Message::Response { .. })
    ));
    assert!(matches!(
        decode(br#"{"jsonrpc":"2.0","id":"a","error":{"code":-32601,"message":"no"}}"#),
        Ok(Message::Error { .. })
    ));
}

#[test]
fn refusals_and_whom_to_answer() {
    let one = Some(Id::Int(1));
    assert_eq!(code(b"[]"), ("mcp_batch_refused".into(), None));
    assert_eq!(code(b"{"), ("mcp_frame_invalid".into(), None));
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#),
        ("mcp_frame_invalid".into(), None)
    );
    assert_eq!(
        code(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
        ("mcp_frame_invalid".into(), one.clone())
    );
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"x","params":[1]}"#),
        ("mcp_frame_invalid".into(), one.clone())
    );
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1,"method":"x","extra":1}"#),
        ("mcp_frame_invalid".into(), one)
    );
    for id in ["null", "1.5", "1e3", "true", "9007199254740992", "{}"] {
        let f = format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#);
        assert_eq!(
            code(f.as_bytes()),
            ("mcp_frame_invalid".into(), None),
            "{id}"
        );
    }
    assert_eq!(
        code(br#"{"jsonrpc":"2.0","id":1}"#),
        ("mcp_frame_invalid".into(), None)
    );
    let big = vec![b' '; MAX_FRAME_BYTES + 1];
    assert_eq!(code(&big), ("mcp_frame_too_large".into(), None));
}

#[test]
fn refusals_without_an_id_are_answered_null_unless_responses() {
    let r = |b: &[u8]| decode(b).err().map(|r| (r.answers_null(), r.rpc_code()));
    assert_eq!(r(b"{"), Some((true, PARSE_ERROR)));
    assert_eq!(r(b"{\"a\":1,\"a\":2}"), Some((true, PARSE_ERROR)));
    assert_eq!(r(b"\"\xff\""), Some((true, PARSE_ERROR)));
    assert_eq!(r(b"[]"), Some((true, INVALID_REQUEST)));
    assert_eq!(r(b"1"), Some((true, INVALID_REQUEST)));
    assert_eq!(
        r(br#"{"jsonrpc":"2.0","id":null,"method":"ping"}"#),
        Some((true, INVALID_REQUEST))
    );
    assert_eq!(
        r(br#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping"}"#),
        Some((true, INVALID_REQUEST))
    );
    assert_eq!(
        r(br#"{"jsonrpc":"2.0","method":"x","params":1}"#),
        Some((true, INVALID_REQUEST))
    );
    // A usable id: answered under it, not null.
    assert_eq!(
        r(br#"{"jsonrpc":"1.0","id":1,"method":"ping"}"#),
        Some((false, INVALID_REQUEST))
    );
    // Responses are never answered.
    assert_eq!(
        r(br#"{"jsonrpc":"2.0","result":{}}"#).map(|x| x.0),
        Some(false)
    );
    assert_eq!(
        r(br#"{"jsonrpc":"2.0","id":1.5,"error":{"code":1,"message":"m"}}"#).map(|x| x.0),
        Some(false)
    );
}

#[tokio::test]
async fn line_reader_bounds_lines() {
    let data: &[u8] = b"abc\r\n\nxxxxxxxxxx\nde\nlast";
    let mut r = LineReader::new(tokio::io::BufReader::with_capacity(4, data), 5);
    assert_eq!(r.next().await.ok(), Some(Line::Frame(b"abc".to_vec())));
    assert_eq!(r.next().await.ok(), Some(Line::TooLong(10)));
    assert_eq!(r.next().await.ok(), Some(Line::Frame(b"de".to_vec())));
    assert_eq!(r.next().await.ok(), Some(Line::Frame(b"last".to_vec())));
    assert_eq!(r.next().await.ok(), Some(Line::Eof));
}
