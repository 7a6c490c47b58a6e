//! The formatter's integration tests: snapshots of every block shape and body, the forging
//! attempts, the JSON views, and property tests over arbitrary text.

mod fixtures;
mod forging;
mod json;
mod properties;
mod render;
mod structure;
