use glove_types::ErrorCode;
use std::collections::HashSet;

#[test]
fn codes_are_unique_and_snake_case() {
    let mut seen = HashSet::new();
    for c in ErrorCode::all() {
        let s = c.as_str();
        assert!(seen.insert(s), "duplicate code {s}");
        assert!(
            !s.is_empty()
                && s.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                && !s.starts_with('_')
                && !s.ends_with('_'),
            "{s} is not snake_case"
        );
        assert!(!c.meaning().is_empty());
        assert_eq!(ErrorCode::from_code(s), Some(c));
    }
}

#[test]
fn catalogue_snapshot() {
    let table: String = ErrorCode::all()
        .map(|c| {
            format!(
                "{:<10} {:<44} {}\n",
                c.area().as_str(),
                c.as_str(),
                c.meaning()
            )
        })
        .collect();
    crate::snap!(insta::assert_snapshot!("error_codes", table));
}

/// `docs/error-codes.md` is generated from the table; this keeps it in step.
/// Regenerate with `GLOVE_BLESS=1 cargo test -p glove-types --test it codes`.
#[test]
fn docs_error_codes_in_step() {
    let path = crate::repo_root().join("docs/error-codes.md");
    let want = ErrorCode::catalogue_markdown();
    if std::env::var_os("GLOVE_BLESS").is_some() {
        std::fs::write(&path, &want).expect("write docs/error-codes.md");
        return;
    }
    let got = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        got == want,
        "docs/error-codes.md is out of date; run GLOVE_BLESS=1 cargo test -p glove-types --test it codes"
    );
}
