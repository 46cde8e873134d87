//! Arguments as real clients send them: numbers that JSON does not type as integers,
//! numeric strings, and every kind of bad argument to every tool, which must come back
//! as an `isError` tool result naming the argument (never a protocol error).

use serde_json::{Value, json};

use super::*;

/// Calls a tool and insists on a tool result (not a JSON-RPC error).
async fn result_of(
    server: &Server,
    tool: &'static str,
    args: Value,
) -> rmcp::model::CallToolResult {
    match server.call(tool, args.clone()).await {
        Ok(r) => r,
        Err(e) => panic!("{tool}({args}) was a protocol error, not a tool result: {e}"),
    }
}

fn text_of(r: &rmcp::model::CallToolResult) -> String {
    r.content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.clone()))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn fractional_integral_and_string_timeouts_run_and_bad_ones_are_named() {
    let server = Server::start(&[]).await;
    for timeout in [json!(15.0), json!(2.5), json!(3), json!("4")] {
        let r = server
            .exec(json!({"code": "print('ran')", "timeout_s": timeout}))
            .await;
        assert_eq!(stdout(&r), "ran\n", "timeout_s {timeout}: {r}");
    }
    // A fractional limit is really applied, not rounded up to whole seconds.
    let r = server
        .exec(json!({"code": "import time\ntime.sleep(5)", "timeout_s": 0.5}))
        .await;
    assert_eq!(r["status"], "timeout", "{r}");
    assert!(r["duration_ms"].as_u64().unwrap() < 4000, "{r}");

    for bad in [json!(0), json!(-3), json!("soon"), json!(true)] {
        let r = result_of(
            &server,
            "execute_python",
            json!({"code": "print(1)", "timeout_s": bad}),
        )
        .await;
        assert_eq!(r.is_error, Some(true), "{bad}: {r:?}");
        let text = text_of(&r);
        assert!(text.contains("`timeout_s`"), "{bad}: {text}");
        assert!(text.contains("greater than 0"), "{bad}: {text}");
    }
    server.stop().await;
}

#[tokio::test]
async fn every_tool_answers_bad_arguments_with_an_is_error_result_naming_them() {
    let server = Server::start(&[]).await;
    let cases: Vec<(&'static str, Value, &str)> = vec![
        ("execute_python", json!({}), "code"),
        ("execute_python", json!({"code": 5}), "code"),
        (
            "execute_python",
            json!({"code": "1", "session": 7}),
            "session",
        ),
        (
            "execute_python",
            json!({"code": "1", "inputs": "a.txt"}),
            "inputs",
        ),
        (
            "execute_python",
            json!({"code": "1", "inputs": {"a": 1}}),
            "inputs",
        ),
        (
            "execute_python",
            json!({"code": "1", "timeout": 3}),
            "timeout",
        ),
        ("request_grant", json!({}), "reason"),
        ("request_grant", json!({"reason": "x"}), "path"),
        (
            "request_grant",
            json!({"path": "/tmp", "access": "rw", "reason": "x"}),
            "access",
        ),
        (
            "request_grant",
            json!({"path": "/tmp", "access": "read", "reason": 1}),
            "reason",
        ),
        ("reset_session", json!({"keep_files": "yes"}), "keep_files"),
        ("reset_session", json!({"session": ["a"]}), "session"),
        ("list_grants", json!({"session": 3}), "session"),
        ("list_grants", json!({"session": "../x"}), "session"),
        ("list_grants", json!({"sesion": "x"}), "sesion"),
    ];
    for (tool, args, argument) in cases {
        let r = result_of(&server, tool, args.clone()).await;
        assert_eq!(r.is_error, Some(true), "{tool}({args}): {r:?}");
        let text = text_of(&r);
        assert!(
            text.contains(&format!("`{argument}`")),
            "{tool}({args}) does not name `{argument}`: {text}"
        );
    }
    // Session names that parse but cannot be used are tool errors too.
    let r = result_of(
        &server,
        "reset_session",
        json!({"session": "../../etc", "keep_files": true}),
    )
    .await;
    assert_eq!(r.is_error, Some(true), "{r:?}");
    let r = server.exec(json!({"code": "print('alive')"})).await;
    assert_eq!(stdout(&r), "alive\n");
    server.stop().await;
}

#[tokio::test]
async fn schemas_have_plain_types_and_no_custom_formats() {
    let server = Server::start(&[]).await;
    let tools = server.client.list_all_tools().await.unwrap();
    assert!(tools.len() >= 5, "{tools:?}");
    for tool in &tools {
        let input = serde_json::to_string(&tool.input_schema).unwrap();
        assert!(!input.contains("\"null\""), "{}: {input}", tool.name);
        for schema in [
            Some(input),
            tool.output_schema
                .as_ref()
                .map(|s| serde_json::to_string(s).unwrap()),
        ]
        .into_iter()
        .flatten()
        {
            for odd in ["uint", "int32", "int64", "double", "float"] {
                assert!(
                    !schema.contains(&format!("\"format\":\"{odd}")),
                    "{}: {schema}",
                    tool.name
                );
            }
        }
    }
    let exec = tools.iter().find(|t| t.name == "execute_python").unwrap();
    assert_eq!(
        exec.input_schema["properties"]["timeout_s"]["type"],
        "number"
    );
    assert_eq!(exec.input_schema["properties"]["session"]["type"], "string");
    let description = exec.description.as_deref().unwrap_or_default();
    for needle in ["`os`", "`subprocess`", "pathlib.Path", "request_grant"] {
        assert!(
            description.contains(needle),
            "{needle} not in {description}"
        );
    }
    server.stop().await;
}
