//! Delivery: taking a conversation's ready results at a boundary, showing them and settling
//! them through the one protocol (`Router::present`). `consume.rs` is the path of `drain`, the
//! hooks, the relay and `hermes mcp` (rendered into the reader's budget, acked all or given
//! back); `printed.rs` is the interactive session's (rendered text printed to the terminal).
//! Settling one claim by its token (`hermes delivery ack|…`) is `cmd/claim.rs`.

pub mod consume;
pub mod printed;
