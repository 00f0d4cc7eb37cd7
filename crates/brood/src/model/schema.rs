//! A tool's argument schema as it goes on the wire. A schema never changes, and
//! every request of every run that offers the tool carries it, so it is shared (one
//! copy for all clones) and rendered to JSON once, the first time a request needs it:
//! afterwards a request body copies the rendered text instead of walking and escaping
//! the schema again. The same goes for the tool's whole entry in a request (name,
//! description and schema).

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
    /// The whole request entry of the tool the schema belongs to, for the name and
    /// description it was first rendered with (see [`Schema::tool_entry`]).
    entry: OnceLock<Entry>,
}

struct Entry {
    name: Arc<str>,
    description: Arc<str>,
    rendered: Box<RawValue>,
}

/// The same text: one shared string, or equal ones.
fn same(a: &Arc<str>, b: &Arc<str>) -> bool {
    Arc::ptr_eq(a, b) || **a == **b
}

impl Schema {
    /// Wrap a schema (rendered to JSON text once).
    pub fn new(value: Value) -> Self {
        Schema(Arc::new(Inner {
            value,
            rendered: OnceLock::new(),
            entry: OnceLock::new(),
        }))
    }

    /// The rendered request entry (`{"type": "function", "function": {…}}`) of the
    /// tool `name` with `description` and this schema: `render` makes it the first
    /// time, and every later request of every run offering the tool copies the text
    /// instead of escaping the description again. `None` when this schema was first
    /// rendered for another name or description (a schema shared by two tools):
    /// the caller renders that entry itself.
    pub(crate) fn tool_entry(
        &self,
        name: &Arc<str>,
        description: &Arc<str>,
        render: impl FnOnce() -> Box<RawValue>,
    ) -> Option<&RawValue> {
        let e = self.0.entry.get_or_init(|| Entry {
            name: name.clone(),
            description: description.clone(),
            rendered: render(),
        });
        (same(&e.name, name) && same(&e.description, description)).then_some(&*e.rendered)
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
