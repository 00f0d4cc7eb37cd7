//! A JSON document carried as its text: encoded once where it is made and written
//! into a record as it is, not built as a `serde_json::Value` tree, cloned and encoded
//! again on the writer's thread. A run's recorded grant travels this way (issue 17.1:
//! with a 1,000-child `task`, the grant's tree was built, copied and re-encoded a
//! thousand times on the two threads every child's start competes for).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// Valid JSON text (made by [`JsonText::of`] or read back checked); cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(Arc<str>);

impl JsonText {
    /// `value` encoded as JSON.
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        serde_json::to_string(value).map(|s| JsonText(Arc::from(s)))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The document as a `Value` (parsed; for tests and rare readers).
    pub fn to_value(&self) -> serde_json::Value {
        serde_json::from_str(&self.0).unwrap_or(serde_json::Value::Null)
    }
}

impl Serialize for JsonText {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Written as the JSON it holds, not as a string of it.
        let raw: &RawValue = serde_json::from_str(&self.0).map_err(serde::ser::Error::custom)?;
        raw.serialize(s)
    }
}

impl<'de> Deserialize<'de> for JsonText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(d)?;
        Ok(JsonText(Arc::from(raw.get())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn it_is_written_as_the_json_it_holds_and_read_back() {
        let grant = json!({"tools": ["read_file", "grep"], "note": "a \"q\"\n"});
        let text = JsonText::of(&grant).unwrap();
        assert_eq!(text.to_value(), grant);
        let outer = serde_json::to_value(json!({ "grant": text })).unwrap();
        assert_eq!(outer["grant"], grant, "an object, not a string");
        let back: JsonText = serde_json::from_value(outer["grant"].clone()).unwrap();
        assert_eq!(back.to_value(), grant);
    }
}
