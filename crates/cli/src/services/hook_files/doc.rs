//! A JSON document that keeps its keys in the order they were written, so `hook install` can
//! merge into a user's settings file and leave everything it does not own as it was
//! (`serde_json::Value` sorts keys, and its `preserve_order` feature would change the order of
//! every JSON object the workspace prints).

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their key order.
#[derive(Clone, Debug, PartialEq)]
pub enum Doc {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Doc>),
    Object(Vec<(String, Doc)>),
}

impl Doc {
    /// An empty object.
    pub fn object() -> Doc {
        Doc::Object(Vec::new())
    }

    /// A string.
    pub fn string(s: impl Into<String>) -> Doc {
        Doc::String(s.into())
    }

    /// The value of `key`, if this is an object that has it.
    pub fn get(&self, key: &str) -> Option<&Doc> {
        match self {
            Doc::Object(entries) => entries.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The value of `key`, mutable.
    pub fn get_mut(&mut self, key: &str) -> Option<&mut Doc> {
        match self {
            Doc::Object(entries) => entries.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// Sets `key` (in place when present, else at the end). No-op unless this is an object.
    pub fn set(&mut self, key: &str, value: Doc) {
        if let Some(slot) = self.get_mut(key) {
            *slot = value;
        } else if let Doc::Object(entries) = self {
            entries.push((key.to_owned(), value));
        }
    }

    /// The value of `key`, inserted as `default()` at the end when missing.
    pub fn entry(&mut self, key: &str, default: impl FnOnce() -> Doc) -> Option<&mut Doc> {
        if self.get(key).is_none() {
            self.set(key, default());
        }
        self.get_mut(key)
    }

    /// The text, if this is a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Doc::String(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is an object.
    pub fn is_object(&self) -> bool {
        matches!(self, Doc::Object(_))
    }
}

impl Serialize for Doc {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Doc::Null => s.serialize_unit(),
            Doc::Bool(b) => s.serialize_bool(*b),
            Doc::Number(n) => n.serialize(s),
            Doc::String(t) => s.serialize_str(t),
            Doc::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Doc::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Doc {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Doc, D::Error> {
        d.deserialize_any(DocVisitor)
    }
}

struct DocVisitor;

impl<'de> Visitor<'de> for DocVisitor {
    type Value = Doc;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Doc, E> {
        Ok(Doc::Null)
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Doc, E> {
        Ok(Doc::Bool(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Doc, E> {
        Ok(Doc::Number(v.into()))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Doc, E> {
        Ok(Doc::Number(v.into()))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Doc, E> {
        serde_json::Number::from_f64(v)
            .map(Doc::Number)
            .ok_or_else(|| E::custom("a number JSON cannot hold"))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Doc, E> {
        Ok(Doc::String(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Doc, E> {
        Ok(Doc::String(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Doc, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Doc::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Doc, A::Error> {
        let mut entries: Vec<(String, Doc)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, Doc>()? {
            // A repeated key: the last one wins, at the place of the first (as JSON parsers do).
            match entries.iter_mut().find(|(key, _)| *key == k) {
                Some(slot) => slot.1 = v,
                None => entries.push((k, v)),
            }
        }
        Ok(Doc::Object(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_keep_their_order_through_a_round_trip() {
        let text = r#"{"zeta":1,"alpha":{"y":[1,2.5,"x",null,true],"b":{}},"mid":"m"}"#;
        let doc: Doc = serde_json::from_str(text).expect("parses");
        assert_eq!(serde_json::to_string(&doc).expect("encodes"), text);
    }

    #[test]
    fn set_replaces_in_place_and_appends_new_keys() {
        let mut doc: Doc = serde_json::from_str(r#"{"a":1,"b":2}"#).expect("parses");
        doc.set("a", Doc::string("x"));
        doc.set("c", Doc::Null);
        assert_eq!(
            serde_json::to_string(&doc).expect("encodes"),
            r#"{"a":"x","b":2,"c":null}"#
        );
    }
}
