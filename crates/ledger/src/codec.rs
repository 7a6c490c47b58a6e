//! Value encoding: one format-version byte, then postcard.
//!
//! Every persisted value goes through here, so a file written by a newer hermes is recognised
//! value by value as well as by the file's own version record.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::LedgerError;

/// The format this build writes and the newest it reads. Format 2 added hosts' fencing epoch,
/// locality and lease; format 3 a worker's pool on hosts and a unit's pool on its dispatch;
/// format 4 an agent child's profile, adapter and depth on a unit's dispatch and its stream's
/// model and usage on its outcome; format 5 a unit's workspace on its dispatch and a child's
/// changes on its outcome; format 6 a unit's sandbox on its dispatch and an agent child's
/// refused tool calls on its outcome; format 7 lays no value out anew: it marks the redb files
/// that keep the records of their active units in a table of their own, which an older build
/// would not keep in step (it refuses the file instead). Every other value is laid out as in
/// format 1 and read from any.
pub const FORMAT_VERSION: u8 = 7;

/// The oldest format this build reads.
pub const OLDEST_FORMAT: u8 = 1;

/// Why a stored value could not be decoded.
#[derive(Debug)]
pub(crate) enum DecodeError {
    /// Written by a newer format.
    Newer(u8),
    /// Not a value this build understands.
    Damaged(String),
}

/// Encodes a value behind the format version.
pub(crate) fn encode<T: Serialize>(value: &T) -> Vec<u8> {
    let out = vec![FORMAT_VERSION];
    // Serializing plain data structs into a Vec cannot fail.
    match postcard::to_extend(value, out) {
        Ok(bytes) => bytes,
        Err(err) => unreachable!("postcard failed to encode in-memory data: {err}"),
    }
}

/// Decodes a value written by `encode`, of a type laid out the same in every format.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    decode_versioned(bytes, |_, rest| {
        postcard::from_bytes(rest).map_err(|err| DecodeError::Damaged(err.to_string()))
    })
}

/// Decodes a value whose layout depends on the format it was written in: `read` gets the
/// format and the postcard bytes.
pub(crate) fn decode_versioned<T>(
    bytes: &[u8],
    read: impl FnOnce(u8, &[u8]) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Damaged("empty value".into())),
        Some((&version, rest)) if (OLDEST_FORMAT..=FORMAT_VERSION).contains(&version) => {
            read(version, rest)
        }
        Some((&version, _)) if version > FORMAT_VERSION => Err(DecodeError::Newer(version)),
        Some((&version, _)) => Err(DecodeError::Damaged(format!(
            "unknown value format {version}"
        ))),
    }
}

/// Decodes a stored record of a type laid out the same in every format; a failure names the
/// file and what was being read.
pub(crate) fn decode_record<V: DeserializeOwned>(
    path: &Path,
    what: &str,
    bytes: &[u8],
) -> crate::error::Result<V> {
    decode(bytes).map_err(|err| ledger_error(path, what, err))
}

/// The ledger error for a record at `path` that could not be decoded.
pub(crate) fn ledger_error(path: &Path, what: &str, err: DecodeError) -> LedgerError {
    match err {
        DecodeError::Newer(found) => LedgerError::NewerFormat {
            path: path.to_owned(),
            found: u32::from(found),
            supported: u32::from(FORMAT_VERSION),
        },
        DecodeError::Damaged(reason) => LedgerError::Damaged {
            path: path.to_owned(),
            reason: format!("{what}: {reason}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_recognises_newer_values() {
        let bytes = encode(&("abc", 42_u32));
        let back: (String, u32) = decode(&bytes).expect("decodes");
        assert_eq!(back, ("abc".to_owned(), 42));

        let mut newer = bytes.clone();
        newer[0] = FORMAT_VERSION + 1;
        assert!(
            matches!(decode::<(String, u32)>(&newer), Err(DecodeError::Newer(v)) if v == FORMAT_VERSION + 1)
        );
        assert!(matches!(
            decode::<(String, u32)>(&[]),
            Err(DecodeError::Damaged(_))
        ));
        assert!(matches!(
            decode::<(String, u32)>(&[FORMAT_VERSION, 0xff]),
            Err(DecodeError::Damaged(_))
        ));
    }
}
