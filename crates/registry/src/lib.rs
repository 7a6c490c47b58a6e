//! registry (in progress).
