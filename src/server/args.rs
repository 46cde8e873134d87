//! Tool arguments as real clients send them. Every tool takes its arguments as a raw JSON
//! object and parses them here, so that a bad argument is a tool result with
//! `isError: true` that names the argument and lists the accepted ones (the model reads
//! it and corrects the call), never a JSON-RPC error the client renders opaquely.

use rmcp::model::{CallToolResult, ContentBlock, JsonObject};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;

use super::schema;

/// Longest error message sent back (serde may echo a huge wrong-typed value).
const MAX_MESSAGE_CHARS: usize = 1000;

/// An argument the tool cannot take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArgError {
    /// The argument at fault, when one is (a missing or unknown one included).
    pub argument: Option<String>,
    pub message: String,
}

impl ArgError {
    /// An argument that parsed but is not acceptable (e.g. a session name).
    pub fn invalid(tool: &str, argument: &str, why: &str) -> ArgError {
        ArgError {
            argument: Some(argument.to_string()),
            message: format!("invalid argument `{argument}` to {tool}: {why}"),
        }
    }

    /// The result the model sees: which argument, what is wrong, what the tool takes.
    pub fn into_result(self) -> CallToolResult {
        CallToolResult::error(vec![ContentBlock::text(self.message)])
    }
}

/// Parses `tool`'s arguments into `T`, or says which argument is wrong and why.
pub fn parse<T: DeserializeOwned + JsonSchema>(tool: &str, raw: JsonObject) -> Result<T, ArgError> {
    let value = serde_json::Value::Object(raw);
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let argument = argument_named(&path, &inner);
        let accepted = schema::describe_arguments(&schema::input::<T>());
        let head = match &argument {
            Some(name) => format!("invalid argument `{name}` to {tool}"),
            None => format!("invalid arguments to {tool}"),
        };
        let at = if path.contains('.') || path.contains('[') {
            format!(" (at {path})")
        } else {
            String::new()
        };
        let detail: String = strip_position(&inner)
            .chars()
            .take(MAX_MESSAGE_CHARS)
            .collect();
        ArgError {
            argument,
            message: format!("{head}{at}: {detail}. {tool} takes: {accepted}."),
        }
    })
}

/// The top-level argument a serde error is about: the first segment of its path, or
/// the field a "missing field"/"unknown field" message names. Pure.
fn argument_named(path: &str, message: &str) -> Option<String> {
    let first = path.split(['.', '[']).next().unwrap_or_default();
    if !first.is_empty() && first != "?" {
        return Some(first.to_string());
    }
    for prefix in ["missing field `", "unknown field `"] {
        if let Some(rest) = message.strip_prefix(prefix)
            && let Some(end) = rest.find('`')
        {
            return Some(rest[..end].to_string());
        }
    }
    None
}

/// serde_json appends " at line 1 column 0" to errors from a `Value`: noise here. Pure.
fn strip_position(message: &str) -> &str {
    match message.rfind(" at line ") {
        Some(pos) => &message[..pos],
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::execution::ExecuteArgs;
    use serde_json::json;

    fn obj(v: serde_json::Value) -> JsonObject {
        match v {
            serde_json::Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn a_wrong_type_names_the_argument_and_lists_the_accepted_ones() {
        let e = parse::<ExecuteArgs>("execute_python", obj(json!({"code": 5}))).unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("code"));
        assert!(
            e.message
                .starts_with("invalid argument `code` to execute_python"),
            "{}",
            e.message
        );
        assert!(e.message.contains("code (required)"), "{}", e.message);
        assert!(!e.message.contains("line 1"), "{}", e.message);
    }

    #[test]
    fn missing_and_unknown_arguments_are_named() {
        let e = parse::<ExecuteArgs>("execute_python", obj(json!({}))).unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("code"), "{}", e.message);
        let e = parse::<ExecuteArgs>("execute_python", obj(json!({"code": "1", "timeout": 3})))
            .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("timeout"), "{}", e.message);
        assert!(e.message.contains("timeout_s"), "{}", e.message);
    }

    #[test]
    fn nested_errors_name_the_top_argument_and_the_path() {
        let e = parse::<ExecuteArgs>(
            "execute_python",
            obj(json!({"code": "1", "inputs": {"a.txt": 7}})),
        )
        .unwrap_err();
        assert_eq!(e.argument.as_deref(), Some("inputs"), "{}", e.message);
    }

    #[test]
    fn huge_wrong_values_are_not_echoed_whole() {
        let big = "9".repeat(100_000);
        let e = parse::<ExecuteArgs>(
            "execute_python",
            obj(json!({"code": "1", "session": 5, "inputs": big})),
        )
        .unwrap_err();
        assert!(
            e.message.len() < 2 * MAX_MESSAGE_CHARS,
            "{}",
            e.message.len()
        );
    }
}
