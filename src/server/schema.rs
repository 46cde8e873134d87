//! The JSON schemas clients see, generated from the argument and result types, then
//! made plain enough for every real client: JSON Schema 2020-12, optional fields typed
//! without `null` unions (clients such as the Inspector convert a string argument only
//! when a field's type is exactly `"number"`/`"integer"`/`"object"`), and no
//! non-standard `format` values (schemars writes `uint64`, `double`…, which strict
//! validators such as Ajv warn about on every listing).

use std::sync::Arc;

use rmcp::model::JsonObject;
use schemars::JsonSchema;
use schemars::generate::SchemaSettings;
use serde_json::Value;

/// `format` values JSON Schema 2020-12 defines; every other one is dropped.
const STANDARD_FORMATS: &[&str] = &[
    "date-time",
    "date",
    "time",
    "duration",
    "email",
    "idn-email",
    "hostname",
    "idn-hostname",
    "ipv4",
    "ipv6",
    "uri",
    "uri-reference",
    "iri",
    "iri-reference",
    "uuid",
    "uri-template",
    "json-pointer",
    "relative-json-pointer",
    "regex",
];

/// A tool's `inputSchema`: what the arguments type accepts.
pub fn input<T: JsonSchema>() -> Arc<JsonObject> {
    let mut object = generate::<T>(SchemaSettings::draft2020_12());
    // An optional argument is one that may be left out; `null` is accepted too but not
    // advertised (a `["number","null"]` type defeats clients' argument conversion).
    for property in object
        .get_mut("properties")
        .and_then(Value::as_object_mut)
        .into_iter()
        .flat_map(|p| p.values_mut())
    {
        strip_null(property);
    }
    // Like rmcp's own input schemas: the tool's description says it; the type's doc
    // comment is not for the client.
    object.remove("title");
    object.remove("description");
    Arc::new(object)
}

/// A tool's `outputSchema`: what the result type serialises to (its `null`s included,
/// spelled as `anyOf` branches of one type each, which every client dialect reads).
pub fn output<T: JsonSchema>() -> Arc<JsonObject> {
    let mut value = Value::Object(generate::<T>(
        SchemaSettings::draft2020_12().for_serialize(),
    ));
    split_type_arrays(&mut value);
    let Value::Object(mut object) = value else {
        return Arc::new(JsonObject::new());
    };
    object.remove("title");
    object.remove("description");
    Arc::new(object)
}

fn generate<T: JsonSchema>(settings: SchemaSettings) -> JsonObject {
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut value = schema.to_value();
    strip_formats(&mut value);
    match value {
        Value::Object(object) => object,
        // A root schema of a struct is always an object; anything else is a bug in the
        // types, shown to the client rather than panicking.
        other => {
            let mut object = JsonObject::new();
            object.insert("type".into(), Value::from("object"));
            object.insert("description".into(), Value::from(other.to_string()));
            object
        }
    }
}

/// Makes a schema that admits `null` as well as something else admit only the
/// something else: `{"type": ["T", "null"]}` becomes `{"type": "T"}`, and a
/// `{"type": "null"}` branch of `anyOf`/`oneOf` goes (a lone remaining branch is merged
/// in). Pure.
pub fn strip_null(value: &mut Value) {
    let Value::Object(map) = value else {
        return;
    };
    if map.get("default").is_some_and(Value::is_null) {
        map.remove("default");
    }
    if let Some(Value::Array(types)) = map.get_mut("type") {
        types.retain(|t| t != "null");
        if types.len() == 1 {
            let only = types.remove(0);
            map.insert("type".into(), only);
        }
    }
    for key in ["anyOf", "oneOf"] {
        let Some(Value::Array(branches)) = map.get_mut(key) else {
            continue;
        };
        let is_null = |b: &Value| {
            b.get("type").is_some_and(|t| t == "null")
                && b.as_object().is_some_and(|o| o.len() == 1)
        };
        if branches.len() > 1 && branches.iter().any(is_null) {
            branches.retain(|b| !is_null(b));
            if branches.len() == 1
                && let Some(Value::Object(only)) = branches.pop()
            {
                map.remove(key);
                for (k, v) in only {
                    map.entry(k).or_insert(v);
                }
            }
        }
    }
}

/// Keywords that describe a schema rather than constrain it: they stay beside `anyOf`.
const ANNOTATIONS: &[&str] = &["title", "description", "default", "examples", "$comment"];

