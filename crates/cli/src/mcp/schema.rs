//! Tool input schemas every MCP client accepts. schemars writes an optional field
//! as `"type": ["string", "null"]` and an optional enum or struct as `anyOf` of a `$ref` into
//! `$defs` and `null`; some agent CLIs refuse those schemas and the MCP Inspector's `--cli` does
//! not convert arguments it cannot read a type from. [`input`] rewrites each schema into the
//! plain subset: every `$ref` inlined, no `$defs`, no `null` in a `type` or an `anyOf`/`oneOf`
//! (an optional field is simply not `required`). [`refused`] finds what is left of those
//! constructs; the tests walk every tool's schema with it.

use std::sync::Arc;

use rmcp::model::JsonObject;
use rmcp::schemars::JsonSchema;
use serde_json::{Map, Value};

/// The input schema of `T`, in the subset every client accepts.
pub fn input<T: JsonSchema + std::any::Any>() -> Arc<JsonObject> {
    let raw = rmcp::handler::server::common::schema_for_input::<T>().unwrap_or_else(|e| {
        panic!(
            "invalid input schema for {}: {e}",
            std::any::type_name::<T>()
        )
    });
    Arc::new(portable(raw.as_ref().clone()))
}

/// `schema` with its definitions inlined and its nulls dropped (see the module's
/// documentation).
pub fn portable(mut schema: JsonObject) -> JsonObject {
    let mut defs = Map::new();
    for key in ["$defs", "definitions"] {
        if let Some(Value::Object(d)) = schema.remove(key) {
            defs.extend(d);
        }
    }
    match simplify(Value::Object(schema), &defs, 0) {
        Value::Object(o) => o,
        _ => JsonObject::new(),
    }
}

/// How deep definitions may nest in each other (a recursive type would not end).
const MAX_DEPTH: usize = 16;

fn simplify(value: Value, defs: &Map<String, Value>, depth: usize) -> Value {
    match value {
        Value::Array(items) => Value::Array(
            items
                .into_iter()
                .map(|v| simplify(v, defs, depth))
                .collect(),
        ),
        Value::Object(mut o) => {
            for key in ["anyOf", "oneOf"] {
                if let Some(Value::Array(options)) = o.remove(key) {
                    let mut kept: Vec<Value> =
                        options.into_iter().filter(|v| !is_null(v)).collect();
                    if kept.len() == 1 {
                        if let Value::Object(only) = kept.remove(0) {
                            for (k, v) in only {
                                o.entry(k).or_insert(v);
                            }
                        }
                    } else {
                        o.insert(key.to_owned(), Value::Array(kept));
                    }
                }
            }
            if let Some(Value::String(r)) = o.get("$ref").cloned()
                && let Some(target) = r.rsplit('/').next().and_then(|n| defs.get(n))
                && depth < MAX_DEPTH
            {
                o.remove("$ref");
                // The reference's own keys (its description) win over the definition's.
                let mut inlined = match simplify(target.clone(), defs, depth + 1) {
                    Value::Object(t) => t,
                    _ => Map::new(),
                };
                inlined.remove("title");
                for (k, v) in o {
                    inlined.insert(k, v);
                }
                o = inlined;
            }
            if let Some(Value::Array(types)) = o.get("type").cloned() {
                let kept: Vec<Value> = types.into_iter().filter(|t| t != "null").collect();
                let t = match kept.as_slice() {
                    [one] => one.clone(),
                    _ => Value::Array(kept),
                };
                o.insert("type".into(), t);
            }
            if let Some(Value::Array(values)) = o.get_mut("enum") {
                values.retain(|v| !v.is_null());
            }
            if o.get("default").is_some_and(Value::is_null) {
                o.remove("default");
            }
            Value::Object(
                o.into_iter()
                    .map(|(k, v)| (k, simplify(v, defs, depth)))
                    .collect(),
            )
        }
        other => other,
    }
}

fn is_null(v: &Value) -> bool {
    v.get("type").is_some_and(|t| t == "null") || v.get("const").is_some_and(Value::is_null)
}

/// Where `schema` uses a construct some client refuses: a `type` array, `anyOf`/`oneOf`
/// holding a `$ref`, `$defs`/`definitions`, or any `$ref` left. Empty: every client takes it.
#[cfg(test)]
pub fn refused(schema: &Value) -> Vec<String> {
    let mut found = Vec::new();
    walk(schema, "#", &mut found);
    found
}

#[cfg(test)]
fn walk(value: &Value, at: &str, found: &mut Vec<String>) {
    match value {
        Value::Object(o) => {
            for (k, v) in o {
                let here = format!("{at}/{k}");
                match k.as_str() {
                    "type" if v.is_array() => found.push(format!("{here}: a type array")),
                    "$defs" | "definitions" => found.push(format!("{here}: definitions")),
                    "$ref" => found.push(format!("{here}: a $ref")),
                    "anyOf" | "oneOf" if v.to_string().contains("\"$ref\"") => {
                        found.push(format!("{here}: {k} with a $ref"));
                    }
                    _ => {}
                }
                walk(v, &here, found);
            }
        }
        Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                walk(v, &format!("{at}/{i}"), found);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::tools::Tools;

    #[test]
    fn every_tool_schema_uses_only_what_every_client_accepts() {
        let tools = Tools::tool_router().list_all();
        assert_eq!(tools.len(), 6, "{tools:?}");
        for tool in tools {
            let schema = Value::Object(tool.input_schema.as_ref().clone());
            assert_eq!(
                refused(&schema),
                Vec::<String>::new(),
                "{}: {schema}",
                tool.name
            );
            assert_eq!(schema["type"], "object", "{}", tool.name);
            let Some(props) = schema["properties"].as_object() else {
                continue;
            };
            for (name, prop) in props {
                assert!(
                    prop["type"].is_string() || prop.get("enum").is_some(),
                    "{}.{name} says its type plainly: {prop}",
                    tool.name
                );
            }
        }
    }

    #[test]
    fn the_walker_finds_each_refused_construct() {
        let bad = serde_json::json!({
            "type": "object",
            "$defs": {"Role": {"type": "string"}},
            "properties": {
                "a": {"type": ["string", "null"]},
                "b": {"anyOf": [{"$ref": "#/$defs/Role"}, {"type": "null"}]},
            }
        });
        assert_eq!(refused(&bad).len(), 4, "{:?}", refused(&bad));
        let Value::Object(o) = bad else {
            unreachable!()
        };
        let fixed = Value::Object(portable(o));
        assert_eq!(refused(&fixed), Vec::<String>::new(), "{fixed}");
        assert_eq!(fixed["properties"]["a"]["type"], "string");
        assert_eq!(fixed["properties"]["b"]["type"], "string");
    }
}
