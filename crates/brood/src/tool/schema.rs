//! Tool argument schemas as the model sees them: derived from the argument types
//! with `schemars` (so the schema and the parser cannot disagree), then made
//! compact, since every request of every run carries every schema.

/// JSON schema of `T` (derived with `schemars`), as a tool's `schema()`, made
/// compact (see [`compact_schema`]).
pub fn schema_of<T: schemars::JsonSchema>() -> serde_json::Value {
    let settings = schemars::gen::SchemaSettings::draft07().with(|s| {
        s.inline_subschemas = true;
        s.meta_schema = None;
    });
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).unwrap_or_else(|_| serde_json::json!({}));
    if let Some(obj) = v.as_object_mut() {
        obj.shift_remove("title");
        obj.shift_remove("$schema");
        // "Arguments of `x`." says nothing the tool's description does not.
        obj.shift_remove("description");
    }
    compact_schema(&mut v);
    v
}

/// Drop what a derived schema carries for Rust's sake and the model never needs;
/// every request of every run sends every schema, so each byte is paid in input
/// tokens many times over. In every subschema: `"default": null`; the Rust width
/// in `"format"` of numbers (`"uint"`, `"int64"`; `"minimum"` stays); `null` in
/// the type of an optional field (`["integer", "null"]` becomes `"integer"` —
/// the field is already left out of `required`, and `null` is still accepted);
/// `anyOf: [T, {"type": "null"}]` (an optional field of a type with its own
/// schema) becomes `T`; and a `oneOf` of one-string enums (a unit-variant Rust
/// enum) becomes one `enum`. Meaning is kept: what validated before validates now, bar `null` for
/// an optional field, which the tools take as absent anyway.
pub fn compact_schema(v: &mut serde_json::Value) {
    use serde_json::Value;
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    // `Option<T>` of a `T` with its own schema: `anyOf: [T, {"type": "null"}]`.
    let only_null = |b: &Value| {
        b.as_object()
            .is_some_and(|o| o.len() == 1 && o.get("type").is_some_and(|t| t == "null"))
    };
    let inner = match obj.get("anyOf") {
        Some(Value::Array(list)) if list.len() == 2 && list.iter().any(only_null) => list
            .iter()
            .find(|b| !only_null(b))
            .and_then(Value::as_object)
            .cloned(),
        _ => None,
    };
    if let Some(inner) = inner {
        obj.shift_remove("anyOf");
        for (k, val) in inner {
            obj.entry(k).or_insert(val);
        }
    }
    if obj.get("default").is_some_and(Value::is_null) {
        obj.shift_remove("default");
    }
    let numeric = |t: &Value| matches!(t.as_str(), Some("integer" | "number"));
    let single_type = match obj.get_mut("type") {
        Some(Value::Array(types)) if types.len() == 2 && types.iter().any(|t| t == "null") => {
            types.retain(|t| t != "null");
            types.pop()
        }
        _ => None,
    };
    if let Some(t) = single_type {
        obj.insert("type".into(), t);
    }
    if obj.get("type").is_some_and(numeric) {
        obj.shift_remove("format");
    }
    if let Some(values) = obj.get("oneOf").and_then(unit_enum_values) {
        obj.shift_remove("oneOf");
        obj.insert("type".into(), Value::from("string"));
        obj.insert("enum".into(), Value::Array(values));
    }
    if let Some(Value::Object(props)) = obj.get_mut("properties") {
        props.values_mut().for_each(compact_schema);
    }
    if let Some(items) = obj.get_mut("items") {
        match items {
            Value::Array(list) => list.iter_mut().for_each(compact_schema),
            other => compact_schema(other),
        }
    }
    for key in ["anyOf", "oneOf", "allOf"] {
        if let Some(Value::Array(list)) = obj.get_mut(key) {
            list.iter_mut().for_each(compact_schema);
        }
    }
}

/// The values of a `oneOf` whose branches are each `{"type": "string", "enum":
/// [one value]}` (with at most a description); `None` for any other `oneOf`.
fn unit_enum_values(one_of: &serde_json::Value) -> Option<Vec<serde_json::Value>> {
    let branches = one_of.as_array()?;
    let mut values = Vec::with_capacity(branches.len());
    for b in branches {
        let b = b.as_object()?;
        if b.keys()
            .any(|k| !matches!(k.as_str(), "type" | "enum" | "description"))
        {
            return None;
        }
        if b.get("type")?.as_str()? != "string" {
            return None;
        }
        match b.get("enum")?.as_array()?.as_slice() {
            [only] if only.is_string() => values.push(only.clone()),
            _ => return None,
        }
    }
    (!values.is_empty()).then_some(values)
}
