//! End-to-end tests live in `tests/tests/`; `src/bin/ledger-worker.rs` is the helper process the
//! multi-process ledger tests and `cargo xtask bench` start. This library is empty on purpose.
