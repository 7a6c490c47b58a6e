//! The crate's error: what went wrong, with what was being done when it did, on one line.

use std::fmt;

/// A failure to create, start, reach or stop a cluster.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(err: std::io::Error) -> Error {
        Error(err.to_string())
    }
}

impl Error {
    /// An error saying `message`.
    pub fn new(message: String) -> Error {
        Error(message)
    }
}

/// This crate's results.
pub type Result<T> = std::result::Result<T, Error>;

/// Says what was being done when a step failed (`reading postgresql.conf: …`).
pub(crate) trait Context<T> {
    fn context(self, what: &str) -> Result<T>;
    fn with_context(self, what: impl FnOnce() -> String) -> Result<T>;
}

impl<T, E: fmt::Display> Context<T> for std::result::Result<T, E> {
    fn context(self, what: &str) -> Result<T> {
        self.map_err(|err| Error(format!("{what}: {err}")))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|err| Error(format!("{}: {err}", what())))
    }
}

impl<T> Context<T> for Option<T> {
    fn context(self, what: &str) -> Result<T> {
        self.ok_or_else(|| Error(what.to_owned()))
    }

    fn with_context(self, what: impl FnOnce() -> String) -> Result<T> {
        self.ok_or_else(|| Error(what()))
    }
}

/// Returns early with an error made like `format!`.
macro_rules! bail {
    ($($arg:tt)*) => {
        return Err($crate::error::Error::new(format!($($arg)*)))
    };
}
pub(crate) use bail;
