//! A tool's argument schema as it goes on the wire. A schema never changes, and
//! every request of every run that offers the tool carries it, so it is shared (one
//! copy for all clones) and rendered to JSON once, the first time a request needs it:
//! afterwards a request body copies the rendered text instead of walking and escaping
//! the schema again.

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::value::RawValue;
use serde_json::Value;

/// A JSON schema, shared and rendered once.
#[derive(Clone)]
pub struct Schema(Arc<Inner>);

struct Inner {
    value: Value,
    rendered: OnceLock<Box<RawValue>>,
}

impl Schema {
    /// Wrap a schema (rendered to JSON text once).
    pub fn new(value: Value) -> Self {
        Schema(Arc::new(Inner {
            value,
            rendered: OnceLock::new(),
        }))
    }

    /// The schema as a JSON value.
    pub fn value(&self) -> &Value {
        &self.0.value
    }

    /// The schema's compact JSON, rendered on first use.
    pub fn rendered(&self) -> &RawValue {
        // A `Value` always renders; the fallback (`null`) only keeps this panic-free.
        self.0
            .rendered
            .get_or_init(|| serde_json::value::to_raw_value(&self.0.value).unwrap_or_default())
    }
}

impl Deref for Schema {
    type Target = Value;
    fn deref(&self) -> &Value {
        &self.0.value
    }
}

impl From<Value> for Schema {
    fn from(value: Value) -> Self {
        Schema::new(value)
    }
}

impl PartialEq for Schema {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0.value == other.0.value
    }
}

impl fmt::Debug for Schema {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0.value, f)
    }
}

/// As the plain value, for any serializer; the request body (always JSON) writes
/// [`Schema::rendered`] instead.
impl Serialize for Schema {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.value.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Schema {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Value::deserialize(d).map(Schema::new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_once_for_all_clones_as_the_compact_json() {
        let v = json!({"type": "object", "properties": {"p": {"type": "string", "description": "a \"q\""}}});
        let a = Schema::new(v.clone());
        let b = a.clone();
        assert_eq!(a.rendered().get(), serde_json::to_string(&v).unwrap());
        // One rendering, shared: the clone sees the same text, not a copy.
        assert!(std::ptr::eq(a.rendered(), b.rendered()));
        // Other serializers see the plain value.
        assert_eq!(serde_json::to_value(&b).unwrap(), v);
        let back: Schema = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(back, a);
    }
}
