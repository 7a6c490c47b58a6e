//! `hermes [--resume SESSION]`: the interactive session. The process hosts its
//! session's children (a registry `Host`) and consumes their results (a router consumer shared
//! by an idle poller and the post-turn drain), with a line editor in front.

mod console;
mod foreground;
mod line;
mod poller;
mod progress;
mod session;
mod views;

pub use session::run;
