//! Hosts granted by consent: with a proxied network and no allow list, a fetch is
//! refused until the person grants that exact host and port; then it reaches the origin
//! (judged from the origin's log) with no restart, `list_grants` shows it, and the audit
//! log has the request and the decision. A decline, a client without elicitation, a host
//! the operator denied and malformed hosts are refused, each naming the host.

use serde_json::{Value, json};

use super::super::egress::{Origin, egress_records};
use super::super::{As, both_modes, stdout};
use super::{Answer, Harness};

fn network(origin: &Origin) -> Vec<(&'static str, String)> {
    vec![
        ("CODEGUARD", "enforce".to_string()),
        ("HOST_SANDBOX_NETWORK", "proxy".to_string()),
        (
            "SANDBOX_EGRESS_RESOLVE",
            "origin.test=127.0.0.1,denied.test=127.0.0.1".to_string(),
        ),
        ("SANDBOX_EGRESS_DENY", "denied.test".to_string()),
        ("SANDBOX_EGRESS_ALLOW", String::new()),
    ]
    .into_iter()
    .chain(std::iter::once(("SANDBOX_PIDS_LIMIT", "256".to_string())))
    .filter(|_| origin.port > 0)
    .collect()
}

async fn start(who: As, answer: Answer, origin: &Origin, args: &[&str]) -> Harness {
    let env = network(origin);
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    Harness::start_env(who, answer, args, &env).await
}

fn fetch(port: u16) -> String {
    format!(
        r#"import urllib.request
try:
    print(urllib.request.urlopen("http://origin.test:{port}/data.csv", timeout=20).read().decode().strip())
except Exception as e:
    print(getattr(e, "code", None) or type(e).__name__)
"#
    )
}

async fn grant_host(h: &Harness, host: &str) -> (bool, Value) {
    h.call(
        "request_grant",
        json!({"host": host, "reason": "the task downloads the published data set", "session": "g"}),
    )
    .await
}

#[tokio::test]
async fn an_approved_host_is_reachable_at_once_and_only_that_host() {
    for who in both_modes() {
        let context = format!("{who:?}");
        let origin = Origin::start(b"x,y".to_vec());
        let h = start(who, Answer::Approve, &origin, &[]).await;
        let r = h.run(&fetch(origin.port)).await;
        assert_eq!(stdout(&r), "403\n", "{context}: {r}");
        assert!(
            r["warnings"].to_string().contains("request_grant(host="),
            "{context}: {r}"
        );

        let target = format!("http://origin.test:{}/data.csv", origin.port);
        let (is_error, g) = grant_host(&h, &target).await;
        assert!(!is_error, "{context}: {g}");
        assert_eq!(g["granted"], true, "{context}: {g}");
        let shown = format!("origin.test:{}", origin.port);
        assert_eq!(g["host"], shown, "{context}: {g}");
        assert_eq!(g["worker_restarted"], false, "{context}: {g}");
        let asked = h.asked();
        assert_eq!(asked.len(), 1, "{context}: {asked:?}");
        assert!(
            asked[0].contains(&format!("\n    {shown}\n")),
            "{context}: {asked:?}"
        );
        assert!(asked[0].contains("the task downloads the published data set"));

        let r = h.run(&fetch(origin.port)).await;
        assert_eq!(stdout(&r), "x,y\n", "{context}: {r}");
        // Another port of the same host was not granted.
        let other = h.run(&fetch(origin.port + 1)).await;
        assert_eq!(stdout(&other), "403\n", "{context}: {other}");
        assert_eq!(
            origin.seen(),
            vec!["GET /data.csv HTTP/1.1".to_string()],
            "{context}"
        );

        let (_, list) = h.call("list_grants", json!({})).await;
        let hosts = list["hosts"].as_array().unwrap();
        assert_eq!(hosts.len(), 1, "{context}: {list}");
        assert_eq!(hosts[0]["session"], "g");
        assert_eq!(hosts[0]["grant"]["host"], "origin.test");
        assert_eq!(hosts[0]["grant"]["port"], origin.port);
        let records = super::super::audit::records(h.data_dir());
        let grant_records: Vec<&Value> = records
            .iter()
            .filter(|r| r["phase"] == "grant" && r["detail"].as_str().unwrap().contains("host "))
            .collect();
        assert_eq!(grant_records.len(), 2, "{context}: {grant_records:?}");
        assert_eq!(grant_records[1]["decision"], "approved");
        assert!(
            egress_records(h.data_dir())
                .iter()
                .any(|r| r["decision"] == "allowed")
        );
    }
}

#[tokio::test]
async fn declined_denied_malformed_and_unaskable_host_requests_are_refused() {
    let origin = Origin::start(b"x".to_vec());
    let port = origin.port;
    for answer in [Answer::Decline, Answer::Refuse, Answer::Cancel] {
        let h = start(As::Root, answer, &origin, &[]).await;
        let (is_error, g) = grant_host(&h, &format!("origin.test:{port}")).await;
        assert!(is_error, "{answer:?}: {g}");
        assert_eq!(g["granted"], false);
        assert_eq!(g["host"], format!("origin.test:{port}"), "{g}");
        assert_eq!(stdout(&h.run(&fetch(port)).await), "403\n", "{answer:?}");
    }
    let h = start(As::Root, Answer::Approve, &origin, &[]).await;
    let (is_error, g) = grant_host(&h, &format!("denied.test:{port}")).await;
    assert!(
        is_error
            && g["message"]
                .as_str()
                .unwrap()
                .contains("SANDBOX_EGRESS_DENY"),
        "{g}"
    );
    for bad in [
        "user:pw@origin.test",
        "origin.test:70000",
        "origin.test\u{7}",
        "раypal.com",
        "ftp://origin.test/",
    ] {
        let (is_error, g) = grant_host(&h, bad).await;
        assert!(is_error, "{bad:?}: {g}");
        assert!(
            g["message"]
                .as_str()
                .unwrap()
                .starts_with("refused without asking"),
            "{bad:?}: {g}"
        );
    }
    let both = json!({"host": "origin.test", "path": "/tmp", "reason": "x"});
    let Value::Object(map) = both else { panic!() };
    let r = h
        .client
        .call_tool(rmcp::model::CallToolRequestParams::new("request_grant").with_arguments(map))
        .await
        .unwrap();
    assert_eq!(r.is_error, Some(true), "{r:?}");
    assert!(h.asked().is_empty(), "{:?}", h.asked());
    assert!(origin.seen().is_empty());
}

/// `--allow-host` pre-approves without asking.
#[tokio::test]
async fn allow_host_pre_approves_a_host() {
    let origin = Origin::start(b"pre".to_vec());
    let arg = format!("origin.test:{}", origin.port);
    let h = start(As::Root, Answer::Decline, &origin, &["--allow-host", &arg]).await;
    assert_eq!(stdout(&h.run(&fetch(origin.port)).await), "pre\n");
    assert!(h.asked().is_empty());
}