/// Rewrites `{"type": ["T", "null"], ...}` as `{"anyOf": [{"type": "T", ...},
/// {"type": "null"}]}`, at any depth: a `type` array is legal but less portable (clients
/// that map schemas onto a single-type dialect reject it). Pure.
pub fn split_type_arrays(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.values_mut().for_each(split_type_arrays);
            let Some(Value::Array(types)) = map.get("type") else {
                return;
            };
            if types.len() < 2 {
                return;
            }
            let types = types.clone();
            map.remove("type");
            let mut shared = JsonObject::new();
            for key in ANNOTATIONS {
                if let Some(v) = map.remove(*key) {
                    shared.insert((*key).to_string(), v);
                }
            }
            let constraints = std::mem::take(map);
            let branches: Vec<Value> = types
                .into_iter()
                .map(|t| {
                    let mut branch = JsonObject::new();
                    if t != "null" {
                        branch.extend(constraints.clone());
                    }
                    branch.insert("type".into(), t);
                    Value::Object(branch)
                })
                .collect();
            *map = shared;
            map.insert("anyOf".into(), Value::Array(branches));
        }
        Value::Array(items) => items.iter_mut().for_each(split_type_arrays),
        _ => {}
    }
}

/// Drops every non-standard `format`, at any depth. Pure.
pub fn strip_formats(value: &mut Value) {
    match value {
        Value::Object(map) => {
            let drop = map
                .get("format")
                .and_then(Value::as_str)
                .is_some_and(|f| !STANDARD_FORMATS.contains(&f));
            if drop {
                map.remove("format");
            }
            // A property named "format" is a schema too (an object, never a string),
            // so it is walked like any other and never dropped by the check above.
            map.values_mut().for_each(strip_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_formats),
        _ => {}
    }
}

/// Names of a schema's properties, required ones first, for error messages. Pure.
pub fn describe_arguments(schema: &JsonObject) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return "no arguments".to_string();
    };
    let mut names: Vec<String> = required.iter().map(|r| format!("{r} (required)")).collect();
    names.extend(
        properties
            .keys()
            .filter(|k| !required.contains(&k.as_str()))
            .cloned(),
    );
    if names.is_empty() {
        "no arguments".to_string()
    } else {
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn non_standard_formats_go_at_any_depth_and_standard_ones_stay() {
        let mut v = json!({
            "type": "object",
            "properties": {
                "n": {"type": "integer", "format": "uint64", "minimum": 0},
                "when": {"type": "string", "format": "date-time"},
                "format": {"type": "number", "format": "double"},
                "list": {"type": "array", "items": {"type": "integer", "format": "int32"}}
            }
        });
        strip_formats(&mut v);
        assert_eq!(
            v["properties"]["n"],
            json!({"type": "integer", "minimum": 0})
        );
        assert_eq!(v["properties"]["when"]["format"], "date-time");
        assert_eq!(v["properties"]["format"], json!({"type": "number"}));
        assert_eq!(v["properties"]["list"]["items"], json!({"type": "integer"}));
    }

    #[test]
    fn null_unions_become_the_plain_type() {
        let mut v = json!({"type": ["integer", "null"], "minimum": 0});
        strip_null(&mut v);
        assert_eq!(v, json!({"type": "integer", "minimum": 0}));
        let mut v = json!({"description": "d", "anyOf": [{"$ref": "#/$defs/X"}, {"type": "null"}]});
        strip_null(&mut v);
        assert_eq!(v, json!({"description": "d", "$ref": "#/$defs/X"}));
        let mut v = json!({"anyOf": [{"type": "string"}, {"type": "object"}]});
        let before = v.clone();
        strip_null(&mut v);
        assert_eq!(v, before);
    }

    #[test]
    fn warden_input_schemas_have_no_null_and_no_odd_format() {
        let text = serde_json::to_string(&input::<crate::execution::ExecuteArgs>()).unwrap();
        assert!(!text.contains("null"), "{text}");
        assert!(!text.contains("format"), "{text}");
        let schema = input::<crate::execution::ExecuteArgs>();
        assert_eq!(schema["properties"]["timeout_s"]["type"], "number");
        assert_eq!(schema["properties"]["timeout_s"]["exclusiveMinimum"], 0);
        assert_eq!(schema["properties"]["inputs"]["type"], "object");
        assert_eq!(schema["required"], json!(["code"]));
        let out = serde_json::to_string(&output::<crate::execution::ExecResult>()).unwrap();
        assert!(!out.contains("uint64"), "{out}");
    }

    #[test]
    fn type_arrays_become_single_type_branches() {
        let mut v = json!({"properties": {"n": {"type": ["integer", "null"], "minimum": 0, "description": "d"}}});
        split_type_arrays(&mut v);
        assert_eq!(
            v["properties"]["n"],
            json!({"description": "d", "anyOf": [{"type": "integer", "minimum": 0}, {"type": "null"}]})
        );
        let out = serde_json::to_string(&output::<crate::execution::ExecResult>()).unwrap();
        assert!(!out.contains("\"type\":["), "{out}");
    }

    #[test]
    fn argument_list_puts_required_first() {
        let schema = json!({
            "type": "object",
            "properties": {"session": {}, "code": {}, "timeout_s": {}},
            "required": ["code"]
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        let text = describe_arguments(&schema);
        assert!(text.starts_with("code (required)"), "{text}");
        assert!(text.contains("timeout_s"), "{text}");
    }
}
