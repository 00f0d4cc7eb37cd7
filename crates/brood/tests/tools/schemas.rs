//! Tool schemas as they go on the wire: compact (no Rust-only detail), with the
//! same meaning, and still accepted by the tools.

use super::*;
use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `probe` (this line must not reach the model).
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct ProbeArgs {
    /// Required text.
    path: String,
    /// An optional count.
    limit: Option<u32>,
    /// An optional flag.
    deep: Option<bool>,
    /// Optional names.
    names: Option<Vec<String>>,
    /// Items with a unit-variant enum.
    items: Vec<ProbeItem>,
    /// A choice that carries data stays a `oneOf`.
    mode: Option<ProbeMode>,
}

/// One item.
#[derive(Deserialize, JsonSchema)]
#[allow(dead_code)]
struct ProbeItem {
    /// State.
    state: ProbeState,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ProbeState {
    /// Not started.
    Pending,
    /// Finished.
    Done,
}

#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
enum ProbeMode {
    Fast,
    Limited(u32),
}

#[test]
fn a_derived_schema_keeps_its_meaning_and_drops_what_only_rust_needs() {
    let s = brood::tool::schema_of::<ProbeArgs>();
    let props = &s["properties"];
    assert_eq!(s["type"], "object");
    assert_eq!(s["required"], json!(["items", "path"]));
    assert!(s.get("description").is_none(), "root description: {s}");
    assert_eq!(
        props["limit"],
        json!({"description": "An optional count.", "type": "integer", "minimum": 0.0})
    );
    assert_eq!(
        props["deep"],
        json!({"description": "An optional flag.", "type": "boolean"})
    );
    assert_eq!(props["names"]["type"], "array");
    assert_eq!(props["names"]["items"], json!({"type": "string"}));
    // A unit-variant enum inside array items: one `enum` of its values.
    assert_eq!(
        props["items"]["items"]["properties"]["state"],
        json!({"description": "State.", "type": "string", "enum": ["pending", "done"]})
    );
    // An enum with data is not flattened (its branches differ in shape).
    let mode = props["mode"].to_string();
    assert!(
        mode.contains("oneOf") || mode.contains("anyOf"),
        "mode: {mode}"
    );
    assert!(!mode.contains("\"format\""), "mode: {mode}");
    let text = s.to_string();
    for gone in ["\"default\":null", "\"null\"", "\"format\""] {
        assert!(!text.contains(gone), "{gone} left in {text}");
    }
}

#[tokio::test]
async fn builtin_schemas_are_compact_and_their_tools_still_take_null_for_absent() {
    let env = Env::new();
    let tb = env.toolbox(Permissions::full("tester"));
    let specs = tb.specs();
    assert!(specs.len() >= 9, "{specs:?}");
    for spec in specs.iter() {
        let text = spec.parameters.to_string();
        assert_eq!(spec.parameters["type"], "object", "{}", spec.name);
        for gone in ["\"default\":null", "\"null\"", "\"format\"", "Arguments of"] {
            assert!(!text.contains(gone), "{}: {gone} in {text}", spec.name);
        }
    }
    // A model may still send `null` for an optional field: read as absent.
    env.write("a.txt", "one\ntwo\n");
    let out = call(
        &env,
        "read_file",
        json!({"path": "a.txt", "start_line": null, "end_line": null, "limit": null}),
    )
    .await
    .unwrap();
    assert!(out.starts_with("     1\tone\n     2\ttwo\n"), "{out}");
}
