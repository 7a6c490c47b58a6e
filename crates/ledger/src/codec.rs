//! Value encoding: one format-version byte, then postcard.
//!
//! Every persisted value goes through here, so a file written by a newer hermes is recognised
//! value by value as well as by the file's own version record.

use serde::Serialize;
use serde::de::DeserializeOwned;

/// The format this build writes and the newest it reads.
pub const FORMAT_VERSION: u8 = 1;

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

/// Decodes a value written by `encode`.
pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DecodeError> {
    match bytes.split_first() {
        None => Err(DecodeError::Damaged("empty value".into())),
        Some((&version, rest)) if version == FORMAT_VERSION => {
            postcard::from_bytes(rest).map_err(|err| DecodeError::Damaged(err.to_string()))
        }
        Some((&version, _)) if version > FORMAT_VERSION => Err(DecodeError::Newer(version)),
        Some((&version, _)) => Err(DecodeError::Damaged(format!(
            "unknown value format {version}"
        ))),
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
