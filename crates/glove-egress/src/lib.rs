//! The per-session egress proxy (see `docs/egress.md`).
