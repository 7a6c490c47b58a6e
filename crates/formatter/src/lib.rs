//! formatter (in progress).
