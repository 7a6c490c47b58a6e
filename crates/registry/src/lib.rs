//! registry (in progress).

pub mod capture;
pub mod clock;
pub mod config;
pub mod progress;
pub mod spawn;
pub mod stall;
pub mod transcript;
